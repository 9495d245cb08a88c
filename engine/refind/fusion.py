"""Reciprocal-rank fusion over chunk ids.

score(c) = sum over arms a that returned c of  w_a / (rrf_k + rank_a(c)),  rank counted from 1.
(Cormack et al. 2009 use k = 60 with ranks from 1; some engines count from 0 — we count from 1.)
Ties break by chunk id, so the same inputs always give the same order.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Fused:
    chunk_id: int
    score: float
    ranks: dict[str, int] = field(default_factory=dict)  # arm -> rank (from 1)
    arm_scores: dict[str, float] = field(default_factory=dict)


def rrf_term(weight: float, k: float, rank: int) -> float:
    """One arm's contribution to an item it ranked `rank` (from 1): the whole formula, in one place."""
    return weight / (k + rank)


def rrf(arms: dict[str, list[tuple[int, float]]], weights: dict[str, float] | None = None,
        k: float = 60.0) -> list[Fused]:
    weights = weights or {}
    fused: dict[int, Fused] = {}
    for arm, hits in arms.items():
        w = weights.get(arm, 1.0)
        for rank, (cid, score) in enumerate(hits, start=1):
            f = fused.setdefault(cid, Fused(cid, 0.0))
            f.score += rrf_term(w, k, rank)
            f.ranks[arm] = rank
            f.arm_scores[arm] = score
    return sorted(fused.values(), key=lambda f: (-f.score, f.chunk_id))


def rerank_arm(scores: dict[int, float], weight: float, k: float) -> dict[int, float]:
    """The cross-encoder as one more RRF arm: each chunk's term by its rerank-score rank (ties by id)."""
    order = sorted(scores, key=lambda c: (-scores[c], c))
    return {c: rrf_term(weight, k, r) for r, c in enumerate(order, start=1)}


def contributions(f: Fused, weights: dict[str, float], k: float) -> dict[str, float]:
    """Explain's view of a fused chunk: each arm's term, and their total (the fused score)."""
    out = {arm: rrf_term(weights.get(arm, 1.0), k, rank) for arm, rank in f.ranks.items()}
    out["total"] = f.score
    return out
