"""Recency on last_seen, bounded: factor = 1 - w * (1 - 0.5 ** (age_days / half_life_days)).

The factor falls from 1 (seen now) towards 1 - w (seen long ago), so recency can take at most the
part w of a page's score: with a small w it reorders only pages whose fused scores are within a few
per cent of each other — pages that match about equally — and never lets age outvote relevance
(fused scores differ by a few per cent between ranks). w = 1 is the plain exponential decay.
Off when the half-life is 0 (or w is 0).
"""
from __future__ import annotations

from datetime import datetime

import numpy as np


def age_days(last_seen: datetime, now: datetime) -> float:
    return max(0.0, (now - last_seen).total_seconds() / 86400.0)


def decay_factor(last_seen: datetime, now: datetime, half_life_days: float, weight: float = 1.0) -> float:
    if not half_life_days or half_life_days <= 0 or weight <= 0:
        return 1.0
    return 1.0 - weight * (1.0 - 0.5 ** (age_days(last_seen, now) / half_life_days))


def ages_days(now_us: int, seen_us: np.ndarray) -> np.ndarray:
    """age_days before its clamp (negative for a future last_seen) of many pages at once, from
    microseconds since 1970, bit for bit: a difference under 2**53 µs (285 years) is exact in a
    float, and dividing it is then rounded as timedelta.total_seconds() rounds; a longer one is
    divided in Python."""
    d = now_us - np.asarray(seen_us, dtype=np.int64)
    out = d.astype(np.float64) / 1e6
    far = np.flatnonzero(np.abs(d) >= 2**53)
    if len(far):
        out[far] = [x / 10**6 for x in d[far].tolist()]
    return out / 86400.0


def decay_factors(ages: np.ndarray, half_life_days: float, weight: float = 1.0) -> np.ndarray:
    """decay_factor of each age (ages_days) at once, bit for bit: the power is Python's (NumPy's
    vectorised one may differ in the last bit, and ties would reorder on one ulp)."""
    if not half_life_days or half_life_days <= 0 or weight <= 0:
        return np.ones(len(ages))
    halves = np.array([0.5 ** r if r > 0 else 1.0 for r in (ages / half_life_days).tolist()], dtype=np.float64)
    return np.where(ages > 0, 1.0 - weight * (1.0 - halves), 1.0)
