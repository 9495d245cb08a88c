"""One way to run SQL on the store's database, whichever it is: the tables kept beside the corpus
(API keys, the query log) write their SQL once, with `?` placeholders, and run on DuckDB or
PostgreSQL alike; where the two dialects differ, a table asks `sql.dialect`.

  rows / row    a query's rows, or its first row (None when none)
  run           a statement that changes rows: how many it changed
  insert        many rows into a table at once (DuckDB: through Arrow; PostgreSQL: COPY)
  transaction   the same, inside one transaction: all or nothing
"""
from __future__ import annotations

import contextlib
import functools
import re
from typing import Any, Iterator, Protocol, Sequence

import pyarrow as pa


class Sql(Protocol):
    dialect: str          # "duckdb" or "postgres"

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]: ...

    def row(self, sql: str, params: Sequence[Any] = ()) -> tuple | None: ...

    def run(self, sql: str, params: Sequence[Any] = ()) -> int: ...

    def insert(self, table: str, columns: list[str], rows: list[tuple], skip_existing: bool = False) -> None: ...

    def transaction(self) -> contextlib.AbstractContextManager["Sql"]: ...


class DuckSql:
    """SQL on a DuckDB cursor. `begin` (a callable that yields a cursor inside a transaction) is the
    store's own write transaction, or this cursor's when it is a cursor of its own."""
    dialect = "duckdb"

    def __init__(self, cursor, begin=None):
        self._cur = cursor
        self._begin = begin

    def _c(self):
        return self._cur() if callable(self._cur) else self._cur

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        return self._c().execute(sql, list(params)).fetchall()

    # fetched to the end: DuckDB refuses other work on a cursor with a result left unread
    def row(self, sql: str, params: Sequence[Any] = ()) -> tuple | None:
        rows = self._c().execute(sql, list(params)).fetchall()
        return rows[0] if rows else None

    def run(self, sql: str, params: Sequence[Any] = ()) -> int:
        rows = self._c().execute(sql, list(params)).fetchall()
        return int(rows[0][0]) if rows and rows[0] and isinstance(rows[0][0], int) else 0

    def insert(self, table: str, columns: list[str], rows: list[tuple], skip_existing: bool = False) -> None:
        """Rows (tuples in `columns` order) into `table`; with `skip_existing`, a row whose key is
        there already is left out (ON CONFLICT DO NOTHING)."""
        if not rows:
            return
        cur = self._c()
        cur.register("_rows", pa.table({c: [r[i] for r in rows] for i, c in enumerate(columns)}))
        try:
            cur.execute(f"INSERT INTO {table} ({', '.join(columns)}) SELECT {', '.join(columns)} FROM _rows"
                        + (" ON CONFLICT DO NOTHING" if skip_existing else ""))
        finally:
            cur.unregister("_rows")

    @contextlib.contextmanager
    def transaction(self) -> Iterator["DuckSql"]:
        if self._begin is not None:
            with self._begin() as con:
                yield DuckSql(con)
            return
        cur = self._c()
        cur.begin()
        try:
            yield DuckSql(cur)
            cur.commit()
        except BaseException:
            cur.rollback()
            raise


@functools.lru_cache(maxsize=512)
def to_pyformat(sql: str) -> str:
    """`?` placeholders as psycopg's `%s` (and a literal `%` doubled), outside quoted strings."""
    parts = re.split(r"('(?:[^']|'')*')", sql)
    return "".join(p if i % 2 else p.replace("%", "%%").replace("?", "%s") for i, p in enumerate(parts))


class PgSql:
    """SQL on psycopg connections (autocommit outside `transaction`). `borrow` is a callable that
    gives a context manager yielding the connection for one statement (a pooled one, or a connection
    of its own); `on_error` turns a lost connection into the store's typed error."""
    dialect = "postgres"

    def __init__(self, borrow, on_error=None):
        self._borrow = borrow
        self._on_error = on_error

    def _with(self, fn):
        try:
            with self._borrow() as con:
                return fn(con)
        except Exception as exc:
            if self._on_error is not None:
                self._on_error(exc)
            raise

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        return self._with(lambda con: con.execute(to_pyformat(sql), list(params)).fetchall())

    def row(self, sql: str, params: Sequence[Any] = ()) -> tuple | None:
        return self._with(lambda con: con.execute(to_pyformat(sql), list(params)).fetchone())

    def run(self, sql: str, params: Sequence[Any] = ()) -> int:
        return self._with(lambda con: con.execute(to_pyformat(sql), list(params)).rowcount)

    def insert(self, table: str, columns: list[str], rows: list[tuple], skip_existing: bool = False) -> None:
        if not rows:
            return

        def write(con):
            with con.cursor() as cur:
                if skip_existing:   # COPY cannot skip a row: one INSERT per row, pipelined by psycopg
                    cur.executemany(f"INSERT INTO {table} ({', '.join(columns)}) VALUES "
                                    f"({', '.join(['%s'] * len(columns))}) ON CONFLICT DO NOTHING", rows)
                    return
                with cur.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
                    for r in rows:
                        copy.write_row(r)
        self._with(write)

    @contextlib.contextmanager
    def transaction(self) -> Iterator["PgSql"]:
        try:
            with self._borrow() as con, con.transaction():
                yield PgSql(lambda: contextlib.nullcontext(con), self._on_error)
        except Exception as exc:
            if self._on_error is not None:
                self._on_error(exc)
            raise
