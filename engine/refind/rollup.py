"""Roll chunk scores up to pages: "max" (default), "sum", or "mean_top2".

The search rolls up over arrays: each chunk's page as an integer (its row in the search's
in-memory view) and the chunks best first.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

ROLLUPS = ("max", "sum", "mean_top2")


@dataclass(frozen=True)
class Rolled:
    """Chunks rolled up to pages. `pages[i]` (a page's integer key) scores `values[i]`; its chunks,
    best first, are `chunk_positions(i)` — positions in the chunk arrays the rollup was given."""
    pages: np.ndarray        # the pages' keys, ascending
    values: np.ndarray       # float64
    order: np.ndarray        # chunk positions grouped by page (pages ascending), best first in each
    starts: np.ndarray       # where each page's group starts in `order`
    counts: np.ndarray
    # set by the focus stage (engine/refind/focus.py): each page's factor, its value before, its chunks
    focus: np.ndarray | None = None
    before: np.ndarray | None = None
    chunks: np.ndarray | None = None

    def chunk_positions(self, i: int) -> np.ndarray:
        s = int(self.starts[i])
        return self.order[s: s + int(self.counts[i])]


def rollup_rows(rows: np.ndarray, scores: np.ndarray, how: str = "max") -> Rolled:
    """Chunks given best first (by score, then chunk id): `rows[i]` the page of the i-th (-1: no
    page, the chunk is left out), `scores[i]` its score. The values are bit for bit those of a
    rollup over Python lists (the reference in tests/refind/test_search_stages.py): max is a page's first
    chunk's score, sum adds its chunks' best first (np.bincount adds in order, as Python's sum
    does), mean_top2 is (first + second) / 2, or the first alone."""
    if how not in ROLLUPS:
        raise ValueError(f"unknown rollup {how!r}; use one of {', '.join(ROLLUPS)}")
    kept = np.flatnonzero(rows >= 0)
    r = rows[kept]
    by_page = np.argsort(r, kind="stable")      # grouped by page; best first within each (stable)
    grouped = r[by_page]
    head = np.empty(len(grouped), dtype=bool)   # where each page's group starts
    head[:1] = True
    np.not_equal(grouped[1:], grouped[:-1], out=head[1:])
    starts = np.flatnonzero(head)
    counts = np.diff(starts, append=len(grouped))
    pages = grouped[starts]
    order = kept[by_page]
    top = scores[order[starts]]
    # (one sort and a dozen small calls: np.unique with its index, inverse and counts took ~2x as long)
    if how == "max":
        values = top
    elif how == "sum":
        values = np.bincount(np.cumsum(head) - 1, weights=scores[order], minlength=len(pages))
    else:
        second = scores[order[np.minimum(starts + 1, len(order) - 1)]] if len(order) else top
        values = np.where(counts >= 2, (top + second) / 2, top)
    return Rolled(pages, np.asarray(values, dtype=np.float64), order, starts, counts)
