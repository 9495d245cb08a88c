"""The query log: every execution of a verb, written to DuckDB off the request path.

Tables (one kind of row each; `query_id` is the key that joins them):
  log_queries(query_id, ts, endpoint, workspace, query, params, models, timings, total, returned,
              pinned, error_type, error_title, scopes)   one row per execution
  log_candidates(query_id, model, arm, rank, chunk_id, page_id, score)
                                                     what each arm returned (dense per model; the
                                                     sparse arm once, model = '')
  log_fused(query_id, model, stage, rank, chunk_id, page_id, score)
                                                     stage 'fused' (RRF) and 'reranked'
  log_results(query_id, model, rank, page_id, score, pinned)     the final pages returned
  log_agreement(query_id, model_a, model_b, k, jaccard, rbo_ext, rbo_p, kendall_tau_b, shared)
  feedback(query_id, page_id, kind, ts)              click / found / irrelevant

Requests put an entry on a bounded queue and return; one writer thread drains it in batches (one
transaction per batch) every `log.flush_interval_s` or `log.batch_size` entries, and on shutdown.
A hard crash loses what is still queued: at most one batch plus what arrived during its write — unless
`durable` (`[log] durable`, for replicas): then an execution's rows are committed before its reply.
A full queue drops the entry (counted in /v1/status) rather than slowing a request down.
"""
from __future__ import annotations

import itertools
import json
import logging
import queue
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from indexes.querylog import QUERY_COLUMNS, ROW_TABLES, LogTables
from indexes.store_rows import StoreUnavailable
from indexes.store import CorpusStore

from engine.core.clock import utcnow

log = logging.getLogger("refindery.querylog")





# The `endpoint` label of a relation search's log row. The other verbs log their names (search,
# compare, evidence, ...); this one has been logged under its route since the first release, and
# keeps that label so old logs and the queries written over them stay comparable.
RELATION_SEARCH_ENDPOINT = "/v1/public/search"


@dataclass
class LogEntry:
    query_id: str
    endpoint: str
    workspace: str | None
    query: str | None
    params: dict[str, Any]
    models: list[str]
    timings: dict[str, Any] = field(default_factory=dict)
    total: int | None = None
    returned: int | None = None
    pinned: dict[str, str] = field(default_factory=dict)
    error_type: str | None = None
    error_title: str | None = None
    scopes: list[str] | None = None   # the document scopes it ran within (None: every scope); feedback reads it
    ts: datetime = field(default_factory=utcnow)
    candidates: list[tuple] = field(default_factory=list)  # (model, arm, rank, chunk_id, page_id, score)
    fused: list[tuple] = field(default_factory=list)  # (model, stage, rank, chunk_id, page_id, score)
    results: list[tuple] = field(default_factory=list)  # (model, rank, page_id, score, pinned)
    agreement: list[tuple] = field(default_factory=list)  # (model_a, model_b, k, jaccard, rbo, p, tau, shared)
    access: list[tuple] = field(default_factory=list)  # (ts, key_id, method, route, workspace, status, ms)
    call_only: bool = False  # an HTTP call's access row alone (query_id is its request id): no log_queries row


RETRY_MAX_S = 2.0      # the longest wait between two tries of a batch the store did not take
CLOSE_RETRY_S = 10.0   # how long a closing log still tries


class QueryLog:
    def __init__(self, store: CorpusStore, enabled: bool = True, queue_size: int = 10_000,
                 batch_size: int = 200, flush_interval_s: float = 1.0, durable: bool = False):
        """`durable`: an execution's rows are committed before its reply (`[log] durable`: replicas,
        where a process killed mid-load must lose no row of a request it answered); an HTTP call's
        access row alone still goes through the queue."""
        self.store = store
        self.durable = durable
        self._write_lock = threading.Lock()   # one batch at a time on the log's own connection
        self.enabled = enabled
        # called with every entry recorded, kept or not (the server's metrics, server/metrics.py: the
        # entries are where a search's stage times are); a listener is quick and never raises
        self.listeners: list = []
        self.batch_size = batch_size
        self.flush_interval_s = flush_interval_s
        self._queue: queue.Queue[LogEntry] = queue.Queue(maxsize=queue_size)
        self._recent: OrderedDict[str, None] = OrderedDict()  # ids not yet surely on disk
        self._recent_lock = threading.Lock()
        self.dropped = 0
        self.written = 0
        self.tables = LogTables(store)
        self._versions = itertools.count(1)   # next() is atomic: two threads never take one number
        self.feedback_version = 0   # moved on by every change to the feedback: what caches of it compare
        self._stamp: str | None = store.feedback_stamp()   # the store's mark of the feedback's last change
        self._stop = threading.Event()
        self._idle = threading.Condition()
        self._pending = 0  # recorded but not yet committed (queued, or in the batch being written)
        self._thread = threading.Thread(target=self._run, name="querylog-writer", daemon=True)
        if enabled:
            self._thread.start()

    # Producer side -------------------------------------------------------------------------------
    def record(self, entry: LogEntry) -> None:
        for listener in self.listeners:
            listener(entry)
        if not self.enabled:
            return
        if self.durable and not entry.call_only:
            self._write([entry])   # StoreUnavailable reaches the caller: an answer, but not logged, is an error
            return
        if not entry.call_only:
            with self._recent_lock:
                self._recent[entry.query_id] = (entry.workspace, entry.scopes)
                while len(self._recent) > 50_000:
                    self._recent.popitem(last=False)
        with self._idle:
            self._pending += 1
        try:
            self._queue.put_nowait(entry)
        except queue.Full:
            self.dropped += 1
            with self._idle:
                self._pending -= 1

    def origin_of(self, query_id: str) -> tuple[bool, str | None, list[str] | None]:
        """(whether the query is logged or queued, its workspace, the document scopes it ran within
        or None for every scope): what decides who may read it (engine/core/access.readable_query)."""
        with self._recent_lock:
            if query_id in self._recent:
                workspace, scopes = self._recent[query_id]
                return True, workspace, scopes
        return self.tables.origin_of(query_id)

    def knows(self, query_id: str) -> bool:
        with self._recent_lock:
            if query_id in self._recent:
                return True
        return self.tables.exists(query_id)

    # Writer side ---------------------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.is_set() or not self._queue.empty():
            batch: list[LogEntry] = []
            deadline = time.monotonic() + self.flush_interval_s
            while len(batch) < self.batch_size:
                timeout = deadline - time.monotonic()
                if timeout <= 0:
                    break
                try:
                    batch.append(self._queue.get(timeout=min(timeout, 0.05)))
                except queue.Empty:
                    if self._stop.is_set():
                        break
            if batch:
                try:
                    self._write_through(batch)
                except Exception:  # the log must never take the engine down
                    log.exception("query log: a batch of %d entries could not be written", len(batch))
                finally:
                    with self._idle:
                        self._pending -= len(batch)
                        self._idle.notify_all()

    def _write_through(self, batch: list[LogEntry]) -> None:
        """Write a batch; while the store does not answer (a PostgreSQL restarting), keep it and try
        again, backing off to RETRY_MAX_S — entries recorded meanwhile wait in the queue (up to its
        size; past it they are dropped and counted) — until the store is back, or for at most
        CLOSE_RETRY_S once the log is closing. A batch is one transaction: a failed try wrote none of it."""
        wait, closing_since = 0.1, None
        while True:
            try:
                self._write(batch)
                return
            except StoreUnavailable:
                if self._stop.is_set():
                    closing_since = closing_since or time.monotonic()
                    if time.monotonic() - closing_since > CLOSE_RETRY_S:
                        raise
                log.warning("query log: the store did not answer; %d entries kept, trying again in %.1f s",
                            len(batch), wait)
                time.sleep(wait)
                wait = min(wait * 2, RETRY_MAX_S)

    def _write(self, batch: list[LogEntry]) -> None:
        with self._write_lock:
            self._write_locked(batch)

    def _write_locked(self, batch: list[LogEntry]) -> None:
        queries = {c: [] for c in QUERY_COLUMNS}
        rows: dict[str, list[tuple]] = {k: [] for k in ROW_TABLES}
        for e in batch:
            for kind in ROW_TABLES:
                rows[kind] += [(e.query_id, *r) for r in getattr(e, kind)]
            if e.call_only:
                continue
            for c in QUERY_COLUMNS:
                v = getattr(e, c)
                queries[c].append(json.dumps(v, default=str) if c in ("params", "timings", "pinned") else v)
        self.tables.write(queries, rows)
        self.written += len(batch)
        with self._recent_lock:
            for e in batch:
                self._recent.pop(e.query_id, None)

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until everything queued so far is written."""
        if not self.enabled:
            return True
        end = time.monotonic() + timeout
        with self._idle:
            while self._pending > 0 and time.monotonic() < end:
                self._idle.wait(0.05)
            return self._pending == 0

    def close(self) -> None:
        if self._thread.is_alive():   # started while enabled, even if turned off since
            self._stop.set()
            self._thread.join(timeout=30)

    # Reads and maintenance -----------------------------------------------------------------------
    def add_feedback(self, query_id: str, page_id: str, kind: str, key_id: str | None = None) -> None:
        """Store a judgment. A query still queued is written first, so that what reads the feedback
        with its query (the shortcuts) finds both."""
        with self._recent_lock:
            queued = query_id in self._recent
        if queued:
            self.flush()
        self.tables.add_feedback(query_id, page_id, kind, utcnow(), key_id)
        self._feedback_changed()

    def delete_feedback(self, workspace: str, query_id: str | None = None, page_id: str | None = None,
                        scopes: list[str] | None = None) -> int:
        """Forget judgments on a workspace's queries (indexes/querylog.py: delete_feedback); how many went."""
        self.flush()
        n = self.tables.delete_feedback(workspace, query_id, page_id, scopes)
        self._feedback_changed()
        return n

    def forget_pages(self, page_ids: list[str]) -> int:
        """Forget every judgment on pages that were deleted."""
        n = self.tables.forget_pages(page_ids)
        self._feedback_changed()
        return n

    def prune(self, before: datetime) -> dict[str, int]:
        """Delete log rows of executions older than `before` (feedback on them too)."""
        out = self.tables.prune(before)
        self._feedback_changed()
        return out

    def _feedback_changed(self) -> None:
        """This process's caches of the feedback start over; with replicas, every other's too once it
        has applied the store generation this marks (follow_feedback)."""
        self.feedback_version = next(self._versions)
        self._stamp = self.store.touch_feedback()
        if self._stamp is not None:
            self._stamp = str(self._stamp)

    def follow_feedback(self) -> None:
        """A replica's, on following the store: the feedback another replica changed is read again."""
        stamp = self.store.feedback_stamp()
        if stamp != self._stamp:
            self._stamp = stamp
            self.feedback_version = next(self._versions)

    def stats(self) -> dict[str, Any]:
        return {"enabled": self.enabled, "queued": self._queue.qsize(), "written": self.written,
                "dropped": self.dropped}
