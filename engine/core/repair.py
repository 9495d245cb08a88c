"""Keeping every index at the store's generation: the repair at open (replay the pages changed since
an index's generation, or rebuild it), the quarantine of pages an index cannot hold, a reindex, and
embedding what a model lacks. The `Corpus` (engine/core/corpus.py) is composed of these."""
from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import numpy as np

from engine.core.clock import utcnow
from engine.core.faults import maybe_crash

if TYPE_CHECKING:
    from indexes.backends import DenseArm, SparseArm
    from indexes.store import CorpusStore
    from models.embedder import Embedder

    from engine.core.querylog import QueryLog

log = logging.getLogger("refindery.corpus")


@dataclass
class RepairReport:
    index: str
    action: str  # "none" | "replayed" | "rebuilt" | "synced"
    from_generation: int
    to_generation: int
    detail: str = ""


class IndexRepairs:
    """What a corpus does to keep its indexes at the store's generation. The store, the arms and the
    models are the Corpus's (`dense(model)`, `embedder(model)`, `embedder_names`, `maintain_dense`)."""
    store: CorpusStore
    sparse: SparseArm
    _dense: dict[str, DenseArm]   # model -> its dense arm, as opened so far
    write_lock: threading.RLock
    repairs: list[RepairReport]
    vectors_added: int
    applied: int   # the store generation every index has applied (follow; a replica's /healthz)
    replicated: bool   # the store is shared with other processes: indexes move by `follow` only
    querylog: QueryLog   # a deleted page's feedback goes with it

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
            if self.replicated:   # a replica replays it as every other write (its markers never skip one)
                self.follow()
                return gen
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

    def follow(self) -> dict[str, str]:
        """Bring every index to the store's generation by replaying what changed since each one's own
        generation, whoever wrote it — the write path of a replica (the store in PostgreSQL), where
        other processes commit generations in between this one's. The sparse index replays the pages
        changed since its marker (or is rebuilt once those change rows are pruned); each dense index
        takes the vectors it lacks and drops those the store no longer holds, in memory (saved by
        `flush` at the generation applied, never at a later one). The relation tables replay the
        relation writes up to the same generation first, outside the write lock (a relation write holds
        their file's lock, then the store's, then asks for this). Returns the pages quarantined."""
        g_store = self.store.generation()
        self.follow_relations(g_store)
        with self.write_lock:
            g = self.sparse.generation
            rejected: dict[str, str] = {}
            pages: list[str] = []
            if g < g_store:
                if g < 0 or g < self.store.pruned_upto():
                    rejected = self.sparse.rebuild(self.store.index_docs(), g_store)
                else:
                    pages = self.store.changed_pages_since(g)
                    docs = [d for batch in self.store.index_docs(pages) for d in batch]
                    rejected = self.sparse.replace_pages(pages, docs, g_store)
                self.quarantine(rejected)
            for model in sorted(set(self.embedder_names) | set(self._dense)):
                self._follow_dense(model, pages)
                if model not in self.embedder_names and self._dense[model].count() == 0:
                    self._dense.pop(model)   # a model no longer kept, its vectors dropped (by any replica)
                    continue
                # kept fit as a single process keeps it after its writes: rebuilt as HNSW once it
                # crosses the line, compacted once tombstones pile up (a replica never ran this before)
                self.maintain_dense(model)
                d = self._dense[model]   # at g_store now, in memory: the next flush saves it so
                d.dirty = d.dirty or d.generation != g_store
            self.querylog.follow_feedback()   # the feedback another replica changed: read again from here on
            self.applied = max(self.applied, g_store)
            return rejected

    def follow_vectors(self, models: list[str]) -> None:
        """Vectors another process stored without a new generation (its background embedding of a
        model): each model's dense index — if this process has opened it — takes what it lacks."""
        with self.write_lock:
            for model in models:
                if model in self._dense:
                    self._follow_dense(model, [])
                    self._dense[model].dirty = True
            self.vectors_added += 1   # what a search ranks by which model is read again (coverage)

    def _follow_dense(self, model: str, pages: list[str]) -> None:
        dense = self.dense(model)
        store_ids, _ = self.store.embedding_ids(model)
        have = dense.ids()
        extra = np.setdiff1d(have, store_ids)
        missing = np.setdiff1d(store_ids, have)
        if len(np.unique(have)) != len(have):   # a duplicate entry: rebuilt whole
            dense.reset()
            extra, missing = np.zeros(0, dtype=np.int64), store_ids
        dense.remove(extra)
        if len(missing):
            dense.add(*self.store.embeddings_for(model, missing.tolist()))
        if pages:   # a backend holding filter fields beside the vectors re-reads the changed pages'
            dense.refresh_pages(pages)

    def delete_page(self, page_id: str) -> bool:
        """Remove a page from the store and every index (delete_pages). False if it does not exist."""
        return bool(self.delete_pages([page_id]))

    def delete_pages(self, page_ids: list[str]) -> list[str]:
        """Remove pages from the store and every index in one generation, and what the query log holds
        of them: the judgments on them (the shortcuts to them go too) and their rows among a logged
        search's candidates and results. Returns the ids that existed."""
        with self.write_lock:
            old = self.store.existing_pages(list(dict.fromkeys(page_ids)))
            if not old:
                return []
            gone = sorted(old)
            gen = self.store.apply([], [], gone)
            # with replicas, the judgments' change is a generation of its own, which the follow applies
            self.querylog.forget_pages(gone)
            if self.replicated:
                self.follow()
                self.applied_moved()
            else:
                self.sparse.replace_pages(gone, [], gen)
                chunks = sorted(c for p in old.values() for c in p.chunk_ids)
                for model in self.embedder_names:
                    self.dense(model).remove(chunks)
                    self.maintain_dense(model)
        return gone

    def follow_own_write(self) -> None:
        """A replica's, after a write of shared state outside the indexes (feedback): its indexes apply
        the write's generation, so the reply's Refindery-Generation covers it."""
        if self.replicated:
            with self.write_lock:
                self.follow()
                self.applied_moved()

    def sync_pages(self, generation: int) -> None:
        """After a store write that changed pages' filter fields only (clusters, entity links):
        re-index those pages in tantivy. Vectors are unchanged."""
        with self.write_lock:
            if self.replicated:   # every replica's writes since, not only this one
                self.follow()
                self.applied_moved()
                return
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
                      stop: threading.Event | None = None, encoder: "Embedder | None" = None) -> int:
        """Embed every chunk that has no vector of `model` yet (adding a model embeds only this).
        Batch by batch: the batch's texts are read and its vectors stored under the write lock, but
        encoded outside it (a server embeds while it serves: a write waits for a batch's insert, not
        for a slow model's encoding — all-mpnet-base-v2 takes ~14 s for 128 chunks on 2 cores). What
        is missing is the queue: it lives in the store, so an embedding killed part way resumes where
        it stopped; a chunk deleted or embedded by another writer meanwhile is skipped at the insert
        (never two vectors of one model). `progress(done, total)` after each; `stop` ends it between
        batches; `encoder`: the model as the background encodes with it (EmbedderPool.background)."""
        emb = encoder or self.embedder(model)
        dense = self.dense(model)

        def waiting() -> int:   # chunks without a vector of the model, now
            counts = self.store.counts()
            return max(0, counts["chunks"] - counts["embeddings"].get(model, 0))

        seen_generation = self.store.generation()
        total = waiting()
        done = 0
        with self.write_lock:
            present = set(dense.ids().tolist())   # vectors the index holds without a stored row (a repair's)
        if progress is not None:
            progress(0, total)
        skipped: set[int] = set()   # encoded, then deleted or embedded by another writer before the insert
        while stop is None or not stop.is_set():
            with self.write_lock:
                rows = self.store.chunks_missing_embeddings(model, limit=batch + len(skipped))
            rows = [r for r in rows if r[0] not in skipped][:batch]
            if not rows:
                break
            ids = [r[0] for r in rows]
            vecs = emb.encode_documents([r[1] for r in rows])
            with self.write_lock:
                landed = set(self.store.add_embeddings(model, ids, vecs))
                maybe_crash(f"embedded:{model}:{done + len(ids)}")   # stored, not yet in the index (a test's kill)
                fresh = [i for i, cid in enumerate(ids) if cid in landed and cid not in present]
                dense.add(np.array([ids[i] for i in fresh], dtype=np.int64), vecs[fresh])
                self.vectors_added += 1
            skipped.update(cid for cid in ids if cid not in landed)
            done += len(ids)
            if progress is not None:
                if (g := self.store.generation()) != seen_generation:   # pages arrived (or went) meanwhile:
                    seen_generation, total = g, done + waiting()       # the total is what waits now
                progress(done, max(total, done))
        with self.write_lock:
            self.maintain_dense(model)
        return done


def _left_out(rejected: dict[str, str]) -> str:
    return f" ({len(rejected)} pages the index cannot hold moved to quarantine)" if rejected else ""
