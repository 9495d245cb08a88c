"""The SQL that judges a relation's rows for one plan and aggregates them per entity.

Per relation: what its data can hold (`read_profiles`: one cheap scan, cached until the workspace's
next write — are there retired, withheld, valueless or unplaceable rows?), so that every test this
data cannot make true is left out and clean data is judged with plain comparisons; its current rows
with each constraint's verdict (`rows_sql`); per unit (a group, or a constraint alone) whether a row
matches or is open (`verdicts`, `unit_columns`); the flags OR-ed and the row counters summed per
entity (`flags`, `counters`, packed FIELDS to a BIGINT); and the per-entity aggregate (`aggregate`),
keyed by a dense integer entity number. The same text is what in_memory.py evaluates over columns.
"""
from __future__ import annotations

import duckdb

from ..relation_shapes import BoundShape, PlanShape, RelationShape
from .row_sql import (ACTIVE, FIELD, FIELDS, INACTIVE, UNPLACEABLE, Flags, Profile, _all, distance, length_sql,
                      predicate, time_sql, unplaced)


def computes(plan: PlanShape, rel: RelationShape) -> bool:
    """Whether this search reads the relation's computed length (a constraint names it): only
    then are its rows read through the computing projection."""
    return rel.length_slot is not None and any(
        b.rel.name == rel.name and b.slot.name == rel.length_slot for b in plan.singles)


def source(plan: PlanShape, rel: RelationShape) -> str:
    """What one relation's rows are read from: its table, or — when the relation has a computed
    length slot — the table with that slot's columns computed (length_sql)."""
    table = plan.space.shape(rel).name
    if not computes(plan, rel):
        return table
    n, v = length_sql(rel, plan.as_of[1] if plan.as_of else plan.today, "as_of" if plan.as_of else "today")
    return f"(SELECT *, {n} AS n_{rel.length_slot}, {v} AS v_{rel.length_slot} FROM {table})"


def read_profiles(con: duckdb.DuckDBPyConnection, plan: PlanShape, cache: dict | None, version: int
                  ) -> dict[str, Profile]:
    """Each relation's `Profile` for the slots this plan reads, cached in `cache` per workspace version."""
    return {rel.name: _profile(con, plan, rel, cache, version) for rel in plan.relations}


def _profile(con: duckdb.DuckDBPyConnection, plan: PlanShape, rel: RelationShape, cache: dict | None,
             version: int) -> Profile:
        slots = sorted({b.slot.name for b in plan.singles if b.rel.name == rel.name}
                       | set(rel.period or ()) | ({rel.date_slot} if rel.date_slot else set()))
        exprs = ["count(*)", "count(retired)", "count(withheld)", "count(*) - count(entity_id)"]
        exprs += [f"count(*) - count(v_{s})" for s in slots]
        terms = [s for s in slots if rel.slots[s].type == "term"]
        exprs += [f"count(v_{s}) - count(t_{s})" for s in terms]
        exprs += [f"count(t_{s}) - count(r_{s})" for s in terms]
        table = source(plan, rel)
        sight = plan.space.sight
        key = ("profile", plan.space.workspace_id, table, tuple(exprs), sight.scopes, version)
        row = cache.get(key) if cache is not None else None
        if row is None:
            row = con.execute(f"SELECT {', '.join(exprs)} FROM {table} WHERE workspace_id = ? AND current "
                                   f"AND {sight.row()}", [plan.space.workspace_id]).fetchone()
            if cache is not None:
                cache[key] = row
        p = Profile(rows=row[0], retired=row[1] > 0, withheld=row[2] > 0, unattributed=row[3] > 0)
        p.null = {s for s, n in zip(slots, row[4:4 + len(slots)]) if n}
        unknown = row[4 + len(slots):4 + len(slots) + len(terms)]
        unranked = row[4 + len(slots) + len(terms):]
        for b in plan.singles:
            if b.rel.name != rel.name or b.kind != "term":
                continue
            i = terms.index(b.slot.name)
            if unknown[i] or (b.c.op in ("gte", "lte") and unranked[i]):
                p.unplaced.add(b.slot.name)
        return p


class RelationSql:
    """A plan's per-relation SQL, over the relations' profiles."""

    def __init__(self, plan: PlanShape, profiles: dict[str, Profile]):
        self.plan, self.profiles = plan, profiles
        self.flag_sets: dict[str, Flags] = {rel.name: self.flags(rel) for rel in plan.relations}

    def computes(self, rel: RelationShape) -> bool:
        return computes(self.plan, rel)

    def nullable(self, b: BoundShape) -> bool:
        p = self.profiles[b.rel.name]
        return b.can_be_null(p.null, p.withheld)

    def can_open(self, rel: RelationShape, bound: list[BoundShape]) -> bool:
        """Whether any row can be open without matching: only then is undetermined possible."""
        p = self.profiles[rel.name]
        return (self.plan.as_of is not None or p.retired or p.withheld or any(self.nullable(b) for b in bound))

    # Row verdicts --------------------------------------------------------------------------------
    def rows_sql(self, rel: RelationShape, extra_where: str = "", extra_cols: tuple[str, ...] = (),
                 attributed: bool = True) -> tuple[str, list]:
        """One relation's current rows with, per constraint on it, p<i> (its verdict), z<i> (no
        value recorded), u<i> (a value the vocabulary cannot place), d<i> (distance from a
        threshold); tm (time state at as_of), undated, retired_, withheld_ — each only where this
        data can make it other than constant."""
        plan, prof = self.plan, self.profiles[rel.name]
        params: list = []
        cols = ["r.ent_no", "r.entity_id", "r.row_id"]
        cols.append("r.retired IS NOT NULL AS retired_" if prof.retired else "FALSE AS retired_")
        cols.append("r.withheld IS NOT NULL AS withheld_" if prof.withheld else "FALSE AS withheld_")
        if plan.as_of is not None:
            tm, tparams = time_sql(rel, plan.as_of)
            cols.append(f"{tm} AS tm")
            params += tparams
        else:
            cols.append(f"{ACTIVE} AS tm")
        cols.append(f"r.v_{rel.period[0]} IS NULL AS undated" if rel.period else "TRUE AS undated")
        for b in plan.singles:
            if b.rel.name != rel.name:
                continue
            pred, pp = predicate(b, self.nullable(b), b.slot.name in prof.unplaced)
            cols.append(f"{pred} AS p{b.index}")
            params += pp
            cols.append(f"r.v_{b.slot.name} IS NULL AS z{b.index}" if b.slot.name in prof.null
                        else f"FALSE AS z{b.index}")
            cols.append(f"{unplaced(b)} AS u{b.index}" if b.slot.name in prof.unplaced else f"FALSE AS u{b.index}")
            dist = distance(b)
            if dist is not None:
                cols.append(f"{dist[0]} AS d{b.index}")
                params += dist[1]
        cols += [f"r.{c}" for c in extra_cols]
        table = source(self.plan, rel)
        who = "r.ent_no IS NOT NULL" if attributed else "r.entity_id IS NULL"
        sql = (f"SELECT {', '.join(cols)} FROM {table} r WHERE r.workspace_id = ? AND r.current "
               f"AND {who} AND {plan.space.sight.row('r')} {extra_where}")
        params.append(plan.space.workspace_id)
        return sql, params

    def verdicts(self, rel: RelationShape, bound: list[BoundShape]) -> tuple[str, str, str, str]:
        """(every condition TRUE, some condition FALSE, the row MATCHES, the row is OPEN) as SQL
        over rows_sql's columns."""
        prof = self.profiles[rel.name]
        all_true = _all([f"p{b.index} IS TRUE" if self.nullable(b) else f"p{b.index}" for b in bound],
                        " AND ", "TRUE")
        any_false = _all([f"p{b.index} IS FALSE" if self.nullable(b) else f"NOT p{b.index}" for b in bound],
                         " OR ", "FALSE")
        clean = _all([all_true] + (["NOT retired_"] if prof.retired else [])
                     + (["NOT withheld_"] if prof.withheld else []), " AND ", "TRUE")
        timely = f"tm = {ACTIVE}" if self.plan.as_of is not None else "TRUE"
        match = _all([clean, timely], " AND ", "TRUE")
        if not self.can_open(rel, bound):
            return all_true, any_false, match, "FALSE"
        opened = _all([f"NOT {any_false}" if any_false != "FALSE" else "TRUE"]
                      + ([f"tm <> {INACTIVE}"] if self.plan.as_of is not None else []), " AND ", "TRUE")
        return all_true, any_false, match, opened

    def units(self, rel: RelationShape) -> list[tuple[str, list[BoundShape]]]:
        plan = self.plan
        out = [(f"g{g.index}", g.bound) for g in plan.groups if g.relation.name == rel.name]
        return out + [(f"s{b.index}", [b]) for b in plan.singles if b.rel.name == rel.name]

    def unit_columns(self, rel: RelationShape) -> list[tuple[str, str]]:
        """Per unit (a group, or a constraint alone) its row verdicts as columns <unit>_m (the row
        matches), <unit>_o (the row is open) and, for groups, <unit>_t (every condition TRUE on a
        clean row, at any time) — computed once and read by every flag and counter: (name, SQL)."""
        cols = []
        prof = self.profiles[rel.name]
        for name, bound in self.units(rel):
            all_true, _, match, opened = self.verdicts(rel, bound)
            cols += [(f"{name}_m", match), (f"{name}_o", opened)]
            if name.startswith("g"):
                clean = _all([all_true] + (["NOT retired_"] if prof.retired else [])
                             + (["NOT withheld_"] if prof.withheld else []), " AND ", "TRUE")
                cols.append((f"{name}_t", clean))
        return cols

    def unit_sql(self, rel: RelationShape) -> list[str]:
        return [f"{sql} AS {name}" for name, sql in self.unit_columns(rel)]

    def flags(self, rel: RelationShape) -> Flags:
        """The per-row flags OR-ed per entity: live (a row not retired), per unit o, and for a
        group why an open row cannot be judged and whether a value could not be placed — each
        only where this data can raise it."""
        f, prof, as_of = Flags(), self.profiles[rel.name], self.plan.as_of
        f.add("live", "NOT retired_" if prof.retired else "TRUE")
        for name, bound in self.units(rel):
            # whether a row matches is read off the unit's row counter (> 0), not a flag
            if self.can_open(rel, bound):
                f.add(f"{name}_o", f"{name}_o")
            if not name.startswith("g") or (not self.can_open(rel, bound) and not prof.unplaced):
                continue
            opened = f"{name}_o"
            value = [b for b in bound if not b.is_period and b.slot.name in prof.null]
            period = [b for b in bound if b.is_period and b.slot.name in prof.null]
            spans = [b for b in bound if b.is_span]
            causes = {
                "unrecorded": _all([f"(p{b.index} IS NULL AND z{b.index})" for b in value], " OR ", "FALSE"),
                "open_period": _all([f"(p{b.index} IS NULL AND z{b.index})" for b in period], " OR ", "FALSE"),
                "undated": _all(([f"tm = {UNPLACEABLE}"] if as_of is not None else [])
                                + [f"(p{b.index} IS NULL AND NOT z{b.index})" for b in spans], " OR ", "FALSE"),
                "corrected": "retired_" if prof.retired else "FALSE",
                "withheld": "withheld_" if prof.withheld else "FALSE",
            }
            for cause, test in causes.items():
                if test != "FALSE" and f.has(opened):
                    f.add(f"{name}_c_{cause}", f"{opened} AND NOT {name}_m AND {test}")
            for b in value:
                f.add(f"{name}_z{b.index}", f"{opened} AND NOT {name}_m AND p{b.index} IS NULL AND z{b.index}")
            for b in bound:
                if b.slot.name in prof.unplaced and not b.is_period:
                    others = _all([f"p{o.index} IS FALSE" if self.nullable(o) else f"NOT p{o.index}"
                                   for o in bound if o is not b], " OR ", "FALSE")
                    live = f" AND tm <> {INACTIVE}" if as_of is not None else ""
                    f.add(f"{name}_u{b.index}", f"u{b.index} AND NOT {others}{live}")
        return f

    def counters(self, rel: RelationShape) -> dict[str, str]:
        """Per-entity row counters the reply sums: rows satisfying each unit (active at as_of), and
        per group the inactive / undated / unplaceable ones — only those this search can make
        non-zero (without as_of nothing is inactive or unplaceable)."""
        out = {}
        for name, _ in self.units(rel):
            out[f"{name}_active"] = f"{name}_m"
            if not name.startswith("g"):
                continue
            if self.plan.as_of is not None:
                out[f"{name}_inactive"] = f"{name}_t AND tm = {INACTIVE}"
                out[f"{name}_unplaceable"] = f"{name}_t AND tm = {UNPLACEABLE}"
            if rel.period and rel.period[0] in self.profiles[rel.name].null:
                out[f"{name}_undated"] = f"{name}_t AND undated"
        return out

    def packed(self, rel: RelationShape) -> list[list[str]]:
        """The counters, FIELDS to a BIGINT (summed per entity, unpacked after)."""
        names = list(self.counters(rel))
        return [names[k:k + FIELDS] for k in range(0, len(names), FIELDS)]

    def aggregate(self, rel: RelationShape) -> tuple[str, list]:
        """Per entity: the OR of every flag mask, its packed row counters, and per gte/lte
        constraint of a group the distance of its nearest satisfying row. The relation's coverage
        rows are aggregated in the same pass (with nothing set), so an entity is covered exactly
        when it has an aggregate row: no join, no DISTINCT."""
        rows, params = self.rows_sql(rel)
        rows = f"SELECT *, {', '.join(self.unit_sql(rel))} FROM ({rows})"
        flags, counters = self.flag_sets[rel.name], self.counters(rel)
        cols: list[tuple[str, str, str, str]] = []   # (name, row SQL, coverage-row SQL, aggregate)
        for k, m in enumerate(flags.masks()):
            cols.append((f"mask{k}", m, "CAST(0 AS BIGINT)", f"bit_or(mask{k})"))
        wide = self.profiles[rel.name].rows >= 2 ** FIELD
        for k, names in enumerate(self.packed(rel)):
            if wide:  # an entity could hold more rows than a field counts: count each apart
                cols += [(f"n_{n}", f"CAST({counters[n]} AS BIGINT)", "CAST(0 AS BIGINT)",
                          f"CAST(sum(n_{n}) AS BIGINT)") for n in names]
                continue
            packed = " | ".join(f"(CAST({counters[n]} AS BIGINT) << {FIELD * j})" for j, n in enumerate(names))
            cols.append((f"pk{k}", packed, "CAST(0 AS BIGINT)", f"CAST(sum(pk{k}) AS BIGINT)"))
        for name, bound in self.units(rel):
            if name.startswith("g"):
                for b in bound:
                    if b.thresholded:
                        d = f"{name}_d{b.index}"
                        cols.append((d, f"CASE WHEN {name}_m THEN d{b.index} END", "CAST(NULL AS DOUBLE)", f"min({d})"))
        from_rows = f"SELECT ent_no, {', '.join(f'{sql} AS {n}' for n, sql, _, _ in cols)} FROM ({rows})"
        from_cov = (f"SELECT ent_no, {', '.join(f'{cov} AS {n}' for n, _, cov, _ in cols)} FROM rel_coverage "
                    f"WHERE workspace_id = ? AND relation = ? AND current AND {self.plan.space.sight.row()}")
        params += [self.plan.space.workspace_id, rel.name]
        return (f"SELECT ent_no, {', '.join(f'{agg} AS {n}' for n, _, _, agg in cols)} "
                f"FROM ({from_rows} UNION ALL {from_cov}) GROUP BY ent_no"), params

    def counter_expr(self, rel: RelationShape, counter: str, agg: str) -> str:
        """SQL reading one entity's counter off its aggregate row `agg`."""
        if self.profiles[rel.name].rows >= 2 ** FIELD:
            return f"{agg}.n_{counter}"
        for k, names in enumerate(self.packed(rel)):
            if counter in names:
                return f"(({agg}.pk{k} >> {FIELD * names.index(counter)}) & {2 ** FIELD - 1})"
        raise KeyError(counter)

    def counter_sql(self) -> dict[str, str]:
        """Per counter, SQL over the temp table giving one entity's value (the warrant sums it)."""
        out = {}
        for rel in self.plan.relations:
            if self.profiles[rel.name].rows >= 2 ** FIELD:
                out.update({n: f"n_{n}" for n in self.counters(rel)})
                continue
            for k, names in enumerate(self.packed(rel)):
                out.update({n: f"((pk_{rel.name}_{k} >> {FIELD * j}) & {2 ** FIELD - 1})" for j, n in enumerate(names)})
        return out

    def unattributed_open(self, con: duckdb.DuckDBPyConnection, rel: RelationShape, bound: list[BoundShape]) -> bool:
        """Whether a row the loader tied to nobody could satisfy these conditions (it fails none)."""
        if not self.profiles[rel.name].unattributed:
            return False
        rows, params = self.rows_sql(rel, attributed=False)
        _, any_false, _, _ = self.verdicts(rel, bound)
        return bool(con.execute(
            f"SELECT count(*) FROM ({rows}) WHERE NOT {any_false} AND tm <> {INACTIVE}", params).fetchone()[0])

    def matching_rows(self, con: duckdb.DuckDBPyConnection, rel: RelationShape, groups: list, numbers: list[int]
                      ) -> list[dict]:
        """These entities' rows of one relation that satisfy at least one of its groups, every
        column the delivery reads (load, table, row key, source ordinal, each slot's cell and
        reading), with m<group index> saying which groups each satisfies; by entity, then row.
        `con`: the enumeration's cursor, or another thread's (the rows are read from the store, never
        from the enumeration's own tables)."""
        extra = ["load_id", "db_table", "row_key", "src_row"]
        for s in rel.slots.values():
            if s.computed and not self.computes(rel):
                continue
            extra.append(f"v_{s.name}")
            if s.type == "term":
                extra.append(f"t_{s.name}")
            elif s.type == "number":
                extra.append(f"n_{s.name}")
        # the entity numbers as one list parameter: a filter DuckDB pushes into the scan (half the
        # time of a literal IN list, which it plans as a join); sorted here rather than in SQL
        rows_sql, params = self.rows_sql(rel, "AND r.ent_no = ANY(?::INTEGER[])", tuple(extra))
        params.append([int(n) for n in numbers])
        matches = {g.index: self.verdicts(rel, g.bound)[2] for g in groups}
        sel = ", ".join(f"{m} AS m{i}" for i, m in matches.items())
        any_match = " OR ".join(f"m{i}" for i in matches)
        res = con.execute(f"SELECT * FROM (SELECT *, {sel} FROM ({rows_sql})) WHERE {any_match}",
                          params)
        names = [d[0] for d in res.description]
        rows = [dict(zip(names, r)) for r in res.fetchall()]
        rows.sort(key=lambda r: (r["entity_id"], r["row_id"]))
        return rows
