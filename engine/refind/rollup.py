"""Roll chunk scores up to pages: "max" (default), "sum", or "mean_top2"."""
from __future__ import annotations

from collections import defaultdict
from typing import Callable, Iterable

ROLLUPS = ("max", "sum", "mean_top2")


def rollup(scored_chunks: Iterable[tuple[int, float]], page_of: Callable[[int], str | None],
           how: str = "max") -> list[tuple[str, float, list[int]]]:
    """[(page_id, page score, chunk ids best first)] best first; ties break by page id. Chunks given
    best first (by score, then chunk id — as the search passes them) are not sorted again per page."""
    if how not in ROLLUPS:
        raise ValueError(f"unknown rollup {how!r}; use one of {', '.join(ROLLUPS)}")
    per_page: dict[str, list[tuple[float, int]]] = defaultdict(list)
    ordered, prev = True, None
    for cid, score in scored_chunks:
        if ordered and prev is not None and (score > prev[0] or (score == prev[0] and cid < prev[1])):
            ordered = False
        prev = (score, cid)
        pid = page_of(cid)
        if pid is not None:
            per_page[pid].append(prev)
    out = []
    for pid, items in per_page.items():
        if not ordered:
            items.sort(key=lambda t: (-t[0], t[1]))
        scores = [s for s, _ in items]
        if how == "max":
            value = scores[0]
        elif how == "sum":
            value = sum(scores)
        else:
            value = sum(scores[:2]) / min(2, len(scores))
        out.append((pid, value, [c for _, c in items]))
    out.sort(key=lambda t: (-t[1], t[0]))
    return out
