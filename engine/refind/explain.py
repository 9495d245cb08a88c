"""`explain` for one page of a search: each of its chunks' arm ranks and scores and what each arm
added to the fused score (and the reranker's, when it ranked), the rollup, focus (how much of the page
is about the query), recency's band or decay,
its pin, and the shortcut that put it first."""
from __future__ import annotations

import math

from engine.refind.focus import is_results_page
from engine.refind.fusion import contributions
from engine.refind.recency import age_days, recency_on
from engine.refind.schema import ArmHit, ChunkExplain, PageExplain, Params


def page_explain(cids, cscores, fused_by_id, rerank_scores, p: Params, entry, m, now, pinned,
                 shortcut: str | None = None) -> PageExplain:
    """`cids`/`cscores`: the page's chunks and the scores they entered the rollup with; `fused_by_id`:
    their fusion records; `entry`: the page's place in the ranking; `m`: its hydrated row."""
    chunks = []
    for c, score in zip(cids, cscores):
        f = fused_by_id.get(c)
        contrib = {}
        if f is not None:
            contrib = contributions(f, {"dense": p.dense_weight, "sparse": p.sparse_weight}, p.rrf_k, p.fusion)
            if p.rerank and p.rerank_fusion == "rrf" and c in rerank_scores:
                contrib["rerank"] = score - f.score
                contrib["total"] = score
        chunks.append(ChunkExplain(
            chunk_id=c,
            dense=ArmHit(rank=f.ranks["dense"], score=f.arm_scores["dense"]) if f and "dense" in f.ranks else None,
            sparse=ArmHit(rank=f.ranks["sparse"], score=f.arm_scores["sparse"]) if f and "sparse" in f.ranks else None,
            rrf=contrib, normalised=dict(f.normalised) if f and p.fusion == "linear" else None,
            rerank=rerank_scores.get(c), score=score))
    decay = None
    if recency_on(p.recency_half_life_days, p.recency_mode, p.recency_weight) and p.recency_mode == "band":
        decay = {"half_life_days": p.recency_half_life_days, "age_days": age_days(m["last_seen"], now),
                 "band_width": p.recency_band}
        if entry is not None and entry.band is not None:
            decay |= {"band": float(entry.band), "level": entry.level}
        if p.recency_visits_days > 0 or p.recency_bookmark_days > 0:   # how it was visited, in its band
            visits = max(1, m.get("visit_count") or 1)
            marked = "bookmarked" in (m.get("entities") or [])
            decay |= {"visits": float(visits), "bookmarked": 1.0 if marked else 0.0,
                      "credit_days": math.log2(visits) * p.recency_visits_days + marked * p.recency_bookmark_days}
    elif recency_on(p.recency_half_life_days, p.recency_mode, p.recency_weight):
        decay = {"half_life_days": p.recency_half_life_days, "weight": p.recency_weight,
                 "age_days": age_days(m["last_seen"], now),
                 "factor": entry.factor if entry else 1.0}
    focused = None
    if entry is not None and entry.focus is not None:
        matched, n, factor, before = entry.focus
        focused = {"form": p.focus_form, "strength": p.focus, "slack": p.focus_slack,
                   "results_page": p.focus_results_page if is_results_page(m.get("url") or "") else 1.0,
                   "chunks_matched": float(matched), "chunks": float(n),
                   "factor": factor, "before": before, "after": entry.rollup}
    return PageExplain(chunks=chunks, rollup={"how": p.rollup, "value": entry.rollup if entry else 0.0},
                       focus=focused, decay=decay, pinned=pinned, shortcut=shortcut, score=entry.score if entry else 0.0)
