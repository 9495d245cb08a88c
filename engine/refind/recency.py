"""Recency on last_seen, bounded: factor = 1 - w * (1 - 0.5 ** (age_days / half_life_days)).

The factor falls from 1 (seen now) towards 1 - w (seen long ago), so recency can take at most the
part w of a page's score: with a small w it reorders only pages whose fused scores are within a few
per cent of each other — pages that match about equally — and never lets age outvote relevance
(fused scores differ by a few per cent between ranks). w = 1 is the plain exponential decay.
Off when the half-life is 0 (or w is 0).
"""
from __future__ import annotations

from datetime import datetime


def recency_on(half_life_days: float, mode: str, weight: float) -> bool:
    """Recency is off at a half-life of 0, and in decay mode at a weight of 0 (the one place that says so)."""
    return half_life_days > 0 and (mode == "band" or weight > 0)


def age_days(last_seen: datetime, now: datetime) -> float:
    return max(0.0, (now - last_seen).total_seconds() / 86400.0)


def factors_us(now_us: int, seen_us: list[int], half_life_days: float, weight: float = 1.0) -> list[float]:
    """The recency factor (the module's formula, with age_days) of many pages at once, from their
    last_seen in microseconds since 1970 (the search's in-memory view keeps it so), bit for bit what
    the formula gives on datetimes: a difference under 2**53 µs (285 years) is exact in a float,
    and dividing it is then rounded as timedelta.total_seconds() rounds; a longer one is divided as
    an integer. Plain Python: a search decays the few pages that can still reach its slice, and
    NumPy's calls cost more than they save at that size (its power may also differ in the last bit,
    and ties would reorder on one ulp)."""
    if not half_life_days or half_life_days <= 0 or weight <= 0:
        return [1.0] * len(seen_us)
    out = []
    for s in seen_us:
        d = now_us - s
        age = (float(d) / 1e6 if -2**53 < d < 2**53 else d / 10**6) / 86400.0
        out.append(1.0 - weight * (1.0 - 0.5 ** (age / half_life_days)) if age > 0 else 1.0)
    return out
