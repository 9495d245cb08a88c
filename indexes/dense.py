"""One FAISS index per embedder over chunk vectors, keyed by chunk id.

"flat" is exact inner product (IndexIDMap2 over IndexFlatIP). "hnsw" is approximate (IndexIDMap2
over IndexHNSWFlat, inner product) for large corpora; the engine's "auto" picks one by corpus size
(engine/corpus.py; the switch size is measured in bench/results/dense.md).
FAISS cannot delete from an HNSW graph, so a removal there is a tombstone: the id is excluded from
every search by an IDSelectorNot and from ids()/count(); `needs_compaction` says when dead entries
pass a fifth of the graph, and the caller rebuilds it from the store. Filtered HNSW searches over a
small allowed set are answered exactly from the stored vectors (a graph walk with a selective filter
misses results); larger ones widen efSearch by the filter's selectivity.
The file is written to a temporary name and renamed, then the tombstones, then the generation
marker: a crash between them leaves an older marker, and replaying from it is idempotent (sync
compares the index's live ids with the store's).
"""
from __future__ import annotations

import os
import threading
from pathlib import Path

import faiss
import numpy as np

from .generation import read_marker, write_marker


def set_search_threads(n: int) -> None:
    """The OpenMP threads FAISS uses for searches started from the calling thread (OpenMP keeps the
    setting per thread: other threads — ingest's index builds — keep the default); 0 leaves it."""
    if n > 0:
        faiss.omp_set_num_threads(n)


_caller = threading.local()   # per calling thread: FAISS's OpenMP threads there before a search set them


def with_search_threads(threads: int, fn, *args):
    """`fn(*args)` on the calling thread with FAISS's OpenMP threads set to `threads` for the call and
    restored after (0: as they are). The thread's own setting is asked once (~0.1 ms a call) and then
    remembered: only set_search_threads changes it."""
    if threads <= 0:
        return fn(*args)
    before = getattr(_caller, "faiss_threads", None)
    if before is None:
        before = _caller.faiss_threads = faiss.omp_get_max_threads()
    if before == threads:   # (each call releases the GIL, and may wait to take it back)
        return fn(*args)
    set_search_threads(threads)
    try:
        return fn(*args)
    finally:
        set_search_threads(before)


def kmeans_labels(matrix: np.ndarray, k: int, seed: int, niter: int = 25) -> np.ndarray:
    """Spherical k-means (FAISS) over the rows of `matrix`: each row's cluster, 0..k-1."""
    x = np.ascontiguousarray(matrix, dtype=np.float32)
    km = faiss.Kmeans(x.shape[1], k, niter=niter, seed=seed, spherical=True, verbose=False,
                      min_points_per_centroid=1)
    km.train(x)
    _, labels = km.index.search(x, 1)
    return labels[:, 0]


class DenseIndex:
    # Dead entries over this share of the graph ask for a rebuild; filters allowing at most
    # `exact_below` ids are searched exactly.
    COMPACT_AT = 0.2
    EXACT_BELOW = 20_000

    def __init__(self, path: Path | str, dim: int, kind: str = "flat", hnsw_m: int = 32,
                 ef_construction: int = 200, ef_search: int = 128, load: bool = True):
        self.path = Path(path)
        self.marker_path = self.path.with_suffix(".json")
        self.deleted_path = self.path.with_suffix(".deleted.npy")
        self.deleted: set[int] = set()
        self._dead_cache = None  # (sorted tombstone array, IDSelectorNot over it), rebuilt after a change
        self.dim = dim
        self.kind = kind
        self.hnsw_m = hnsw_m
        self.ef_construction = ef_construction
        self.ef_search = ef_search
        self._lock = threading.RLock()
        self.dirty = False
        self._generation_override: int | None = None
        if load:
            self.index = self._load()
        else:  # a replacement being built beside the live index (see Corpus.maintain_dense)
            self._generation_override = -1
            self.index = self._empty()
            self.dirty = True

    @staticmethod
    def kind_on_disk(path: Path | str) -> str | None:
        m = read_marker(Path(path).with_suffix(".json")) or {}
        return m.get("kind")

    @property
    def needs_compaction(self) -> bool:
        total = int(self.index.ntotal)
        return self.kind == "hnsw" and total > 0 and (total - self.count()) > self.COMPACT_AT * total

    def _empty(self) -> faiss.Index:
        if self.kind == "flat":
            inner = faiss.IndexFlatIP(self.dim)
        elif self.kind == "hnsw":
            inner = faiss.IndexHNSWFlat(self.dim, self.hnsw_m, faiss.METRIC_INNER_PRODUCT)
            inner.hnsw.efConstruction = self.ef_construction
            inner.hnsw.efSearch = self.ef_search
        else:
            raise ValueError(f"unknown dense index kind {self.kind!r} (flat or hnsw)")
        return faiss.IndexIDMap2(inner)

    def _load(self) -> faiss.Index:
        marker = read_marker(self.marker_path) or {}
        if self.path.exists() and marker.get("dim") == self.dim and marker.get("kind") == self.kind:
            try:
                idx = faiss.read_index(str(self.path))
                if idx.d == self.dim:
                    if self.kind == "hnsw":
                        faiss.downcast_index(idx.index).hnsw.efSearch = self.ef_search
                        if self.deleted_path.exists():
                            self.deleted = set(np.load(self.deleted_path).tolist())
                    return idx
            except RuntimeError:
                pass
        # Missing, unreadable, or built with other settings: start empty at generation -1 so the
        # caller rebuilds it from the store.
        self._generation_override = -1
        return self._empty()

    @property
    def generation(self) -> int:
        if self._generation_override is not None:
            return self._generation_override
        m = read_marker(self.marker_path)
        return int(m["generation"]) if m and "generation" in m else -1

    # Writes -------------------------------------------------------------------------------------
    def remove(self, ids: np.ndarray | list[int]) -> None:
        ids = np.asarray(list(ids), dtype=np.int64)
        if not len(ids):
            return
        with self._lock:
            if self.kind == "hnsw":
                self.deleted.update(ids.tolist())
                self._dead_cache = None
            else:
                self.index.remove_ids(faiss.IDSelectorBatch(ids))
            self.dirty = True

    def add(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        if not len(ids):
            return
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        if vectors.shape[1] != self.dim:
            raise ValueError(f"vectors have dim {vectors.shape[1]}, index has {self.dim}")
        with self._lock:
            ids = np.asarray(ids, dtype=np.int64)
            if self.deleted:
                # A tombstoned id added again lives again; its old entry (same id) is dropped from
                # results by id, so only one of the two is ever returned.
                self.deleted.difference_update(ids.tolist())
                self._dead_cache = None
            self.index.add_with_ids(vectors, ids)
            self.dirty = True

    def reset(self) -> None:
        with self._lock:
            self.index = self._empty()
            self.deleted = set()
            self._dead_cache = None
            self.dirty = True

    def save(self, generation: int) -> None:
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(".faiss.tmp")
            faiss.write_index(self.index, str(tmp))
            with open(tmp, "rb") as fh:
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
            if self.kind == "hnsw":
                tmp_del = self.deleted_path.with_suffix(".tmp.npy")
                np.save(tmp_del, np.asarray(sorted(self.deleted), dtype=np.int64))
                os.replace(tmp_del, self.deleted_path)
            write_marker(self.marker_path, {"generation": generation, "dim": self.dim, "kind": self.kind,
                                            "count": int(self.index.ntotal)})
            self._generation_override = None
            self.dirty = False

    # Reads --------------------------------------------------------------------------------------
    def count(self) -> int:
        """Live vectors (tombstones and superseded duplicates not counted)."""
        if self.kind == "flat":
            return int(self.index.ntotal)
        return len(self.ids())

    def ids(self) -> np.ndarray:
        """All live chunk ids in the index (for consistency checks)."""
        with self._lock:
            ids = faiss.vector_to_array(self.index.id_map).astype(np.int64)
            if self.kind == "flat":
                return ids
            ids = np.unique(ids)
            if self.deleted:
                ids = np.setdiff1d(ids, self._dead()[0], assume_unique=True)
            return ids

    def refresh_pages(self, page_ids: list[str]) -> None:
        """Nothing to do: FAISS holds no filter fields (the filters reach it as `allowed_ids`)."""

    def total(self) -> int:
        """Entries in the index, dead ones included."""
        return int(self.index.ntotal)

    def search(self, query: np.ndarray, top_n: int, allowed_ids: np.ndarray | None = None,
               flt=None) -> list[tuple[int, float]]:
        """[(chunk_id, inner product)] best first; `allowed_ids` restricts the search inside FAISS
        (`flt`, the filters as the sparse arm reads them, is for backends that hold filter fields)."""
        if self.index.ntotal == 0 or top_n <= 0:
            return []
        q = np.ascontiguousarray(query.reshape(1, -1), dtype=np.float32)
        if self.kind == "hnsw":
            return self._search_hnsw(q, top_n, allowed_ids)
        params = None
        if allowed_ids is not None:
            if len(allowed_ids) == 0:
                return []
            params = faiss.SearchParameters(sel=faiss.IDSelectorBatch(np.asarray(allowed_ids, dtype=np.int64)))
        with self._lock:
            scores, ids = self.index.search(q, min(top_n, self.index.ntotal), params=params)
        return _ranked(ids[0], scores[0])

    def _dead(self):
        """The tombstones as a sorted array and as a FAISS selector excluding them, built once per
        change rather than on every query (a fifth of a large graph can be tombstones)."""
        if self._dead_cache is None:
            arr = np.asarray(sorted(self.deleted), dtype=np.int64)
            inner = faiss.IDSelectorBatch(arr)
            sel = faiss.IDSelectorNot(inner)
            sel.inner_ref = inner  # the Not selector does not own its inner one
            self._dead_cache = (arr, sel)
        return self._dead_cache

    def _search_hnsw(self, q: np.ndarray, top_n: int, allowed_ids) -> list[tuple[int, float]]:
        with self._lock:
            total = int(self.index.ntotal)
            ef = max(self.ef_search, top_n)
            if allowed_ids is not None:
                allowed = np.unique(np.asarray(allowed_ids, dtype=np.int64))
                if self.deleted:
                    allowed = np.setdiff1d(allowed, self._dead()[0], assume_unique=True)
                if len(allowed) == 0:
                    return []
                if len(allowed) <= self.EXACT_BELOW:
                    present = allowed
                    try:
                        vecs = self.index.reconstruct_batch(present)
                    except RuntimeError:  # an allowed id the index lacks (not synced yet)
                        present = allowed[np.isin(allowed, faiss.vector_to_array(self.index.id_map))]
                        if not len(present):
                            return []
                        vecs = self.index.reconstruct_batch(present)
                    scores = vecs @ q[0]
                    best = np.argsort(-scores, kind="stable")[:top_n]
                    return _ranked(present[best], scores[best])
                sel = faiss.IDSelectorBatch(allowed)
                ef = min(max(ef, int(ef * total / len(allowed))), 4 * max(self.ef_search, top_n))
            elif self.deleted:
                sel = self._dead()[1]
            else:
                sel = None
            params = faiss.SearchParametersHNSW(sel=sel, efSearch=ef) if sel is not None else \
                faiss.SearchParametersHNSW(efSearch=ef)
            # A few extra in case an id was added twice (see add): duplicates are dropped below.
            scores, ids = self.index.search(q, min(top_n + 8, total), params=params)
        return _ranked(ids[0], scores[0])[:top_n]


def _ranked(ids, scores) -> list[tuple[int, float]]:
    """[(id, score)] best first, ties by id, -1 (no result) and repeated ids dropped."""
    best: dict[int, float] = {}
    for i, s in zip(ids, scores):
        i = int(i)
        if i != -1 and i not in best:
            best[i] = float(s)
    return sorted(best.items(), key=lambda t: (-t[1], t[0]))
