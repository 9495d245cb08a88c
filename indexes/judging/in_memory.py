"""The NumPy evaluator: a relation's per-entity aggregate — exactly the table `RelationSql.aggregate`'s
SQL yields, row for row (tests/relations/test_relation_columns.py compares them) — computed over its
rows held as columns (held_columns.py).

Every per-row input of the verdicts (each constrained slot's value, the time state at as_of, retired,
withheld, undated — only those the search reads) is a small code per row. Each condition is decided
once per distinct value by its own predicate SQL (`RelationColumns.decide`); the flags, counters and
distances — the very SQL text of relation_sql.py, run by three_valued.py — once per combination of
those codes (`combine`); then spread to the rows by one index and reduced per entity (`aggregated`).
"""
from __future__ import annotations

from datetime import date

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..relation_shapes import RelationShape
from .held_columns import RelationColumns, Unsupported
from .relation_sql import RelationSql
from .row_sql import ACTIVE, BITS, FIELD, INACTIVE, UNPLACEABLE, distance, predicate, unplaced
from .three_valued import TRUE, Columns, Tri, combine, floats, run_sql, tri

def judge(rsql: RelationSql, rel: RelationShape, cols: RelationColumns, con: duckdb.DuckDBPyConnection
          ) -> pa.Table:
    """The relation's aggregate over its held rows: the flags, counters and distances computed once
    per combination of the per-row codes (`combine`), and spread to the rows by one index each
    before the per-entity reduction. Unsupported: what this cannot judge (the SQL path runs)."""
    factors = _factors(rsql, rel, cols)
    key, levels, size = combine(list(factors.values()))
    env = _environment(rsql, rel, cols, con, dict(zip(factors, levels)))
    out = _outputs(rsql, rel, env, size)
    visible = cov_visible = None
    sight = rsql.plan.space.sight
    if not sight.everything:
        sees = [(sight.row("r"), [])]
        visible = tri(cols.decide(con, cols.scope, sees)[0], cols.scope.codes).t
        cov_visible = tri(cols.decide(con, cols.cov_scope, sees)[0], cols.cov_scope.codes).t
    return aggregated(cols, out, key, visible, cov_visible)


def _slot(cols: RelationColumns, name: str):
    if name not in cols.slots:
        raise Unsupported(f"slot {name} not held")
    return cols.slots[name]


def _factors(rsql: RelationSql, rel: RelationShape, cols: RelationColumns) -> dict[str, tuple[np.ndarray, int]]:
    """Every per-row input the verdicts read, as (a code per row, how many codes): each constrained
    slot's value, and — where this data and search can make them vary — retired, withheld, the time
    state at as_of and undated."""
    plan, prof = rsql.plan, rsql.profiles[rel.name]
    factors: dict[str, tuple[np.ndarray, int]] = {}
    for b in plan.singles:
        if b.rel.name == rel.name:
            coded = _slot(cols, b.slot.name)
            factors[b.slot.name] = (coded.codes, coded.values.num_rows)
    if prof.retired:
        factors["@retired"] = (cols.retired.view(np.int8), 2)
    if prof.withheld:
        factors["@withheld"] = (cols.withheld.view(np.int8), 2)
    if plan.as_of is not None:
        factors["@tm"] = (time_states(plan.as_of[1], rel, cols), 3)
    if rel.period and rel.period[0] in prof.null:
        pf = _slot(cols, rel.period[0])
        undated = pc.is_null(pf.values.column(f"v_{rel.period[0]}")).to_numpy(zero_copy_only=False)
        factors["@undated"] = (undated.view(np.int8)[pf.codes], 2)
    return factors


def _environment(rsql: RelationSql, rel: RelationShape, cols: RelationColumns, con: duckdb.DuckDBPyConnection,
                 level: dict[str, np.ndarray]) -> Columns:
    """The columns rows_sql names (p<i>, z<i>, u<i>, d<i>, tm, retired_, withheld_, undated) and the
    unit columns, per combination, each computed on first use."""
    plan, prof = rsql.plan, rsql.profiles[rel.name]

    def flag(name: str) -> Tri:
        on = level[name] == 1
        return Tri(on, ~on)

    later: dict = {
        "retired_": (lambda: flag("@retired")) if prof.retired else (lambda: Tri(False, True)),
        "withheld_": (lambda: flag("@withheld")) if prof.withheld else (lambda: Tri(False, True)),
        "undated": (lambda: flag("@undated")) if "@undated" in level else (lambda: TRUE),
        "tm": (lambda: level["@tm"]) if plan.as_of is not None else (lambda: ACTIVE),
    }
    for b in plan.singles:
        if b.rel.name != rel.name:
            continue
        s, i = b.slot.name, b.index
        exprs = [predicate(b), (f"r.v_{s} IS NULL", []), (unplaced(b) or "FALSE", [])]
        dist = distance(b)
        if dist is not None:
            exprs.append(dist)
        decided = cols.decide(con, _slot(cols, s), exprs)
        later[f"p{i}"] = lambda a=decided[0], c=level[s]: tri(a, c)
        later[f"z{i}"] = lambda a=decided[1], c=level[s]: tri(a, c)
        later[f"u{i}"] = lambda a=decided[2], c=level[s]: tri(a, c)
        if dist is not None:
            later[f"d{i}"] = lambda a=decided[3], c=level[s]: floats(a, c)
    env = Columns(later)
    for name, sql in rsql.unit_columns(rel):
        later[name] = lambda sql=sql: run_sql(sql, env)
    return env


def _outputs(rsql: RelationSql, rel: RelationShape, env: Columns, size: int) -> dict[str, tuple[str, object]]:
    """Per aggregate column: (how it aggregates, per combination its flags / counters as booleans, or
    its floats) — the masks, the packed (or, past 2**FIELD rows, separate) counters, the distances."""

    def sure(sql: str) -> np.ndarray:
        """A flag or counter per combination: never NULL by construction (else the SQL path runs)."""
        v = run_sql(sql, env)
        if not np.all(v.known):
            raise Unsupported(f"NULL from {sql!r}")
        return np.broadcast_to(np.asarray(v.t, dtype=bool), (size,))

    out: dict[str, tuple[str, object]] = {}
    flags = rsql.flag_sets[rel.name]
    for k in range(0, len(flags.flags), BITS):
        out[f"mask{k // BITS}"] = ("or", [sure(sql) for _, sql in flags.flags[k:k + BITS]])
    counters = rsql.counters(rel)
    wide = rsql.profiles[rel.name].rows >= 2 ** FIELD
    for k, names in enumerate(rsql.packed(rel)):
        if wide:
            out.update({f"n_{n}": ("count", [sure(counters[n])]) for n in names})
            continue
        out[f"pk{k}"] = ("pack", [sure(counters[n]) for n in names])
    for name, bound in rsql.units(rel):
        if name.startswith("g"):
            for b in bound:
                if b.thresholded:
                    m = np.broadcast_to(run_sql(f"{name}_m", env).t, (size,))
                    out[f"{name}_d{b.index}"] = ("min", np.where(m, env[f"d{b.index}"], np.nan))
    return out


def time_states(as_of_end: date, rel: RelationShape, cols: RelationColumns) -> np.ndarray:
    """time_sql's ACTIVE / INACTIVE / UNPLACEABLE per row at as_of. Each date slot's distinct
    values get a state of four bits (no value; hi <= end; lo > end; lo known), the rule is run
    once per combination of states, and each row reads its combination. A comparison with a
    missing date is FALSE here where SQL has NULL: every test is a CASE WHEN over ANDs and ORs
    of comparisons (no NOT), which fires exactly when it would in SQL."""
    end = (as_of_end - date(1970, 1, 1)).days
    names = ([rel.date_slot] if rel.date_slot else []) + list(rel.period or ())
    if not names:
        return np.full(cols.rows, UNPLACEABLE, np.int8)
    factors = []
    for s in names:
        if s not in cols.slots:
            raise Unsupported(f"slot {s} not held")
        coded = cols.slots[s]

        def bits(col: str):
            a = coded.values.column(f"{col}_{s}").combine_chunks()
            known = pc.is_valid(a).to_numpy(zero_copy_only=False)
            return known, pc.fill_null(pc.cast(a, pa.int32()), 0).to_numpy(zero_copy_only=False)

        vnull = pc.is_null(coded.values.column(f"v_{s}")).to_numpy(zero_copy_only=False)
        lo_known, lo = bits("lo")
        hi_known, hi = bits("hi")
        state = (vnull.astype(np.int8) | ((hi_known & (hi <= end)).astype(np.int8) << 1)
                 | ((lo_known & (lo > end)).astype(np.int8) << 2) | (lo_known.astype(np.int8) << 3))
        factors.append((state[coded.codes], 16))
    key, levels, _ = combine(factors)
    st = dict(zip(names, levels))

    def bit(s: str, i: int) -> np.ndarray:
        return ((st[s] >> i) & 1) == 1

    if rel.date_slot:
        d = rel.date_slot
        undated = np.where(~bit(d, 3), UNPLACEABLE, np.where(bit(d, 1), ACTIVE,
                                                             np.where(bit(d, 2), INACTIVE, UNPLACEABLE)))
    else:
        undated = np.full(len(levels[0]), UNPLACEABLE)
    if rel.period:
        pf, pt = rel.period
        dated = np.where(bit(pf, 1) & (bit(pt, 0) | bit(pt, 2)), ACTIVE,
                         np.where(bit(pf, 2) | bit(pt, 1), INACTIVE, UNPLACEABLE))
        table = np.where(~bit(pf, 0), dated, undated)
    else:
        table = undated
    return table.astype(np.int8)[key]

def aggregated(cols: RelationColumns, out: dict, key: np.ndarray, visible: np.ndarray | None,
               cov_visible: np.ndarray | None) -> pa.Table:
    """Per entity: OR / packed counts / count / min of each column over its (visible) rows, and
    an all-zero row (NULL distances) for an entity that only has a (visible) coverage row.
    `out`: each column's flags or counters per combination (booleans) or floats; `key`: each
    row's combination."""
    counts = _summed(cols, [f for how, arrays in out.values() if how != "min" for f in arrays], key, visible)
    aggs: dict[str, np.ndarray] = {}
    at = 0
    for name, (how, values) in out.items():
        if how == "min":
            aggs[name] = _least(cols, values, key, visible)
            continue
        mine, at = counts[at:at + len(values)], at + len(values)
        column = np.zeros(len(cols.starts), np.int64)
        for j, count in enumerate(mine):
            if how == "or":
                column |= (count > 0).astype(np.int64) << j
            elif how == "pack":
                column |= count << (FIELD * j)
            else:
                column = count
        aggs[name] = column
    return _laid_out(cols, out, aggs, visible, cov_visible)


def _summed(cols: RelationColumns, fields: list[np.ndarray], key: np.ndarray, visible: np.ndarray | None
            ) -> list[np.ndarray]:
    """Each boolean field (per combination) summed per entity over its (visible) rows.

    An entity's sum is at most its number of rows: as many fields as fit go in one int64 at the
    width that number needs (5 bits for 20 rows), and one gather and one reduceat serve them all,
    where the SQL's layout (a mask of bits, counters of 21 bits) would take one per column. OR is a
    sum above zero."""
    starts = cols.starts
    n_ent = len(starts)
    longest = int(np.diff(np.r_[starts, cols.rows]).max()) if n_ent else 0
    width = max(1, longest.bit_length())
    counts: list[np.ndarray] = []
    per = 63 // width
    for c in range(0, len(fields), per):
        packed = np.zeros(len(fields[c]), np.int64)
        for j, f in enumerate(fields[c:c + per]):
            packed |= f.astype(np.int64) << (width * j)
        per_row = packed[key]
        if visible is not None:
            per_row = np.where(visible, per_row, 0)
        sums = np.add.reduceat(per_row, starts) if n_ent else per_row[:0]
        counts += [(sums >> (width * j)) & ((1 << width) - 1) for j in range(len(fields[c:c + per]))]
    return counts


def _least(cols: RelationColumns, values: np.ndarray, key: np.ndarray, visible: np.ndarray | None) -> np.ndarray:
    """The least of floats (NaN: none) per entity, as the least of their ranks among the
    combinations' values: an integer reduction, twice as fast as fmin's over the rows' floats."""
    starts = cols.starts
    order = np.argsort(values, kind="stable")   # NaN last
    ranks = np.empty(len(values), np.int32)
    ranks[order] = np.arange(len(values), dtype=np.int32)
    per_row = ranks[key]
    if visible is not None:
        per_row = np.where(visible, per_row, len(values))
    least = np.minimum.reduceat(per_row, starts) if len(starts) else per_row[:0]
    return np.r_[values[order], np.nan][least]


def _laid_out(cols: RelationColumns, out: dict, aggs: dict[str, np.ndarray], visible: np.ndarray | None,
              cov_visible: np.ndarray | None) -> pa.Table:
    """The aggregate as the SQL lays it out: a row per entity with a visible row or a visible
    coverage row (all zero, NULL distances, for the latter alone), by entity number."""
    starts, present = cols.starts, cols.entities
    if visible is not None and len(starts):
        keep = np.logical_or.reduceat(visible, starts)
        present = present[keep]
        aggs = {n: a[keep] for n, a in aggs.items()}
    covered = cols.cov_ent_no if cov_visible is None else cols.cov_ent_no[cov_visible]
    top = int(max(present.max(initial=-1), covered.max(initial=-1))) + 1
    seen = np.zeros(top, bool)   # entity numbers are dense: a bitmap is the cheapest union
    seen[present] = True
    seen[covered] = True
    every = np.flatnonzero(seen).astype(np.int32)
    at = (np.cumsum(seen) - 1)[present]   # each present entity's place among every one
    columns: dict[str, pa.Array] = {"ent_no": pa.array(every, pa.int32())}
    for name, (how, _) in out.items():
        if how == "min":
            full = np.full(len(every), np.nan)
            full[at] = aggs[name]
            columns[name] = pa.array(full, pa.float64(), mask=np.isnan(full))
        else:
            full = np.zeros(len(every), np.int64)
            full[at] = aggs[name]
            columns[name] = pa.array(full, pa.int64())
    return pa.table(columns)
