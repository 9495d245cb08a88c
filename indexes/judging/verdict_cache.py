"""Enumeration results kept for the next search that asks the same: a relation's per-entity verdicts
for the constraints on it, and a whole plan's statuses, as Arrow tables within a byte budget, keyed by
workspace, version and the statement's SQL and parameters (everything the result depends on).
"""
from __future__ import annotations

import threading
from collections import OrderedDict

import pyarrow as pa

SEEN_KEYS = 4096     # enumeration statements remembered as asked-for once (VerdictCache.seen)

class VerdictCache:
    """Least-recently-used enumeration results (Arrow tables) within a byte budget, keyed by
    workspace, version and the statement's SQL and parameters: a relation's per-entity verdicts
    for the constraints on it (Enumerator._verdict_table) and a whole plan's statuses (Enumerator.run).
    `budget_mb` 0: off."""

    def __init__(self, budget_mb: float):
        self.budget = int(budget_mb * 2**20)
        self._items: OrderedDict[tuple, pa.Table] = OrderedDict()
        self._seen: OrderedDict[tuple, None] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def seen(self, key: tuple) -> bool:
        """Whether `key` was asked for before (and remember it): a result is cached on its second
        use, so a search that is never repeated pays nothing for the cache."""
        if self.budget <= 0:
            return False
        with self._lock:
            if key in self._seen:
                self._seen.move_to_end(key)
                return True
            self._seen[key] = None
            while len(self._seen) > SEEN_KEYS:
                self._seen.popitem(last=False)
            return False

    def get(self, key: tuple) -> pa.Table | None:
        if self.budget <= 0:
            return None
        with self._lock:
            table = self._items.get(key)
            if table is None:
                self.misses += 1
                return None
            self._items.move_to_end(key)
            self.hits += 1
            return table

    def put(self, key: tuple, table: pa.Table) -> None:
        if table.nbytes > self.budget:
            return
        with self._lock:
            old = self._items.pop(key, None)
            self._bytes -= old.nbytes if old is not None else 0
            self._items[key] = table
            self._bytes += table.nbytes
            while self._bytes > self.budget:
                _, gone = self._items.popitem(last=False)
                self._bytes -= gone.nbytes

    def forget(self, workspace_id: str) -> None:
        """Drop a workspace's entries (its version moved: they can never be read again)."""
        with self._lock:
            for key in [k for k in self._items if k[0] == workspace_id]:
                self._bytes -= self._items.pop(key).nbytes
            for key in [k for k in self._seen if k[0] == workspace_id]:
                del self._seen[key]

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._seen.clear()
            self._bytes = 0

