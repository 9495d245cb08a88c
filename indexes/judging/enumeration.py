"""Enumeration: every relation a search names, judged set-based and intersected per entity — the
conductor over the rooms of this package.

A row is judged three-valued per condition: TRUE, FALSE, or NULL (no value for the slot, or a span
that straddles the threshold). Per group, a row MATCHES when every condition is TRUE, it is active
at as_of, not retired by a correction and not withheld by its loader; it is OPEN when no condition is
FALSE and it is not inactive (an open row that does not match cannot be judged).

How a search runs (`Enumerator.run`):
1. each relation's profile and SQL (relation_sql.py, over row_sql.py);
2. each relation's per-entity aggregate, from memory where it can: the verdict cache
   (verdict_cache.py), or judged over its rows held as columns (in_memory.py over held_columns.py,
   column_cache.py and three_valued.py) — the relations of a plan side by side on a few threads;
3. the statuses (statuses.py): in NumPy when every aggregate came from memory, else one SQL
   statement into a temp table (which computes the missing aggregates inline);
4. what the warrant reads off them (reading.py): lists, combinations, the ranked page, coverage.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import duckdb
import pyarrow as pa

from ..relation_shapes import BoundShape, PlanShape, RelationShape
from . import in_memory, statuses
from .column_cache import ColumnCache
from .held_columns import Unsupported, rows_reader
from .reading import StatusTable
from .relation_sql import RelationSql, read_profiles
from .verdict_cache import VerdictCache

# Judging a plan's relations side by side (Enumerator._verdict_tables): a few threads every search shares.
_JUDGES = ThreadPoolExecutor(max_workers=4, thread_name_prefix="refindery-judge")


class Enumerator:
    """Builds and runs the enumeration; the statuses are then readable as `self.table`."""

    def __init__(self, con: duckdb.DuckDBPyConnection, plan: PlanShape, cache: dict | None = None, version: int = 0,
                 verdict_cache: VerdictCache | None = None, columns: ColumnCache | None = None, reader=None):
        """`cache`: the profiles, per workspace version; `reader`: makes a cursor for a read on another
        thread (RelationStore.reader), by default one made from `con`."""
        self.con, self.plan, self.version = con, plan, version
        self._reader = reader or con.cursor
        self.verdict_cache, self.columns = verdict_cache, columns
        self._tables: dict[str, pa.Table] = {}   # each relation's aggregate this search read from memory
        self._later: list = []   # column reads this search found missing: started when it is done (drop)
        self.rows = RelationSql(plan, read_profiles(con, plan, cache, version))
        self.profiles, self.flag_sets = self.rows.profiles, self.rows.flag_sets
        self.statuses = StatusTable(con, self.rows)

    @property
    def table(self) -> str:
        """What the warrant reads: the temp table, or a registered Arrow table's view."""
        return self.statuses.name

    def run(self) -> str:
        """Materialise the statuses as `self.table`: when the same plan ran at this workspace version
        (the statement's SQL and parameters are the key), the cached Arrow table itself, read in place;
        when every relation's aggregate comes from memory, the statuses computed from them in NumPy
        (`statuses.final`); else the statement run in SQL into a temp table. A registered table is
        copied into the temp table only if a later step writes to it (`StatusTable.own`)."""
        sql, params = statuses.statement(self.rows)
        key = (self.plan.space.workspace_id, self.version, "plan", sql, repr(params))
        hit = self.verdict_cache.get(key) if self.verdict_cache is not None else None
        if hit is not None:
            return self._hold(hit)
        if self.verdict_cache is None and self.columns is None:
            return self._materialise(sql, params)
        for rel, table in self._verdict_tables().items():
            if table is not None:
                self._tables[rel] = table
        if len(self._tables) == len(self.plan.relations):
            final = statuses.final(self.rows, self._tables, self.universe())
            self._hold(final)
            if self.verdict_cache is not None and self.verdict_cache.seen(key):
                self.verdict_cache.put(key, final)
            return self.table
        self._materialise(*statuses.statement(self.rows, self._verdicts))
        if self.verdict_cache is not None and self.verdict_cache.seen(key):
            self.verdict_cache.put(key, self._arrow(f"SELECT * FROM {self.table}"))
        return self.table

    def _hold(self, table: pa.Table) -> str:
        self.statuses.name = self.statuses.register(table)
        self.statuses.held = statuses.hold(self.plan, table)
        return self.table

    def _materialise(self, sql: str, params: list) -> str:
        self.con.execute(f"CREATE TEMP TABLE {self.statuses.temp} AS {sql}", params)
        return self.table

    def judged(self, rel: RelationShape, con: duckdb.DuckDBPyConnection | None = None) -> pa.Table | None:
        """The relation's aggregate — exactly the table `RelationSql.aggregate`'s SQL yields, row for
        row — judged over its rows held in memory (in_memory.py), or None where that does not apply
        (no column cache, a computed length, rows not held yet, anything the evaluator cannot read)."""
        if self.columns is None or self.rows.computes(rel):
            return None
        table, ws = self.plan.space.shape(rel).name, self.plan.space.workspace_id
        try:
            cols = self.columns.get((ws, self.version, table), rows_reader(self._reader, table, rel, ws), self._later)
            return None if cols is None else in_memory.judge(self.rows, rel, cols, con or self.con)
        except Unsupported:
            return None

    def _verdict_tables(self) -> dict[str, pa.Table | None]:
        """Every relation's `_verdict_table`: the first on this thread, each other on a thread of
        its own with a cursor of its own (made here: a DuckDB connection is not shared across
        threads), so a two-relation plan is judged on two cores (NumPy and DuckDB let go of the GIL).
        One that comes back None leaves the search to its SQL statement, which reuses the others."""
        rels = self.plan.relations
        if len(rels) < 2 or self.columns is None:
            out: dict[str, pa.Table | None] = {}
            for rel in rels:
                out[rel.name] = self._verdict_table(rel)
                if out[rel.name] is None:
                    break
            return out
        cons = [self.con.cursor() for _ in rels[1:]]

        def apart(rel: RelationShape, con: duckdb.DuckDBPyConnection) -> pa.Table | None:
            try:
                return self._verdict_table(rel, con)
            finally:
                con.close()

        futures = [_JUDGES.submit(apart, rel, con) for rel, con in zip(rels[1:], cons)]
        out = {rels[0].name: self._verdict_table(rels[0])}
        for rel, f in zip(rels[1:], futures):
            out[rel.name] = f.result()
        return out

    def _verdict_table(self, rel: RelationShape, con: duckdb.DuckDBPyConnection | None = None) -> pa.Table | None:
        """A relation's per-entity aggregate (masks, row counters, distances) for these constraints,
        from memory: cached per workspace version — the aggregate's SQL and parameters say everything
        it depends on (constraints, as_of, the reader's scopes), and the version moves with every load
        or correction — else judged over the relation's rows held in memory (`judged`), else (the
        second time these constraints on this relation are asked for, VerdictCache.seen) computed
        apart in SQL and cached. None: this search computes it inline, in its one statement.
        `con`: the cursor of the thread this runs on (default the enumeration's)."""
        if rel.name in self._tables:
            return self._tables[rel.name]
        agg, params = self.rows.aggregate(rel)
        cache = self.verdict_cache
        key = (self.plan.space.workspace_id, self.version, agg, repr(params))
        table = cache.get(key) if cache is not None else None
        if table is None:
            table = self.judged(rel, con)
            again = cache is not None and cache.seen(key)
            if table is None:
                if not again:
                    return None
                table = self._arrow(agg, params, con)
            if again:
                cache.put(key, table)
        return table

    def _verdicts(self, rel: RelationShape) -> str | None:
        """`_verdict_table` as a view registered on this cursor, or None (computed inline)."""
        table = self._verdict_table(rel)
        return None if table is None else self.statuses.register(table)

    def universe(self) -> pa.Table:
        """The plan's universe: (ent_no, entity_id, name as the reader may see it) per entity, by
        entity id — held with the columns until the workspace's next write (or a change of the names
        the reader sees, which moves the map version)."""
        space = self.plan.space
        sight = space.sight

        def read(con: duckdb.DuckDBPyConnection) -> pa.Table:
            con.complete()
            return con.sql(f"SELECT ent_no, entity_id, {sight.name()} AS name FROM rel_entities WHERE workspace_id = ? "
                           f"AND list_contains(?, kind) AND {sight.entity()} ORDER BY entity_id",
                           params=[space.workspace_id, self.plan.kinds]).to_arrow_table()
        if self.columns is None:
            return read(self.con)
        key = (space.workspace_id, self.version, "universe", tuple(self.plan.kinds), sight.scopes, space.map_version)
        return self.columns.get(key, lambda: self._apart(read), self._later) or read(self.con)

    def _apart(self, read):
        """`read(con)` on a cursor of its own (the column cache may run it on another thread)."""
        con = self._reader()
        try:
            return read(con)
        finally:
            con.close()

    def _arrow(self, sql: str, params: list | None = None, con: duckdb.DuckDBPyConnection | None = None) -> pa.Table:
        con = con or self.con
        con.complete()   # a relation (con.sql) refuses while an earlier statement's result is unread
        return con.sql(sql, params=params).to_arrow_table()

    def drop(self) -> None:
        if self._later and self.columns is not None:
            self.columns.start(self._later)
            self._later = []
        self.statuses.drop()

    # What the warrant reads (reading.py) and the rows it delivers (relation_sql.py) ------------------
    def lists(self, specs: dict[str, tuple], limit: int, restrict: list[str] | None = None):
        return self.statuses.lists(specs, limit, restrict)

    def matched_ids(self, limit: int, restrict: list[str] | None = None) -> list[str]:
        return self.statuses.matched_ids(limit, restrict)

    def page(self, limit: int, offset: int, restrict: list[str] | None = None) -> list[tuple]:
        return self.statuses.page(limit, offset, restrict)

    def combinations(self) -> tuple[list[str], list[tuple]]:
        return self.statuses.combinations()

    def counter_sql(self) -> dict[str, str]:
        return self.rows.counter_sql()

    def coverage(self, relation: str, numbers: list[int]) -> list[tuple]:
        return self.statuses.coverage(relation, numbers)

    def unattributed_open(self, rel: RelationShape, bound: list[BoundShape]) -> bool:
        return self.rows.unattributed_open(self.con, rel, bound)

    def matching_rows(self, rel: RelationShape, groups: list, numbers: list[int],
                      con: duckdb.DuckDBPyConnection | None = None) -> list[dict]:
        return self.rows.matching_rows(con or self.con, rel, groups, numbers)

    # Criteria read from documents narrow the matched (reading.py) ------------------------------------
    def matched(self) -> list[tuple[str, int, str | None]]:
        return self.statuses.matched()

    def set_codes(self, column: str, codes: dict[int, int]) -> None:
        self.statuses.set_codes(column, codes)

    def demote_matched(self, columns: list[str], unrecorded_from: int, unproved: tuple[int, ...]) -> None:
        self.statuses.demote_matched(columns, unrecorded_from, unproved)
