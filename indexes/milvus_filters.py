"""A search's filters as one Milvus boolean expression, and a chunk's filter fields as a Milvus row
(indexes/milvus.py's arms push both into every search and write). Every value is a quoted literal
(strings escaped, integers as integers; milvus-lite 2.5 has no expression templates): after is
inclusive and before exclusive, as the embedded arms read them.
"""
from __future__ import annotations

from datetime import datetime, timezone

from .sparse import SparseFilter
from .store import IndexDoc


def _micros(dt: datetime) -> int:
    dt = dt.replace(tzinfo=timezone.utc) if dt.tzinfo is None else dt.astimezone(timezone.utc)
    return int(dt.timestamp() * 1_000_000)


def _lit(value) -> str:
    """A Milvus expression literal: an integer, or a double-quoted string with `"` and `\\` escaped
    and every other character as it is. Milvus compares a string literal's characters as written: a
    JSON escape such as `\\t` or `\\u0000` stays two or six characters, so a value holding a tab or a
    NUL matched nothing. A line break cannot stand in a literal at all; the engine refuses one in every
    name it filters on (workspaces, scopes, entity ids: engine/core/identity.py)."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise TypeError(f"not an expression literal: {value!r}")
    if isinstance(value, int):
        return str(int(value))
    if "\n" in value or "\r" in value:
        raise ValueError("a Milvus string literal cannot hold a line break")
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _list(values) -> str:
    return "[" + ", ".join(_lit(v) for v in values) + "]"


NOTHING = "chunk_id < 0"


def _among(template: str, values) -> str:
    """`template` over the values a literal can hold (a value with a line break is one no stored row
    holds: the engine refuses such names), or an expression matching nothing when none is left."""
    kept = [v for v in values if not (isinstance(v, str) and ("\n" in v or "\r" in v))]
    return template.format(_list(kept)) if kept else NOTHING


def expression(f: SparseFilter | None) -> str:
    """A search's filters as one Milvus boolean expression ("" = none), every value a quoted
    literal (_lit). after is inclusive and before exclusive, as the embedded arms read them."""
    if f is None:
        return ""
    parts: list[str] = []
    if f.workspace:
        parts.append(_among("workspace in {}", [f.workspace]))
    if f.domains:
        parts.append(_among("domain in {}", f.domains))
    if f.after:
        parts.append(f"last_seen >= {_micros(f.after)}")
    if f.before:
        parts.append(f"last_seen < {_micros(f.before)}")
    if f.cluster_ids:
        parts.append(f"cluster_id in {_list(int(c) for c in f.cluster_ids)}")
    if f.entities:
        parts.append(_among("array_contains_any(entities, {})", f.entities))
    if f.scopes is not None:
        parts.append(_among("scope in {}", f.scopes))   # no scope: nothing
    if f.page_ids is not None:
        parts.append(_among("page_id in {}", f.page_ids))
    return " and ".join(parts)


def _row(d: IndexDoc) -> dict:
    return {"chunk_id": int(d.chunk_id), "page_id": d.page_id, "workspace": d.workspace_id,
            "domain": (d.domain or "")[:512], "scope": d.scope or "", "entities": list(d.entities)[:1000],
            "last_seen": _micros(d.last_seen), "cluster_id": -1 if d.cluster_id is None else int(d.cluster_id)}
