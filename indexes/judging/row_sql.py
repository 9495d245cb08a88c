"""The SQL of one row: how one bound constraint is judged over one row of its relation's table
(aliased r) — TRUE, FALSE, or NULL where the row's value cannot decide it (`predicate`), a value the
vocabulary cannot place (`unplaced`), a satisfying row's distance from a threshold (`distance`), a
row's time state at as_of (`time_sql`), a computed length (`length_sql`) — and the named per-row
flags packed into BIGINT masks (`Flags`). The codes every room shares are here too.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import date

from ..relation_shapes import BoundShape, RelationShape

CAUSES = ("unrecorded", "open_period", "undated", "corrected", "withheld")
# Status codes in the temp table (small integers compare faster than strings).
MATCHED, NONE, NOT_RECORDED, UNDETERMINED = 0, 1, 2, 3
STATUS = {"matched": MATCHED, "none": NONE, "not_recorded": NOT_RECORDED, "undetermined": UNDETERMINED}
ACTIVE, INACTIVE, UNPLACEABLE = 0, 1, 2   # time states of a row at as_of
BITS = 62            # flags per BIGINT mask
FIELD = 21           # bits per packed row counter (an entity's rows of one relation < 2**21)
FIELDS = 3           # packed counters per BIGINT
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
