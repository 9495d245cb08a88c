"""Recency decay on last_seen: factor = 0.5 ** (age_days / half_life_days); off when half-life is 0."""
from __future__ import annotations

from datetime import datetime


def age_days(last_seen: datetime, now: datetime) -> float:
    return max(0.0, (now - last_seen).total_seconds() / 86400.0)


def decay_factor(last_seen: datetime, now: datetime, half_life_days: float) -> float:
    if not half_life_days or half_life_days <= 0:
        return 1.0
    return 0.5 ** (age_days(last_seen, now) / half_life_days)
