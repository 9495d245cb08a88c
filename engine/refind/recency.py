"""Recency on last_seen, bounded: factor = 1 - w * (1 - 0.5 ** (age_days / half_life_days)).

The factor falls from 1 (seen now) towards 1 - w (seen long ago), so recency can take at most the
part w of a page's score: with a small w it reorders only pages whose fused scores are within a few
per cent of each other — pages that match about equally — and never lets age outvote relevance
(fused scores differ by a few per cent between ranks). w = 1 is the plain exponential decay.
Off when the half-life is 0 (or w is 0).
"""
from __future__ import annotations

from datetime import datetime


def age_days(last_seen: datetime, now: datetime) -> float:
    return max(0.0, (now - last_seen).total_seconds() / 86400.0)


def decay_factor(last_seen: datetime, now: datetime, half_life_days: float, weight: float = 1.0) -> float:
    if not half_life_days or half_life_days <= 0 or weight <= 0:
        return 1.0
    return 1.0 - weight * (1.0 - 0.5 ** (age_days(last_seen, now) / half_life_days))
