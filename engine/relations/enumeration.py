"""Enumeration: every relation a search names, read set-based in DuckDB and intersected per entity.

One scan per relation judges each current row against every group on that relation and every
constraint alone (for counts.per_constraint), and aggregates per entity; the universe is then
joined with those aggregates and with the coverage declarations, and each entity gets one status
per group and one overall — all in one SQL statement, materialised as a temporary table that the
warrant reads its counts, lists and the page of matches from.

A row is judged three-valued per condition: TRUE, FALSE, or NULL (no value for the slot, or a span
that straddles the threshold). Per group, a row MATCHES when every condition is TRUE, it is
active at as_of, not retired by a correction and not withheld by its loader; it is OPEN (cannot
be judged) when no condition is FALSE, it is not inactive, and it does not match. Per entity and
group: matched if a row matches, else undetermined if a row is open, else none if the relation was
looked at for the entity (a coverage row or any row), else not_recorded.
"""
from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from datetime import date

import duckdb

from .constraints import Bound
from .packs import Relation
from .workspaces import Space

CAUSES = ("unrecorded", "open_period", "undated", "corrected", "withheld")


@dataclass
class Group:
    """Conditions on one relation that must hold on ONE row (required ones; preferences apart)."""
    index: int
    relation: Relation
    required: bool
    bound: list[Bound]

    @property
    def constraints(self) -> list[int]:
        return [b.index for b in self.bound]


def make_groups(bound: list[Bound]) -> list[Group]:
    groups: dict[tuple[str, bool], Group] = {}
    for b in bound:
        key = (b.rel.name, b.c.required)
        if key not in groups:
            groups[key] = Group(len(groups), b.rel, b.c.required, [])
        groups[key].bound.append(b)
    return list(groups.values())


@dataclass
class Plan:
    space: Space
    groups: list[Group]
    singles: list[Bound]
    as_of: tuple[date, date] | None          # first and last day of the as_of month
    kinds: list[str]
    params: list = field(default_factory=list)

    @property
    def relations(self) -> list[Relation]:
        seen: dict[str, Relation] = {}
        for b in self.singles:
            seen.setdefault(b.rel.name, b.rel)
        return list(seen.values())


def time_sql(rel: Relation, as_of: tuple[date, date] | None) -> tuple[str, list, str]:
    """(SQL giving 'active' | 'inactive' | 'unanswerable' for row r at as_of, params, SQL saying
    whether the row is undated — has no tenure)."""
    undated = f"r.v_{rel.period[0]} IS NULL" if rel.period else "TRUE"
    if as_of is None:
        return "'active'", [], undated
    _, end = as_of
    params: list = []
    if rel.date_slot:
        d = rel.date_slot
        undated_test = (f"CASE WHEN r.lo_{d} IS NULL THEN 'unanswerable' WHEN r.hi_{d} <= ? THEN 'active' "
                        f"WHEN r.lo_{d} > ? THEN 'inactive' ELSE 'unanswerable' END")
        undated_params = [end, end]
    else:
        undated_test, undated_params = "'unanswerable'", []
    if not rel.period:
        return undated_test, undated_params, undated
    pf, pt = rel.period
    dated = (f"CASE WHEN r.hi_{pf} <= ? AND (r.v_{pt} IS NULL OR r.lo_{pt} > ?) THEN 'active' "
             f"WHEN r.lo_{pf} > ? OR r.hi_{pt} <= ? THEN 'inactive' ELSE 'unanswerable' END")
    params = [end, end, end, end] + undated_params
    return f"CASE WHEN r.v_{pf} IS NOT NULL THEN {dated} ELSE {undated_test} END", params, undated


def _all(parts: list[str], joiner: str, empty: str) -> str:
    return f"({joiner.join(parts)})" if parts else empty


class Enumerator:
    """Builds and runs the enumeration; the result is a temp table named `self.table`."""

    def __init__(self, con: duckdb.DuckDBPyConnection, plan: Plan):
        self.con = con
        self.plan = plan
        self.table = f"_rsearch_{secrets.token_hex(6)}"

    def rows_sql(self, rel: Relation, extra_where: str = "", extra_cols: tuple[str, ...] = ()) -> tuple[str, list]:
        """One relation's current rows with, per constraint on it, p<i> (its three-valued verdict),
        z<i> (no value recorded), u<i> (a value the vocabulary cannot place), d<i> (distance from a
        threshold); tm (time state), undated, retired_, withheld_."""
        plan = self.plan
        params: list = []
        cols = ["r.entity_id", "r.row_id", "r.retired IS NOT NULL AS retired_", "r.withheld IS NOT NULL AS withheld_"]
        tm, tparams, undated = time_sql(rel, plan.as_of)
        cols.append(f"{tm} AS tm")
        params += tparams
        cols.append(f"{undated} AS undated")
        for b in plan.singles:
            if b.rel.name != rel.name:
                continue
            pred, pp = b.predicate()
            cols.append(f"{pred} AS p{b.index}")
            params += pp
            cols.append(f"r.v_{b.slot.name} IS NULL AS z{b.index}")
            up = b.unplaced()
            cols.append(f"{up or 'FALSE'} AS u{b.index}")
            dist = b.distance()
            if dist is not None:
                cols.append(f"{dist[0]} AS d{b.index}")
                params += dist[1]
        cols += [f"r.{c}" for c in extra_cols]
        table = plan.space.shape(rel).name
        sql = (f"SELECT {', '.join(cols)} FROM {table} r WHERE r.workspace_id = ? AND r.current "
               f"AND r.entity_id IS NOT NULL {extra_where}")
        params.append(plan.space.workspace_id)
        return sql, params

    @staticmethod
    def verdicts(bound: list[Bound]) -> tuple[str, str, str]:
        """(every condition TRUE, some condition FALSE, the row MATCHES) over rows_sql's columns."""
        all_true = _all([f"p{b.index} IS TRUE" for b in bound], " AND ", "TRUE")
        any_false = _all([f"p{b.index} IS FALSE" for b in bound], " OR ", "FALSE")
        match = f"({all_true} AND tm = 'active' AND NOT retired_ AND NOT withheld_)"
        return all_true, any_false, match

    def _aggregate(self, rel: Relation) -> tuple[str, list]:
        plan = self.plan
        rows, params = self.rows_sql(rel)
        aggs = ["count(*) FILTER (WHERE NOT retired_) AS n_live", "count(*) AS n_rows"]
        units = [(f"g{g.index}", g.bound) for g in plan.groups if g.relation.name == rel.name]
        units += [(f"s{b.index}", [b]) for b in plan.singles if b.rel.name == rel.name]
        for name, bound in units:
            all_true, any_false, match = self.verdicts(bound)
            opened = f"(NOT {any_false} AND tm <> 'inactive' AND NOT {match})"
            clean = f"{all_true} AND NOT retired_ AND NOT withheld_"
            aggs += [f"bool_or({match}) AS {name}_m", f"bool_or({opened}) AS {name}_o",
                     f"count(*) FILTER (WHERE {clean} AND tm = 'active') AS {name}_active"]
            if not name.startswith("g"):
                continue
            aggs += [f"count(*) FILTER (WHERE {clean} AND tm = 'inactive') AS {name}_inactive",
                     f"count(*) FILTER (WHERE {clean} AND undated) AS {name}_undated",
                     f"count(*) FILTER (WHERE {clean} AND tm = 'unanswerable') AS {name}_unplaceable"]
            value = [b for b in bound if not b.is_period]
            period = [b for b in bound if b.is_period]
            spans = [b for b in bound if b.is_span]
            causes = {
                "unrecorded": _all([f"(p{b.index} IS NULL AND z{b.index})" for b in value], " OR ", "FALSE"),
                "open_period": _all([f"(p{b.index} IS NULL AND z{b.index})" for b in period], " OR ", "FALSE"),
                "undated": "(tm = 'unanswerable'" + "".join(
                    f" OR (p{b.index} IS NULL AND NOT z{b.index})" for b in spans) + ")",
                "corrected": "retired_",
                "withheld": "withheld_",
            }
            for cause, test in causes.items():
                aggs.append(f"bool_or({opened} AND {test}) AS {name}_{cause}")
            for b in value:
                aggs.append(f"bool_or({opened} AND p{b.index} IS NULL AND z{b.index}) AS {name}_z{b.index}")
                if b.unplaced() is not None:
                    others = _all([f"p{o.index} IS FALSE" for o in bound if o is not b], " OR ", "FALSE")
                    aggs.append(f"bool_or(u{b.index} AND NOT {others} AND tm <> 'inactive') AS {name}_u{b.index}")
            for b in bound:
                if b.thresholded:
                    aggs.append(f"min(d{b.index}) FILTER (WHERE {match}) AS {name}_d{b.index}")
        return f"SELECT entity_id, {', '.join(aggs)} FROM ({rows}) GROUP BY entity_id", params

    def run(self) -> str:
        plan = self.plan
        params: list = []
        ctes = []
        params_u = [plan.space.workspace_id]
        kinds = plan.kinds
        ctes.append(f"u AS (SELECT DISTINCT entity_id FROM rel_entities WHERE workspace_id = ? "
                    f"AND list_contains(?, kind))")
        params_u.append(kinds)
        params += params_u
        select = ["u.entity_id"]
        covered: dict[str, str] = {}
        for rel in plan.relations:
            agg, ap = self._aggregate(rel)
            ctes.append(f"a_{rel.name} AS ({agg})")
            params += ap
            ctes.append(f"c_{rel.name} AS (SELECT DISTINCT entity_id FROM rel_coverage "
                        f"WHERE workspace_id = ? AND relation = ? AND current)")
            params += [plan.space.workspace_id, rel.name]
            covered[rel.name] = f"(c_{rel.name}.entity_id IS NOT NULL OR coalesce(a_{rel.name}.n_rows, 0) > 0)"
            select += [f"{covered[rel.name]} AS cov_{rel.name}",
                       f"coalesce(a_{rel.name}.n_live, 0) AS live_{rel.name}"]
        joins = " ".join(f"LEFT JOIN a_{r.name} ON a_{r.name}.entity_id = u.entity_id "
                         f"LEFT JOIN c_{r.name} ON c_{r.name}.entity_id = u.entity_id" for r in plan.relations)
        units = [(f"g{g.index}", g.relation, g.bound) for g in plan.groups]
        units += [(f"s{b.index}", b.rel, [b]) for b in plan.singles]
        for name, rel, bound in units:
            a = f"a_{rel.name}"
            select.append(f"CASE WHEN {a}.{name}_m THEN 'matched' WHEN {a}.{name}_o THEN 'undetermined' "
                          f"WHEN {covered[rel.name]} THEN 'none' ELSE 'not_recorded' END AS {name}")
            select.append(f"coalesce({a}.{name}_active, 0) AS {name}_active")
            if name.startswith("g"):
                select += [f"coalesce({a}.{name}_{x}, 0) AS {name}_{x}" for x in ("inactive", "undated", "unplaceable")]
                select += [f"coalesce({a}.{name}_{c}, FALSE) AS {name}_{c}" for c in CAUSES]
                for b in bound:
                    if not b.is_period:
                        select.append(f"coalesce({a}.{name}_z{b.index}, FALSE) AS {name}_z{b.index}")
                        if b.unplaced() is not None:
                            select.append(f"coalesce({a}.{name}_u{b.index}, FALSE) AS {name}_u{b.index}")
                    if b.thresholded:
                        select.append(f"{a}.{name}_d{b.index} AS {name}_d{b.index}")
        inner = f"SELECT {', '.join(select)} FROM u {joins}"
        required = [f"g{g.index}" for g in plan.groups if g.required]
        optional = [f"g{g.index}" for g in plan.groups if not g.required]
        status = "CASE " + "".join(
            f"WHEN {_all([f'{g} = {s!r}' for g in required], ' OR ', 'FALSE')} THEN {s!r} "
            for s in ("none", "not_recorded", "undetermined")) + "ELSE 'matched' END"
        opt = " + ".join(f"CAST({g} = 'matched' AS INTEGER)" for g in optional) or "0"
        sql = (f"CREATE TEMP TABLE {self.table} AS WITH {', '.join(ctes)} "
               f"SELECT *, {status} AS status, {opt} AS opt FROM ({inner})")
        self.con.execute(sql, params)
        return self.table

    def drop(self) -> None:
        try:
            self.con.execute(f"DROP TABLE IF EXISTS {self.table}")
        except duckdb.Error:
            pass
