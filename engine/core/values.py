"""Values every store and index can hold, checked at the edge so a bad one is refused with its
reason instead of reaching DuckDB or tantivy (where it would fail half-way through a write).

- dates: tantivy keeps dates as nanoseconds in an i64, so 1678-01-01 to 2262-01-01 (UTC);
- integers: DuckDB BIGINT and tantivy i64, so -2^63 to 2^63-1 (a page size or an offset has
  tighter bounds of its own);
- text: must encode as UTF-8 (a lone surrogate such as "\\udc00" cannot be stored anywhere);
- numbers: finite (NaN and Infinity compare with nothing);
- names (a document scope, an entity id): printable — no control character, which no screen shows
  and no filter expression of every backend can carry (engine/core/identity.py).
"""
from __future__ import annotations

import math
from datetime import datetime, timezone
from typing import Annotated, Any

from pydantic import AfterValidator, Field

from indexes.sparse import DATE_MAX, DATE_MIN

INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1


def utc_naive(v: datetime | None) -> datetime | None:
    """Stored as naive UTC; naive input is taken to be UTC already."""
    if v is None:
        return None
    return v.astimezone(timezone.utc).replace(tzinfo=None) if v.tzinfo else v


def storable_date(v: datetime | None) -> datetime | None:
    v = utc_naive(v)
    if v is not None and not DATE_MIN <= v < DATE_MAX:
        raise ValueError(f"must be between {DATE_MIN.date().isoformat()} and {DATE_MAX.date().isoformat()} "
                         "(what the index's dates can hold)")
    return v


def encodable(v: Any) -> Any:
    """Text (or text inside lists and dicts) that encodes as UTF-8."""
    if isinstance(v, str):
        try:
            v.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ValueError(f"text is not valid Unicode (a lone surrogate at position {exc.start})") from None
    elif isinstance(v, (list, tuple)):
        for x in v:
            encodable(x)
    elif isinstance(v, dict):
        for k, x in v.items():
            encodable(k)
            encodable(x)
    return v


def finite(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        raise ValueError("must be a finite number (not NaN or Infinity)")
    if isinstance(v, (list, tuple)):
        for x in v:
            finite(x)
    return v


def printable_name(v: Any) -> Any:
    from engine.core.identity import printable

    encodable(v)
    if isinstance(v, str) and not printable(v):
        raise ValueError("a name cannot hold a control character (a line break, a tab, NUL, …)")
    return v


StorableDate = Annotated[datetime, AfterValidator(storable_date)]
Int64 = Annotated[int, Field(ge=INT64_MIN, le=INT64_MAX)]
Text = Annotated[str, AfterValidator(encodable)]
Name = Annotated[str, AfterValidator(printable_name)]



# How deep a client's JSON (a request body, a record, front matter) may nest. Parsers and validators
# recurse once per level, so some hundreds of levels in they fail with RecursionError (a 500); a
# text past this is refused with a 422 instead, whether its parser got through it or not.
MAX_NESTING = 64


class TooDeep(ValueError):
    def __init__(self, limit: int = MAX_NESTING):
        super().__init__(f"nested more than {limit} levels deep")


def check_nesting(value: Any, limit: int = MAX_NESTING, children=None) -> Any:
    """`value` when its lists and dicts (or, with `children`, whatever that function opens: YAML
    nodes) nest at most `limit` deep, else TooDeep. Iterative, one visit per element. An element met
    twice (a YAML alias) is opened once."""
    children = children or _json_children
    stack = [(value, 1)]
    seen: set[int] = set()
    while stack:
        v, depth = stack.pop()
        inner = children(v)
        if not inner:
            continue
        if depth > limit:
            raise TooDeep(limit)
        if id(v) in seen:
            continue
        seen.add(id(v))
        stack.extend((c, depth + 1) for c in inner)
    return value


def _json_children(v: Any) -> list:
    if isinstance(v, dict):
        return list(v.values())
    if isinstance(v, (list, tuple)):
        return list(v)
    return []
