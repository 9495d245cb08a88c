"""The relation tables shared by replicas: each replica keeps them in a DuckDB file of its own (the
relation search judges rows there, in DuckDB SQL and NumPy), and every write to them goes through
the shared store's log, so that every replica's file holds the same rows.

A write (a load, a document load, a correction, a new workspace) runs as usual on the local file, on
a connection that records each call that changes it — `execute` and `executemany` with their
parameters, `register` with its Arrow table, `unregister` — and, in the same store transaction, is
added to `relation_ops` at a new store generation. That transaction holds the store's generation
row, so relation writes of every replica are serialised and numbered: before running its own, a
writer replays the ones it has not applied; a replica's follower replays every one up to the
generation it is about to apply (engine/core/repair.py), so a search that waits for a write's
generation token sees the write's rows on any replica. The local file records the last generation
it applied (`rel_applied`), in the transaction that applied it: the store commits first, so a crash
in between leaves the write in the log, and the file replays it when next opened.

A write must be deterministic given its statements, parameters and tables: its times and ids come
in as parameters (never `now()` or `random()` in the SQL), and numbering follows an explicit order.
"""
from __future__ import annotations

import base64
import contextlib
import datetime as dt
import decimal
import json
import re
from typing import Any, Callable, Iterator

import duckdb
import numpy as np
import pyarrow as pa

from .duck_file import DuckFile

_READ = re.compile(r"\s*SELECT\b", re.IGNORECASE)   # a statement that changes nothing: not recorded
REPLAY_BATCH = 50


# Parameters as JSON, with the types DuckDB takes that JSON lacks tagged --------------------------
def encode(value: Any) -> Any:
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, (list, tuple)):
        return [encode(v) for v in value]
    if isinstance(value, dt.datetime):
        return {"$dt": value.isoformat()}
    if isinstance(value, dt.date):
        return {"$d": value.isoformat()}
    if isinstance(value, decimal.Decimal):
        return {"$dec": str(value)}
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"$b": base64.b64encode(bytes(value)).decode()}
    raise TypeError(f"a relation write's parameter of type {type(value).__name__} cannot be recorded")


def decode(value: Any) -> Any:
    if isinstance(value, list):
        return [decode(v) for v in value]
    if isinstance(value, dict):
        (tag, text), = value.items()
        return {"$dt": dt.datetime.fromisoformat, "$d": dt.date.fromisoformat, "$dec": decimal.Decimal,
                "$b": base64.b64decode}[tag](text)
    return value


def _ipc(table: pa.Table) -> bytes:
    """The table as an Arrow IPC stream, zstd-compressed (a load's columns shrink several times)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema, options=pa.ipc.IpcWriteOptions(compression="zstd")) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def _table(data: bytes) -> pa.Table:
    return pa.ipc.open_stream(pa.py_buffer(data)).read_all()


class Recorder:
    """A DuckDB connection inside a write transaction that records each call that changes the file."""

    def __init__(self, con: duckdb.DuckDBPyConnection):
        self._con = con
        self.ops: list[list] = []
        self.tables: list[bytes] = []

    def execute(self, sql: str, params=None):
        if not _READ.match(sql):
            self.ops.append(["x", sql, encode(params)])
        return self._con.execute(sql) if params is None else self._con.execute(sql, params)

    def executemany(self, sql: str, rows):
        rows = list(rows)
        self.ops.append(["m", sql, encode(rows)])
        return self._con.executemany(sql, rows)

    def register(self, name: str, table: pa.Table):
        if not isinstance(table, pa.Table):
            raise TypeError("a relation write registers Arrow tables only (they are recorded as Arrow IPC)")
        self.ops.append(["r", name, len(self.tables)])
        self.tables.append(_ipc(table))
        return self._con.register(name, table)

    def unregister(self, name: str):
        self.ops.append(["u", name])
        return self._con.unregister(name)


def replay(con: duckdb.DuckDBPyConnection, ops: list[list], tables: list[bytes]) -> None:
    """Run a recorded write's calls again, in order, on `con` (inside a transaction)."""
    for op in ops:
        kind = op[0]
        if kind == "x":
            con.execute(op[1]) if op[2] is None else con.execute(op[1], decode(op[2]))
        elif kind == "m":
            con.executemany(op[1], decode(op[2]))
        elif kind == "r":
            con.register(op[1], _table(bytes(tables[op[2]])))
        elif kind == "u":
            con.unregister(op[1])
        else:
            raise ValueError(f"unknown relation op {kind!r}")


class SharedRelations(DuckFile):
    """A replica's DuckDB file of the relation tables, its writes shared through the store's log.
    `transaction()` stays a local one (the tables' own DDL, which each replica runs as it opens);
    `shared_transaction(changes)` is a write every replica replays."""

    def __init__(self, path, store, replica: str):
        """`store`: the shared corpus store (indexes/pg_store.py); `replica`: this replica's id."""
        super().__init__(path)
        self.shared = store
        self.replica = replica
        self.on_replayed: Callable[[list[str]], None] | None = None   # workspaces another replica changed
        self.on_written: Callable[[int], None] | None = None   # after a write here: its generation
        self.stored: Callable[[], None] | None = None   # a write in the store, not yet here (a crash test's point)
        self._upto = 0          # every relation write at or below this generation is applied here
        with super().transaction() as con:
            con.execute("CREATE TABLE IF NOT EXISTS rel_applied (generation BIGINT NOT NULL)")
            row = con.execute("SELECT max(generation) FROM rel_applied").fetchone()
            if row[0] is None:
                con.execute("INSERT INTO rel_applied VALUES (0)")
            self._applied = int(row[0] or 0)   # the last relation write applied here

    @property
    def applied(self) -> int:
        """The store generation up to which every relation write is applied in this file."""
        return max(self._upto, self._applied)

    def catch_up(self, upto: int | None = None) -> int:
        """Replay the relation writes committed past what this file applied, up to generation `upto`
        (every one committed, without); returns how many."""
        n = 0
        with self._write_lock:
            while True:
                rows = self.shared.relation_ops(self._applied, upto, REPLAY_BATCH)
                for row in rows:
                    self._apply(*row)
                n += len(rows)
                if len(rows) < REPLAY_BATCH:
                    break
            if upto is not None:
                self._upto = max(self._upto, upto)
        return n

    def _apply(self, generation: int, changes: list[str], ops: str, tables: list[bytes]) -> None:
        con = self._con
        con.begin()
        try:
            replay(con, json.loads(ops), tables)
            con.execute("UPDATE rel_applied SET generation = ?", [generation])
            con.commit()
        except BaseException:
            con.rollback()
            raise
        self._applied = generation
        if changes and self.on_replayed is not None:
            self.on_replayed(list(changes))

    @contextlib.contextmanager
    def shared_transaction(self, changes: list[str] | tuple = ()) -> Iterator[Recorder]:
        """One write of the relation tables, all or nothing here and in the log, at a new store
        generation (the replicas' other writes wait for it); `changes`: the workspaces whose rows it
        changes (each replica that replays it forgets what it cached of them)."""
        with self._write_lock:
            con = self._con
            began = False
            try:
                with self.shared.shared_write() as (pg, generation):
                    # the writes other replicas committed before this one's generation, first
                    for row in self.shared.relation_ops(self._applied, None, 1 << 30, con=pg):
                        self._apply(*row)
                    con.begin()
                    began = True
                    rec = Recorder(con)
                    yield rec
                    con.execute("UPDATE rel_applied SET generation = ?", [generation])
                    self.shared.add_relation_op(pg, generation, self.replica, list(changes),
                                                json.dumps(rec.ops), rec.tables)
            except BaseException:
                if began:
                    con.rollback()
                raise
            # the store has committed the write: here next (a crash before this replays it at open)
            if self.stored is not None:
                self.stored()
            con.commit()
            self._applied = generation
        if self.on_written is not None:   # outside the file's lock
            self.on_written(generation)
