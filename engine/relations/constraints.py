"""Constraints: {relation, slot, op, value, brief_span, required} — one condition on one slot.

`parse_constraints` refuses what is malformed as a request (422 search_constraint_invalid);
`bind` places each constraint in the workspace's address space: it either runs (a `Bound`, with
its vocabulary expansion and the SQL that judges a row) or is a gap (relation_unknown,
slot_unknown, vocabulary_unbound) that is reported and does not run. A constraint asking its slot
something its type cannot answer is a 422 too: the request never made sense.
"""
from __future__ import annotations

import calendar
import math
import re
from dataclasses import dataclass, field
from datetime import date
from typing import Any

from engine.core.errors import SearchConstraintInvalid
from engine.relations.packs import OPS, Relation, Slot, Vocabulary, norm

# span_relocated_from is accepted (and not read) so a brief's compiled.constraints can be sent back as is.
KEYS = {"relation", "slot", "op", "value", "brief_span", "quote", "required", "span_relocated_from"}
SYMBOL = {"eq": "=", "ne": "≠", "gte": "≥", "lte": "≤", "in": "in", "contains": "contains"}
NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")
SPAN = re.compile(r"^(\d{4})(?:-(\d{1,2})(?:-(\d{1,2}))?)?$")
TYPE_CANNOT = "a constraint asks its slot something its type cannot answer"


@dataclass
class Constraint:
    index: int
    relation: str
    slot: str
    op: str
    value: Any
    required: bool = True
    brief_span: list[int] | None = None
    quote: str | None = None

    def as_sent(self) -> dict:
        out = {"relation": self.relation, "slot": self.slot, "op": self.op, "value": self.value,
               "brief_span": self.brief_span, "required": self.required}
        if self.quote is not None:
            out["quote"] = self.quote
        return out

    def label(self) -> str:
        value = ", ".join(map(str, self.value)) if isinstance(self.value, list) else self.value
        return f"{self.relation}.{self.slot} {SYMBOL.get(self.op, self.op)} {value}"


def _scalar(v) -> bool:
    """A string (non-blank, valid Unicode) or a finite number: NaN and Infinity compare with nothing."""
    if isinstance(v, bool) or not isinstance(v, (str, int, float)):
        return False
    if isinstance(v, float):
        return math.isfinite(v)
    if isinstance(v, int):
        return abs(v) < 1 << 63
    try:
        v.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return v.strip() != ""


def parse_constraints(raw: Any) -> list[Constraint]:
    if not isinstance(raw, list):
        raise SearchConstraintInvalid("`constraints` must be a list of constraints")
    if not raw:
        raise SearchConstraintInvalid("`constraints` is empty")
    if len(raw) > 64:
        raise SearchConstraintInvalid("at most 64 constraints in one search", count=len(raw))
    out = []
    for i, c in enumerate(raw):
        problem = None
        if not isinstance(c, dict):
            problem = "a constraint is an object {relation, slot, op, value, brief_span, required}"
        elif set(c) - KEYS:
            problem = f"unknown keys: {', '.join(sorted(set(c) - KEYS))}"
        elif not all(isinstance(c.get(k), str) and c.get(k).strip() for k in ("relation", "slot", "op")):
            problem = "relation, slot and op are non-empty strings"
        elif c["op"] not in OPS:
            problem = f"op must be one of {', '.join(OPS)}"
        elif "value" not in c:
            problem = "value is required"
        elif c["op"] == "in" and not (isinstance(c["value"], list) and c["value"] and all(map(_scalar, c["value"]))):
            problem = "op in takes a non-empty list of values"
        elif c["op"] != "in" and not _scalar(c["value"]):
            problem = f"op {c['op']} takes one value (a string or a finite number)"
        elif "required" in c and not isinstance(c["required"], bool):
            problem = "required is true or false"
        elif c.get("brief_span") is not None and not (
                isinstance(c["brief_span"], list) and len(c["brief_span"]) == 2
                and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in c["brief_span"])
                and c["brief_span"][0] <= c["brief_span"][1]):
            problem = "brief_span is [start, end] character offsets into the brief"
        elif c.get("quote") is not None and not isinstance(c["quote"], str):
            problem = "quote is a string"
        if problem:
            raise SearchConstraintInvalid(f"constraints[{i}] is malformed", index=i, problem=problem)
        out.append(Constraint(i, c["relation"].strip(), c["slot"].strip(), c["op"], c["value"],
                              c.get("required", True), c.get("brief_span"), c.get("quote")))
    return out


def parse_span(value) -> tuple[date, date] | None:
    """The first and last day of what a month/date value names: a year, a month or a day."""
    m = SPAN.match(str(value).strip())
    if not m:
        return None
    y, mo, d = int(m.group(1)), m.group(2), m.group(3)
    try:
        if mo is None:
            return date(y, 1, 1), date(y, 12, 31)
        if d is None:
            return date(y, int(mo), 1), date(y, int(mo), calendar.monthrange(y, int(mo))[1])
        day = date(y, int(mo), int(d))
        return day, day
    except ValueError:
        return None


@dataclass
class Bound:
    """A constraint that runs: how it reads a row, and the expansion line it prints."""
    c: Constraint
    rel: Relation
    slot: Slot
    kind: str                       # term | literal | text | number | span
    expansion: str
    terms: list[str] = field(default_factory=list)        # term: the set a row's term must be in
    literals: list[str] = field(default_factory=list)     # unknown surfaces, matched as written
    threshold: Any = None           # gte/lte: rung, number, or (first day, last day)
    values: list[Any] = field(default_factory=list)       # number / span / text values
    narrow: list[str] = field(default_factory=list)

    @property
    def index(self) -> int:
        return self.c.index

    @property
    def is_period(self) -> bool:
        return self.rel.period is not None and self.slot.name in self.rel.period

    @property
    def is_span(self) -> bool:
        return self.slot.type in ("month", "date")

    @property
    def thresholded(self) -> bool:
        return self.c.op in ("gte", "lte")

    def can_be_null(self, null_slots: set[str], withheld: bool) -> bool:
        """Whether the verdict can be NULL over this data: a missing value, a span that may
        straddle the threshold, or a number a loader could not read."""
        return (self.slot.name in null_slots or self.kind == "span"
                or (self.kind == "number" and withheld))


@dataclass
class Gap:
    index: int
    constraint: Constraint
    reason: str

    def as_dict(self) -> dict:
        return {"index": self.index, "constraint": self.constraint.as_sent(), "reason": self.reason}


def _fmt(terms: list[str]) -> str:
    return "{" + ", ".join(terms) + "}"


def _bind_term(c: Constraint, rel: Relation, slot: Slot, vocabulary: Vocabulary) -> Bound:
    axis = vocabulary.axis(slot.axis)
    values = c.value if c.op == "in" else [c.value]
    if c.op in ("gte", "lte"):
        term = axis.resolve(str(c.value))
        if term is None or axis.rung(term) is None:
            raise SearchConstraintInvalid(
                TYPE_CANNOT, index=c.index,
                problem=f"{c.value!r} is not a term on the order of axis {axis.name}: "
                        f"{' < '.join(axis.order or [])}")
        k = axis.rung(term)
        terms = [t for t in axis.order if (axis.rung(t) >= k if c.op == "gte" else axis.rung(t) <= k)]
        via = "synonym, order" if axis.is_synonym(str(c.value)) else "order"
        line = f"{slot.name}: {SYMBOL[c.op]} {c.value} → {_fmt(terms)} via {via}"
        return Bound(c, rel, slot, "term", line, terms=terms, threshold=k)
    terms, literals, vias = [], [], []
    for value in values:
        term = axis.resolve(str(value))
        if term is None:
            literals.append(norm(str(value)))
            continue
        if axis.is_synonym(str(value)):
            vias.append("synonym")
        covered = axis.covered(term)
        if len(covered) > 1:
            vias.append("hierarchy")
        terms += [t for t in covered if t not in terms]
    shown = ", ".join(map(str, values)) if c.op == "in" else str(c.value)
    if literals and not terms:
        line = f"{slot.name}: {shown} is not a term of axis {axis.name}: matched as written"
        return Bound(c, rel, slot, "literal", line, literals=literals,
                     narrow=[f"vocabulary_unknown_surface:{slot.name}"])
    if literals:  # some values are terms, some are not: run the terms, name the rest
        raise SearchConstraintInvalid(
            TYPE_CANNOT, index=c.index,
            problem=f"{', '.join(literals)}: not terms of axis {axis.name} (send them in a constraint of their own)")
    via = ", ".join(dict.fromkeys(vias))
    prefix = {"eq": "", "ne": "≠ ", "in": "in "}[c.op]
    if c.op == "eq" and not via:
        line = f"{slot.name}: {c.value} is a term of axis {axis.name}"
    else:
        negation = "not " if c.op == "ne" else ""
        line = f"{slot.name}: {prefix}{shown} → {negation}{_fmt(terms)}" + (f" via {via}" if via else "")
    return Bound(c, rel, slot, "term", line, terms=terms)


def bind_one(c: Constraint, rel: Relation, slot: Slot, vocabulary: Vocabulary) -> Bound:
    values = c.value if c.op == "in" else [c.value]
    sym = SYMBOL[c.op]
    shown = "[" + ", ".join(map(str, values)) + "]" if c.op == "in" else str(c.value)
    if slot.type == "term":
        return _bind_term(c, rel, slot, vocabulary)
    if slot.type == "text":
        if not all(isinstance(v, str) for v in values):
            raise SearchConstraintInvalid(TYPE_CANNOT, index=c.index, problem=f"{slot.name} is text")
        return Bound(c, rel, slot, "text", f"{slot.name}: {sym} {shown} as text, ignoring case",
                     values=[norm(v) for v in values])
    if slot.type == "number":
        nums = []
        for v in values:
            if isinstance(v, str):
                if not NUMBER.match(v.strip()):
                    raise SearchConstraintInvalid(TYPE_CANNOT, index=c.index,
                                                  problem=f"{slot.name} is a number; {v!r} is not one")
                v = float(v)
            nums.append(float(v))
        return Bound(c, rel, slot, "number", f"{slot.name}: {sym} {shown} as a number",
                     values=nums, threshold=nums[0] if c.op in ("gte", "lte") else None)
    spans = []
    for v in values:
        span = parse_span(v) if isinstance(v, str) else None
        if span is None:
            raise SearchConstraintInvalid(TYPE_CANNOT, index=c.index,
                                          problem=f"{slot.name} is a {slot.type}: write YYYY, YYYY-MM or YYYY-MM-DD")
        spans.append(span)
    return Bound(c, rel, slot, "span", f"{slot.name}: {sym} {shown} as a {slot.type}",
                 values=spans, threshold=spans[0] if c.op in ("gte", "lte") else None)


def bind(constraints: list[Constraint], schema, vocabulary: Vocabulary) -> tuple[list[Bound], list[Gap]]:
    bound, gaps = [], []
    for c in constraints:
        rel = schema.relation(c.relation)
        if rel is None:
            gaps.append(Gap(c.index, c, f"relation_unknown:{c.relation}"))
            continue
        slot = rel.slots.get(c.slot)
        if slot is None:
            gaps.append(Gap(c.index, c, f"slot_unknown:{c.slot}"))
            continue
        if c.op not in slot.ops(vocabulary):
            raise SearchConstraintInvalid(TYPE_CANNOT, index=c.index,
                                          problem=f"{rel.name}.{slot.name} ({slot.type}) answers "
                                                  f"{', '.join(slot.ops(vocabulary))}, not {c.op}")
        if slot.type == "term" and slot.axis is None:
            gaps.append(Gap(c.index, c, f"vocabulary_unbound:{c.slot}"))
            continue
        bound.append(bind_one(c, rel, slot, vocabulary))
    return bound, gaps
