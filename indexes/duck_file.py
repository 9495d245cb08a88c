"""A DuckDB file that one process opens (DuckDB lets one process write a file): its connection, a
cursor per thread, cursors of their own, one write transaction at a time. The corpus store
(indexes/store.py) is one; with the corpus in PostgreSQL, the relation tables keep one of their own in
the data dir (indexes/relations.py)."""
from __future__ import annotations

import contextlib
import threading
from pathlib import Path
from typing import Iterator

import duckdb

from .store_rows import StoreBusy, StoreError


NO_FILES = {"enable_external_access": False}


def _lock_down(con: duckdb.DuckDBPyConnection) -> None:
    """No progress bar (a reader streams without one), then the configuration locked. The same file
    opened again in this process shares its database, already locked: checked, not set again."""
    if con.execute("SELECT current_setting('lock_configuration')").fetchone()[0]:
        return
    con.execute("SET enable_progress_bar = false")
    con.execute("SET lock_configuration = true")


class DuckFile:
    kind = "duckdb"   # which store this is (tests assert it: a setting ignored would pass them otherwise)

    def __init__(self, path: Path | str):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            # no file but this one, and no setting changed later: the SQL run here includes replayed
            # relation writes (indexes/relation_log.py) and SQL generated from requests (relation search)
            self._con = duckdb.connect(str(self.path), config=NO_FILES)
            _lock_down(self._con)
        except duckdb.IOException as exc:
            if "lock" in str(exc).lower():
                raise StoreBusy(self.path, str(exc)) from exc
            raise StoreError(f"cannot open the store {self.path}: {exc}") from exc
        self._write_lock = threading.RLock()
        self._local = threading.local()
        self._cursors: list[duckdb.DuckDBPyConnection] = []  # closed with the file, so the file is let go
        self.closed = False

    def cursor(self) -> duckdb.DuckDBPyConnection:
        """A cursor for the calling thread (DuckDB connections are not shared across threads)."""
        cur = getattr(self._local, "cur", None)
        if cur is None:
            cur = self.new_cursor()
            self._local.cur = cur
        return cur

    def new_cursor(self) -> duckdb.DuckDBPyConnection:
        """A cursor of its own (for a thread that writes outside the store's lock, like the query log)."""
        cur = self._con.cursor()
        with self._write_lock:
            self._cursors.append(cur)
        return cur

    def close(self) -> None:
        """Close every cursor and the connection: DuckDB keeps the file (and its lock) while any
        cursor lives."""
        with self._write_lock:
            if self.closed:
                return
            for cur in self._cursors:
                try:
                    cur.close()
                except duckdb.Error:
                    pass
            self._con.close()
            self.closed = True

    @contextlib.contextmanager
    def transaction(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """The writer connection inside one transaction, under the write lock: all or nothing."""
        with self._write_lock:
            con = self._con
            con.begin()
            try:
                yield con
                con.commit()
            except BaseException:
                con.rollback()
                raise
