"""From ranked chunks to ranked pages: rollup, then recency, then the order (ties by page id).

Over arrays: the chunks (ids and scores best first, and each one's page as its row in the search's
in-memory view), the pages as those rows; page ids are read for the pages that get ranked, and a
page's chunks only for the pages a search returns (`RankedPages.page`). At ~200 candidate chunks
and ~180 pages (bench-data, 10k chunks) chunk -> page, rollup and recency take ~110 µs timed warm
against ~250 µs over Python lists and dicts (~0.1–0.2 ms less of a search's p50); the figures are
bit for bit the same (tests/test_search_stages.py holds both ways equal).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

import numpy as np

from indexes.hot import HotView

from engine.refind.recency import ages_days, decay_factors
from engine.refind.rollup import Rolled


@dataclass(slots=True)
class ScoredPage:
    """A page after rollup and recency: its final score, the rollup value it came from, the decay
    factor, and its chunks best first with their scores."""
    page_id: str
    score: float
    rollup: float
    factor: float
    chunk_ids: list[int]
    chunk_scores: list[float]


@dataclass
class RankedPages:
    """The rolled-up pages best first — the first `len(page_ids)` of them, every page when the
    ranking was not cut (`rank_pages`' `top`) — of `total`; `page(pid)` is one of those in full."""
    page_ids: list[str]
    total: int
    rolled: Rolled
    chunk_ids: np.ndarray          # the chunks the rollup was given, best first
    chunk_scores: np.ndarray
    scores: np.ndarray             # per rolled page (in `rolled`'s order): the final score
    factors: np.ndarray            # ... and the recency factor
    _at: dict[str, int] = field(repr=False, default_factory=dict)   # page id -> its index in `rolled`

    def page(self, page_id: str) -> ScoredPage | None:
        i = self._at.get(page_id)
        if i is None:
            return None
        at = self.rolled.chunk_positions(i)
        return ScoredPage(page_id, float(self.scores[i]), float(self.rolled.values[i]), float(self.factors[i]),
                          self.chunk_ids[at].tolist(), self.chunk_scores[at].tolist())


def rank_pages(rolled: Rolled, chunk_ids: np.ndarray, chunk_scores: np.ndarray, view: HotView,
               now: datetime, half_life_days: float, weight: float, top: int | None = None) -> RankedPages:
    """Each rolled-up page times its recency factor (decay_factor on its last_seen; none at a
    half-life or weight of 0), best first, ties by page id. With `top`, only the first `top` pages
    are put in order (a search shows offset + k of them): the pages scoring at least the top-th
    score, ties with it included, are sorted, the rest only counted."""
    if half_life_days > 0 and weight > 0:
        now_us = int(np.datetime64(now, "us").astype(np.int64))
        factors = decay_factors(ages_days(now_us, view.last_seen_us(rolled.pages)), half_life_days, weight)
        scores = rolled.values * factors
    else:
        factors, scores = np.ones(len(rolled.values)), rolled.values
    n = len(scores)
    if top is not None and top < n:
        neg = -scores
        picked = np.flatnonzero(neg <= np.partition(neg, top - 1)[top - 1]) if top > 0 else np.zeros(0, np.int64)
        order = picked[np.argsort(neg[picked], kind="stable")]
    else:
        order = np.argsort(-scores, kind="stable")
    names = view.page_ids_of(rolled.pages[order])
    ordered = scores[order]
    ranked = list(range(len(order)))
    ties = np.flatnonzero(ordered[1:] == ordered[:-1]).tolist()
    run_start = None
    for j, t in enumerate(ties):   # each run of equal scores, by page id
        if run_start is None:
            run_start = t
        if j + 1 == len(ties) or ties[j + 1] != t + 1:
            ranked[run_start: t + 2] = sorted(ranked[run_start: t + 2], key=names.__getitem__)
            run_start = None
    if top is not None:
        ranked = ranked[:top]
    rows = order.tolist()
    return RankedPages([names[i] for i in ranked], n, rolled, chunk_ids, chunk_scores, scores, factors,
                       {names[i]: rows[i] for i in ranked})
