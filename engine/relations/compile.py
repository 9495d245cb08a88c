"""The brief compiler's two deterministic halves: the tool a model is forced to call, and the
checker its call goes through before anything runs.

`compile_tool(schema, vocabulary)` is one tool whose input schema IS the workspace's address space:
one variant per (relation, slot), the ops that slot's type supports (gte / lte on a term slot only
where its axis is ordered), the axis's terms in the slot description, and brief_span + quote
required on every constraint.

`read_compile_output(brief, schema, vocabulary, model_said)` checks what the model returned against
the brief: every kept constraint is attributable to whole words of one sentence of the brief (a
mis-counted span is relocated when its quote occurs exactly once), constraints the tool did not offer
or a slot's type cannot answer are dropped with the reason, and every sentence no kept constraint
came from is listed as uncompiled — that part of the request was not searched.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from engine.core.errors import SearchConstraintInvalid
from engine.relations.constraints import Constraint, bind_one
from engine.relations.packs import Schema, Slot, Vocabulary

TOOL_NAME = "compile_search_brief"
REQUIRED = ["relation", "slot", "op", "value", "brief_span", "quote", "required"]
SENTENCE = re.compile(r"[^.!?]+(?:[.!?]+|$)")
MONTH = re.compile(r"^\d{4}-(0[1-9]|1[0-2])$")


def slot_description(relation: str, slot: Slot, vocabulary: Vocabulary) -> str:
    head = f"{relation}.{slot.name} ({slot.type})"
    if slot.type == "term":
        if slot.axis is None:
            return (f"{head}: axis {slot.name} has NO vocabulary in this workspace; a constraint here is "
                    f"reported unbound and does not run")
        axis = vocabulary.axis(slot.axis)
        terms = (f"ordered low to high: {' < '.join(axis.order)}" if axis.ordered
                 else f"terms: {', '.join(axis.terms)}")
        return (f"{head}: axis {axis.name}, {terms}. Write the term, or the brief's own word when it is a "
                f"synonym — synonyms and groups are resolved server-side")
    return {
        "text": f"{head}: free text, compared ignoring case; contains matches a part of it",
        "number": f"{head}: a number, written with digits and an optional decimal point",
        "month": f"{head}: a month, written YYYY-MM (or YYYY for a whole year)",
        "date": f"{head}: a date, written YYYY-MM-DD (or YYYY-MM, YYYY)",
    }[slot.type]


def _value_schema(slot: Slot) -> dict:
    scalar = {"type": "number"} if slot.type == "number" else {"type": "string"}
    return {"anyOf": [scalar, {"type": "array", "items": scalar, "minItems": 1}]}


def constraint_variants(schema: Schema, vocabulary: Vocabulary, required: list[str] = REQUIRED) -> list[dict]:
    """One JSON Schema per (relation, slot) a constraint may name: the relation and slot as constants,
    the ops the slot's type answers, the value's form (the axis's terms in the slot's description).
    The compile model must fill every key (`REQUIRED`); a caller writing constraints itself, only
    relation, slot, op and value."""
    variants = []
    for rel in schema.relations.values():
        for slot in rel.slots.values():
            if slot.computed:   # the seed's tool offers the pack's declared slots (13 for expert_network)
                continue
            variants.append({
                "type": "object",
                "properties": {
                    "relation": {"enum": [rel.name], "description": rel.description or rel.name},
                    "slot": {"enum": [slot.name], "description": slot_description(rel.name, slot, vocabulary)},
                    "op": {"enum": list(slot.ops(vocabulary))},
                    "value": _value_schema(slot),
                    "brief_span": {"type": "array", "items": {"type": "integer", "minimum": 0},
                                   "minItems": 2, "maxItems": 2,
                                   "description": "[start, end) character offsets of the quote in the brief"},
                    "quote": {"type": "string", "description": "the brief's own words this constraint comes from"},
                    "required": {"type": "boolean",
                                 "description": "false when the brief states a preference, not a condition"},
                },
                "required": list(required),
                "additionalProperties": False,
            })
    return variants


def compile_tool(schema: Schema, vocabulary: Vocabulary) -> dict:
    variants = constraint_variants(schema, vocabulary)
    return {
        "name": TOOL_NAME,
        "description": ("Compile a search brief into constraints over this workspace's relations. One "
                        "constraint per condition the brief states, each with the brief's own words (quote) "
                        "and their offsets (brief_span). Leave out what no relation.slot below can express."),
        "input_schema": {
            "type": "object",
            "properties": {
                "constraints": {"type": "array", "items": {"anyOf": variants}},
                "as_of": {"type": ["string", "null"], "pattern": MONTH.pattern,
                          "description": "YYYY-MM when the brief pins the question to a month"},
            },
            "required": ["constraints"],
            "additionalProperties": False,
        },
    }


@dataclass
class CompiledConstraint:
    relation: str
    slot: str
    op: str
    value: Any
    brief_span: tuple[int, int]
    quote: str
    required: bool = True
    span_relocated_from: tuple[int, int] | None = None

    def as_constraint(self) -> dict:
        """The shape the search's `constraints` field takes."""
        return {"relation": self.relation, "slot": self.slot, "op": self.op, "value": self.value,
                "brief_span": list(self.brief_span), "quote": self.quote, "required": self.required}


@dataclass
class Compiled:
    brief: str
    constraints: list[CompiledConstraint] = field(default_factory=list)
    dropped: list[dict] = field(default_factory=list)
    uncompiled: list[dict] = field(default_factory=list)
    as_of: str | None = None


def sentences(brief: str) -> list[tuple[int, int]]:
    """[start, end) of each sentence, without the spaces between them."""
    out = []
    for m in SENTENCE.finditer(brief):
        start, end = m.start(), m.end()
        while start < end and brief[start].isspace():
            start += 1
        while end > start and brief[end - 1].isspace():
            end -= 1
        if start < end:
            out.append((start, end))
    return out


def _whole_words(brief: str, start: int, end: int) -> bool:
    before = brief[start - 1] if start > 0 else " "
    after = brief[end] if end < len(brief) else " "
    return not (before.isalnum() or after.isalnum())


def _in_one_sentence(spans: list[tuple[int, int]], start: int, end: int) -> bool:
    return any(s <= start and end <= e for s, e in spans)


def locate(brief: str, quote: str, span) -> tuple[tuple[int, int] | None, str | None]:
    """(the span the quote holds in the brief, None) or (None, the reason it cannot be placed)."""
    if not quote.strip():
        return None, "quote_empty"
    spans = sentences(brief)

    def good(s: int, e: int) -> bool:
        return _whole_words(brief, s, e) and _in_one_sentence(spans, s, e)

    if (isinstance(span, (list, tuple)) and len(span) == 2 and all(isinstance(x, int) for x in span)
            and 0 <= span[0] <= span[1] <= len(brief) and brief[span[0]:span[1]] == quote and good(*span)):
        return (span[0], span[1]), None
    found = [(m.start(), m.start() + len(quote)) for m in re.finditer(re.escape(quote), brief)]
    placed = [f for f in found if good(*f)]
    if len(placed) == 1:
        return placed[0], None
    if len(placed) > 1:
        return None, "span_ambiguous"
    if any(_whole_words(brief, *f) for f in found):
        return None, "quote_crosses_sentences"
    if found:
        return None, "quote_not_whole_words"
    return None, "quote_not_in_brief"


def read_compile_output(brief: str, schema: Schema, vocabulary: Vocabulary, model_said: dict) -> Compiled:
    out = Compiled(brief)
    said = model_said if isinstance(model_said, dict) else {}
    as_of = said.get("as_of")
    out.as_of = as_of if isinstance(as_of, str) and MONTH.match(as_of) else None
    for i, c in enumerate(said.get("constraints") or []):
        if not isinstance(c, dict):
            out.dropped.append({"constraint": {"raw": c}, "reason": "malformed"})
            continue

        def drop(reason: str) -> None:
            out.dropped.append({"constraint": c, "reason": reason})

        rel = schema.relation(c.get("relation")) if isinstance(c.get("relation"), str) else None
        if rel is None:
            drop(f"relation_unknown:{c.get('relation')}")
            continue
        slot = rel.slots.get(c.get("slot")) if isinstance(c.get("slot"), str) else None
        if slot is None:
            drop(f"slot_unknown:{c.get('slot')}")
            continue
        if c.get("op") not in slot.ops(vocabulary):
            drop(f"op_not_offered:{c.get('op')}")
            continue
        value = c.get("value")
        if value is None or (c["op"] == "in") != isinstance(value, list):
            drop("value_malformed")
            continue
        if slot.type != "term" or slot.axis is not None:  # an unbound term slot is kept: search reports it
            try:
                bind_one(Constraint(i, rel.name, slot.name, c["op"], value), rel, slot, vocabulary)
            except SearchConstraintInvalid:
                drop("type_cannot_answer")
                continue
        quote = c.get("quote") if isinstance(c.get("quote"), str) else ""
        span, reason = locate(brief, quote, c.get("brief_span"))
        if span is None:
            drop(reason)
            continue
        given = c.get("brief_span")
        moved = tuple(given) if isinstance(given, (list, tuple)) and list(given) != list(span) else None
        out.constraints.append(CompiledConstraint(
            rel.name, slot.name, c["op"], value, span, quote,
            c.get("required") if isinstance(c.get("required"), bool) else True, moved))
    for s, e in sentences(brief):
        if not any(cc.brief_span[0] < e and s < cc.brief_span[1] for cc in out.constraints):
            out.uncompiled.append({"span": [s, e], "text": brief[s:e]})
    return out
