"""The corpus store in PostgreSQL (psycopg 3): the same verbs, rows and answers as the DuckDB store
(indexes/store.py), for stores that several processes — replicas — open at once.

Writers from any number of processes are serialised by the generation row: every write transaction
first moves `meta.generation` (an UPDATE, whose row lock is held to the commit), so a write reads
what every earlier write committed, two replicas posting the same page one after the other leave one
page and one set of chunks, and generations are committed in the order they are numbered (a replica
that has applied generation g has seen every write up to g). Reads run in autocommit on a bounded
pool of connections; a read of the search's in-memory view (hot_read) is one REPEATABLE READ
snapshot. The schema is versioned (indexes/pg_schema.py). This file holds the store's connections,
its write transaction and its change feed; the verbs are in indexes/pg_reads.py and pg_writes.py.
"""
from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import psycopg
from psycopg.types.string import StrBinaryDumper, StrDumperUnknown
from psycopg_pool import ConnectionPool, PoolTimeout

from . import pg_schema
from .pg_lookups import PgLookups
from .pg_reads import PgReads
from .pg_writes import PgWrites
from .sql import PgSql, Sql
from .store_rows import StoreBusy, StoreUnavailable

log = logging.getLogger(__name__)

SCHEMA_VERSION = "2"    # the corpus's identifiers (indexes/store.py's SCHEMA_VERSION)
CHANNEL, VECTORS_NOTICE = pg_schema.CHANNEL, pg_schema.VECTORS_NOTICE
LOCK_FILE = "replica.lock"   # in a replica's data dir: one process a data dir (PgCorpusStore.hold)
REPLICA_RETENTION_S = 86_400   # a replica not heard from for a day no longer holds back pruning the change rows


class _TextNoNul(StrDumperUnknown):
    """A str as PostgreSQL text with each NUL (U+0000, which PostgreSQL text cannot hold — the default
    dumper raises) written as U+FFFD, one character for one, so every offset into the text stays true.
    Without it, a page, a query or a name carrying NUL failed its write with a 500 in PostgreSQL only
    (DuckDB keeps the NUL)."""

    def dump(self, obj: str):
        return (obj.replace("\x00", "\ufffd") if "\x00" in obj else obj).encode(self._encoding)


class _BinaryNoNul(StrBinaryDumper):
    def dump(self, obj: str):
        return (obj.replace("\x00", "\ufffd") if "\x00" in obj else obj).encode(self._encoding)


def _configure(con: psycopg.Connection) -> None:
    con.execute("SET TIME ZONE 'UTC'")   # naive timestamps are UTC, as in the DuckDB store
    con.adapters.register_dumper(str, _TextNoNul)
    con.adapters.register_dumper(str, _BinaryNoNul)


def _where(url: str) -> str:
    """A store's URL without its password, for a message."""
    from psycopg.conninfo import conninfo_to_dict
    try:
        parts = conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return "its URL"
    return f"database {parts.get('dbname', '?')} on {parts.get('host', 'localhost')}"


def _unavailable(exc: Exception) -> None:
    """A connection lost under a statement: the store's typed error (a route answers it with a 503)."""
    if isinstance(exc, psycopg.OperationalError):
        raise StoreUnavailable(f"the store's PostgreSQL did not answer: {exc}".strip()) from exc


def _call_each(callbacks: list[Callable], arg) -> None:
    """The change feed's followers, each in turn: one's failure is its own."""
    for cb in callbacks:
        try:
            cb(arg)
        except Exception:
            log.exception("store: a follower of %r failed", arg)


class PgCorpusStore(PgReads, PgLookups, PgWrites):
    """The corpus store in a PostgreSQL database, named by a postgresql:// URL."""

    kind = "postgres"
    PAGE_ID_TABLES = ("chunks", "page_entities", "rel_documents", "criterion_judgments")

    def __init__(self, url: str, scratch_dir: Path | str | None = None, connect_timeout_s: float = 10.0,
                 pool_size: int = 8):
        self.url = url
        self._scratch = Path(scratch_dir) if scratch_dir is not None else Path(tempfile.gettempdir())
        self._timeout = connect_timeout_s
        self._conns: list[psycopg.Connection] = []     # the connections of our own (writer, log, listener)
        self._lock = threading.Lock()
        self.closed = False
        self._writer = self._connect()
        self._held = None    # the data dir's lock file, while this process holds it (hold)
        self._write_lock = threading.RLock()
        self.migrated_from = pg_schema.migrate(self._writer, SCHEMA_VERSION)
        # reads share a bounded pool: a replica's request threads never hold more than pool_size
        # connections of the server's max_connections, however many threads ask
        self._pool = ConnectionPool(url, min_size=1, max_size=pool_size, timeout=connect_timeout_s, open=False,
                                    kwargs={"autocommit": True, "connect_timeout": max(1, int(connect_timeout_s))},
                                    configure=_configure, check=ConnectionPool.check_connection,
                                    name="refindery-store")   # check: a connection the server dropped
                                                              # (a restart) is replaced, not handed out
        self._pool.open(wait=False)
        self._seen = threading.Condition()
        self._seen_generation = 0
        self._callbacks: list[Callable[[int], None]] = []
        self._vector_callbacks: list[Callable[[str], None]] = []
        self._follower: threading.Thread | None = None

    @property
    def scratch_dir(self) -> Path:
        """Where files that only this process reads go (the in-memory view's spilled texts)."""
        return self._scratch

    def _connect(self) -> psycopg.Connection:
        """A connection of its own (autocommit), not from the pool."""
        try:
            con = psycopg.connect(self.url, autocommit=True, connect_timeout=max(1, int(self._timeout)))
        except psycopg.OperationalError as exc:
            raise StoreUnavailable(f"cannot reach the store's PostgreSQL: {exc}".strip()) from exc
        _configure(con)
        with self._lock:
            self._conns = [c for c in self._conns if not c.closed] + [con]
        return con

    @contextlib.contextmanager
    def _borrow(self) -> Iterator[psycopg.Connection]:
        """A pooled connection for one read (or one short transaction); a server that went away, or
        no connection to be had within the connect timeout, is StoreUnavailable. After an outage the
        pool waits out its reconnect backoff (doubling from 1 s): meanwhile a read that finds no pooled
        connection connects by itself, so service resumes as soon as the server is back."""
        with contextlib.ExitStack() as stack:
            try:
                con = stack.enter_context(self._pool.connection())
            except PoolTimeout:
                con = self._connect()                    # StoreUnavailable while the server is still down
                stack.callback(self._drop, con)
            except psycopg.OperationalError as exc:
                _unavailable(exc)   # raises StoreUnavailable
                raise
            try:
                yield con
            except psycopg.OperationalError as exc:
                _unavailable(exc)
                raise

    def _drop(self, con: psycopg.Connection) -> None:
        with contextlib.suppress(psycopg.Error):
            con.close()
        with self._lock:
            self._conns = [c for c in self._conns if c is not con]

    def _q(self, sql: str, params: Iterable[Any] = ()) -> list[tuple]:
        with self._borrow() as con:
            return con.execute(sql, list(params)).fetchall()

    def _one(self, sql: str, params: Iterable[Any] = ()) -> tuple | None:
        with self._borrow() as con:
            return con.execute(sql, list(params)).fetchone()

    def _named(self, sql: str, params: Iterable[Any] = ()) -> tuple[list[str], list[tuple]]:
        """A query's column names and rows."""
        with self._borrow() as con:
            cur = con.execute(sql, list(params))
            return [d.name for d in cur.description], cur.fetchall()

    def sql(self, own: bool = False) -> Sql:
        """SQL for the tables kept beside the corpus (indexes/sql.py): on pooled connections, or with
        `own` on a connection of its own (reopened after the server went away)."""
        if not own:
            return PgSql(self._borrow, _unavailable)
        held: list[psycopg.Connection] = []

        @contextlib.contextmanager
        def connection() -> Iterator[psycopg.Connection]:
            if not held or held[0].closed or held[0].broken:
                held[:] = [self._connect()]
            yield held[0]
        return PgSql(connection, _unavailable)

    def close(self) -> None:
        with self._lock:
            if self.closed:
                return
            self.closed = True      # the follower sees it within a second and stops
            for con in self._conns:
                with contextlib.suppress(psycopg.Error):
                    con.close()
        self._pool.close()
        if self._held is not None:
            self._held.close()   # the data dir's lock goes with it
            self._held = None

    @contextlib.contextmanager
    def _write(self, bump: bool = True) -> Iterator[tuple[psycopg.Connection, int]]:
        """One write transaction, serialised with every other writer of the store (of any process) on
        the generation row; yields (connection, new generation), or the current one without `bump`."""
        with self._write_lock:
            con = self._live_writer()
            try:
                with con.transaction():
                    if bump:
                        gen = con.execute("UPDATE meta SET value = (value::bigint + 1)::text WHERE key = 'generation' "
                                          "RETURNING value::bigint").fetchone()[0]
                        # delivered to every listener when (and only if) this transaction commits
                        con.execute("SELECT pg_notify(%s, %s)", [CHANNEL, str(gen)])
                    else:
                        gen = con.execute("SELECT value::bigint FROM meta WHERE key = 'generation' FOR UPDATE"
                                          ).fetchone()[0]
                    yield con, int(gen)
            except psycopg.OperationalError as exc:
                raise StoreUnavailable(f"the store's PostgreSQL went away during a write: {exc}".strip()) from exc

    # The relation tables' shared writes (indexes/relation_log.py) ---------------------------------
    @contextlib.contextmanager
    def shared_write(self) -> Iterator[tuple[psycopg.Connection, int]]:
        """A write of something every replica keeps beside the store (the relation tables): one
        transaction at a new generation, serialised with every other writer; (connection, generation)."""
        with self._write(bump=True) as (con, gen):
            yield con, gen

    @staticmethod
    def add_relation_op(con: psycopg.Connection, generation: int, replica: str, changes: list[str], ops: str,
                        tables: list[bytes]) -> None:
        # the tables as binary (a load's are megabytes: the text form would double them and take 3x longer)
        con.execute("INSERT INTO relation_ops VALUES (%s, %s, now(), %s, %s, %b)",
                    [generation, replica, changes, ops, tables])

    def relation_ops(self, after: int, upto: int | None = None, limit: int = 50,
                     con: psycopg.Connection | None = None) -> list[tuple[int, list[str], str, list[bytes]]]:
        """The relation writes past generation `after` (up to `upto`), oldest first, at most `limit`:
        (generation, workspaces changed, ops, tables)."""
        sql = ("SELECT generation, changes, ops, tables FROM relation_ops WHERE generation > %s "
               + ("AND generation <= %s " if upto is not None else "") + "ORDER BY generation LIMIT %s")
        params = [after, *([upto] if upto is not None else []), limit]
        if con is not None:
            return con.execute(sql, params, binary=True).fetchall()
        with self._borrow() as c:
            return c.execute(sql, params, binary=True).fetchall()

    def hold(self, folder: Path) -> None:
        """Hold `folder` (a replica's data dir: its indexes) for this process — a lock file there, let
        go when the store closes or the process dies. Replicas share the store, never a data dir;
        StoreBusy when another process holds it."""
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / LOCK_FILE
        fh = open(path, "a+")
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            pid = fh.read().strip() or "?"
            fh.close()
            raise StoreBusy(path, f"held in refindery (PID {pid})") from None
        fh.seek(0)
        fh.truncate()
        fh.write(str(os.getpid()))
        fh.flush()
        self._held = fh

    def report_applied(self, replica_id: str, generation: int, address: str | None = None) -> None:
        """Record that replica `replica_id` has applied every write up to `generation` (the change
        rows below the slowest live replica's are the only ones pruned)."""
        with self._borrow() as con:
            con.execute("""INSERT INTO replicas VALUES (%s, %s, %s, now() AT TIME ZONE 'UTC', now() AT TIME ZONE 'UTC')
                           ON CONFLICT (replica_id) DO UPDATE SET applied = excluded.applied, seen_at = excluded.seen_at,
                           address = coalesce(excluded.address, replicas.address)""",
                        [replica_id, address, generation])

    def replicas(self, within_s: float | None = None) -> list[dict]:
        """Every replica that reported within `within_s` (default REPLICA_RETENTION_S): id, address,
        applied generation, when seen."""
        cols, rows = self._named(
            "SELECT replica_id, address, applied, started_at, seen_at FROM replicas "
            "WHERE seen_at > (now() AT TIME ZONE 'UTC') - make_interval(secs => %s) ORDER BY replica_id",
            [REPLICA_RETENTION_S if within_s is None else within_s])
        return [dict(zip(cols, r)) for r in rows]

    def slowest_replica(self) -> int | None:
        """The lowest generation a live replica has applied (None with no replica reporting)."""
        row = self._one("SELECT min(applied) FROM replicas WHERE seen_at > (now() AT TIME ZONE 'UTC') - "
                        "make_interval(secs => %s)", [REPLICA_RETENTION_S])
        return None if row is None or row[0] is None else int(row[0])

    def _live_writer(self) -> psycopg.Connection:
        """The writer connection, checked first (a round trip): one the server dropped while it was
        idle (a restart) is replaced before a write begins, not found out by the write."""
        if not (self._writer.closed or self._writer.broken):
            try:
                self._writer.execute("SELECT 1")
                return self._writer
            except psycopg.OperationalError:
                pass
        self._writer = self._connect()
        return self._writer

    def schema_version(self) -> str:
        row = self._one("SELECT value FROM meta WHERE key = 'schema_version'")
        return row[0] if row else SCHEMA_VERSION

    def setting(self, key: str) -> str | None:
        row = self._one("SELECT value FROM meta WHERE key = %s", [f"setting:{key}"])
        return row[0] if row else None

    def generation(self) -> int:
        """The committed generation (read each time: other processes write too)."""
        return int(self._one("SELECT value FROM meta WHERE key = 'generation'")[0])

    def on_generation(self, callback: Callable[[int], None]) -> None:
        """Call `callback(generation)` (from the follower thread) whenever the store's committed
        generation moves, whichever process wrote it; with a missed notice (the server restarted)
        the next one, or the follower's own re-read on reconnecting, carries the latest."""
        with self._seen:
            self._callbacks.append(callback)
        self._follow()

    def on_vectors(self, callback: Callable[[str], None]) -> None:
        """Call `callback(model)` (from the follower thread) when any process stored vectors of `model`
        without moving the generation (a background embedding: a catch-up, an added model)."""
        with self._seen:
            self._vector_callbacks.append(callback)
        self._follow()

    def _vectors_added(self, model: str) -> None:
        with self._seen:
            callbacks = list(self._vector_callbacks)
        _call_each(callbacks, model)

    def wait_for(self, generation: int, timeout_s: float) -> bool:
        """Whether the store has committed `generation` (a write's reply token) within `timeout_s`."""
        self._follow()
        deadline = time.monotonic() + timeout_s
        with self._seen:
            while self._seen_generation < generation:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._seen.wait(min(left, 1.0))
        return self._seen_generation >= generation or self.generation() >= generation

    def _follow(self) -> None:
        with self._lock:
            if self._follower is None and not self.closed:
                self._follower = threading.Thread(target=self._listen, name="store-follower", daemon=True)
                self._follower.start()

    def _saw(self, generation: int) -> None:
        with self._seen:
            if generation <= self._seen_generation:
                return
            self._seen_generation = generation
            self._seen.notify_all()
            callbacks = list(self._callbacks)
        _call_each(callbacks, generation)

    def _listen(self) -> None:
        """LISTEN on the channel, reconnecting after the server went away (then re-reading the
        generation, for the notices sent while it was gone), until the store is closed."""
        backoff = 0.1
        while not self.closed:
            try:
                with psycopg.connect(self.url, autocommit=True, connect_timeout=max(1, int(self._timeout))) as con:
                    con.execute(f"LISTEN {CHANNEL}")
                    self._saw(int(con.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()[0]))
                    backoff = 0.1
                    while not self.closed:
                        for note in con.notifies(timeout=1.0):
                            if note.payload.startswith(VECTORS_NOTICE):
                                self._vectors_added(note.payload[len(VECTORS_NOTICE):])
                            else:
                                self._saw(int(note.payload))
            except psycopg.Error:
                time.sleep(backoff)
                backoff = min(backoff * 2, 2.0)
