"""Document loads' rule readers: a document parsed (front matter with positions, body), and the rows a
rule recovers from it — a front-matter key holding a mapping or list of mappings, labelled lines in
blocks under a heading, Markdown tables under a heading — each value the document's own text at its
span (engine/relations/documents.py runs them over a folder)."""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

from engine.core.errors import LoadInvalid
from engine.core.values import MAX_NESTING, TooDeep, check_nesting
from engine.core.markdown import heading, headings
from engine.relations.packs import norm

MAX_BYTES = 2_000_000   # a document larger than this is not read


class ReaderRule(BaseModel):
    """One rule: where in a document a relation's rows are written, and which key, label or column
    holds each slot."""
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    relation: str = Field(min_length=1)
    from_: Literal["front_matter", "fields", "labelled", "table"] = Field(alias="from")
    path: str | None = Field(default=None, description="front_matter / fields (a JSON record's): the key holding "
                                                        "a mapping or a list of mappings (absent: the whole of it).")
    section: str | None = Field(default=None, description="labelled / table: read only under a heading "
                                                          "containing these words (case-insensitive).")
    slots: dict[str, str] = Field(min_length=1, description="slot -> key, label or column header")


# ---------------------------------------------------------------------------------------------
# Parsing

@dataclass
class Doc:
    path: Path                      # where it is read (never shown)
    rel: str                        # its path inside the folder (what replies name)
    text: str
    content_hash: str
    front: Any = None               # the front matter's yaml node (a MappingNode) or None
    front_at: int = 0               # offset of the front matter's text in the document
    body_at: int = 0                # offset of the body (after the front matter)
    entity_id: str | None = None
    name: str | None = None
    title: str | None = None
    scope: str | None = None        # its document scope (None: every key of the workspace reads it)
    fingerprint: str = ""

    @property
    def body(self) -> str:
        return self.text[self.body_at:]


FRONT = re.compile(r"\A---[ \t]*\r?\n(.*?)^---[ \t]*(?:\r?\n|\Z)", re.S | re.M)


def parse(path: Path, rel: str) -> Doc:
    raw = path.read_bytes()
    if len(raw) > MAX_BYTES:
        raise LoadInvalid(f"document {rel!r} is over {MAX_BYTES} bytes", reason="document_too_large")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise LoadInvalid(f"document {rel!r} is not UTF-8 text", reason="document_unreadable") from exc
    doc = Doc(path, rel, text, hashlib.sha256(raw).hexdigest())
    if path.suffix.lower() == ".json":
        # a JSON record (a document-store export): the whole record is read as the front matter is
        # (JSON is YAML's flow syntax, and YAML's parser keeps every value's span)
        try:
            check_nesting(json.loads(text))
            node = _compose(text)
        except TooDeep as exc:
            raise LoadInvalid(f"document {rel!r} is {exc}", reason="record_invalid") from None
        except (ValueError, yaml.YAMLError) as exc:
            raise LoadInvalid(f"document {rel!r} is not a JSON record ({str(exc).splitlines()[0]})",
                              reason="record_invalid") from exc
        except RecursionError:
            raise LoadInvalid(f"document {rel!r} is nested more than {MAX_NESTING} levels deep",
                              reason="record_invalid") from None
        if not isinstance(node, yaml.MappingNode):
            raise LoadInvalid(f"document {rel!r} is not a JSON object", reason="record_invalid")
        doc.front, doc.front_at, doc.body_at = node, 0, len(text)
        return doc
    m = FRONT.match(text)
    if m:
        doc.front_at, doc.body_at = m.start(1), m.end()
        try:
            node = _compose(m.group(1))
        except yaml.YAMLError as exc:
            raise LoadInvalid(f"document {rel!r}: its front matter is not YAML ({str(exc).splitlines()[0]})",
                              reason="front_matter_invalid") from exc
        except (RecursionError, TooDeep):
            raise LoadInvalid(f"document {rel!r}: its front matter is nested more than {MAX_NESTING} levels deep",
                              reason="front_matter_invalid") from None
        if node is not None and not isinstance(node, yaml.MappingNode):
            raise LoadInvalid(f"document {rel!r}: its front matter is not a mapping", reason="front_matter_invalid")
        doc.front = node
    return doc


def _node_children(node) -> list:
    if isinstance(node, yaml.MappingNode):
        return [v for pair in node.value for v in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _compose(text: str):
    """The YAML node of a text, nested at most MAX_NESTING deep (PyYAML's composer recurses once per
    level: a text nested thousands deep is a RecursionError, which the caller refuses too)."""
    node = yaml.compose(text)
    return check_nesting(node, children=_node_children) if node is not None else None


def _child(node, key: str):
    if not isinstance(node, yaml.MappingNode):
        return None
    for k, v in node.value:
        if isinstance(k, yaml.ScalarNode) and k.value == key:
            return v
    return None


def get_path(node, dotted: str):
    for part in dotted.split("."):
        node = _child(node, part)
        if node is None:
            return None
    return node


def scalar_span(doc: Doc, node) -> tuple[str, int, int] | None:
    """(value, start, end) of a YAML scalar in the document; None for an empty or non-scalar node.
    A quoted scalar's span is inside its quotes."""
    if not isinstance(node, yaml.ScalarNode) or node.tag.endswith(":null") or not str(node.value).strip():
        return None
    s, e = doc.front_at + node.start_mark.index, doc.front_at + node.end_mark.index
    if node.style in ("'", '"'):
        s, e = s + 1, e - 1
    return node.value, s, e


def _text_at(doc: Doc, path: str | None) -> str | None:
    if path is None or doc.front is None:
        return None
    hit = scalar_span(doc, get_path(doc.front, path))
    return hit[0].strip() if hit else None


# ---------------------------------------------------------------------------------------------
# Rule readers: each yields rows as {slot: (value, start, end)}

@dataclass
class Extracted:
    relation: str
    reader: str                                   # rule:<from> | model
    slots: dict[str, tuple[str, int, int, str]]   # slot -> (value, start, end, quote)
    source_rel: str = ""
    ordinal: int = 0


# A labelled line's label and separator; its value is the rest of the line less the spaces and tabs
# around it (cut with str methods: a lazy value before `[ \t]*$` backtracked over every space).
LABEL = re.compile(r"^[ \t]*(?:[-*+][ \t]+)?(?:\*\*|__)?(?P<label>[^:\n*_|]{1,80}?)(?::(?:\*\*|__)|(?:\*\*|__)?:)")


def labelled(line: str) -> tuple[str, str, int] | None:
    """(label, value, the value's offset in the line) of a `Label: value` line, or None."""
    m = LABEL.match(line)
    if m is None:
        return None
    rest = line[m.end():]
    value = rest.lstrip(" \t")
    at = m.end() + len(rest) - len(value)
    return m.group("label"), value.rstrip(" \t"), at


def _sections(doc: Doc, section: str | None) -> list[tuple[int, int]]:
    """[start, end) of the body parts a rule reads: the whole body, or each part under a heading
    containing `section` (up to the next heading of the same or a higher level)."""
    body_end = len(doc.text)
    if section is None:
        return [(doc.body_at, body_end)]
    heads = list(headings(doc.text, doc.body_at))
    out = []
    for i, (s, e, level, title) in enumerate(heads):
        if norm(section) in norm(title):
            end = next((h[0] for h in heads[i + 1:] if h[2] <= level), body_end)
            out.append((e, end))
    return out


def _lines(text: str, start: int, end: int):
    pos = start
    for line in text[start:end].split("\n"):
        yield pos, line
        pos += len(line) + 1


def read_front(doc: Doc, rule: ReaderRule) -> tuple[list[Extracted], list[dict]]:
    if doc.front is None:
        return [], []
    node = doc.front if rule.path is None else get_path(doc.front, rule.path)
    if node is None:
        return [], []
    items = node.value if isinstance(node, yaml.SequenceNode) else [node]
    rows, dropped = [], []
    for item in items:
        if not isinstance(item, yaml.MappingNode):
            dropped.append({"reason": "not_a_mapping"})
            continue
        slots, bad = {}, None
        for slot, key in rule.slots.items():
            child = _child(item, key)
            if child is None:
                continue
            hit = scalar_span(doc, child)
            if hit is None:
                if not isinstance(child, yaml.ScalarNode):
                    bad = f"not_a_value:{slot}"
                continue
            value, s, e = hit
            if doc.text[s:e] != value:   # an escaped or folded scalar: not the document's own words
                bad = f"value_not_verbatim:{slot}"
                continue
            slots[slot] = (value.strip(), s, e, doc.text[s:e])
        if bad:
            dropped.append({"reason": bad})
        elif slots:
            rows.append(Extracted(rule.relation, f"rule:{rule.from_}", slots))
    return rows, dropped


def read_labelled(doc: Doc, rule: ReaderRule) -> tuple[list[Extracted], list[dict]]:
    labels = {norm(label): slot for slot, label in rule.slots.items()}
    rows: list[Extracted] = []
    for start, end in _sections(doc, rule.section):
        block: dict = {}
        for pos, line in _lines(doc.text, start, end):
            m = labelled(line)
            slot = labels.get(norm(m[0])) if m else None
            if slot is None or not m[1].strip():
                if not line.strip() or heading(line):         # a blank line or a heading ends a block
                    if block:
                        rows.append(Extracted(rule.relation, "rule:labelled", block))
                    block = {}
                continue
            if slot in block:                                 # the same label again: a new row
                rows.append(Extracted(rule.relation, "rule:labelled", block))
                block = {}
            value = m[1].strip().strip("*_").strip()
            s = pos + m[2] + m[1].index(value)
            block[slot] = (value, s, s + len(value), value)
        if block:
            rows.append(Extracted(rule.relation, "rule:labelled", block))
    return rows, []


def _cells(line: str, pos: int) -> list[tuple[str, int, int]]:
    """The cells of a Markdown table line with their spans (stripped of spaces)."""
    out, at = [], pos
    inner = line
    lead = len(inner) - len(inner.lstrip())
    inner, at = inner.strip(), pos + lead
    if inner.startswith("|"):
        inner, at = inner[1:], at + 1
    if inner.endswith("|"):
        inner = inner[:-1]
    for part in inner.split("|"):
        value = part.strip()
        s = at + (part.index(value) if value else 0)
        out.append((value, s, s + len(value)))
        at += len(part) + 1
    return out


SEPARATOR_CELL = re.compile(r":?-{3,}:?")


def separator(line: str) -> bool:
    """Whether a line is a table's header rule (`|---|:---:|`): every cell between its pipes is three
    or more dashes, with optional colons (cell by cell: the one-pattern form backtracked over spaces)."""
    inner = line.strip()
    if inner.startswith("|"):
        inner = inner[1:]
    if inner.endswith("|") and inner:
        inner = inner[:-1]
    return all(SEPARATOR_CELL.fullmatch(cell.strip()) for cell in inner.split("|"))


def read_table(doc: Doc, rule: ReaderRule) -> tuple[list[Extracted], list[dict]]:
    headers = {norm(h): slot for slot, h in rule.slots.items()}
    rows: list[Extracted] = []
    for start, end in _sections(doc, rule.section):
        lines = list(_lines(doc.text, start, end))
        i = 0
        while i + 1 < len(lines):
            pos, line = lines[i]
            if "|" in line and separator(lines[i + 1][1]):
                head = [norm(c[0]) for c in _cells(line, pos)]
                j = i + 2
                while j < len(lines) and "|" in lines[j][1] and lines[j][1].strip():
                    cells = _cells(lines[j][1], lines[j][0])
                    slots = {}
                    for h, (value, s, e) in zip(head, cells):
                        if h in headers and value:
                            slots[headers[h]] = (value, s, e, value)
                    if slots:
                        rows.append(Extracted(rule.relation, "rule:table", slots))
                    j += 1
                i = j
            else:
                i += 1
    return rows, []


READERS = {"front_matter": read_front, "fields": read_front, "labelled": read_labelled, "table": read_table}
