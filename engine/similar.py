"""Similar pages through one of three mediations (seed 001):

- vector  — page vectors (mean of the page's chunk vectors, normalised), cosine, source excluded;
- cluster — co-members of the source's cluster, ranked by cosine to the source;
- entity  — pages sharing canonical entities, ranked by IDF-weighted Jaccard over entity sets,
            with idf(e) = ln(1 + N / df(e)) so an entity on every page still weighs a little.
"""
from __future__ import annotations

import math
import threading
from dataclasses import dataclass

import numpy as np

from .corpus import Corpus
from .errors import InvalidRequest, PageNotFound

MEDIATIONS = ("vector", "cluster", "entity")


@dataclass
class PageVectors:
    key: tuple
    page_ids: list[str]
    matrix: np.ndarray  # float32 [pages, dim], rows normalised
    row: dict[str, int]


_cache: dict[tuple[str, str, str], PageVectors] = {}
_lock = threading.Lock()


def page_vectors(corpus: Corpus, model: str, workspace: str) -> PageVectors:
    """Page vectors of a workspace, rebuilt when the store or the model's vectors change."""
    counts = corpus.store.counts()
    key = (corpus.store.generation(), counts["embeddings"].get(model, 0))
    ck = (str(corpus.data_dir), model, workspace)
    with _lock:
        hit = _cache.get(ck)
        if hit is not None and hit.key == key:
            return hit
    ids, vecs = corpus.store.embeddings_for(model)
    pages = corpus.store.cursor().execute(
        """SELECT c.chunk_id, c.page_id FROM chunks c JOIN pages p USING (page_id)
           WHERE p.workspace_id = ? ORDER BY c.chunk_id""", [workspace]).fetchall()
    page_of = dict(pages)
    page_ids = sorted({pid for _, pid in pages})
    row = {pid: i for i, pid in enumerate(page_ids)}
    dim = vecs.shape[1] if vecs.size else 1
    mat = np.zeros((len(page_ids), dim), dtype=np.float32)
    if len(ids):
        keep = np.array([int(c) in page_of for c in ids], dtype=bool)
        rows = np.array([row[page_of[int(c)]] for c in ids[keep]], dtype=np.int64)
        np.add.at(mat, rows, vecs[keep])
    norms = np.linalg.norm(mat, axis=1, keepdims=True)
    mat = mat / np.where(norms == 0, 1, norms)
    pv = PageVectors(key, page_ids, mat, row)
    with _lock:
        _cache[ck] = pv
    return pv


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
    if mediation == "entity":
        scored = _entity_jaccard(store.page_entity_sets(ws), page_id)
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
