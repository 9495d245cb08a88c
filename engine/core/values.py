"""Values every store and index can hold, checked at the edge so a bad one is refused with its
reason instead of reaching DuckDB or tantivy (where it would fail half-way through a write).

- dates: tantivy keeps dates as nanoseconds in an i64, so 1678-01-01 to 2262-01-01 (UTC);
- integers: DuckDB BIGINT and tantivy i64, so -2^63 to 2^63-1 (a page size or an offset has
  tighter bounds of its own);
- text: must encode as UTF-8 (a lone surrogate such as "\\udc00" cannot be stored anywhere);
- numbers: finite (NaN and Infinity compare with nothing).
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


StorableDate = Annotated[datetime, AfterValidator(storable_date)]
Int64 = Annotated[int, Field(ge=INT64_MIN, le=INT64_MAX)]
Text = Annotated[str, AfterValidator(encodable)]
