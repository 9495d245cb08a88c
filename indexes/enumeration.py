"""Enumeration: every relation a search names, read set-based in DuckDB and intersected per entity.

One scan per relation judges each current row against every group on that relation and every
constraint alone (for counts.per_constraint), and aggregates per entity; the universe is then
joined with those aggregates and with the coverage declarations, and each entity gets one status
per group, per constraint alone and overall — all in one SQL statement, materialised as a
temporary table that the warrant reads its counts, lists and page of matches from.

A row is judged three-valued per condition: TRUE, FALSE, or NULL (no value for the slot, or a span
that straddles the threshold). Per group, a row MATCHES when every condition is TRUE, it is
active at as_of, not retired by a correction and not withheld by its loader; it is OPEN when no
condition is FALSE and it is not inactive (an open row that does not match cannot be judged). Per
entity and group: matched if a row matches, else undetermined if a row is open, else none if the
relation was looked at for the entity (a coverage row or any row), else not_recorded.

Speed: a `Profile` of each relation (one cheap scan, cached until the workspace's next write: are
there retired, withheld, valueless or unplaceable rows?) lets the SQL leave out every test this
data cannot make true, so clean data is judged with plain comparisons; verdicts are computed once
per row in layered projections and aggregated per entity as a few bit masks (bit_or) and packed
counters, keyed by a dense integer entity number.

Two ways to run the same SQL: in DuckDB (above), or — where the relation's rows are held as NumPy
columns at this workspace version (relation_columns.py) — `judged` evaluates the very same
per-row SQL text over them (conditions decided once per distinct value, the rest once per
combination of inputs, a reduceat per entity) and `_final` computes the statuses from the
aggregates; the lists, ranking and page then read NumPy arrays (`Held`). Both ways give the same
tables, column for column (tests/relations/test_relation_columns.py).
"""
from __future__ import annotations

import re
import secrets
import threading
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import date


import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .relation_columns import (TRUE, ColumnCache, Columns, RelationColumns, Tri, Unsupported, combine,
                               floats, run_sql, tri)
from .relation_shapes import BoundShape, PlanShape, RelationShape


CAUSES = ("unrecorded", "open_period", "undated", "corrected", "withheld")
# Status codes in the temp table (small integers compare faster than strings).
MATCHED, NONE, NOT_RECORDED, UNDETERMINED = 0, 1, 2, 3
STATUS = {"matched": MATCHED, "none": NONE, "not_recorded": NOT_RECORDED, "undetermined": UNDETERMINED}
ACTIVE, INACTIVE, UNPLACEABLE = 0, 1, 2   # time states of a row at as_of
BITS = 62            # flags per BIGINT mask
FIELD = 21           # bits per packed row counter (an entity's rows of one relation < 2**21)
FIELDS = 3           # packed counters per BIGINT
SEEN_KEYS = 4096     # enumeration statements remembered as asked-for once (VerdictCache.seen)
SORTED = b"refindery.sorted"   # a statuses table's metadata: made in NumPy, in entity id order


@dataclass
class Profile:
    """What one relation's current rows in the workspace can hold, for the slots a search reads."""
    rows: int = 0
    retired: bool = False
    withheld: bool = False
    unattributed: bool = False
    null: set[str] = field(default_factory=set)        # slots some row holds no value for
    unplaced: set[str] = field(default_factory=set)    # term slots some row holds an unknown surface in


def length_sql(rel: RelationShape, ref: date, ref_name: str) -> tuple[str, str]:
    """SQL for a relation's computed length: (years as a number, the arithmetic as text), from the
    first day of period_from to the last day of period_to — or to `ref` (as_of's last day, or
    today) while the period is open or ends after it. Both NULL (not computable: the row is open
    on it) when the start is missing or is a bare year, or the end is a bare year: a span a year
    wide cannot be counted in years."""
    pf, pt = rel.period
    ref_sql = f"DATE '{ref.isoformat()}'"
    end = f"least(coalesce(hi_{pt}, {ref_sql}), {ref_sql})"
    days = f"(date_diff('day', lo_{pf}, {end}) + 1)"
    computable = (f"lo_{pf} IS NOT NULL AND date_diff('day', lo_{pf}, hi_{pf}) < 31 "
                  f"AND (v_{pt} IS NULL OR (hi_{pt} IS NOT NULL AND date_diff('day', lo_{pt}, hi_{pt}) < 31)) "
                  f"AND {end} >= lo_{pf}")
    note = (f"CASE WHEN v_{pt} IS NULL THEN ' (open: counted to {ref_name})' "
            f"WHEN hi_{pt} > {ref_sql} THEN ' (counted to {ref_name})' ELSE '' END")
    n = f"CASE WHEN {computable} THEN {days} / 365.25 END"
    v = (f"CASE WHEN {computable} THEN printf('%s to %s: %d days = %.1f years', strftime(lo_{pf}, '%Y-%m-%d'), "
         f"strftime({end}, '%Y-%m-%d'), {days}, {days} / 365.25) || {note} END")
    return n, v


def time_sql(rel: RelationShape, as_of: tuple[date, date]) -> tuple[str, list]:
    """SQL giving ACTIVE / INACTIVE / UNPLACEABLE for row r at as_of, and its params."""
    _, end = as_of
    if rel.date_slot:
        d = rel.date_slot
        undated = (f"CASE WHEN r.lo_{d} IS NULL THEN {UNPLACEABLE} WHEN r.hi_{d} <= ? THEN {ACTIVE} "
                   f"WHEN r.lo_{d} > ? THEN {INACTIVE} ELSE {UNPLACEABLE} END")
        undated_params = [end, end]
    else:
        undated, undated_params = str(UNPLACEABLE), []
    if not rel.period:
        return undated, undated_params
    pf, pt = rel.period
    dated = (f"CASE WHEN r.hi_{pf} <= ? AND (r.v_{pt} IS NULL OR r.lo_{pt} > ?) THEN {ACTIVE} "
             f"WHEN r.lo_{pf} > ? OR r.hi_{pt} <= ? THEN {INACTIVE} ELSE {UNPLACEABLE} END")
    return f"CASE WHEN r.v_{pf} IS NOT NULL THEN {dated} ELSE {undated} END", [end] * 4 + undated_params


def sql_str(value: str) -> str:
    """A SQL string literal (vocabulary terms are written into the SQL, so term tests are plain IN
    lists the optimiser can fold)."""
    return "'" + str(value).replace("'", "''") + "'"


# The SQL of one bound constraint over one row of its relation's table, aliased r. Each returns
# (sql, params) or a SQL expression.
def predicate(b: BoundShape, nullable: bool = True, unplaceable: bool = True) -> tuple[str, list]:
    """TRUE / FALSE when the row's value decides the condition; NULL when it cannot (no value,
    or a span that straddles the threshold). `nullable` / `unplaceable` say whether this data
    holds rows with no value / a value the vocabulary cannot place: the SQL is simplest when
    it need not handle them (a term test is then a plain IN over integers or strings)."""
    s, op = b.slot.name, b.c.op
    v = f"r.v_{s}"
    if b.kind == "term":
        if op in ("gte", "lte"):
            test = f"r.r_{s} {'>=' if op == 'gte' else '<='} {int(b.threshold)}"
        else:
            test = f"r.t_{s} IN ({', '.join(sql_str(t) for t in b.terms)})"
            if op == "ne":
                test = f"NOT ({test})"
        if unplaceable:
            test = f"coalesce({test}, FALSE)"
        if nullable:
            test = f"CASE WHEN {v} IS NULL THEN NULL ELSE {test} END"
        return test, []
    if b.kind == "literal":
        test = f"list_contains(?, lower(regexp_replace(trim({v}), '\\s+', ' ', 'g')))"
        if op == "ne":
            test = f"NOT {test}"
        return f"CASE WHEN {v} IS NULL THEN NULL ELSE {test} END", [b.literals]
    if b.kind == "text":
        low = f"lower(regexp_replace(trim({v}), '\\s+', ' ', 'g'))"
        if op == "contains":
            return f"CASE WHEN {v} IS NULL THEN NULL ELSE strpos({low}, ?) > 0 END", [b.values[0]]
        test = f"list_contains(?, {low})"
        if op == "ne":
            test = f"NOT {test}"
        return f"CASE WHEN {v} IS NULL THEN NULL ELSE {test} END", [b.values]
    if b.kind == "number":
        n = f"r.n_{s}"
        if op in ("gte", "lte"):
            return f"{n} {'>=' if op == 'gte' else '<='} ?", [b.threshold]
        test = f"list_contains(?, {n})"
        return (f"NOT {test}" if op == "ne" else test), [b.values]
    # spans: decided only when the whole of the row's span is on one side
    lo, hi = f"r.lo_{s}", f"r.hi_{s}"
    if op in ("gte", "lte"):
        first, last = b.threshold
        if op == "gte":
            return f"CASE WHEN {lo} >= ? THEN TRUE WHEN {hi} < ? THEN FALSE END", [first, first]
        return f"CASE WHEN {hi} <= ? THEN TRUE WHEN {lo} > ? THEN FALSE END", [last, last]
    parts, params = [], []
    for first, last in b.values:
        parts.append(f"CASE WHEN {lo} >= ? AND {hi} <= ? THEN TRUE WHEN {hi} < ? OR {lo} > ? THEN FALSE END")
        params += [first, last, first, last]
    any_in = f"({' OR '.join(parts)})" if len(parts) > 1 else parts[0]
    return (f"NOT {any_in}" if op == "ne" else any_in), params


def unplaced(b: BoundShape) -> str | None:
    """A row whose value the vocabulary cannot place relative to the constraint's set."""
    if b.kind != "term":
        return None
    s = b.slot.name
    col = f"r.r_{s}" if b.c.op in ("gte", "lte") else f"r.t_{s}"
    return f"(r.v_{s} IS NOT NULL AND {col} IS NULL)"


def distance(b: BoundShape) -> tuple[str, list] | None:
    """How far a satisfying row is from a gte/lte threshold: rungs, units, or months/days."""
    if not b.thresholded:
        return None
    s = b.slot.name
    if b.kind == "term":
        return f"CAST(abs(r.r_{s} - ?) AS DOUBLE)", [b.threshold]
    if b.kind == "number":
        return f"abs(r.n_{s} - ?)", [b.threshold]
    unit = "month" if b.slot.type == "month" else "day"
    first, last = b.threshold
    if b.c.op == "gte":
        return f"CAST(date_diff('{unit}', ?, r.lo_{s}) AS DOUBLE)", [first]
    return f"CAST(date_diff('{unit}', r.hi_{s}, ?) AS DOUBLE)", [last]


def _all(parts: list[str], joiner: str, empty: str) -> str:
    parts = [p for p in parts if p != empty]
    if not parts:
        return empty
    return parts[0] if len(parts) == 1 else f"({joiner.join(parts)})"


class Flags:
    """Named per-row booleans of one relation, packed into BIGINT masks and OR-ed per entity."""

    def __init__(self) -> None:
        self.flags: list[tuple[str, str]] = []

    def add(self, name: str, sql: str) -> None:
        self.flags.append((name, sql))

    @property
    def names(self) -> list[str]:
        return [n for n, _ in self.flags]

    def has(self, name: str) -> bool:
        return name in self.names

    def masks(self) -> list[str]:
        out = []
        for k in range(0, len(self.flags), BITS):
            chunk = self.flags[k:k + BITS]
            out.append(" | ".join(f"(CAST({s} AS BIGINT) << {i})" for i, (_, s) in enumerate(chunk)))
        return out

    def bit(self, name: str) -> tuple[int, int]:
        i = self.names.index(name)
        return i // BITS, i % BITS

    def detail_masks(self) -> list[int]:
        """Per mask, the bits of the flags that say why (causes, unrecorded, unplaced)."""
        out = []
        for k in range(0, len(self.flags), BITS):
            bits = 0
            for i, (name, _) in enumerate(self.flags[k:k + BITS]):
                if re.search(r"_(c_|z\d|u\d)", name):
                    bits |= 1 << i
            out.append(bits)
        return out

    def test(self, name: str, prefix: str) -> str:
        """SQL testing the entity-level OR of a flag over the aggregated masks <prefix>0, 1, ..."""
        if not self.has(name):
            return "FALSE"
        k, i = self.bit(name)
        return f"coalesce(({prefix}{k} >> {i}) & 1 = 1, FALSE)"


# Judging a plan's relations side by side (Enumerator._verdict_tables): a few threads every search shares.
_JUDGES = ThreadPoolExecutor(max_workers=4, thread_name_prefix="refindery-judge")


class VerdictCache:
    """Least-recently-used enumeration results (Arrow tables) within a byte budget, keyed by
    workspace, version and the statement's SQL and parameters: a relation's per-entity verdicts
    for the constraints on it (Enumerator._verdicts) and a whole plan's statuses (Enumerator.run).
    `budget_mb` 0: off."""

    def __init__(self, budget_mb: float):
        self.budget = int(budget_mb * 2**20)
        self._items: OrderedDict[tuple, pa.Table] = OrderedDict()
        self._seen: OrderedDict[tuple, None] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def seen(self, key: tuple) -> bool:
        """Whether `key` was asked for before (and remember it): a result is cached on its second
        use, so a search that is never repeated pays nothing for the cache."""
        if self.budget <= 0:
            return False
        with self._lock:
            if key in self._seen:
                self._seen.move_to_end(key)
                return True
            self._seen[key] = None
            while len(self._seen) > SEEN_KEYS:
                self._seen.popitem(last=False)
            return False

    def get(self, key: tuple) -> pa.Table | None:
        if self.budget <= 0:
            return None
        with self._lock:
            table = self._items.get(key)
            if table is None:
                self.misses += 1
                return None
            self._items.move_to_end(key)
            self.hits += 1
            return table

    def put(self, key: tuple, table: pa.Table) -> None:
        if table.nbytes > self.budget:
            return
        with self._lock:
            old = self._items.pop(key, None)
            self._bytes -= old.nbytes if old is not None else 0
            self._items[key] = table
            self._bytes += table.nbytes
            while self._bytes > self.budget:
                _, gone = self._items.popitem(last=False)
                self._bytes -= gone.nbytes

    def forget(self, workspace_id: str) -> None:
        """Drop a workspace's entries (its version moved: they can never be read again)."""
        with self._lock:
            for key in [k for k in self._items if k[0] == workspace_id]:
                self._bytes -= self._items.pop(key).nbytes
            for key in [k for k in self._seen if k[0] == workspace_id]:
                del self._seen[key]

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._seen.clear()
            self._bytes = 0


@dataclass
class Held:
    """The statuses `_final` computed, by entity id, as NumPy arrays: what the lists, the ranking and
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


def _rows_reader(cursor, table: str, rel: RelationShape, workspace_id: str):
    """How a relation's rows are read into columns, on a cursor of its own (`cursor()`) made when the
    read runs (on the column cache's thread; again after each write while the relation is held)."""
    def read() -> RelationColumns:
        con = cursor()
        try:
            return RelationColumns.read(con, table, rel, workspace_id)
        finally:
            con.close()
    return read


class Enumerator:
    """Builds and runs the enumeration; the result is a temp table named `self.table`."""

    def __init__(self, con: duckdb.DuckDBPyConnection, plan: PlanShape, cache: dict | None = None, version: int = 0,
                 verdict_cache: "VerdictCache | None" = None, columns: ColumnCache | None = None, reader=None):
        """`reader`: makes a cursor for a read on another thread (RelationStore.reader); default one
        made from `con`."""
        self.con = con
        self._reader = reader or con.cursor
        self.cache, self.version = cache, version
        self.verdict_cache = verdict_cache
        self.columns = columns
        self._tables: dict[str, pa.Table] = {}   # each relation's verdicts this search read from memory
        self._held: Held | None = None   # the statuses as NumPy arrays, by entity id, when _final made them
        self._later: list = []   # column reads this search found missing: started when it is done (drop)
        self._registered: list[str] = []
        self.plan = plan
        self._temp = f"_rsearch_{secrets.token_hex(6)}"
        self.table = self._temp   # what the warrant reads: the temp table, or a cached Arrow table's view
        self.profiles = {rel.name: self.profile(rel) for rel in plan.relations}
        self.flag_sets: dict[str, Flags] = {rel.name: self.flags(rel) for rel in plan.relations}

    # What the data can hold ----------------------------------------------------------------------
    def profile(self, rel: RelationShape) -> Profile:
        slots = sorted({b.slot.name for b in self.plan.singles if b.rel.name == rel.name}
                       | set(rel.period or ()) | ({rel.date_slot} if rel.date_slot else set()))
        exprs = ["count(*)", "count(retired)", "count(withheld)", "count(*) - count(entity_id)"]
        exprs += [f"count(*) - count(v_{s})" for s in slots]
        terms = [s for s in slots if rel.slots[s].type == "term"]
        exprs += [f"count(v_{s}) - count(t_{s})" for s in terms]
        exprs += [f"count(t_{s}) - count(r_{s})" for s in terms]
        table = self.source(rel)
        sight = self.plan.space.sight
        key = ("profile", self.plan.space.workspace_id, table, tuple(exprs), sight.scopes, self.version)
        row = self.cache.get(key) if self.cache is not None else None
        if row is None:
            row = self.con.execute(f"SELECT {', '.join(exprs)} FROM {table} WHERE workspace_id = ? AND current "
                                   f"AND {sight.row()}", [self.plan.space.workspace_id]).fetchone()
            if self.cache is not None:
                self.cache[key] = row
        p = Profile(rows=row[0], retired=row[1] > 0, withheld=row[2] > 0, unattributed=row[3] > 0)
        p.null = {s for s, n in zip(slots, row[4:4 + len(slots)]) if n}
        unknown = row[4 + len(slots):4 + len(slots) + len(terms)]
        unranked = row[4 + len(slots) + len(terms):]
        for b in self.plan.singles:
            if b.rel.name != rel.name or b.kind != "term":
                continue
            i = terms.index(b.slot.name)
            if unknown[i] or (b.c.op in ("gte", "lte") and unranked[i]):
                p.unplaced.add(b.slot.name)
        return p

    def computes(self, rel: RelationShape) -> bool:
        """Whether this search reads the relation's computed length (a constraint names it): only
        then are its rows read through the computing projection."""
        return rel.length_slot is not None and any(
            b.rel.name == rel.name and b.slot.name == rel.length_slot for b in self.plan.singles)

    def source(self, rel: RelationShape) -> str:
        """What one relation's rows are read from: its table, or — when the relation has a computed
        length slot — the table with that slot's columns computed (length_sql)."""
        table = self.plan.space.shape(rel).name
        if not self.computes(rel):
            return table
        n, v = length_sql(rel, self.plan.as_of[1] if self.plan.as_of else self.plan.today,
                          "as_of" if self.plan.as_of else "today")
        return f"(SELECT *, {n} AS n_{rel.length_slot}, {v} AS v_{rel.length_slot} FROM {table})"

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
        table = self.source(rel)
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

    def _aggregate(self, rel: RelationShape) -> tuple[str, list]:
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

    def judged(self, rel: RelationShape, con: duckdb.DuckDBPyConnection | None = None) -> pa.Table | None:
        """The relation's aggregate — exactly the table `_aggregate`'s SQL yields, row for row —
        judged over its rows held in memory (indexes/relation_columns.py), or None where that does
        not apply (no column cache, a computed length, anything the evaluator cannot read)."""
        if self.columns is None or self.computes(rel):
            return None
        table, ws = self.plan.space.shape(rel).name, self.plan.space.workspace_id
        try:
            cols = self.columns.get((ws, self.version, table), _rows_reader(self._reader, table, rel, ws), self._later)
            return None if cols is None else self._judge(rel, cols, con or self.con)
        except Unsupported:
            return None

    def _judge(self, rel: RelationShape, cols: RelationColumns, con: duckdb.DuckDBPyConnection) -> pa.Table:
        """Every per-row input of the verdicts (each constrained slot's value, the time state at
        as_of, retired, withheld, undated — only those this search reads) is a small code per row;
        the flags, counters and distances are computed once per combination of those codes
        (`combine`), and spread to the rows by one index each before the per-entity reduction."""
        plan, prof = self.plan, self.profiles[rel.name]

        def slot(name: str):
            if name not in cols.slots:
                raise Unsupported(f"slot {name} not held")
            return cols.slots[name]

        factors: dict[str, tuple[np.ndarray, int]] = {}
        for b in plan.singles:
            if b.rel.name == rel.name:
                coded = slot(b.slot.name)
                factors[b.slot.name] = (coded.codes, coded.values.num_rows)
        if prof.retired:
            factors["@retired"] = (cols.retired.view(np.int8), 2)
        if prof.withheld:
            factors["@withheld"] = (cols.withheld.view(np.int8), 2)
        if plan.as_of is not None:
            factors["@tm"] = (self._time_states(rel, cols), 3)
        if rel.period and rel.period[0] in prof.null:
            pf = slot(rel.period[0])
            undated = pc.is_null(pf.values.column(f"v_{rel.period[0]}")).to_numpy(zero_copy_only=False)
            factors["@undated"] = (undated.view(np.int8)[pf.codes], 2)
        key, levels, size = combine(list(factors.values()))
        level = dict(zip(factors, levels))

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
            decided = cols.decide(con, slot(s), exprs)
            later[f"p{i}"] = lambda a=decided[0], c=level[s]: tri(a, c)
            later[f"z{i}"] = lambda a=decided[1], c=level[s]: tri(a, c)
            later[f"u{i}"] = lambda a=decided[2], c=level[s]: tri(a, c)
            if dist is not None:
                later[f"d{i}"] = lambda a=decided[3], c=level[s]: floats(a, c)
        env = Columns(later)
        for name, sql in self.unit_columns(rel):
            later[name] = lambda sql=sql: run_sql(sql, env)

        def sure(sql: str) -> np.ndarray:
            """A flag or counter per combination: never NULL by construction (else the SQL path runs)."""
            v = run_sql(sql, env)
            if not np.all(v.known):
                raise Unsupported(f"NULL from {sql!r}")
            return np.broadcast_to(np.asarray(v.t, dtype=bool), (size,))

        # column -> (how it aggregates, per combination: its flags / counters as booleans, or its floats)
        out: dict[str, tuple[str, object]] = {}
        flags = self.flag_sets[rel.name]
        for k in range(0, len(flags.flags), BITS):
            out[f"mask{k // BITS}"] = ("or", [sure(sql) for _, sql in flags.flags[k:k + BITS]])
        counters = self.counters(rel)
        wide = prof.rows >= 2 ** FIELD
        for k, names in enumerate(self.packed(rel)):
            if wide:
                out.update({f"n_{n}": ("count", [sure(counters[n])]) for n in names})
                continue
            out[f"pk{k}"] = ("pack", [sure(counters[n]) for n in names])
        for name, bound in self.units(rel):
            if name.startswith("g"):
                for b in bound:
                    if b.thresholded:
                        m = np.broadcast_to(run_sql(f"{name}_m", env).t, (size,))
                        out[f"{name}_d{b.index}"] = ("min", np.where(m, env[f"d{b.index}"], np.nan))
        visible = cov_visible = None
        if not plan.space.sight.everything:
            sees = [(plan.space.sight.row("r"), [])]
            visible = tri(cols.decide(con, cols.scope, sees)[0], cols.scope.codes).t
            cov_visible = tri(cols.decide(con, cols.cov_scope, sees)[0], cols.cov_scope.codes).t
        return self._aggregated(cols, out, key, visible, cov_visible)

    def _time_states(self, rel: RelationShape, cols: RelationColumns) -> np.ndarray:
        """time_sql's ACTIVE / INACTIVE / UNPLACEABLE per row at as_of. Each date slot's distinct
        values get a state of four bits (no value; hi <= end; lo > end; lo known), the rule is run
        once per combination of states, and each row reads its combination. A comparison with a
        missing date is FALSE here where SQL has NULL: every test is a CASE WHEN over ANDs and ORs
        of comparisons (no NOT), which fires exactly when it would in SQL."""
        end = (self.plan.as_of[1] - date(1970, 1, 1)).days
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

    @staticmethod
    def _aggregated(cols: RelationColumns, out: dict, key: np.ndarray, visible: np.ndarray | None,
                    cov_visible: np.ndarray | None) -> pa.Table:
        """Per entity: OR / packed counts / count / min of each column over its (visible) rows, and
        an all-zero row (NULL distances) for an entity that only has a (visible) coverage row.
        `out`: each column's flags or counters per combination (booleans) or floats; `key`: each
        row's combination.

        Every flag and counter is one boolean per row, so each is summed per entity — OR is a sum
        above zero — and an entity's sum is at most its number of rows: as many of them as fit go
        in one int64 at the width that number needs (5 bits for 20 rows), and one gather and one
        reduceat serve them all, where the SQL's layout (a mask of bits, counters of 21 bits)
        would take one per column. The columns are then laid out as the SQL's."""
        starts, entities = cols.starts, cols.entities
        n_ent = len(starts)
        longest = int(np.diff(np.r_[starts, cols.rows]).max()) if n_ent else 0
        width = max(1, longest.bit_length())
        fields = [f for how, arrays in out.values() if how != "min" for f in arrays]
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
        aggs: dict[str, np.ndarray] = {}
        at = 0
        for name, (how, values) in out.items():
            if how == "min":
                # the least of floats (NaN: none) as the least of their ranks among the combinations'
                # values: an integer reduction, twice as fast as fmin's over the rows' floats
                order = np.argsort(values, kind="stable")   # NaN last
                ranks = np.empty(len(values), np.int32)
                ranks[order] = np.arange(len(values), dtype=np.int32)
                per_row = ranks[key]
                if visible is not None:
                    per_row = np.where(visible, per_row, len(values))
                least = np.minimum.reduceat(per_row, starts) if n_ent else per_row[:0]
                aggs[name] = np.r_[values[order], np.nan][least]
                continue
            mine, at = counts[at:at + len(values)], at + len(values)
            column = np.zeros(n_ent, np.int64)
            for j, count in enumerate(mine):
                if how == "or":
                    column |= (count > 0).astype(np.int64) << j
                elif how == "pack":
                    column |= count << (FIELD * j)
                else:
                    column = count
            aggs[name] = column
        present = entities
        if visible is not None and len(starts):
            keep = np.logical_or.reduceat(visible, starts)
            present = entities[keep]
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

    def run(self) -> str:
        """Materialise the enumeration as `self.table`: when the same plan ran at this workspace version
        (the statement's SQL and parameters are the key), the cached Arrow table itself, read in place;
        when every relation's verdicts come from memory (the verdict cache, or judged over the rows held
        as columns), the statuses computed from them in NumPy (`_final`) as an Arrow table; else the
        statement run in SQL into a temp table. A registered table is copied into the temp table only if
        a later step writes to it (`_own`)."""
        sql, params = self._statement(cached_ok=False)
        key = (self.plan.space.workspace_id, self.version, "plan", sql, repr(params))
        hit = self.verdict_cache.get(key) if self.verdict_cache is not None else None
        if hit is not None:
            self.table = self._register(hit)
            self._held = self._hold(hit)
            return self.table
        if self.verdict_cache is None and self.columns is None:
            self.con.execute(f"CREATE TEMP TABLE {self.table} AS {sql}", params)
            return self.table
        for rel, table in self._verdict_tables().items():
            if table is not None:
                self._tables[rel] = table
        if len(self._tables) == len(self.plan.relations):
            final = self._final(self._tables)
            self.table = self._register(final)
            if self.verdict_cache is not None and self.verdict_cache.seen(key):
                self.verdict_cache.put(key, final)
            return self.table
        sql, params = self._statement(cached_ok=True)
        self.con.execute(f"CREATE TEMP TABLE {self.table} AS {sql}", params)
        if self.verdict_cache is not None and self.verdict_cache.seen(key):
            self.verdict_cache.put(key, self._arrow(f"SELECT * FROM {self.table}"))
        return self.table

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

    def _final(self, tables: dict[str, pa.Table]) -> pa.Table:
        """`_statement`'s SELECT computed in NumPy from each relation's aggregate: the same columns,
        names, types and values (a test compares them)."""
        plan = self.plan
        u = self.universe()
        ent = u.column("ent_no").to_numpy().astype(np.int64)
        cols: dict[str, pa.Array] = {"ent_no": u.column("ent_no").combine_chunks(),
                                     "entity_id": u.column("entity_id").combine_chunks(),
                                     "name": u.column("name").combine_chunks()}
        status: dict[str, np.ndarray] = {}
        for rel in plan.relations:
            flags, prof, agg = self.flag_sets[rel.name], self.profiles[rel.name], tables[rel.name]
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

            cols[f"cov_{rel.name}"] = pa.array(covered)
            cols[f"live_{rel.name}"] = pa.array(flag("live"))
            for k, m in enumerate(masks):
                cols[f"mask_{rel.name}_{k}"] = pa.array(m, pa.int64())
            wide = prof.rows >= 2 ** FIELD
            counters: dict[str, np.ndarray] = {}
            if wide:
                for n in self.counters(rel):
                    counters[n] = column(f"n_{n}", 0).astype(np.int64)
                    cols[f"n_{n}"] = pa.array(counters[n], pa.int64())
            else:
                for k, names in enumerate(self.packed(rel)):
                    pk = column(f"pk{k}", 0).astype(np.int64)
                    cols[f"pk_{rel.name}_{k}"] = pa.array(pk, pa.int64())
                    counters.update({n: (pk >> (FIELD * j)) & (2 ** FIELD - 1) for j, n in enumerate(names)})
            for name, bound in self.units(rel):
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
        table = pa.table(cols).replace_schema_metadata({SORTED: b"entity_id"})
        self._held = self._hold(table)
        return table

    def _hold(self, table: pa.Table) -> Held | None:
        """The arrays the lists, ranking and page read, from a statuses table `_final` made (in
        entity id order, as its metadata says); None for one made in SQL."""
        if (table.schema.metadata or {}).get(SORTED) != b"entity_id":
            return None

        def col(name: str) -> np.ndarray:
            return table.column(name).to_numpy()

        units = [f"g{g.index}" for g in self.plan.groups] + [f"s{b.index}" for b in self.plan.singles]
        flags = [f"{k}_{r.name}" for r in self.plan.relations for k in ("cov", "live")]
        return Held(table, {n: col(n) for n in ["status", "opt", *units, *flags]},
                    {n: np.nan_to_num(table.column(n).to_numpy().astype(np.float64), nan=np.inf)
                     for n in self.threshold_columns()})

    def _verdict_table(self, rel: RelationShape, con: duckdb.DuckDBPyConnection | None = None) -> pa.Table | None:
        """A relation's per-entity verdicts (its aggregate: masks, row counters, distances) for these
        constraints, from memory: cached per workspace version — the aggregate's SQL and parameters say
        everything it depends on (constraints, as_of, the reader's scopes), and the version moves with
        every load or correction — else judged over the relation's rows held in memory (`judged`), else
        (the second time these constraints on this relation are asked for, VerdictCache.seen) computed
        apart in SQL and cached. None: this search computes them inline, in its one statement.
        `con`: the cursor of the thread this runs on (default the enumeration's)."""
        if rel.name in self._tables:
            return self._tables[rel.name]
        agg, params = self._aggregate(rel)
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

    def _statement(self, cached_ok: bool) -> tuple[str, list]:
        """The enumeration's SELECT and its parameters; `cached_ok`: each relation's verdicts from the
        cache (computed and cached first when missing)."""
        plan = self.plan
        ws = plan.space.workspace_id
        params: list = [ws, plan.kinds]
        sight = plan.space.sight
        ctes = [f"u AS (SELECT ent_no, entity_id, {sight.name()} AS name FROM rel_entities WHERE workspace_id = ? "
                f"AND list_contains(?, kind) AND {sight.entity()})"]
        select = ["u.ent_no", "u.entity_id", "u.name"]
        joins = []
        for rel in plan.relations:
            flags, prof = self.flag_sets[rel.name], self.profiles[rel.name]
            agg, ap = self._aggregate(rel)
            a = f"a_{rel.name}"
            cached = self._verdicts(rel) if cached_ok else None
            if cached is None:
                ctes.append(f"{a} AS ({agg})")
                params += ap
            else:
                ctes.append(f"{a} AS (SELECT * FROM {cached})")
            joins.append(f"LEFT JOIN {a} ON {a}.ent_no = u.ent_no")
            covered = f"({a}.ent_no IS NOT NULL)"
            select += [f"{covered} AS cov_{rel.name}", f"{flags.test('live', f'{a}.mask')} AS live_{rel.name}"]
            select += [f"coalesce({a}.mask{k}, 0) AS mask_{rel.name}_{k}" for k in range(len(flags.masks()))]
            if prof.rows >= 2 ** FIELD:
                select += [f"coalesce({a}.n_{n}, 0) AS n_{n}" for n in self.counters(rel)]
            else:
                select += [f"coalesce({a}.pk{k}, 0) AS pk_{rel.name}_{k}" for k in range(len(self.packed(rel)))]
            for name, bound in self.units(rel):
                m, o = f"coalesce({self.counter_expr(rel, f'{name}_active', a)} > 0, FALSE)", \
                    flags.test(f"{name}_o", f"{a}.mask")
                select.append(f"CAST(CASE WHEN {m} THEN {MATCHED} WHEN {o} THEN {UNDETERMINED} "
                              f"WHEN {covered} THEN {NONE} ELSE {NOT_RECORDED} END AS TINYINT) AS {name}")
                if name.startswith("g"):
                    select += [f"{a}.{name}_d{b.index} AS {name}_d{b.index}" for b in bound if b.thresholded]
        required = [f"g{g.index}" for g in plan.groups if g.required]
        optional = [f"g{g.index}" for g in plan.groups if not g.required]
        status = "CASE " + "".join(
            f"WHEN {_all([f'{g} = {code}' for g in required], ' OR ', 'FALSE')} THEN {code} "
            for code in (NONE, NOT_RECORDED, UNDETERMINED)) + f"ELSE {MATCHED} END"
        opt = " + ".join(f"CAST({g} = {MATCHED} AS INTEGER)" for g in optional) or "0"
        inner = f"SELECT {', '.join(select)} FROM u {' '.join(joins)}"
        return (f"WITH {', '.join(ctes)} SELECT *, CAST({status} AS TINYINT) AS status, {opt} AS opt FROM ({inner})",
                params)

    def _verdicts(self, rel: RelationShape) -> str | None:
        """`_verdict_table` as a view registered on this cursor, or None (computed inline)."""
        table = self._verdict_table(rel)
        return None if table is None else self._register(table)

    def _arrow(self, sql: str, params: list | None = None, con: duckdb.DuckDBPyConnection | None = None) -> pa.Table:
        con = con or self.con
        con.complete()   # a relation (con.sql) refuses while an earlier statement's result is unread
        return con.sql(sql, params=params).to_arrow_table()

    def _register(self, table: pa.Table) -> str:
        """A name for a cached Arrow table on this cursor (unregistered by drop())."""
        name = f"_verdicts_{secrets.token_hex(6)}"
        self.con.complete()   # registering refuses while an earlier statement's result is unread
        self.con.register(name, table)
        self._registered.append(name)
        return name

    def _own(self) -> None:
        """Before a write to the statuses: a cached plan's table becomes this search's own copy (the
        cache's Arrow table is shared by every later search and is never written)."""
        if self.table != self._temp:
            self.con.execute(f"CREATE TEMP TABLE {self._temp} AS SELECT * FROM {self.table}")
            self.table = self._temp

    def drop(self) -> None:
        if self._later and self.columns is not None:
            self.columns.start(self._later)
            self._later = []
        try:
            self.con.execute(f"DROP TABLE IF EXISTS {self._temp}")
        except duckdb.Error:
            pass
        for name in self._registered:
            try:
                self.con.complete()
                self.con.unregister(name)
            except duckdb.Error:
                pass
        self._registered.clear()

    # What the warrant reads off the temp table ---------------------------------------------------
    # A list is named by a spec: ("status", s) every entity of overall status s; ("unit", u, s)
    # every entity whose group or lone constraint u (g0, s1, ...) has status s; ("absent", rel)
    # entities looked at for rel that hold no live row; ("uncovered", rel) never looked at.
    def _where(self, spec: tuple) -> str:
        kind = spec[0]
        if kind == "status":
            return f"status = {STATUS[spec[1]]}"
        if kind == "unit":
            return f"{spec[1]} = {STATUS[spec[2]]}"
        if kind == "absent":
            return f"cov_{spec[1]} AND NOT live_{spec[1]}"
        if kind == "uncovered":
            return f"NOT cov_{spec[1]}"
        raise ValueError(spec)

    def _mask(self, spec: tuple) -> np.ndarray:
        """`_where` over the held arrays."""
        cols, kind = self._held.columns, spec[0]
        if kind == "status":
            return cols["status"] == STATUS[spec[1]]
        if kind == "unit":
            return cols[spec[1]] == STATUS[spec[2]]
        if kind == "absent":
            return cols[f"cov_{spec[1]}"] & ~cols[f"live_{spec[1]}"]
        if kind == "uncovered":
            return ~cols[f"cov_{spec[1]}"]
        raise ValueError(spec)

    def threshold_columns(self) -> list[str]:
        cols = {b.index: f"g{g.index}_d{b.index}" for g in self.plan.groups for b in g.bound if b.thresholded}
        return [cols[i] for i in sorted(cols)]

    def order_by(self) -> str:
        """The deterministic ranking: optional groups satisfied, distance from each threshold, id."""
        keys = ["opt DESC"]
        for g in self.plan.groups:
            keys += [f"g{g.index}_d{b.index} ASC NULLS LAST" for b in g.bound if b.thresholded]
        return ", ".join(keys + ["entity_id"])

    def matched_ids(self, limit: int, restrict: list[str] | None = None) -> list[str]:
        """The matched entities' ids in ranking order, at most `limit`."""
        if self._held is not None and restrict is None and self.table != self._temp:
            return self._held.ids(self._held.ranked(self.threshold_columns())[:int(limit)])
        where, params = f"status = {MATCHED}", []
        if restrict is not None:
            where, params = f"{where} AND list_contains(?, entity_id)", [restrict]
        return [r[0] for r in self.con.execute(
            f"SELECT entity_id FROM {self.table} WHERE {where} ORDER BY {self.order_by()} LIMIT {int(limit)}",
            params).fetchall()]

    def lists(self, specs: dict[str, tuple], limit: int, restrict: list[str] | None = None
              ) -> dict[str, list[tuple[str, int]]]:
        """Every bounded list in one statement: per key up to `limit` (entity id, entity number), by id."""
        out: dict[str, list[tuple[str, int]]] = {k: [] for k in specs}
        if limit == 0 or not specs:
            return out
        if self._held is not None and restrict is None and self.table != self._temp:
            for key, spec in specs.items():
                at = np.flatnonzero(self._mask(spec))[:int(limit)]
                out[key] = list(zip(self._held.ids(at), self._held.numbers(at)))
            return out
        keys, parts, params = list(specs), [], []
        for i, key in enumerate(keys):
            where = self._where(specs[key])
            if restrict is not None:
                where = f"({where}) AND list_contains(?, entity_id)"
                params.append(restrict)
            parts.append(f"(SELECT {i} AS k, entity_id, ent_no FROM {self.table} WHERE {where} "
                         f"ORDER BY entity_id LIMIT {int(limit)})")
        for k, eid, number in self.con.execute(" UNION ALL ".join(parts), params).fetchall():
            out[keys[k]].append((eid, number))
        for pairs in out.values():
            pairs.sort()  # the byte order DuckDB sorts VARCHAR in is the code point order Python uses
        return out

    def combinations(self) -> tuple[list[str], list[tuple]]:
        """One GROUP BY over the status columns (the distinct combinations are few): the names of
        the dimensions, and per combination its dimension values, its entity count and the sums
        of every row counter (in `counter_sql()`'s order)."""
        rels, flags = self.plan.relations, self.flag_sets
        dims = ["status"] + [f"g{g.index}" for g in self.plan.groups] + [f"s{b.index}" for b in self.plan.singles]
        cols = list(dims)
        for r in rels:
            dims += [f"cov_{r.name}", f"live_{r.name}"]
            cols += [f"cov_{r.name}", f"live_{r.name}"]
            for k, bits in enumerate(flags[r.name].detail_masks()):
                if bits:
                    dims.append(f"dm_{r.name}_{k}")
                    cols.append(f"mask_{r.name}_{k} & {bits} AS dm_{r.name}_{k}")
        counter_sql = self.counter_sql()
        if self._held is not None and self.table != self._temp:
            return dims, self._held_combinations(dims)
        rows = self.con.execute(
            f"SELECT {', '.join(cols)}, count(*), {', '.join(f'sum({counter_sql[c]})' for c in counter_sql)} "
            f"FROM {self.table} GROUP BY ALL").fetchall()
        return dims, rows

    def _held_combinations(self, dims: list[str]) -> list[tuple]:
        """`combinations`' GROUP BY over the held statuses table, in NumPy: one key per entity from
        its dimensions' codes (mixed radix, re-numbered by a hash whenever it would grow past 62
        bits), entities counted and counters summed by bincount over the distinct keys, each
        combination's values read off one entity that has it. The same rows as the SQL's, in
        another order (a test compares them)."""
        t, flags = self._held.table, self.flag_sets
        n = len(t)
        if not n:
            return []
        detail = {f"dm_{r.name}_{k}": (f"mask_{r.name}_{k}", bits) for r in self.plan.relations
                  for k, bits in enumerate(flags[r.name].detail_masks()) if bits}
        key, room = np.zeros(n, np.int64), 1
        values: list[np.ndarray] = []
        for d in dims:
            if d in detail:
                column, bits = detail[d]
                v = t.column(column).to_numpy() & bits
            else:
                v = self._held.columns[d] if d in self._held.columns else t.column(d).to_numpy()
            values.append(v)
            if v.dtype == bool or (len(v) and 0 <= int(v.min()) and int(v.max()) < 256):
                codes, card = v.astype(np.int64), (2 if v.dtype == bool else int(v.max()) + 1)
            else:
                enc = pc.dictionary_encode(pa.array(v))
                codes, card = enc.indices.to_numpy(zero_copy_only=False).astype(np.int64), len(enc.dictionary)
            if room * card >= 2 ** 62:   # renumber the combinations so far: at most one per entity
                enc = pc.dictionary_encode(pa.array(key))
                key, room = enc.indices.to_numpy(zero_copy_only=False).astype(np.int64), len(enc.dictionary)
            key = key * card + codes
            room *= card
        enc = pc.dictionary_encode(pa.array(key))
        at, size = enc.indices.to_numpy(zero_copy_only=False).astype(np.int64), len(enc.dictionary)
        counts = np.bincount(at, minlength=size)
        one = np.empty(size, np.int64)          # an entity of each combination
        one[at] = np.arange(n)
        sums = []
        for rel in self.plan.relations:   # counter_sql()'s order
            if self.profiles[rel.name].rows >= 2 ** FIELD:
                sums += [t.column(f"n_{c}").to_numpy() for c in self.counters(rel)]
                continue
            for k, names in enumerate(self.packed(rel)):
                pk = t.column(f"pk_{rel.name}_{k}").to_numpy()
                sums += [(pk >> (FIELD * j)) & (2 ** FIELD - 1) for j in range(len(names))]
        # a counter is below 2**21 per entity: every sum is exact in a double
        totals = [np.bincount(at, weights=v.astype(np.float64), minlength=size).astype(np.int64) for v in sums]
        columns = [v[one].tolist() for v in values] + [counts.tolist()] + [x.tolist() for x in totals]
        return list(zip(*columns))

    def coverage(self, relation: str, numbers: list[int]) -> list[tuple]:
        """The current coverage rows of these entities for a relation: who looked, and when."""
        if not numbers:
            return []
        return self.con.execute(
            "SELECT entity_id, load_id, declared_by, declared_at FROM rel_coverage WHERE workspace_id = ? "
            f"AND relation = ? AND current AND {self.plan.space.sight.row()} AND ent_no = ANY(?::INTEGER[]) "
            "ORDER BY declared_at, load_id",
            [self.plan.space.workspace_id, relation, [int(n) for n in numbers]]).fetchall()

    def page(self, limit: int, offset: int, restrict: list[str] | None = None) -> list[tuple]:
        """One page of the matched, ranked: (entity_id, rank, opt, ent_no, name, *threshold distances)."""
        if self._held is not None and restrict is None and self.table != self._temp:
            held, dist = self._held, self.threshold_columns()
            at = held.ranked(dist)[int(offset):int(offset) + int(limit)]
            if not len(at):
                return []
            t = held.table
            take = pa.array(at, pa.int64())
            columns = [t.column(c).take(take).to_pylist() for c in ("entity_id", "ent_no", "name", *dist)]
            ranks = range(int(offset) + 1, int(offset) + 1 + len(at))
            opts = held.columns["opt"][at].tolist()
            return [(eid, rank, opt, number, name, *rest)
                    for eid, rank, opt, number, name, *rest in zip(columns[0], ranks, opts, *columns[1:])]
        params: list = []
        where = ""
        if restrict is not None:
            where = "WHERE list_contains(?, entity_id)"
            params.append(restrict)
        sel = ", ".join(["entity_id", "rank", "opt", "ent_no", "name", *self.threshold_columns()])
        return self.con.execute(
            f"SELECT {sel} FROM (SELECT *, row_number() OVER (ORDER BY {self.order_by()}) AS rank FROM {self.table} "
            f"WHERE status = {MATCHED}) {where} ORDER BY rank LIMIT ? OFFSET ?",
            params + [limit, offset]).fetchall()

    def unattributed_open(self, rel: RelationShape, bound: list[BoundShape]) -> bool:
        """Whether a row the loader tied to nobody could satisfy these conditions (it fails none)."""
        if not self.profiles[rel.name].unattributed:
            return False
        rows, params = self.rows_sql(rel, attributed=False)
        _, any_false, _, _ = self.verdicts(rel, bound)
        return bool(self.con.execute(
            f"SELECT count(*) FROM ({rows}) WHERE NOT {any_false} AND tm <> {INACTIVE}", params).fetchone()[0])

    def matching_rows(self, rel: RelationShape, groups: list, numbers: list[int],
                      con: duckdb.DuckDBPyConnection | None = None) -> list[dict]:
        """These entities' rows of one relation that satisfy at least one of its groups, every
        column the delivery reads (load, table, row key, source ordinal, each slot's cell and
        reading), with m<group index> saying which groups each satisfies; by entity, then row.
        `con`: a cursor of another thread's (the rows are read from the store, never from this
        enumeration's own tables)."""
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
        res = (con or self.con).execute(f"SELECT * FROM (SELECT *, {sel} FROM ({rows_sql})) WHERE {any_match}",
                                        params)
        names = [d[0] for d in res.description]
        rows = [dict(zip(names, r)) for r in res.fetchall()]
        rows.sort(key=lambda r: (r["entity_id"], r["row_id"]))
        return rows

    # Criteria read from documents narrow the matched ----------------------------------------------
    def matched(self) -> list[tuple[str, int, str | None]]:
        """The matched entities (entity_id, ent_no, name), by id."""
        return self.con.execute(f"SELECT entity_id, ent_no, name FROM {self.table} WHERE status = {MATCHED} "
                                "ORDER BY entity_id").fetchall()

    def set_codes(self, column: str, codes: dict[int, int]) -> None:
        """Add a TINYINT column to the temp table and set it per entity number (others NULL)."""
        if not column.isidentifier():
            raise ValueError(column)
        self._own()
        self.con.execute(f"ALTER TABLE {self.table} ADD COLUMN {column} TINYINT")
        if not codes:
            return
        self.con.register("crit_codes", pa.table({"ent_no": pa.array(list(codes), pa.int32()),
                                                  "code": pa.array(list(codes.values()), pa.int8())}))
        try:
            self.con.execute(f"UPDATE {self.table} SET {column} = c.code FROM crit_codes c "
                             f"WHERE {self.table}.ent_no = c.ent_no")
        finally:
            self.con.unregister("crit_codes")

    def demote_matched(self, columns: list[str], unrecorded_from: int, unproved: tuple[int, ...]) -> None:
        """Move a matched entity to not_recorded when a code column holds `unrecorded_from` or more,
        else to undetermined when one holds a code in `unproved`."""
        if not columns:
            return
        self._own()
        unrecorded = " OR ".join(f"{c} >= {int(unrecorded_from)}" for c in columns)
        codes = ", ".join(str(int(u)) for u in unproved)
        unproved_sql = " OR ".join(f"{c} IN ({codes})" for c in columns)
        self.con.execute(f"UPDATE {self.table} SET status = CASE WHEN {unrecorded} THEN {NOT_RECORDED} "
                         f"WHEN {unproved_sql} THEN {UNDETERMINED} ELSE status END WHERE status = {MATCHED}")
