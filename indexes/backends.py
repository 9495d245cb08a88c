"""The index backends behind one interface: `embedded` (tantivy and FAISS files in the data dir) or
`milvus` (both arms in a Milvus server or cluster). `open_backend` picks one from the settings; above
`indexes/` nothing knows which runs: the corpus asks its backend for the sparse arm, for a model's
dense arm, and to maintain a dense arm after a write, and a search asks only whether the dense arm
takes its filters as a list of chunk ids (embedded: FAISS's id selector) or reads them from the
sparse filter itself (Milvus: an expression over the fields it holds beside the vectors).
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Callable, Iterable, Protocol

import numpy as np

from .dense import DenseIndex
from .milvus import (MilvusDenseIndex, MilvusSparseIndex, MilvusUnavailable, client as milvus_client,
                     collection_name, default_prefix)
from .sparse import SparseFilter, SparseIndex
from .store import CorpusStore, IndexDoc

log = logging.getLogger(__name__)

SPARSE_DIR = "sparse"
DENSE_DIR = "dense"
MILVUS_DIR = "milvus"        # generation markers of the Milvus collections

# An index outside the process did not answer (a search turns it into a 503 index_unavailable).
BackendUnavailable = MilvusUnavailable


class SparseArm(Protocol):
    """The BM25 arm: tantivy in the data dir (indexes/sparse.py) or a Milvus collection."""

    @property
    def generation(self) -> int: ...            # the store generation it has applied

    def mark(self, generation: int) -> None: ...

    def search(self, text: str, top_n: int, flt: SparseFilter | None = None, k3: float = ...
               ) -> list[tuple[int, float]]: ...   # [(chunk_id, bm25)] best first

    def replace_pages(self, page_ids: Iterable[str], docs: Iterable[IndexDoc], generation: int
                      ) -> dict[str, str]: ...   # the pages it could not hold, with why

    def rebuild(self, batches: Iterable[list[IndexDoc]], generation: int) -> dict[str, str]: ...

    def count(self) -> int: ...

    def ids(self): ...

    def doc_freqs(self, words: Iterable[str]) -> dict[str, int]: ...


class DenseArm(Protocol):
    """One embedder's vectors: a FAISS index in the data dir (indexes/dense.py) or a Milvus collection."""
    kind: str                   # flat, hnsw, milvus:<index type>
    dirty: bool                 # changed since its last save
    needs_compaction: bool

    @property
    def generation(self) -> int: ...

    def search(self, query: np.ndarray, top_n: int, allowed_ids: np.ndarray | None = None,
               flt: SparseFilter | None = None) -> list[tuple[int, float]]: ...   # [(chunk_id, ip)] best first

    def add(self, ids: np.ndarray, vectors: np.ndarray) -> None: ...

    def remove(self, ids) -> None: ...

    def refresh_pages(self, page_ids: list[str]) -> None: ...

    def reset(self) -> None: ...

    def save(self, generation: int) -> None: ...

    def count(self) -> int: ...

    def total(self) -> int: ...

    def ids(self) -> np.ndarray: ...


class Backend(Protocol):
    """Where the arms live: `open_backend` picks the one `index.backend` names."""
    dense_takes_id_lists: bool   # True: a filtered dense search is given the allowed chunk ids

    def sparse(self) -> SparseArm: ...

    def dense(self, model: str, dim: int) -> DenseArm: ...

    def maintain(self, model: str, dense: DenseArm) -> DenseArm | None:
        """After a write: a replacement index for `dense` when it should be rebuilt, else None."""


class EmbeddedBackend:
    """tantivy and FAISS in the data dir. A dense arm's kind follows `index.dense_kind`; under "auto"
    it is HNSW from `hnsw_above` vectors up and flat below 80 % of that, keeping the current kind (or
    the one on disk) in between, so a corpus near the line does not flip back and forth."""
    dense_takes_id_lists = True

    def __init__(self, data_dir: Path, index_settings, store: CorpusStore):
        self.data_dir, self.ix, self.store = data_dir, index_settings, store

    def sparse(self) -> SparseIndex:
        return SparseIndex(self.data_dir / SPARSE_DIR, self.ix.sparse_writer_heap)

    def dense(self, model: str, dim: int) -> DenseIndex:
        path = self.data_dir / DENSE_DIR / f"{model}.faiss"
        ix = self.ix
        return DenseIndex(path, dim, self.dense_kind(model, path), ix.hnsw_m, ix.hnsw_ef_construction,
                          ix.hnsw_ef_search)

    def dense_kind(self, model: str, path: Path, n: int | None = None, current: str | None = None) -> str:
        ix = self.ix
        if ix.dense_kind != "auto":
            return ix.dense_kind
        if n is None:
            n = self.store.counts()["embeddings"].get(model, 0)
        if n >= ix.hnsw_above:
            return "hnsw"
        if n < 0.8 * ix.hnsw_above:
            return "flat"
        return current or DenseIndex.kind_on_disk(path) or "flat"

    def maintain(self, model: str, dense: DenseIndex) -> DenseIndex | None:
        """Rebuild the index as the other kind when its size crossed the line (once, logged: about a
        minute per 100k vectors into HNSW on two cores), or an HNSW graph whose tombstones passed the
        limit; both from the store. The replacement is built beside the live index, which searches
        read until it is swapped in."""
        live_vectors = int(dense.index.ntotal) - len(dense.deleted)
        want = self.dense_kind(model, dense.path, live_vectors, dense.kind)
        if want != dense.kind:
            log.warning("dense:%s: %d vectors, switching the index from %s to %s (rebuild)",
                        model, live_vectors, dense.kind, want)
        elif not dense.needs_compaction:
            return None
        ix = self.ix
        fresh = DenseIndex(dense.path, dense.dim, want, ix.hnsw_m, ix.hnsw_ef_construction, ix.hnsw_ef_search,
                           load=False)
        fresh.add(*self.store.embeddings_for(model))
        return fresh


class MilvusBackend:
    """Both arms in Milvus (`[milvus]` settings): full-text search with Milvus's BM25 function, and a
    vector collection per model, each with the filter fields beside it. Milvus builds and compacts
    its own indexes."""
    dense_takes_id_lists = False

    def __init__(self, data_dir: Path, milvus_settings, store: CorpusStore, replica: str | None = None):
        """`replica`: this process's replica id when the store is shared — its collections are its
        own (suffixed with it), as its embedded indexes would be: every replica applies every write
        to its indexes, and two applying one page to one collection at once could leave it twice."""
        mv = self.mv = milvus_settings
        self.data_dir, self.store = data_dir, store
        self.client = milvus_client(mv.uri, mv.token, mv.timeout_s)
        self.prefix = mv.collection_prefix or default_prefix(data_dir)
        if replica:
            self.prefix += "_" + "".join(ch for ch in replica if ch.isalnum())

    def _marker(self, name: str) -> Path:
        return self.data_dir / MILVUS_DIR / f"{name}.json"

    def sparse(self) -> MilvusSparseIndex:
        name = collection_name(self.prefix, "sparse")
        return MilvusSparseIndex(self.client, name, self._marker(name))

    def dense(self, model: str, dim: int) -> MilvusDenseIndex:
        store, mv = self.store, self.mv
        name = collection_name(self.prefix, "dense", model)

        def fields(chunk_ids: list[int]) -> dict:
            return {d.chunk_id: d for batch in store.index_docs(chunk_ids=chunk_ids) for d in batch}

        def vectors(page_ids: list[str]):
            return store.embeddings_for(model, store.chunk_ids_of_pages(page_ids).tolist())

        return MilvusDenseIndex(self.client, name, self._marker(name), dim, mv.index_type, mv.index_params,
                                mv.search_params, fields, vectors)

    def maintain(self, model: str, dense) -> None:
        return None


BACKENDS: dict[str, Callable[..., Backend]] = {
    "embedded": lambda settings, data_dir, store, replica: EmbeddedBackend(data_dir, settings.index, store),
    "milvus": lambda settings, data_dir, store, replica: MilvusBackend(data_dir, settings.milvus, store, replica),
}


def open_backend(settings, data_dir: Path, store: CorpusStore, replica: str | None = None) -> Backend:
    """The backend `index.backend` names (`replica`: this process's id when replicas share the store)."""
    return BACKENDS[settings.index.backend](settings, data_dir, store, replica)
