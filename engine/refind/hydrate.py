"""Hydrate: the returned pages only, read in full — their rows, their top chunks as snippets with the
query's words highlighted, and explain when asked."""
from __future__ import annotations

from datetime import datetime

from engine.refind.candidates import Candidates
from engine.refind.explain import page_explain
from engine.refind.fusion import Fused
from engine.refind.highlight import highlight_all, query_terms
from engine.refind.ranking import RankedPages
from engine.refind.schema import _PAGE_HITS, PageHit, Params
from engine.refind.shortcuts import Shortcut


def hydrate(store, snippets_n: int, query: str, window: list[str], ranked: RankedPages, pinned: dict[str, str],
            cands: Candidates, rerank_scores: dict[int, float], p: Params, now: datetime,
            shortcut: Shortcut | None = None) -> list[PageHit]:
    """The returned pages only, read in full: their rows, their top `snippets_n` chunks as snippets (with
    the highlighted query words; read from `store` where the view does not hold their texts), and explain
    when asked; `shortcut`: the choice that put a page first."""
    meta = cands.view.page_rows(window)
    by_id = {pid: sp for pid in window if (sp := ranked.page(pid)) is not None}
    # a page pinned without a matched passage (a bare domain, a URL) shows how it begins
    unranked = [pid for pid in window if pid not in by_id]
    lead = store.lead_chunks(unranked) if unranked and snippets_n else {}
    shown = [c for pid in window if pid in by_id for c in by_id[pid].chunk_ids[:snippets_n]] + list(lead.values())
    chunk_meta, offsets = cands.view.snippets(shown)   # texts in memory or on file when the view holds them
    if chunk_meta is None:
        chunk_meta = store.snippet_chunks(shown)
    fused_by_id: dict[int, Fused] = {f.chunk_id: f for f in cands.fused} if p.explain else {}
    terms = query_terms(query) if p.highlight else frozenset()
    marked = [c for c in shown if c in chunk_meta]
    marks = dict(zip(marked, highlight_all([chunk_meta[c][0] for c in marked], terms)))
    hits = []
    for i, pid in enumerate(window):
        m = meta[pid]
        sp = by_id.get(pid)
        cids, cscores = (sp.chunk_ids, sp.chunk_scores) if sp else (([lead[pid]], [0.0]) if pid in lead else ([], []))
        snippets = [{"chunk_id": c, "text": chunk_meta[c][0], "section_path": list(chunk_meta[c][1] or []),
                     "char_start": offsets[c][0], "char_end": offsets[c][1], "score": score,
                     "highlights": marks[c]}
                    for c, score in zip(cids[:snippets_n], cscores) if c in chunk_meta and c in offsets]
        chose = shortcut if shortcut is not None and shortcut.choice.page_id == pid else None
        explain = page_explain(cids, cscores, fused_by_id, rerank_scores, p, sp, m, now,
                                pinned.get(pid), chose.reason() if chose else None) if p.explain else None
        hits.append({
            "rank": p.offset + i + 1, "page_id": pid, "url": m["url"], "title": m["title"], "domain": m["domain"],
            "score": sp.score if sp else 0.0, "first_seen": m["first_seen"], "last_seen": m["last_seen"],
            "published": m["published"], "cluster_id": m["cluster_id"], "entities": m["entities"],
            "pinned": pinned.get(pid), "snippets": snippets, "explain": explain,
            "shortcut": None if chose is None else {
                "query_id": chose.choice.query_id, "query": chose.choice.query, "chosen_at": chose.choice.chosen_at,
                "kind": chose.choice.kind, "by": chose.by, "closeness": chose.closeness}})
    # validated in one call (~25 % less than a model per hit and per snippet)
    return _PAGE_HITS.validate_python(hits)
