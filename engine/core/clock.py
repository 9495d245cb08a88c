"""The clock: every time the engine stores or compares is naive UTC (DuckDB TIMESTAMP, tantivy dates)."""
from __future__ import annotations

from datetime import datetime, timezone


def utcnow() -> datetime:
    """Now, as naive UTC."""
    return datetime.now(timezone.utc).replace(tzinfo=None)
