"""Document loads' model reader: one forced tool call per document whose schema is the pack's
relations, and the checker its output goes through (a quote must be whole words of the document at
its span, and the value what the quote says) — the brief compiler's discipline."""
from __future__ import annotations

import re

from engine.relations.packs import Relation, norm
from engine.relations.compile import locate, slot_description
from engine.relations.doc_readers import Doc, Extracted
from engine.relations.workspaces import Space

READER_TOOL = "read_relation_rows"


# ---------------------------------------------------------------------------------------------
# The model reader: one forced tool call per document, then the checker

MODEL_SYSTEM = (
    "You read one document and record the relation rows it states by calling the tool read_relation_rows "
    "exactly once. One row per fact the document states about its subject; for each slot you fill, give the "
    "value, the document's own words that state it as `quote`, and their [start, end) character offsets in "
    "the document as `span`. Leave a slot out when the document does not state it; never infer. Months are "
    "written YYYY-MM (or YYYY)."
)


def reader_tool(space: Space, relations: list[Relation]) -> dict:
    variants = []
    for rel in relations:
        slot_props = {}
        for slot in rel.slots.values():
            if slot.computed:
                continue
            value = {"type": "number"} if slot.type == "number" else {"type": "string"}
            slot_props[slot.name] = {
                "type": "object", "description": slot_description(rel.name, slot, space.vocabulary),
                "properties": {"value": value, "quote": {"type": "string"},
                               "span": {"type": "array", "items": {"type": "integer", "minimum": 0},
                                        "minItems": 2, "maxItems": 2}},
                "required": ["value", "quote", "span"], "additionalProperties": False}
        variants.append({"type": "object",
                         "properties": {"relation": {"enum": [rel.name], "description": rel.description or rel.name},
                                        "slots": {"type": "object", "properties": slot_props,
                                                  "additionalProperties": False}},
                         "required": ["relation", "slots"], "additionalProperties": False})
    return {"name": READER_TOOL,
            "description": "Record the relation rows this document states, each value with its quote and span.",
            "input_schema": {"type": "object",
                             "properties": {"rows": {"type": "array", "items": {"anyOf": variants}}},
                             "required": ["rows"], "additionalProperties": False}}


MONTHS = {m: i + 1 for i, m in enumerate(["january", "february", "march", "april", "may", "june", "july", "august",
                                           "september", "october", "november", "december"])}
MONTHS.update({k[:3]: v for k, v in list(MONTHS.items())})


def months_in(quote: str) -> set[str]:
    """The months (YYYY-MM) and years (YYYY) a quote names."""
    out = set()
    low = quote.lower()
    for m in re.finditer(r"\b(\d{4})-(\d{1,2})\b", low):
        out.add(f"{m.group(1)}-{int(m.group(2)):02d}")
    for m in re.finditer(r"\b([a-z]{3,9})\.?\s+(\d{4})\b", low):
        if m.group(1) in MONTHS:
            out.add(f"{m.group(2)}-{MONTHS[m.group(1)]:02d}")
    for m in re.finditer(r"\b(\d{1,2})/(\d{4})\b", low):
        if 1 <= int(m.group(1)) <= 12:
            out.add(f"{m.group(2)}-{int(m.group(1)):02d}")
    for m in re.finditer(r"\b(\d{4})\b", low):
        out.add(m.group(1))
    return out


def says(space: Space, rel: Relation, slot: str, value, quote: str) -> bool:
    """Whether the quote states this value for the slot."""
    s = rel.slots[slot]
    v = str(value).strip()
    if not v:
        return False
    if norm(v) == norm(quote):
        return True
    if s.type == "number":
        try:
            target = float(v)
        except ValueError:
            return False
        return any(float(n.replace(",", "")) == target for n in re.findall(r"\d[\d,]*(?:\.\d+)?", quote))
    if s.type in ("month", "date"):
        return v[:7] in months_in(quote) or v in months_in(quote)
    if s.type == "term" and s.axis is not None:
        axis = space.vocabulary.axis(s.axis)
        term = axis.resolve(v)
        if term is not None and (axis.resolve(quote) == term
                                 or any(re.search(rf"(?<!\w){re.escape(surface)}(?!\w)", norm(quote))
                                        for surface, t in axis.surfaces().items() if t == term)):
            return True
    return re.search(rf"(?<!\w){re.escape(norm(v))}(?!\w)", norm(quote)) is not None


def check_model_rows(space: Space, doc: Doc, allowed: set[str], said: dict) -> tuple[list[Extracted], list[dict]]:
    rows, dropped = [], []
    for raw in (said.get("rows") if isinstance(said, dict) else None) or []:
        if not isinstance(raw, dict):
            dropped.append({"reason": "malformed"})
            continue
        rel = space.schema.relation(raw.get("relation")) if isinstance(raw.get("relation"), str) else None
        if rel is None or rel.name not in allowed:
            dropped.append({"relation": raw.get("relation"), "reason": f"relation_unknown:{raw.get('relation')}"})
            continue
        slots, reason = {}, None
        given = raw.get("slots") if isinstance(raw.get("slots"), dict) else {}
        for slot, spec in given.items():
            if slot not in rel.stored_slots:
                reason = f"slot_unknown:{slot}"
                break
            if not isinstance(spec, dict) or not isinstance(spec.get("value"), (str, int, float)):
                reason = f"value_malformed:{slot}"
                break
            quote = spec.get("quote") if isinstance(spec.get("quote"), str) else ""
            span, why = locate(doc.text, quote, spec.get("span"))
            if span is None:
                reason = f"{why.replace('_brief', '_document')}:{slot}"
                break
            if not says(space, rel, slot, spec["value"], quote):
                reason = f"value_not_in_quote:{slot}"
                break
            v = spec["value"]
            value = str(int(v)) if isinstance(v, float) and v.is_integer() else str(v).strip()
            slots[slot] = (value, span[0], span[1], quote)
        if reason is None and not slots:
            reason = "row_empty"
        if reason:
            dropped.append({"relation": rel.name, "reason": reason})
        else:
            rows.append(Extracted(rel.name, "model", slots))
    return rows, dropped
