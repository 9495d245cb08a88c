"""The corpus: the store plus every index built from it, kept in step.

The store (DuckDB) is the source of truth. Each index records the store generation it has
applied; `open_corpus` compares them and repairs a lagging index from the store (replaying the
pages changed since, or rebuilding when that history is gone), so a crash anywhere in an ingest
leaves nothing half-indexed once the corpus is opened again.
"""
from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from indexes.backends import DenseArm, SparseArm, open_backend
from indexes.hot import HotPages, HotView
from indexes.keys import KeyStore
from indexes.imports import ImportTables
from indexes.map_notes import MapNotes
from indexes.relations import RelationStore
from indexes.duck_file import DuckFile
from indexes.relation_log import SharedRelations
from indexes.store_protocol import Store, open_store
from indexes.store_rows import StoreUnavailable
from models.device import set_cpu_threads
from models.embedder import Embedder, EmbedderPool
from models.registry import ModelRegistry

from engine.core import switch
from engine.core.devices import NoSuchDevice, device_refusal
from engine.core.errors import PageNotFound
from engine.core.faults import maybe_crash
from engine.core.private import make_private
from engine.core.querylog import QueryLog
from engine.core.repair import IndexRepairs, RepairReport
from engine.core.replica import Replica, replica_id
from engine.core.settings import Settings

log = logging.getLogger("refindery.corpus")

STORE_FILE = "refindery.duckdb"
RELATIONS_FILE = "relations.duckdb"   # the relation tables' own file, with the corpus in PostgreSQL


@dataclass(frozen=True)
class Coverage:
    """A catch-up in progress: `model` has embedded the chunks `covered` (sorted); `left` chunks that
    its fast stand-in `fast` holds wait for it; `fraction` = covered / (covered + left)."""
    model: str
    fast: str
    covered: np.ndarray
    left: int
    fraction: float

    def holds(self, chunk_ids: np.ndarray) -> np.ndarray:
        """Whether each chunk has a vector of `model` (a boolean mask)."""
        return _member(np.asarray(chunk_ids, dtype=np.int64), self.covered)


def _member(ids: np.ndarray, sorted_ids: np.ndarray) -> np.ndarray:
    if not len(sorted_ids) or not len(ids):
        return np.zeros(len(ids), dtype=bool)
    at = np.minimum(np.searchsorted(sorted_ids, ids), len(sorted_ids) - 1)
    return sorted_ids[at] == ids


class Corpus(IndexRepairs):
    def __init__(self, settings: Settings, pool: EmbedderPool | None = None):
        self.settings = settings
        self.data_dir = Path(settings.data_dir)
        make_private(self.data_dir)   # 0700, and everything the engine writes there private (engine/core/private.py)
        self.registry = ModelRegistry(settings.registry_path, settings.models_cache_dir, data_dir=settings.data_dir)
        set_cpu_threads(settings.models.cpu_threads)
        self.pool = pool or EmbedderPool(self.registry, settings.models.device, settings.models.batch_size,
                                         settings.search.query_cache_size, settings.models.query_runtime,
                                         settings.models.cpu_threads)
        st = settings.store
        self.store: Store = open_store(self.data_dir / STORE_FILE, st.url, st.pool_size, st.connect_timeout_s)
        switch.apply(settings, self.store)   # the embedder this data dir runs after a live switch, and one under way
        self.replicated = not isinstance(self.store, DuckFile)   # a replica of a shared store (engine/core/replica.py)
        self.backend = open_backend(settings, self.data_dir, self.store,   # index.backend (indexes/backends.py)
                                    replica_id(self.data_dir) if self.replicated else None)
        self.sparse: SparseArm = self.backend.sparse()
        self._dense: dict[str, DenseArm] = {}   # model -> its dense arm
        self.write_lock = threading.RLock()
        self.repairs: list[RepairReport] = []
        self.store.ensure_workspace(settings.default_workspace)
        lg = settings.log
        durable = (not isinstance(self.store, DuckFile)) if lg.durable == "auto" else lg.durable
        self.querylog = QueryLog(self.store, lg.enabled, lg.queue_size, lg.batch_size, lg.flush_interval_s, durable)
        self._hot = HotPages(self.store, int(settings.search.snippet_texts_mb * 2**20))
        # the relation tables: in the corpus store's DuckDB file, or, the corpus in PostgreSQL, in a file
        # of each replica's own beside it, every write to them replayed by every replica (relation_log)
        self._relation_file = None if not self.replicated else \
            SharedRelations(self.data_dir / RELATIONS_FILE, self.store, replica_id(self.data_dir))
        self.relations = RelationStore(self._relation_file or self.store, self.store,
                                       settings.relations.verdict_cache_mb, settings.relations.columns_mb)
        if self._relation_file is not None:
            self.follow_relations()   # what other replicas wrote while this one was away (or ever, a new one)
            self._relation_file.on_written = self._relation_written
            self._relation_file.stored = lambda: maybe_crash("relations:stored")
        self.keys = KeyStore(self.store)
        self.map_notes = MapNotes(self.store)
        self.imports = ImportTables(self.store)
        self._coverage_lock = threading.Lock()
        self._coverage: tuple[tuple, Coverage | None] | None = None   # (key, what it was at that key)
        self.vectors_added = 0   # bumped by every batch a background embedding stores (engine/core/repair.py)
        self._applied = 0        # a replica's: the generation its indexes have applied (follow)
        self.replica: Replica | None = None   # a replica's follower, once open_corpus starts it
        self.on_switched: Callable[[str], None] | None = None   # the engine's: another replica swapped the embedder

    @property
    def dense_takes_id_lists(self) -> bool:
        """Whether the dense arm reads a search's filters as a list of chunk ids (FAISS) rather than as
        the filter expression itself (a backend that filters by expression)."""
        return self.backend.dense_takes_id_lists

    @property
    def replica_name(self) -> str | None:
        """This process's replica id, with the store shared (None with a DuckDB store)."""
        return self.replica.id if self.replica is not None else None

    def describe_replica(self) -> dict | None:
        """A replica's id and how far it is behind the store (/healthz); None with a DuckDB store."""
        return self.replica.describe() if self.replica is not None else None

    def drop_vectors(self, model: str) -> int:
        """Delete a model's vectors from the store and empty its dense index, under the write lock: the
        number of vectors dropped."""
        with self.write_lock:
            dense = self.dense(model)
            dense.reset()
            dense.save(self.store.generation())
            n = self.store.drop_embeddings(model)
            self._dense.pop(model, None)
        return n

    @property
    def applied(self) -> int:
        """The store generation this process's indexes have applied: with a DuckDB store, whatever it
        committed (its writes reach the indexes under the write lock); a replica's, what it followed."""
        return self._applied if self.replicated else self.store.generation()

    @applied.setter
    def applied(self, generation: int) -> None:
        self._applied = generation

    def wait_applied(self, generation: int, timeout_s: float) -> bool:
        """Whether this process's indexes have applied `generation` (a write's token) within `timeout_s`."""
        if self.replica is None:
            return self.applied >= generation
        return self.replica.wait_applied(generation, timeout_s)

    def follow_switch(self) -> None:
        """A replica's: the data dir's embedder and switch as the store says (engine/core/switch.py); when
        another replica swapped the embedder, `on_switched(model)` embeds what this one wrote meanwhile."""
        active = switch.follow(self)
        if active is not None and self.on_switched is not None:
            self.on_switched(active)

    def follow_relations(self, upto: int | None = None) -> None:
        """A replica's: replay the relation writes any replica committed up to generation `upto`."""
        if self._relation_file is not None:
            self._relation_file.catch_up(upto)

    def _relation_written(self, generation: int) -> None:
        """After this replica's relation write: its indexes apply the write's generation (and any before
        it), so its reply's generation token covers the write."""
        try:
            self.follow()
        except Exception:   # the write is committed whatever happens here: the follower applies it once it can
            log.exception("a relation write's generation %d is not applied by this replica yet", generation)
        self.applied_moved()

    def applied_moved(self) -> None:
        """After a write this process applied itself: wake the requests waiting for its generation."""
        if self.replica is not None:
            self.replica.applied_moved()

    # Models and dense indexes ------------------------------------------------------------------
    def embedder(self, name: str | None = None) -> Embedder:
        try:   # every search passes here: a try costs nothing until a model is loaded on a missing device
            return self.pool.get(name or self.settings.models.active)
        except NoSuchDevice as exc:
            raise device_refusal(exc, self.pool.device) from exc

    @property
    def embedder_names(self) -> list[str]:
        return self.settings.embedder_names

    def dense(self, model: str) -> DenseArm:
        """`model`'s dense arm (opened once)."""
        if model not in self._dense:
            spec = self.registry.spec(model)
            self._dense[model] = self.backend.dense(model, spec.dim or self.embedder(model).dim)
            if model not in self.embedder_names:
                # A model searched (or compared) without being kept up to date on ingest: bring its
                # index to the store's vectors now, not to whatever an earlier process left.
                with self.write_lock:
                    self.sync([model])
        return self._dense[model]

    def maintain_dense(self, model: str) -> None:
        """After a write: whatever the backend does to keep a dense arm fit (a rebuild as the other
        index kind, a compaction; nothing for a backend that keeps its own), swapped in once complete."""
        with self.write_lock:
            fresh = self.backend.maintain(model, self.dense(model))
            if fresh is not None:
                self._dense[model] = fresh

    def coverage(self, snapshot: HotView | None = None) -> "Coverage | None":
        """While the quality profile's embedder catches up (settings.catch_up_model): which chunks it
        has embedded (sorted ids) out of how many the fast stand-in holds — what a search ranks by which
        model (engine/refind/search.py). None when nothing is catching up, or nothing is left to. Read
        again after a write (the snapshot's generation) or a stored batch (vectors_added)."""
        model, fast = self.settings.catch_up_model, self.settings.fast_model
        if model is None:
            return None
        key = ((snapshot or self.hot()).generation, self.vectors_added)
        with self._coverage_lock:
            if self._coverage is not None and self._coverage[0] == key:
                return self._coverage[1]
            # (the two read one after the other, not under the write lock: a search never waits for a write)
            covered = np.sort(np.asarray(self.dense(model).ids(), dtype=np.int64))
            fast_ids = np.asarray(self.dense(fast).ids(), dtype=np.int64)
            left = int(np.count_nonzero(~_member(fast_ids, covered)))
            cov = None if left == 0 else Coverage(model, fast, covered, left,
                                                  len(covered) / max(1, len(covered) + left))
            self._coverage = (key, cov)
            return cov

    # Hot-path lookups --------------------------------------------------------------------------
    def hot(self) -> HotView:
        """The store's hot columns in memory at its current generation (indexes/hot.py): a search
        takes one view for the whole request and reads chunk -> page, page rows, recency and
        workspace populations from it without a store round trip."""
        return self._hot.view()

    def populated_workspaces(self, snapshot: HotView | None = None) -> frozenset[str]:
        """The workspaces that hold pages (at the snapshot's generation)."""
        return (snapshot or self.hot()).populated

    def chunk_pages(self, chunk_ids: list[int], snapshot: HotView | None = None) -> dict[int, str]:
        """chunk id -> page id; `snapshot` (from chunk_page_snapshot): the view the request already holds."""
        return (snapshot or self.hot()).chunk_pages(chunk_ids)

    def record_feedback(self, query_id: str, page_id: str, kind: str, key_id: str | None = None) -> dict:
        """Store an implicit judgment on a logged query (404s for an unknown query or page)."""
        from engine.core.errors import PageNotFound, QueryNotFound

        if not self.querylog.knows(query_id):
            raise QueryNotFound(f"no logged query with id {query_id!r}", ref=query_id)
        if not self.store.pages_by_id([page_id]):
            raise PageNotFound(f"no page with id {page_id!r}", ref=page_id)
        self.querylog.add_feedback(query_id, page_id, kind, key_id)
        return {"query_id": query_id, "page_id": page_id, "kind": kind, "stored": True}

    def brief_compiler(self):
        """The relation-search brief compiler configured in settings ([compiler]), or None."""
        from models.compiler import compiler_from

        return compiler_from(**self.settings.compiler.model_dump(exclude={"price_usd_per_mtok"}))

    def reranker_status(self) -> dict:
        """The configured reranker: whether a rerank request can be served, and if not, why and how."""
        from models.registry import ModelNotFound

        s = self.settings
        out = {"name": s.models.reranker or None, "rerank_by_default": s.search.rerank, "rerank_n": s.search.rerank_n}
        if not s.models.reranker:
            return out | {"available": False, "reason": "models.reranker is empty"}
        try:
            spec = self.registry.spec(s.models.reranker)
            path = self.registry.resolve(s.models.reranker)
        except ModelNotFound as exc:
            return out | {"available": False, "reason": str(exc), "install": exc.install}
        return out | {"available": spec.kind == "reranker", "path": str(path),
                      "backend": spec.extra.get("backend", "torch")}

    def device_status(self) -> dict:
        """The configured device: what it resolves to here (and torch's build), or why it cannot."""
        from models.device import device_report

        return device_report(self.pool.device)

    def models_status(self, kind: str | None = None) -> list[dict]:
        """Every model in the registry (or of one kind): whether it is active or kept up to date on ingest, its
        backend and device, how many chunks it has embedded, and whether its weights are installed
        (with the install hint when not)."""
        from models.device import device_report
        from models.registry import ModelNotFound

        s = self.settings
        all_counts = self.store.counts()
        counts, chunks = all_counts["embeddings"], all_counts["chunks"]
        device = device_report(self.pool.device)
        rows = []
        for name in self.registry.names(kind):
            spec = self.registry.spec(name)
            backend = str(spec.extra.get("backend", "torch"))
            row = {"name": name, "kind": spec.kind, "active": name == s.models.active,
                   "also_embed": name in s.models.also_embed, "dim": spec.dim,
                   "max_seq_length": spec.max_seq_length, "backend": backend,
                   "device": "cpu" if backend == "onnx" else device.get("resolved", device["configured"]),
                   "chunks_embedded": counts.get(name, 0)}
            if spec.kind == "embedder":   # the share of the chunks it has a vector for (a catch-up's progress)
                row["coverage"] = round(min(1.0, counts.get(name, 0) / chunks), 4) if chunks else 1.0
                if name == s.catch_up_model:
                    row["catches_up"] = {"stand_in": s.fast_model, "waiting": max(0, chunks - counts.get(name, 0))}
            if backend != "onnx" and not device["available"]:
                row["device_unavailable"] = device["reason"]
            loaded = self.pool.loaded().get(name)
            if loaded is not None:   # how its queries are encoded (ONNX on CPU where it reproduces the model)
                row["query_runtime"] = loaded.query_runtime
                if loaded.query_runtime_note:
                    row["query_runtime_note"] = loaded.query_runtime_note
            try:
                row["path"] = str(self.registry.resolve(name)) if spec.source != "split-zip" or \
                    self.registry.is_available(name) else None
                row["installed"] = row["path"] is not None
            except ModelNotFound as exc:
                row["path"], row["installed"], row["install"] = None, False, exc.install
            rows.append(row)
        return rows

    def chunk_page_snapshot(self) -> HotView:
        return self.hot()

    def flush(self) -> None:
        """Persist dense indexes that changed since their last save."""
        with self.write_lock:
            g = self.applied   # never a later generation than the indexes hold (a replica's others' writes)
            for d in self._dense.values():
                if d.dirty:
                    d.save(g)
            if self.replica is not None:   # its own record first: the prune stops at the slowest replica's
                self.replica.report()
            low = min([self.sparse.generation] + [d.generation for d in self._dense.values()])
            if low > self.store.pruned_upto():
                self.store.prune_changes(low)

    def close(self) -> None:
        if self.store.closed:
            return
        try:
            if self.replica is not None:
                self.replica.stop()
            self.querylog.close()
            self.relations.columns.settle()   # a relation's rows being read into columns
            try:
                self.flush()
            except StoreUnavailable as exc:   # PostgreSQL down at close: the indexes repair at next open
                log.warning("closing without saving the dense indexes: %s", exc)
        finally:
            self.store.close()
            if self._relation_file is not None:
                self._relation_file.close()


def open_corpus(settings: Settings, pool: EmbedderPool | None = None, repair: bool = True) -> Corpus:
    from engine.core.migrations import to_schema_2

    corpus = Corpus(settings, pool)
    moved = to_schema_2(corpus.store)
    if moved is not None:   # the indexes learn the new ids from the change rows, as after any write
        corpus.repairs.append(RepairReport("store", "migrated", moved["generation"] - 1, moved["generation"],
                                           f"schema 2: {moved['pages_renamed']} scoped pages re-keyed, "
                                           f"{moved['entities_before']} entities -> {moved['entities_after']}"))
        pages = corpus.store.changed_pages_since(moved["generation"] - 1)
        corpus.sync_pages(moved["generation"])
        for m in corpus.embedder_names:   # a backend holding filter fields beside the vectors re-reads them
            corpus.dense(m).refresh_pages(pages)
    if repair:
        corpus.sync()
        corpus.follow_relations(corpus.sparse.generation)   # a new replica's relation tables: every write
        corpus.applied = corpus.sparse.generation
        if corpus.replicated:   # follow every other replica's writes from here on
            corpus.replica = Replica(corpus).start()
            switch.report_models(corpus)   # which embedders it keeps: a drop through any replica asks
        corpus.hot()   # the search's in-memory view, read now rather than by the first search (0.6 s at 1M chunks)
    return corpus


def read_page(corpus: Corpus, page_id: str) -> dict:
    """A page with its whole text and its chunks (GET /v1/pages/{id}, and the MCP get_page tool)."""
    page = corpus.store.page(page_id)
    if page is None:
        raise PageNotFound(f"no page with id {page_id!r}", ref=page_id)
    page["chunks"] = corpus.store.page_chunks(page_id)
    return page
