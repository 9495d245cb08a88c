"""Page vectors: the mean of a page's chunk vectors, normalised — what similar pages (refind), clusters
(ingest) and evidence maps compare pages by. Cached per data dir, model and workspace until the store
or the model's vectors change."""
from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

from engine.core.corpus import Corpus


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
    pages = corpus.store.workspace_chunk_pages(workspace)
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
