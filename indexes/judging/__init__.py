"""Relation search's judging, in rooms — read in this order:

- `row_sql.py`: the SQL of one row — a constraint's verdict (TRUE / FALSE / NULL), time states, the
  per-row flags packed into masks; the status codes every room shares.
- `relation_sql.py`: a plan's SQL per relation — what its data can hold, its rows with their
  verdicts, per unit (group, lone constraint) match and open, the per-entity aggregate.
- `held_columns.py`, `column_cache.py`: a relation's rows held in memory as coded NumPy columns,
  per workspace version, within a budget.
- `three_valued.py`, `in_memory.py`: the NumPy evaluator — the same per-row SQL text run in
  three-valued logic over the held columns, aggregated per entity; the same table as the SQL's.
- `statuses.py`: the per-entity statuses (matched, undetermined, none, not_recorded) per group and
  overall — one SQL statement, or NumPy over the aggregates.
- `reading.py`: what the warrant reads off the statuses — lists, combinations, the ranked page.
- `verdict_cache.py`: aggregates and whole statuses kept for the next search that asks the same.
- `enumeration.py`: the `Enumerator`, the conductor a search runs.

Everything here runs SQL it writes itself over the relation tables (indexes/relations.py) and reads
the engine's plan only through the Protocols of indexes/relation_shapes.py.
"""
