"""Similar pages through one of three mediations (seed 001):

- vector  — page vectors (mean of the page's chunk vectors, normalised), cosine, source excluded;
- cluster — co-members of the source's cluster, ranked by cosine to the source;
- entity  — pages sharing canonical entities, ranked by IDF-weighted Jaccard over entity sets,
            with idf(e) = ln(1 + N / df(e)) so an entity on every page still weighs a little.
"""
from __future__ import annotations

import math


from engine.core.corpus import Corpus
from engine.core.page_vectors import page_vectors
from engine.core.errors import InvalidRequest, PageNotFound

MEDIATIONS = ("vector", "cluster", "entity")


def similar_pages(corpus: Corpus, page_id: str, mediation: str = "vector", k: int = 10,
                  model: str | None = None, scopes: tuple[str, ...] | None = None) -> list[dict]:
    """`scopes`: only pages of these document scopes are candidates (a key's grant); the source
    itself must be one of them."""
    if mediation not in MEDIATIONS:
        raise InvalidRequest(f"unknown mediation {mediation!r}; use one of {', '.join(MEDIATIONS)}")
    store = corpus.store
    src = store.pages_by_id([page_id]).get(page_id)
    if src is None or (scopes is not None and src["scope"] not in scopes):
        raise PageNotFound(f"no page with id {page_id!r}", ref=page_id)
    ws = src["workspace_id"]
    visible = None if scopes is None else set(store.filtered_pages(ws, scopes=list(scopes)))
    model = model or corpus.settings.models.active
    if mediation == "entity":   # the weights too are counted over the pages the caller may read
        sets = store.page_entity_sets(ws)
        scored = _entity_jaccard(sets if visible is None else {p: e for p, e in sets.items() if p in visible
                                                                or p == page_id}, page_id)
    else:
        pv = page_vectors(corpus, model, ws)
        if page_id not in pv.row:
            return []
        sims = pv.matrix @ pv.matrix[pv.row[page_id]]
        if mediation == "vector":
            cand = [p for p in pv.page_ids if p != page_id]
        else:
            if src["cluster_id"] is None:
                return []
            cand = [p for p in store.filtered_pages(ws, cluster_ids=[src["cluster_id"]]) if p != page_id]
        scored = [(p, float(sims[pv.row[p]])) for p in cand if p in pv.row]
    if visible is not None:  # the candidates are restricted before ranking, not the ranking cut after
        scored = [(p, s) for p, s in scored if p in visible]
    scored.sort(key=lambda t: (-t[1], t[0]))
    top = scored[:k]
    meta = store.pages_by_id([p for p, _ in top])
    return [{"page_id": p, "url": meta[p]["url"], "title": meta[p]["title"], "score": s} for p, s in top]


def _entity_jaccard(sets: dict[str, set[str]], source: str) -> list[tuple[str, float]]:
    mine = sets.get(source, set())
    if not mine:
        return []
    n = len(sets)
    df: dict[str, int] = {}
    for ents in sets.values():
        for e in ents:
            df[e] = df.get(e, 0) + 1
    idf = {e: math.log(1 + n / d) for e, d in df.items()}
    out = []
    for pid, ents in sets.items():
        if pid == source or not (ents & mine):
            continue
        inter = sum(idf[e] for e in ents & mine)
        union = sum(idf[e] for e in ents | mine)
        out.append((pid, inter / union))
    return out
