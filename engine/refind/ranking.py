"""From ranked chunks to ranked pages: rollup, then recency, then the order (ties by page id).

Recency has two modes. "band" (`_banded`): the pages in relevance order, and from the best page left,
every page about as relevant as it (its arm level within `band` of the best's: fusion.arm_levels)
ordered by last_seen, most recent first — then the next band; a page's score is not changed. "decay"
(`_decayed`): each score times its decay factor.

Over arrays: the chunks (ids and scores best first, and each one's page as its row in the search's
in-memory view), the pages as those rows; page ids are read for the pages that get ranked, and a
page's chunks only for the pages a search returns (`RankedPages.page`). With recency on, only the
pages that can still reach the slice are decayed and sorted (`_decayed`). At ~200 candidate chunks
and ~180 pages (bench-data, 10k chunks) chunk -> page, rollup and recency take ~40 µs timed warm
(~250 µs over Python lists and dicts); the figures are bit for bit the same
(tests/refind/test_search_stages.py holds both ways equal).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

import numpy as np

from indexes.hot import HotView
from indexes.sparse import index_terms

from engine.refind.candidates import Candidates
from engine.refind.fusion import arm_levels
from engine.refind.recency import factors_us
from engine.refind.rollup import Rolled
from engine.refind.schema import Params


_EPOCH, _MICROSECOND = datetime(1970, 1, 1), timedelta(microseconds=1)


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
    band: int | None = None          # recency band (from 1) and the page's arm level, in band mode
    level: float | None = None
    focus: tuple[int, int, float, float] | None = None   # focus: chunks matched, chunks, factor, value before


@dataclass
class RankedPages:
    """The rolled-up pages best first — the first `len(page_ids)` of them, every page when the
    ranking was not cut (`rank_pages`' `top`) — of `total`; `page(pid)` is one of those in full."""
    page_ids: list[str]
    total: int
    rolled: Rolled
    chunk_ids: np.ndarray          # the chunks the rollup was given, best first
    chunk_scores: np.ndarray
    _at: dict[str, tuple[int, float, float]] = field(repr=False, default_factory=dict)
    # page id -> (its index in `rolled`, its final score, its recency factor), for the pages ranked
    _bands: dict[str, tuple[int, float]] = field(repr=False, default_factory=dict)
    # page id -> (its recency band, its arm level), in band mode

    def page(self, page_id: str) -> ScoredPage | None:
        at = self._at.get(page_id)
        if at is None:
            return None
        i, score, factor = at
        chunks = self.rolled.chunk_positions(i)
        band, level = self._bands.get(page_id, (None, None))
        r = self.rolled
        focused = None if r.focus is None else (int(r.counts[i]), int(r.chunks[i]), float(r.focus[i]), float(r.before[i]))
        return ScoredPage(page_id, score, float(r.values[i]), factor,
                          self.chunk_ids[chunks].tolist(), self.chunk_scores[chunks].tolist(), band, level, focused)


def rank_pages(rolled: Rolled, chunk_ids: np.ndarray, chunk_scores: np.ndarray, view: HotView,
               now: datetime, half_life_days: float, weight: float, top: int | None = None,
               levels: np.ndarray | None = None, band: float = 0.0,
               titles: tuple[list[int], int, float] | None = None,
               credit_us: np.ndarray | None = None) -> RankedPages:
    """Each rolled-up page times its recency factor (decay_factor on its last_seen; none at a
    half-life or weight of 0), best first, ties by page id. With `top`, only the first `top` pages
    are put in order (a search shows offset + k of them): the pages scoring at least the top-th
    score, ties with it included, are sorted, the rest only counted. With `levels` (each page's arm
    level, fusion.arm_levels) and a half-life, recency orders bands instead (`_banded`; `titles`:
    title_cover's masks, the query's term count and the title band, for title siblings; `credit_us`:
    each page's visit credit, visit_credit_us, added to its last_seen within a band)."""
    values = rolled.values
    n = len(values)
    cut = top is not None and top < n
    if half_life_days > 0 and levels is not None:
        return _banded(rolled, chunk_ids, chunk_scores, view, levels, band, top if cut else None, titles, credit_us)
    if half_life_days > 0 and weight > 0:
        return _decayed(rolled, chunk_ids, chunk_scores, view, now, half_life_days, weight, top if cut else None)
    if cut:
        neg = -values
        picked = np.flatnonzero(neg <= np.partition(neg, top - 1)[top - 1]) if top > 0 else np.zeros(0, np.int64)
        order = picked[np.argsort(neg[picked], kind="stable")]
    else:
        order = np.argsort(-values, kind="stable")
    names = view.page_ids_of(rolled.pages[order])
    ordered = values[order]
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
    rows, scores = order.tolist(), ordered.tolist()
    return RankedPages([names[i] for i in ranked], n, rolled, chunk_ids, chunk_scores,
                       {names[i]: (rows[i], scores[i], 1.0) for i in ranked})


def _decayed(rolled: Rolled, chunk_ids: np.ndarray, chunk_scores: np.ndarray, view: HotView, now: datetime,
             half_life_days: float, weight: float, top: int | None) -> RankedPages:
    """rank_pages with recency on. A factor lies in [1 - weight, 1] (as computed, rounding included),
    so a page's final score lies between its value and its value x (1 - weight): with a cut, only the
    pages whose best case reaches the top-th best worst case can be among the first `top`, and only
    those are decayed and sorted — ~10–20 of ~180 at k = 10 and the default weight of 0.05 — in plain
    Python (NumPy's per-call cost is most of the time at that size)."""
    values = rolled.values
    n = len(values)
    if top is None:
        sub = np.arange(n)
    elif top == 0:
        sub = np.zeros(0, np.int64)
    else:
        kth = float(np.partition(values, n - top)[n - top])        # the top-th best value ...
        bound = kth * (1.0 - weight) if kth >= 0 else kth          # ... and its worst case (monotone in it)
        # best case: a value >= 0 keeps it, a negative one rises to value x (1 - weight) (<= 0)
        best = values if bound > 0 else np.where(values >= 0, values, values * (1.0 - weight))
        sub = np.flatnonzero(best >= bound)
    rows = sub.tolist()
    names = view.page_ids_of(rolled.pages[sub])
    now_us = (now - _EPOCH) // _MICROSECOND
    factors = factors_us(now_us, view.last_seen_us(rolled.pages[sub]).tolist(), half_life_days, weight)
    scores = [v * f for v, f in zip(values[sub].tolist(), factors)]
    ranked = sorted(range(len(rows)), key=lambda j: (-scores[j], names[j]))
    if top is not None:
        ranked = ranked[:top]
    return RankedPages([names[j] for j in ranked], n, rolled, chunk_ids, chunk_scores,
                       {names[j]: (rows[j], scores[j], factors[j]) for j in ranked})


def _banded(rolled: Rolled, chunk_ids: np.ndarray, chunk_scores: np.ndarray, view: HotView, levels: np.ndarray,
            band: float, top: int | None, titles: tuple[list[int], int, float] | None = None,
            credit_us: np.ndarray | None = None) -> RankedPages:
    """rank_pages with recency as the order among equals. In relevance order (value, then page id),
    the best page left and every page left whose level is at least its level - `band` form a band,
    ordered by last_seen (most recent first; then relevance); then the next band from the best page
    left. Each band depends only on the bands before it, so the first `top` pages are a prefix of the
    whole order (paging stays a slice of one ranking). A page's score stays its rollup value.
    `titles` = (each page's title cover of the query's terms as a bit mask, the query's term count,
    the title band): when the best page left's title carries at least half the query's terms, the pages
    left whose titles carry all of those, with a level at least its level - the title band, join its band
    (title siblings: "postgres alter" and every ALTER page). `credit_us`: added to each page's last_seen
    for its order within a band (how it was visited: visit_credit_us)."""
    values = rolled.values
    n = len(values)
    names = view.page_ids_of(rolled.pages)
    relevance = sorted(range(n), key=lambda i: (-values[i], names[i]))
    place = np.empty(n, dtype=np.int64)
    place[relevance] = np.arange(n)
    seen = view.last_seen_us(rolled.pages)
    if credit_us is not None:
        seen = seen + credit_us
    left = np.ones(n, dtype=bool)
    order: list[int] = []
    bands: dict[str, tuple[int, float]] = {}
    limit = n if top is None else top
    at, b = 0, 0
    while len(order) < limit:
        while not left[relevance[at]]:
            at += 1
        anchor = relevance[at]
        near = levels >= levels[anchor] - band
        if titles is not None:
            covers, n_terms, title_band = titles
            mask = covers[anchor]
            if mask and 2 * mask.bit_count() >= n_terms:
                same = np.fromiter(((c & mask) == mask for c in covers), dtype=bool, count=n)
                near |= same & (levels >= levels[anchor] - title_band)
        members = np.flatnonzero(left & near)
        members = members[np.lexsort((place[members], -seen[members]))]
        left[members] = False
        b += 1
        for i in members.tolist():
            bands[names[i]] = (b, float(levels[i]))
        order += members.tolist()
    order = order[:limit]
    scores = values.tolist()
    return RankedPages([names[i] for i in order], n, rolled, chunk_ids, chunk_scores,
                       {names[i]: (i, scores[i], 1.0) for i in order},
                       {names[i]: bands[names[i]] for i in order})


def page_levels(p: Params, cands: Candidates, rolled: Rolled) -> np.ndarray:
    """Each rolled-up page's arm level (fusion.arm_levels), from both arms' chunk lists: the scale
    recency's band is measured on (with rerank on too: the reranker orders, the arms say how close)."""
    arm_rows = {}
    for arm, hits in (("dense", cands.dense), ("sparse", cands.sparse)):
        ids = np.fromiter((c for c, _ in hits), dtype=np.int64, count=len(hits))
        arm_rows[arm] = (cands.view.chunk_rows(ids), np.fromiter((x for _, x in hits), dtype=np.float64,
                                                                 count=len(hits)))
    return arm_levels(rolled.pages, arm_rows, {"dense": p.dense_weight, "sparse": p.sparse_weight})


def title_cover(query: str, view: HotView, pages: np.ndarray) -> tuple[list[int], int]:
    """Each page's title as a bit mask of the query's terms it carries (the BM25 arm's terms: stemmed, no
    stop words), and the query's term count: what the title band compares. A title's terms are stemmed
    once per view."""
    terms = list(dict.fromkeys(index_terms(query)))
    bit = {t: 1 << i for i, t in enumerate(terms)}
    memo = view._memo.setdefault("title_terms", {})
    titles = view.cols["title"]
    covers = []
    for row in pages.tolist():
        got = memo.get(row)
        if got is None:
            got = memo[row] = frozenset(index_terms(titles[row] or ""))
        covers.append(sum(b for t, b in bit.items() if t in got))
    return covers, len(terms)


_DAY_US = 86_400 * 10**6


def visit_credit_us(view: HotView, pages: np.ndarray, visits_days: float, bookmark_days: float) -> np.ndarray | None:
    """Each page row's credit within a band, in microseconds: `visits_days` per doubling of its visit
    count (none for one visit), and `bookmark_days` when it is linked to the entity whose local id is
    `bookmarked` (refindery import bookmarks). None when both are 0."""
    if visits_days <= 0 and bookmark_days <= 0:
        return None
    rows = pages.tolist()
    counts = np.fromiter((max(1, view.cols["visit_count"][r] or 1) for r in rows), dtype=np.float64, count=len(rows))
    credit = np.log2(counts) * visits_days
    if bookmark_days > 0:
        marked = np.fromiter((any(e.endswith(":bookmarked") for e in view.page_entities[r]) for r in rows),
                             dtype=bool, count=len(rows))
        credit = credit + marked * bookmark_days
    return np.rint(credit * _DAY_US).astype(np.int64)
