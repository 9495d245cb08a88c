"""The corpus: the store plus every index built from it, kept in step.

The store (DuckDB) is the source of truth. Each index records the store generation it has
applied; `open_corpus` compares them and repairs a lagging index from the store (replaying the
pages changed since, or rebuilding when that history is gone), so a crash anywhere in an ingest
leaves nothing half-indexed once the corpus is opened again.
"""
from __future__ import annotations

import logging
import threading
from typing import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from indexes.backends import open_backend
from indexes.hot import HotPages, HotView
from indexes.keys import KeyStore
from indexes.map_notes import MapNotes
from indexes.relations import RelationStore
from indexes.store import CorpusStore
from models.device import set_cpu_threads
from models.embedder import Embedder, EmbedderPool
from models.registry import ModelRegistry

from engine.core.errors import PageNotFound
from engine.core.clock import utcnow
from engine.core.querylog import QueryLog
from engine.core.settings import Settings

log = logging.getLogger("refindery.corpus")

STORE_FILE = "refindery.duckdb"


@dataclass
class RepairReport:
    index: str
    action: str  # "none" | "replayed" | "rebuilt" | "synced"
    from_generation: int
    to_generation: int
    detail: str = ""


class Corpus:
    def __init__(self, settings: Settings, pool: EmbedderPool | None = None):
        self.settings = settings
        self.data_dir = Path(settings.data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.registry = ModelRegistry(settings.registry_path, settings.models_cache_dir, data_dir=settings.data_dir)
        set_cpu_threads(settings.models.cpu_threads)
        self.pool = pool or EmbedderPool(self.registry, settings.models.device, settings.models.batch_size,
                                         settings.search.query_cache_size, settings.models.query_runtime,
                                         settings.models.cpu_threads)
        self.store = CorpusStore(self.data_dir / STORE_FILE)
        self.backend = open_backend(settings, self.data_dir, self.store)   # index.backend (indexes/backends.py)
        self.sparse = self.backend.sparse()
        self._dense: dict = {}   # model -> its dense arm
        self.write_lock = threading.RLock()
        self.repairs: list[RepairReport] = []
        self.store.ensure_workspace(settings.default_workspace)
        lg = settings.log
        self.querylog = QueryLog(self.store, lg.enabled, lg.queue_size, lg.batch_size, lg.flush_interval_s)
        self._hot = HotPages(self.store, int(settings.search.snippet_texts_mb * 2**20))
        self.relations = RelationStore(self.store, settings.relations.verdict_cache_mb,
                                       settings.relations.columns_mb)
        self.keys = KeyStore(self.store)
        self.map_notes = MapNotes(self.store)

    # Models and dense indexes ------------------------------------------------------------------
    def embedder(self, name: str | None = None) -> Embedder:
        return self.pool.get(name or self.settings.models.active)

    @property
    def embedder_names(self) -> list[str]:
        return self.settings.embedder_names

    def dense(self, model: str):
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

    def record_feedback(self, query_id: str, page_id: str, kind: str) -> dict:
        """Store an implicit judgment on a logged query (404s for an unknown query or page)."""
        from engine.core.errors import PageNotFound, QueryNotFound

        if not self.querylog.knows(query_id):
            raise QueryNotFound(f"no logged query with id {query_id!r}", ref=query_id)
        if not self.store.pages_by_id([page_id]):
            raise PageNotFound(f"no page with id {page_id!r}", ref=page_id)
        self.querylog.add_feedback(query_id, page_id, kind)
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

    def models_status(self, kind: str | None = None) -> list[dict]:
        """Every model in the registry (or of one kind): whether it is active or kept up to date on ingest, its
        backend and device, how many chunks it has embedded, and whether its weights are installed
        (with the install hint when not)."""
        from models.device import resolve_device
        from models.registry import ModelNotFound

        s = self.settings
        counts = self.store.counts()["embeddings"]
        rows = []
        for name in self.registry.names(kind):
            spec = self.registry.spec(name)
            backend = str(spec.extra.get("backend", "torch"))
            row = {"name": name, "kind": spec.kind, "active": name == s.models.active,
                   "also_embed": name in s.models.also_embed, "dim": spec.dim,
                   "max_seq_length": spec.max_seq_length, "backend": backend,
                   "device": "cpu" if backend == "onnx" else resolve_device(s.models.device),
                   "chunks_embedded": counts.get(name, 0)}
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

    # Consistency ---------------------------------------------------------------------------------
    def sync(self, models: list[str] | None = None) -> list[RepairReport]:
        """Bring every index up to the store's generation; return what was done."""
        with self.write_lock:
            reports = [self._sync_sparse()]
            for m in models if models is not None else self.embedder_names:
                reports.append(self._sync_dense(m))
            done = [r for r in reports if r.action != "none"]
            for r in done:
                log.warning("repaired %s: %s from generation %d to %d %s", r.index, r.action,
                            r.from_generation, r.to_generation, r.detail)
            self.repairs.extend(done)
            return reports

    def quarantine(self, rejected: dict[str, str]) -> int | None:
        """Move pages an index cannot hold out of the corpus (into the store's quarantine, reported by
        /v1/status) and out of every index, so one bad row never stops a repair, a reindex or the next
        ingest. Returns the generation that did it (None when there was nothing to move)."""
        if not rejected:
            return None
        with self.write_lock:
            chunk_ids = self.store.chunk_ids_of_pages(sorted(rejected))
            for pid, reason in sorted(rejected.items()):
                log.error("quarantined page %s: the index cannot hold it (%s)", pid, reason)
            gen = self.store.quarantine(rejected, utcnow())
            self.sparse.replace_pages(sorted(rejected), [], gen)
            for d in self._dense.values():
                d.remove(np.intersect1d(d.ids(), np.asarray(chunk_ids, dtype=np.int64)))
            return gen

    def _sync_sparse(self) -> RepairReport:
        g_store = self.store.generation()
        g = self.sparse.generation
        pruned = self.store.pruned_upto()
        n_chunks = self.store.counts()["chunks"]
        if g == g_store and self.sparse.count() == n_chunks:
            return RepairReport("sparse", "none", g, g_store)
        if g_store == 0 and n_chunks == 0 and self.sparse.count() == 0:
            self.sparse.mark(0)  # a new, empty data dir: nothing to repair
            return RepairReport("sparse", "none", g, g_store)
        if 0 <= g <= g_store and g >= pruned:
            pages = self.store.changed_pages_since(g)
            docs = [d for batch in self.store.index_docs(pages) for d in batch]
            rejected = self.sparse.replace_pages(pages, docs, g_store)
            g_now = self.quarantine(rejected) or g_store
            if self.sparse.count() == self.store.counts()["chunks"]:
                return RepairReport("sparse", "replayed", g, g_now, f"{len(pages)} pages" + _left_out(rejected))
        rejected = self.sparse.rebuild(self.store.index_docs(), g_store)
        g_now = self.quarantine(rejected) or g_store
        return RepairReport("sparse", "rebuilt", g, g_now, _left_out(rejected).strip())

    def _sync_dense(self, model: str) -> RepairReport:
        dense = self.dense(model)
        g_store = self.store.generation()
        g = dense.generation
        n_store = self.store.counts()["embeddings"].get(model, 0)
        if g == g_store and dense.count() == n_store:
            return RepairReport(f"dense:{model}", "none", g, g_store)
        if n_store == 0 and dense.count() == 0:
            dense.save(g_store)  # nothing stored, nothing indexed: only the marker was behind
            return RepairReport(f"dense:{model}", "none", g, g_store)
        store_ids, _ = self.store.embedding_ids(model)
        have = dense.ids()
        extra = np.setdiff1d(have, store_ids, assume_unique=False)
        missing = np.setdiff1d(store_ids, have, assume_unique=False)
        if len(np.unique(have)) != len(have) or dense.needs_compaction:
            dense.reset()
            ids, vecs = self.store.embeddings_for(model)
            dense.add(ids, vecs)
            dense.save(g_store)
            return RepairReport(f"dense:{model}", "rebuilt", g, g_store)
        dense.remove(extra)
        if len(missing):
            ids, vecs = self.store.embeddings_for(model, missing.tolist())
            dense.add(ids, vecs)
        dense.save(g_store)
        return RepairReport(f"dense:{model}", "synced", g, g_store, f"-{len(extra)} +{len(missing)}")

    def sync_pages(self, generation: int) -> None:
        """After a store write that changed pages' filter fields only (clusters, entity links):
        re-index those pages in tantivy. Vectors are unchanged."""
        with self.write_lock:
            pages = self.store.changed_pages_since(self.sparse.generation)
            docs = [d for batch in self.store.index_docs(pages) for d in batch]
            generation = self.quarantine(self.sparse.replace_pages(pages, docs, generation)) or generation
            for d in self._dense.values():
                d.refresh_pages(pages)
                d.dirty = d.dirty or d.generation != generation

    def consistency(self) -> dict:
        """Counts in the store and in every index, and whether they agree."""
        counts = self.store.counts()
        out = {"store_generation": self.store.generation(), "chunks": counts["chunks"],
               "sparse": {"count": self.sparse.count(), "generation": self.sparse.generation}, "dense": {}}
        ok = out["sparse"]["count"] == counts["chunks"] and out["sparse"]["generation"] == out["store_generation"]
        for m in sorted(set(self.embedder_names) | set(self._dense)):
            d = self.dense(m)
            n = counts["embeddings"].get(m, 0)
            out["dense"][m] = {"count": d.count(), "embeddings": n, "generation": d.generation,
                               "unsaved_changes": d.dirty, "kind": d.kind,
                               "dead_entries": d.total() - d.count()}
            ok = ok and d.count() == n and (d.generation == out["store_generation"] or d.dirty)
        out["consistent"] = ok
        return out

    def flush(self) -> None:
        """Persist dense indexes that changed since their last save."""
        with self.write_lock:
            g = self.store.generation()
            for d in self._dense.values():
                if d.dirty:
                    d.save(g)
            low = min([self.sparse.generation] + [d.generation for d in self._dense.values()])
            if low > self.store.pruned_upto():
                self.store.prune_changes(low)

    def reindex(self) -> list[RepairReport]:
        """Rebuild every index from the store (embedding what a configured model lacks first)."""
        with self.write_lock:
            for m in self.embedder_names:
                self.embed_missing(m)
            g = self.store.generation()
            rejected = self.sparse.rebuild(self.store.index_docs(), g)
            g = self.quarantine(rejected) or g
            reports = [RepairReport("sparse", "rebuilt", g, g, _left_out(rejected).strip())]
            for m in self.embedder_names:
                d = self.dense(m)
                d.reset()
                ids, vecs = self.store.embeddings_for(m)
                d.add(ids, vecs)
                d.save(g)
                reports.append(RepairReport(f"dense:{m}", "rebuilt", g, g))
            return reports

    def embed_missing(self, model: str, batch: int = 128, progress: Callable[[int, int], None] | None = None,
                      stop: threading.Event | None = None) -> int:
        """Embed every chunk that has no vector of `model` yet (adding a model embeds only this).
        Batch by batch, each under the write lock and no longer (a server embeds while it serves:
        a write waits for one batch at most); `progress(done, total)` after each; `stop` ends it
        between batches."""
        emb = self.embedder(model)
        dense = self.dense(model)
        counts = self.store.counts()
        total = max(0, counts["chunks"] - counts["embeddings"].get(model, 0))
        done = 0
        with self.write_lock:
            present = set(dense.ids().tolist())   # vectors the index holds without a stored row (a repair's)
        if progress is not None:
            progress(0, total)
        while stop is None or not stop.is_set():
            with self.write_lock:
                rows = self.store.chunks_missing_embeddings(model, limit=batch)
                if not rows:
                    break
                ids = [r[0] for r in rows]
                vecs = emb.encode_documents([r[1] for r in rows])
                self.store.add_embeddings(model, ids, vecs)
                fresh = [i for i, cid in enumerate(ids) if cid not in present]
                dense.add(np.array([ids[i] for i in fresh], dtype=np.int64), vecs[fresh])
                done += len(ids)
            if progress is not None:
                progress(done, max(total, done))
        with self.write_lock:
            self.maintain_dense(model)
        return done

    def close(self) -> None:
        if self.store.closed:
            return
        try:
            self.querylog.close()
            self.relations.columns.settle()   # a relation's rows being read into columns
            self.flush()
        finally:
            self.store.close()


def _left_out(rejected: dict[str, str]) -> str:
    return f" ({len(rejected)} pages the index cannot hold moved to quarantine)" if rejected else ""


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
        corpus.hot()   # the search's in-memory view, read now rather than by the first search (0.6 s at 1M chunks)
    return corpus


def read_page(corpus: Corpus, page_id: str) -> dict:
    """A page with its whole text and its chunks (GET /v1/pages/{id}, and the MCP get_page tool)."""
    page = corpus.store.page(page_id)
    if page is None:
        raise PageNotFound(f"no page with id {page_id!r}", ref=page_id)
    page["chunks"] = corpus.store.page_chunks(page_id)
    return page
