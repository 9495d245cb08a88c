"""Roll chunk scores up to pages: "max" (default), "sum", or "mean_top2"."""
from __future__ import annotations

from typing import Callable, Iterable

ROLLUPS = ("max", "sum", "mean_top2")


def rollup(scored_chunks: Iterable[tuple[int, float]], page_of: Callable[[int], str | None],
           how: str = "max") -> list[tuple[str, float, list[int]]]:
    """[(page_id, page score, chunk ids best first)] best first; ties break by page id. Chunks given
    best first (by score, then chunk id — as the search passes them) are not sorted again per page."""
    if how not in ROLLUPS:
        raise ValueError(f"unknown rollup {how!r}; use one of {', '.join(ROLLUPS)}")
    per_page: dict[str, list[tuple[float, int]]] = {}
    get = per_page.get
    ordered, prev_score, prev_cid = True, None, None
    for cid, score in scored_chunks:
        if ordered and prev_score is not None and (score > prev_score or (score == prev_score and cid < prev_cid)):
            ordered = False
        prev_score, prev_cid = score, cid
        pid = page_of(cid)
        if pid is not None:
            items = get(pid)
            if items is None:
                per_page[pid] = [(score, cid)]
            else:
                items.append((score, cid))
    out = []
    for pid, items in per_page.items():
        if not ordered:
            items.sort(key=lambda t: (-t[0], t[1]))
        if how == "max":
            value = items[0][0]
        elif how == "sum":
            value = sum(s for s, _ in items)
        else:
            value = sum(s for s, _ in items[:2]) / min(2, len(items))
        out.append((pid, value, [c for _, c in items]))
    out.sort(key=lambda t: (-t[1], t[0]))
    return out
