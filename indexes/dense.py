"""One FAISS index per embedder over chunk vectors, keyed by chunk id.

"flat" is exact inner product (IndexIDMap2 over IndexFlatIP), the default. "hnsw" is approximate
(IndexIDMap2 over IndexHNSWFlat, inner product) for large corpora; FAISS cannot delete from an
HNSW graph, so removals there rebuild the index from the vectors in the store.
The file is written to a temporary name and renamed, then the generation marker is written: a
crash between the two leaves an older marker, and replaying from it is idempotent.
"""
from __future__ import annotations

import os
import threading
from pathlib import Path

import faiss
import numpy as np

from .generation import read_marker, write_marker


class DenseIndex:
    def __init__(self, path: Path | str, dim: int, kind: str = "flat", hnsw_m: int = 32,
                 ef_construction: int = 200, ef_search: int = 128):
        self.path = Path(path)
        self.marker_path = self.path.with_suffix(".json")
        self.dim = dim
        self.kind = kind
        self.hnsw_m = hnsw_m
        self.ef_construction = ef_construction
        self.ef_search = ef_search
        self._lock = threading.RLock()
        self.dirty = False
        self._generation_override: int | None = None
        self.index = self._load()

    @property
    def supports_remove(self) -> bool:
        return self.kind == "flat"

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
        if not self.supports_remove:
            raise NotImplementedError("HNSW cannot remove vectors; rebuild instead")
        with self._lock:
            self.index.remove_ids(faiss.IDSelectorBatch(ids))
            self.dirty = True

    def add(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        if not len(ids):
            return
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        if vectors.shape[1] != self.dim:
            raise ValueError(f"vectors have dim {vectors.shape[1]}, index has {self.dim}")
        with self._lock:
            self.index.add_with_ids(vectors, np.asarray(ids, dtype=np.int64))
            self.dirty = True

    def reset(self) -> None:
        with self._lock:
            self.index = self._empty()
            self.dirty = True

    def save(self, generation: int) -> None:
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(".faiss.tmp")
            faiss.write_index(self.index, str(tmp))
            with open(tmp, "rb") as fh:
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
            write_marker(self.marker_path, {"generation": generation, "dim": self.dim, "kind": self.kind,
                                            "count": int(self.index.ntotal)})
            self._generation_override = None
            self.dirty = False

    # Reads --------------------------------------------------------------------------------------
    def count(self) -> int:
        return int(self.index.ntotal)

    def ids(self) -> np.ndarray:
        """All chunk ids in the index (for consistency checks)."""
        with self._lock:
            return faiss.vector_to_array(self.index.id_map).astype(np.int64)

    def search(self, query: np.ndarray, top_n: int, allowed_ids: np.ndarray | None = None) -> list[tuple[int, float]]:
        """[(chunk_id, inner product)] best first; `allowed_ids` restricts the search inside FAISS."""
        if self.index.ntotal == 0 or top_n <= 0:
            return []
        q = np.ascontiguousarray(query.reshape(1, -1), dtype=np.float32)
        params = None
        if allowed_ids is not None:
            if len(allowed_ids) == 0:
                return []
            sel = faiss.IDSelectorBatch(np.asarray(allowed_ids, dtype=np.int64))
            params = (faiss.SearchParametersHNSW(sel=sel, efSearch=self.ef_search) if self.kind == "hnsw"
                      else faiss.SearchParameters(sel=sel))
        with self._lock:
            scores, ids = self.index.search(q, min(top_n, self.index.ntotal), params=params)
        out = [(int(i), float(s)) for i, s in zip(ids[0], scores[0]) if i != -1]
        out.sort(key=lambda t: (-t[1], t[0]))
        return out
