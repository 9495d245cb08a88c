"""A replica: one serving process over a shared store (PostgreSQL), with indexes of its own.

Any number of replicas share the store and nothing else; each keeps its indexes (tantivy, FAISS or
its own Milvus collections), its in-memory view and its caches in a data dir of its own, and follows
the store's change feed: whenever a generation is committed — by itself or by another replica — its
follower thread replays what changed (Corpus.follow), then records the generation it has applied in
the store (the change rows below the slowest live replica's are kept) and wakes the requests waiting
for it (read-your-writes: `wait_applied`, a request's `Refindery-Min-Generation` header). Its id is
kept in the data dir, so a replica that restarts takes up its own record again.
"""
from __future__ import annotations

import logging
import threading
import time
import uuid
from pathlib import Path

from engine.core.private import write_private
from indexes.store_rows import StoreUnavailable

log = logging.getLogger("refindery.replica")

ID_FILE = "replica_id"
POLL_S = 1.0          # the follower looks for new generations at least this often (a missed notice)
REPORT_EVERY_S = 1.0  # the applied generation is written to the store at most this often while it moves
VECTORS_EVERY_S = 2.0  # vectors stored without a new generation are looked for at most this often


def replica_id(data_dir: Path) -> str:
    """This data dir's replica id, made once (the data dir is held by one process: no race)."""
    path = Path(data_dir) / ID_FILE
    if path.exists():
        text = path.read_text().strip()
        if text:
            return text
    rid = f"r-{uuid.uuid4().hex[:12]}"
    write_private(path, rid + "\n")
    return rid


class Replica:
    """The follower of one corpus over a shared store (see the module's docstring)."""

    def __init__(self, corpus, address: str | None = None):
        """`corpus`: the Corpus it follows (engine/core/corpus.py, which imports this module)."""
        self.corpus = corpus
        # the corpus's parts the follower reads, named once here: the shared store (its notices and
        # generations), the BM25 arm's generation, the relation tables' replay
        self.store, self.sparse, self.relations = corpus.store, corpus.sparse, corpus.relations
        self.id = replica_id(corpus.data_dir)
        self.address = address
        self._wake = threading.Event()
        self._applied = threading.Condition()
        self._stop = threading.Event()
        self._reported = (-1, 0.0)   # (generation, monotonic time) last written to the store
        self._vector_models: set[str] = set()   # models whose vectors another process stored, not yet looked at
        self._vectors_at = 0.0
        self.errors = 0
        self.last_error: str | None = None
        self._thread = threading.Thread(target=self._run, name="replica-follower", daemon=True)

    def start(self) -> "Replica":
        self.store.on_generation(lambda _g: self._wake.set())
        self.store.on_vectors(self._vectors_heard)
        self._report(force=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=10)
        try:
            self._report(force=True)
        except StoreUnavailable:
            pass

    # Following ---------------------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(POLL_S)
            self._wake.clear()
            if self._stop.is_set():
                break
            try:
                self.catch_up()
            except StoreUnavailable as exc:   # PostgreSQL restarting: tried again at the next notice or poll
                self._failed(exc)
            except Exception as exc:   # a follower that stops would leave this replica behind for good
                log.exception("replica %s: following the store failed", self.id)
                self._failed(exc)

    def _failed(self, exc: Exception) -> None:
        self.errors += 1
        self.last_error = f"{type(exc).__name__}: {exc}"
        time.sleep(0.2)

    def _vectors_heard(self, model: str) -> None:
        with self._applied:
            self._vector_models.add(model)
        self._wake.set()

    def catch_up(self) -> int:
        """Apply what the store committed since this replica last did — and the vectors some process
        stored without a new generation, at most every VECTORS_EVERY_S (a background embedding stores a
        batch every few seconds; each look compares every vector id of the model) — ; returns the
        applied generation."""
        self.corpus.follow_switch()   # the data dir's embedder and switch: one truth, in the store
        if self.store.generation() > self.corpus.applied:
            self.corpus.follow()
        now = time.monotonic()
        if self._vector_models and now - self._vectors_at >= VECTORS_EVERY_S:
            with self._applied:
                models, self._vector_models = self._vector_models, set()
            self._vectors_at = now
            self.corpus.follow_vectors(sorted(models))
        elif self._vector_models:
            self._wake.set()   # looked at again once the interval has passed
            time.sleep(min(0.2, VECTORS_EVERY_S))
        self.applied_moved()
        self._report()
        return self.corpus.applied

    def applied_moved(self) -> None:
        """Wake the requests waiting for a generation (after this process's own write too)."""
        with self._applied:
            self._applied.notify_all()

    def report(self) -> None:
        """Write the applied generation to the store now (before this process prunes change rows)."""
        self._report(force=True)

    def _report(self, force: bool = False) -> None:
        applied = min(self.corpus.applied, self.sparse.generation)
        last, at = self._reported
        now = time.monotonic()
        if force or (applied != last and now - at >= REPORT_EVERY_S) or now - at >= 30 * REPORT_EVERY_S:
            self.store.report_applied(self.id, applied, self.address)
            self._reported = (applied, now)

    # Read your writes --------------------------------------------------------------------------
    def wait_applied(self, generation: int, timeout_s: float) -> bool:
        """Whether this replica has applied `generation` (a write's token) within `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        with self._applied:
            while self.corpus.applied < generation:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._wake.set()   # the follower looks now, not at its next poll
                self._applied.wait(min(left, 0.25))
        return True

    def describe(self) -> dict:
        """What /healthz says of this replica."""
        rel = self.relations.shared
        return {"id": self.id, "applied_generation": self.corpus.applied,
                **({"relations_applied": rel.applied} if rel is not None else {}),
                "follow_errors": self.errors, **({"last_error": self.last_error} if self.last_error else {})}
