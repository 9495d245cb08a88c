"""The in-memory tables of a workspace version — each relation's rows as columns (held_columns.py),
the plan's universe — within a byte budget, read in the background so that no search waits for them.
Dropped at the workspace's next write (its version moves).
"""
from __future__ import annotations

import threading
from collections import OrderedDict

from .held_columns import RelationColumns


class ColumnCache:
    """RelationColumns (and other per-version tables) per (workspace, version, ...) within a byte
    budget (0: off). `background` (the default): a missing entry is read on a thread of its own and
    the asking search goes on without it (judged in SQL), so the first search after a write never
    waits for the read; `background=False` reads it in the asking search."""

    def __init__(self, budget_mb: float, background: bool = True):
        self.budget = int(budget_mb * 2**20)
        self.background = background
        self._items: OrderedDict[tuple, object] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self._building: dict[tuple, threading.Thread | None] = {}
        self._epoch: dict[str, int] = {}   # per workspace, moved by forget: a read begun before is not kept
        self._reads: dict[tuple, object] = {}   # how each held relation's rows were read (forget reads again)
        self.builds = 0

    def get(self, key: tuple, build, later: list | None = None):
        """The entry under `key`, or None while it is being read (or when off, or over the budget).
        In the background, a missing entry's read starts now — or, given `later`, is appended
        there for the caller to `start` once it is done (so the read does not slow that caller)."""
        if self.budget <= 0:
            return None
        with self._lock:
            hit = self._items.get(key)
            if hit is not None:
                self._items.move_to_end(key)
                return hit
            if key in self._building:
                return None if self.background else self._wait(key)
            if self.background:
                if later is not None:
                    if all(k != key for k, _ in later):
                        later.append((key, build))
                    return None
                self._start(key, build)
                return None
            self._building[key] = None
            epoch = self._epoch.get(key[0], 0)
        self._build(key, build, epoch)
        with self._lock:
            return self._items.get(key)

    def start(self, reads: list) -> None:
        """Start the background reads a caller deferred (`get(..., later=)`), unless begun or held."""
        with self._lock:
            for key, build in reads:
                if key not in self._building and key not in self._items:
                    self._start(key, build)

    def _start(self, key: tuple, build) -> None:
        thread = threading.Thread(target=self._build, args=(key, build, self._epoch.get(key[0], 0)), daemon=True,
                                  name="relation-columns")
        self._building[key] = thread
        thread.start()

    def _wait(self, key: tuple):
        thread = self._building.get(key)
        self._lock.release()
        try:
            if thread is not None:
                thread.join()
        finally:
            self._lock.acquire()
        return self._items.get(key)

    def _build(self, key: tuple, build, epoch: int) -> None:
        try:
            value = build()
        except Exception:   # a read that fails (a store closing under it): the searches stay in SQL
            value = None
        with self._lock:
            self._building.pop(key, None)
            if value is None or self._epoch.get(key[0], 0) != epoch:   # the workspace was written meanwhile
                return
            self.builds += 1
            size = value.nbytes
            if size > self.budget:
                return
            self._items[key] = value
            if isinstance(value, RelationColumns):
                self._reads[key] = build
            self._bytes += size
            while self._bytes > self.budget:
                gone_key, gone = self._items.popitem(last=False)
                self._reads.pop(gone_key, None)
                self._bytes -= gone.nbytes

    def settle(self) -> None:
        """Wait for every read in progress (tests, benches, closing)."""
        while True:
            with self._lock:
                threads = [t for t in self._building.values() if t is not None]
            if not threads:
                return
            for t in threads:
                t.join()

    def forget(self, workspace_id: str, version: int | None = None) -> None:
        """Drop a workspace's entries (a write moved it on). Given the workspace's new `version`, the
        rows of every relation that was held are read again at once, each on a thread of its own
        (in the background mode): a workspace being searched has them back a read's time after the
        write, instead of after the next search has run in SQL."""
        with self._lock:
            self._epoch[workspace_id] = self._epoch.get(workspace_id, 0) + 1
            again = []
            for key in [k for k in self._items if k[0] == workspace_id]:
                self._bytes -= self._items.pop(key).nbytes
                build = self._reads.pop(key, None)
                if build is not None:
                    again.append(((workspace_id, version, *key[2:]), build))
            if version is None or not self.background or self.budget <= 0:
                return
            for key, build in again:
                if key not in self._building and key not in self._items:
                    self._start(key, build)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._reads.clear()
            self._bytes = 0


