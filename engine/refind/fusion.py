"""Fusion of the arms' chunk lists into one ranking: reciprocal-rank fusion or a linear combination
of normalised scores. All of the fusion arithmetic lives here (the arms, the reranker as one more
arm, and explain's contributions).

rrf:     score(c) = sum over arms a that returned c of  w_a / (rrf_k + rank_a(c)),  rank from 1, equal
         scores sharing a rank (tied_ranks). (Cormack et al. 2009 use k = 60 with ranks from 1; some
         engines count from 0 — we count from 1.)
linear:  score(c) = sum over arms a that returned c of  w_a * norm_a(score_a(c)),  an arm that did not
         return c adds nothing (as Elasticsearch's linear retriever does). The normaliser maps one
         arm's candidate scores to a common scale (Bruch et al., "An Analysis of Fusion Functions for
         Hybrid Retrieval", ACM TOIS 2023):
           minmax  (s - min) / (max - min)                    [0, 1]; all equal -> 1
           zscore  (s - mean) / std                           all equal -> 0
           l2      s / sqrt(sum of s^2)                       all zero -> 0
           dbsf    (s - (mean - 3 std)) / (6 std), clipped to [0, 1] (Qdrant's distribution-based
                   score fusion); all equal -> 1
Ties break by chunk id, so the same inputs always give the same order.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

METHODS = ("rrf", "linear")
NORMALIZERS = ("minmax", "zscore", "l2", "dbsf")


@dataclass(slots=True)
class Fused:
    chunk_id: int
    score: float
    ranks: dict[str, int] = field(default_factory=dict)  # arm -> rank (from 1)
    arm_scores: dict[str, float] = field(default_factory=dict)  # arm -> raw score
    normalised: dict[str, float] = field(default_factory=dict)  # arm -> normalised score (linear)


def rrf_term(weight: float, k: float, rank: int) -> float:
    """One arm's contribution to an item it ranked `rank` (from 1): the whole formula, in one place."""
    return weight / (k + rank)


def tied_ranks(scores: list[float]) -> list[int]:
    """Ranks from 1 of a list sorted best first, where equal scores share the best rank among them
    (1, 2, 2, 4): the same text scores the same in an arm, and must fuse to the same score — two
    copies of a page then differ only by what comes after fusion (recency), not by an arbitrary
    order between equals."""
    out: list[int] = []
    for i, s in enumerate(scores):
        out.append(out[-1] if i and s == scores[i - 1] else i + 1)
    return out


def normalise(scores: list[float], how: str) -> list[float]:
    """One arm's candidate scores on the normaliser's scale (see the module's docstring)."""
    if not scores:
        return []
    if how == "minmax":
        lo, hi = min(scores), max(scores)
        return [(s - lo) / (hi - lo) if hi > lo else 1.0 for s in scores]
    if how == "l2":
        norm = math.sqrt(sum(s * s for s in scores))
        return [s / norm if norm > 0 else 0.0 for s in scores]
    mean = sum(scores) / len(scores)
    std = math.sqrt(sum((s - mean) ** 2 for s in scores) / len(scores))
    if how == "zscore":
        return [(s - mean) / std if std > 0 else 0.0 for s in scores]
    if how == "dbsf":
        lo = mean - 3 * std
        return [min(1.0, max(0.0, (s - lo) / (6 * std))) if std > 0 else 1.0 for s in scores]
    raise ValueError(f"unknown normalizer {how!r}; use one of {', '.join(NORMALIZERS)}")


def fuse(arms: dict[str, list[tuple[int, float]]], weights: dict[str, float] | None = None,
         method: str = "rrf", k: float = 60.0, normalizer: str = "minmax") -> list[Fused]:
    """The arms' [(chunk_id, score)] lists, best first, fused into one list, best first."""
    weights = weights or {}
    fused: dict[int, Fused] = {}
    for arm, hits in arms.items():
        w = weights.get(arm, 1.0)
        normed = normalise([s for _, s in hits], normalizer) if method == "linear" else None
        shared = tied_ranks([s for _, s in hits])
        for i, (cid, score) in enumerate(hits):
            f = fused.get(cid)
            if f is None:
                f = fused[cid] = Fused(cid, 0.0)
            if normed is None:
                rank = shared[i]
                f.score += rrf_term(w, k, rank)
            else:
                rank = i + 1
                f.normalised[arm] = normed[i]
                f.score += w * normed[i]
            f.ranks[arm] = rank
            f.arm_scores[arm] = score
    return sorted(fused.values(), key=lambda f: (-f.score, f.chunk_id))


def rrf_arrays(arms: dict[str, list[tuple[int, float]]], weights: dict[str, float] | None = None,
               k: float = 60.0) -> tuple[np.ndarray, np.ndarray]:
    """fuse(arms, weights, "rrf", k) as two arrays — the chunk ids (int64) and their fused scores
    (float64), best first — the same scores, bit for bit, in the same order, without a Fused per
    chunk: what a search needs unless it explains or reranks (fuse's arithmetic, inlined; the
    terms summed in a dict — cheaper than NumPy's unique + bincount at a few hundred chunks)."""
    weights = weights or {}
    score: dict[int, float] = {}
    get = score.get
    for arm, hits in arms.items():
        w = weights.get(arm, 1.0)
        prev, rank = None, 0
        for i, (cid, s) in enumerate(hits, 1):
            if i == 1 or s != prev:   # tied_ranks: equal scores share the best rank among them
                rank = i
            prev = s
            score[cid] = get(cid, 0.0) + w / (k + rank)   # rrf_term, inlined
    ids = np.fromiter(score.keys(), dtype=np.int64, count=len(score))
    fused = np.fromiter(score.values(), dtype=np.float64, count=len(score))
    order = np.lexsort((ids, -fused))   # best first, ties by chunk id
    return ids[order], fused[order]


def rrf(arms: dict[str, list[tuple[int, float]]], weights: dict[str, float] | None = None,
        k: float = 60.0) -> list[Fused]:
    return fuse(arms, weights, "rrf", k)


def extra_arm(scores: dict[int, float], weight: float, method: str = "rrf", k: float = 60.0,
              normalizer: str = "minmax") -> dict[int, float]:
    """One more arm over chunks already fused (the cross-encoder's scores): each chunk's term, in the
    request's fusion — by its rank for rrf (equal scores sharing one), by its normalised score for linear."""
    order = sorted(scores, key=lambda c: (-scores[c], c))
    if method == "linear":
        normed = normalise([scores[c] for c in order], normalizer)
        return {c: weight * x for c, x in zip(order, normed)}
    ranks = tied_ranks([scores[c] for c in order])
    return {c: rrf_term(weight, k, r) for r, c in zip(ranks, order)}


def rerank_arm(scores: dict[int, float], weight: float, k: float) -> dict[int, float]:
    """The cross-encoder as one more RRF arm (extra_arm with rrf)."""
    return extra_arm(scores, weight, "rrf", k)


def contributions(f: Fused, weights: dict[str, float], k: float, method: str = "rrf") -> dict[str, float]:
    """Explain's view of a fused chunk: each arm's term, and their total (the fused score)."""
    if method == "linear":
        out = {arm: weights.get(arm, 1.0) * x for arm, x in f.normalised.items()}
    else:
        out = {arm: rrf_term(weights.get(arm, 1.0), k, rank) for arm, rank in f.ranks.items()}
    out["total"] = f.score
    return out


def arm_levels(pages: np.ndarray, arm_rows: dict[str, tuple[np.ndarray, np.ndarray]],
               weights: dict[str, float]) -> np.ndarray:
    """Each page's relevance on the arms' own scale — what recency's band compares ("about as
    relevant"): per arm, the page's best chunk score over the best score the arm returned (0 where
    the arm did not return the page, or returned nothing above 0), averaged over the arms by weight.
    1 is a page every arm put first; RRF's scale says only where a page ranked, this how close it came.
    `pages`: the pages' keys, ascending (Rolled.pages); `arm_rows[arm]`: each chunk the arm returned,
    as its page's key (-1: none) and its score."""
    level = np.zeros(len(pages), dtype=np.float64)
    used = {a: w for a, w in weights.items() if w > 0 and a in arm_rows}
    total = sum(used.values())
    if not total or not len(pages):
        return level
    for arm, w in used.items():
        rows, scores = arm_rows[arm]
        top = float(scores.max()) if len(scores) else 0.0
        if top <= 0:
            continue
        at = np.searchsorted(pages, rows)
        held = (rows >= 0) & (at < len(pages))
        held[held] = pages[at[held]] == rows[held]
        best = np.full(len(pages), -np.inf)
        np.maximum.at(best, at[held], scores[held])
        level += w * np.where(np.isfinite(best), best / top, 0.0)
    return level / total


def merge_catching_up(covered: list[tuple[int, float]], stand_in: list[tuple[int, float]], fraction: float,
                      top_n: int) -> list[tuple[int, float]]:
    """One dense list while an embedder catches up (engine/core/corpus.py: Coverage): `covered`, its
    hits among the chunks it has embedded, and `stand_in`, the fast embedder's hits among the chunks it
    has not, merged by the rank each would have among all chunks — the r-th of the covered share
    (`fraction` of the chunks) ranks about r / fraction, the r-th of the rest about r / (1 - fraction).
    At fraction 1 it is the covered list, at 0 the stand-in's; ties go to the covered hit. Each hit keeps
    its own model's score (rrf reads only the order; a linear fusion would mix two models' scales)."""
    if fraction <= 0:
        return stand_in[:top_n]
    if fraction >= 1:
        return covered[:top_n]
    keyed = [((r + 1) / fraction, 0, r, hit) for r, hit in enumerate(covered)]
    keyed += [((r + 1) / (1 - fraction), 1, r, hit) for r, hit in enumerate(stand_in)]
    keyed.sort(key=lambda t: t[:3])
    return [t[3] for t in keyed[:top_n]]
