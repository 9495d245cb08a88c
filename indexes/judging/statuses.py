"""The per-entity statuses: every entity of the plan's universe joined with each relation's aggregate
(and so its coverage), and given one status per group, per constraint alone and overall.

Per entity and group: matched if a row matches, else undetermined if a row is open, else none if the
relation was looked at for the entity (a coverage row or any row), else not_recorded; overall, the
first of none, not_recorded, undetermined that a required group has, else matched; `opt` counts the
optional groups matched. Two ways to the same table, column for column (a test compares them): the
SQL statement (`statement`), or NumPy over aggregates already in memory (`final`), whose result is
also held as arrays (`Held`) that the lists, ranking and page read without a query.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import pyarrow as pa

from ..relation_shapes import PlanShape, RelationShape
from .relation_sql import RelationSql
from .row_sql import FIELD, MATCHED, NONE, NOT_RECORDED, UNDETERMINED, _all

SORTED = b"refindery.sorted"   # a statuses table's metadata: made in NumPy, in entity id order


def threshold_columns(plan: PlanShape) -> list[str]:
    """The distance columns of every thresholded constraint of a group, by constraint index."""
    cols = {b.index: f"g{g.index}_d{b.index}" for g in plan.groups for b in g.bound if b.thresholded}
    return [cols[i] for i in sorted(cols)]


def order_by(plan: PlanShape) -> str:
    """The deterministic ranking: optional groups satisfied, distance from each threshold, id."""
    keys = ["opt DESC"]
    for g in plan.groups:
        keys += [f"g{g.index}_d{b.index} ASC NULLS LAST" for b in g.bound if b.thresholded]
    return ", ".join(keys + ["entity_id"])


def statement(rsql: RelationSql, cached: Callable[[RelationShape], str | None] | None = None
              ) -> tuple[str, list]:
    """The statuses' SELECT and its parameters. `cached(rel)`: a view of the relation's aggregate
    already computed (None: computed inline, in this statement)."""
    plan = rsql.plan
    ws = plan.space.workspace_id
    params: list = [ws, plan.kinds]
    sight = plan.space.sight
    ctes = [f"u AS (SELECT ent_no, entity_id, {sight.name()} AS name FROM rel_entities WHERE workspace_id = ? "
            f"AND list_contains(?, kind) AND {sight.entity()})"]
    select = ["u.ent_no", "u.entity_id", "u.name"]
    joins = []
    for rel in plan.relations:
        a = f"a_{rel.name}"
        view = cached(rel) if cached is not None else None
        if view is None:
            agg, ap = rsql.aggregate(rel)
            ctes.append(f"{a} AS ({agg})")
            params += ap
        else:
            ctes.append(f"{a} AS (SELECT * FROM {view})")
        joins.append(f"LEFT JOIN {a} ON {a}.ent_no = u.ent_no")
        select += _relation_select(rsql, rel, a)
    required = [f"g{g.index}" for g in plan.groups if g.required]
    optional = [f"g{g.index}" for g in plan.groups if not g.required]
    status = "CASE " + "".join(
        f"WHEN {_all([f'{g} = {code}' for g in required], ' OR ', 'FALSE')} THEN {code} "
        for code in (NONE, NOT_RECORDED, UNDETERMINED)) + f"ELSE {MATCHED} END"
    opt = " + ".join(f"CAST({g} = {MATCHED} AS INTEGER)" for g in optional) or "0"
    inner = f"SELECT {', '.join(select)} FROM u {' '.join(joins)}"
    return (f"WITH {', '.join(ctes)} SELECT *, CAST({status} AS TINYINT) AS status, {opt} AS opt FROM ({inner})",
            params)


def _relation_select(rsql: RelationSql, rel: RelationShape, a: str) -> list[str]:
    """One relation's columns of the statuses, read off its aggregate `a`: covered, live, the masks,
    the counters, each unit's status and each group's threshold distances."""
    flags, prof = rsql.flag_sets[rel.name], rsql.profiles[rel.name]
    covered = f"({a}.ent_no IS NOT NULL)"
    select = [f"{covered} AS cov_{rel.name}", f"{flags.test('live', f'{a}.mask')} AS live_{rel.name}"]
    select += [f"coalesce({a}.mask{k}, 0) AS mask_{rel.name}_{k}" for k in range(len(flags.masks()))]
    if prof.rows >= 2 ** FIELD:
        select += [f"coalesce({a}.n_{n}, 0) AS n_{n}" for n in rsql.counters(rel)]
    else:
        select += [f"coalesce({a}.pk{k}, 0) AS pk_{rel.name}_{k}" for k in range(len(rsql.packed(rel)))]
    for name, bound in rsql.units(rel):
        m, o = f"coalesce({rsql.counter_expr(rel, f'{name}_active', a)} > 0, FALSE)", \
            flags.test(f"{name}_o", f"{a}.mask")
        select.append(f"CAST(CASE WHEN {m} THEN {MATCHED} WHEN {o} THEN {UNDETERMINED} "
                      f"WHEN {covered} THEN {NONE} ELSE {NOT_RECORDED} END AS TINYINT) AS {name}")
        if name.startswith("g"):
            select += [f"{a}.{name}_d{b.index} AS {name}_d{b.index}" for b in bound if b.thresholded]
    return select


def final(rsql: RelationSql, tables: dict[str, pa.Table], universe: pa.Table) -> pa.Table:
    """`statement`'s SELECT computed in NumPy from each relation's aggregate over the plan's universe:
    the same columns, names, types and values, in entity id order (its metadata says so)."""
    plan = rsql.plan
    ent = universe.column("ent_no").to_numpy().astype(np.int64)
    cols: dict[str, pa.Array] = {"ent_no": universe.column("ent_no").combine_chunks(),
                                 "entity_id": universe.column("entity_id").combine_chunks(),
                                 "name": universe.column("name").combine_chunks()}
    status: dict[str, np.ndarray] = {}
    for rel in plan.relations:
        cols.update(_relation_final(rsql, rel, tables[rel.name], ent, status))
    overall = np.full(len(ent), MATCHED, np.int8)
    required = [f"g{g.index}" for g in plan.groups if g.required]
    for code in (UNDETERMINED, NOT_RECORDED, NONE):   # the CASE's first true WHEN wins: set in reverse
        hit = np.zeros(len(ent), bool)
        for g in required:
            hit |= status[g] == code
        overall[hit] = code
    opt = np.zeros(len(ent), np.int32)
    for g in plan.groups:
        if not g.required:
            opt += (status[f"g{g.index}"] == MATCHED).astype(np.int32)
    cols["status"] = pa.array(overall, pa.int8())
    cols["opt"] = pa.array(opt, pa.int32())
    return pa.table(cols).replace_schema_metadata({SORTED: b"entity_id"})


def _relation_final(rsql: RelationSql, rel: RelationShape, agg: pa.Table, ent: np.ndarray,
                    status: dict[str, np.ndarray]) -> dict[str, pa.Array]:
    """`_relation_select`'s columns in NumPy, for the universe's entity numbers `ent`; each unit's
    status codes go into `status` too."""
    flags, prof = rsql.flag_sets[rel.name], rsql.profiles[rel.name]
    a_ent = agg.column("ent_no").to_numpy().astype(np.int64)
    lookup = np.full(max(int(a_ent.max(initial=-1)), int(ent.max(initial=-1))) + 1, -1, np.int64)
    lookup[a_ent] = np.arange(len(a_ent))
    at = lookup[ent]
    covered = at >= 0
    at_ok = np.where(covered, at, 0)

    def column(name: str, fill):
        values = agg.column(name).to_numpy(zero_copy_only=False)
        return np.where(covered, values[at_ok] if len(values) else fill, fill)

    masks = [column(f"mask{k}", 0).astype(np.int64) for k in range(len(flags.masks()))]

    def flag(name: str) -> np.ndarray:
        if not flags.has(name):
            return np.zeros(len(ent), bool)
        k, i = flags.bit(name)
        return ((masks[k] >> i) & 1) == 1

    cols: dict[str, pa.Array] = {f"cov_{rel.name}": pa.array(covered), f"live_{rel.name}": pa.array(flag("live"))}
    for k, m in enumerate(masks):
        cols[f"mask_{rel.name}_{k}"] = pa.array(m, pa.int64())
    counters: dict[str, np.ndarray] = {}
    if prof.rows >= 2 ** FIELD:
        for n in rsql.counters(rel):
            counters[n] = column(f"n_{n}", 0).astype(np.int64)
            cols[f"n_{n}"] = pa.array(counters[n], pa.int64())
    else:
        for k, names in enumerate(rsql.packed(rel)):
            pk = column(f"pk{k}", 0).astype(np.int64)
            cols[f"pk_{rel.name}_{k}"] = pa.array(pk, pa.int64())
            counters.update({n: (pk >> (FIELD * j)) & (2 ** FIELD - 1) for j, n in enumerate(names)})
    for name, bound in rsql.units(rel):
        code = np.where(counters[f"{name}_active"] > 0, MATCHED,
                        np.where(flag(f"{name}_o"), UNDETERMINED, np.where(covered, NONE, NOT_RECORDED)))
        status[name] = code.astype(np.int8)
        cols[name] = pa.array(status[name], pa.int8())
        if name.startswith("g"):
            for b in bound:
                if b.thresholded:
                    d = agg.column(f"{name}_d{b.index}").to_numpy(zero_copy_only=False).astype(np.float64)
                    d = np.where(covered, d[at_ok] if len(d) else np.nan, np.nan)
                    cols[f"{name}_d{b.index}"] = pa.array(d, pa.float64(), mask=np.isnan(d))
    return cols


@dataclass
class Held:
    """The statuses `final` computed, by entity id, as NumPy arrays: what the lists, the ranking and
    the page read without a query. `table` is the registered Arrow table; `distances` the threshold
    distances with NULL as +inf (NULLS LAST)."""
    table: pa.Table
    columns: dict[str, np.ndarray]
    distances: dict[str, np.ndarray]
    _ranked: np.ndarray | None = None

    def ids(self, at: np.ndarray) -> list:
        return self.table.column("entity_id").take(pa.array(at, pa.int64())).to_pylist()

    def numbers(self, at: np.ndarray) -> list:
        return self.table.column("ent_no").take(pa.array(at, pa.int64())).to_pylist()

    def ranked(self, threshold_columns: list[str]) -> np.ndarray:
        """The matched entities' positions in ranking order: optional groups satisfied (more
        first), then each threshold distance (nearer first, none last), then entity id (the
        table's own order)."""
        if self._ranked is None:
            at = np.flatnonzero(self.columns["status"] == MATCHED)
            keys = [at] + [self.distances[c][at] for c in reversed(threshold_columns)] + [-self.columns["opt"][at]]
            self._ranked = at[np.lexsort(keys)]
        return self._ranked


def hold(plan: PlanShape, table: pa.Table) -> Held | None:
    """The arrays the lists, ranking and page read, from a statuses table `final` made (in entity id
    order, as its metadata says); None for one made in SQL."""
    if (table.schema.metadata or {}).get(SORTED) != b"entity_id":
        return None

    def col(name: str) -> np.ndarray:
        return table.column(name).to_numpy()

    units = [f"g{g.index}" for g in plan.groups] + [f"s{b.index}" for b in plan.singles]
    flags = [f"{k}_{r.name}" for r in plan.relations for k in ("cov", "live")]
    return Held(table, {n: col(n) for n in ["status", "opt", *units, *flags]},
                {n: np.nan_to_num(table.column(n).to_numpy().astype(np.float64), nan=np.inf)
                 for n in threshold_columns(plan)})
