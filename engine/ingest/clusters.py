"""Clusters of pages: k-means (FAISS) over page vectors. Every refit issues new cluster ids and
tombstones the old ones, so a stale cluster id filters to nothing instead of to other pages."""
from __future__ import annotations

import math

from engine.core.identity import named_workspace
from engine.core.corpus import Corpus
from engine.core.errors import InvalidRequest
from engine.core.page_vectors import page_vectors
from indexes.dense import kmeans_labels


def refit_clusters(corpus: Corpus, workspace: str, k: int | None = None,
                   model: str | None = None, seed: int = 1234) -> dict:
    workspace = named_workspace(workspace)
    model = model or corpus.settings.models.active
    with corpus.write_lock:
        pv = page_vectors(corpus, model, workspace)
        n = len(pv.page_ids)
        if n < 2:
            raise InvalidRequest(f"workspace {workspace!r} has {n} page(s); clustering needs at least 2")
        k = k or max(2, round(math.sqrt(n / 2)))
        if not 2 <= k <= n:
            raise InvalidRequest(f"k must be between 2 and the number of pages ({n})")
        labels = kmeans_labels(pv.matrix, k, seed)
        base = corpus.store.next_cluster_id()
        assignment = {pid: base + int(labels[i]) for i, pid in enumerate(pv.page_ids)}
        sizes: dict[int, int] = {}
        for cid in assignment.values():
            sizes[cid] = sizes.get(cid, 0) + 1
        gen = corpus.store.replace_clusters(workspace, model, assignment, sizes)
        corpus.sync_pages(gen)
        return {"workspace": workspace, "model": model, "k": k, "clusters": len(sizes),
                "cluster_ids": sorted(sizes), "sizes": sizes, "generation": gen}
