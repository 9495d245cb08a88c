"""A consistent copy of every table of the corpus store, and the way back into an empty store.

Read inside one snapshot while the store goes on taking writes: DuckDB's MVCC (a read transaction on
a cursor of its own; writers keep committing on theirs) and PostgreSQL's REPEATABLE READ READ ONLY
transaction. Every table is counted first, in that snapshot (which pins it), then written out:

- DuckDB: one Parquet file per table, written through Arrow here (the store's connection may not name
  files), with the table's CREATE statement and its indexes' kept for the restore;
- PostgreSQL: one file per table in COPY's own text format (what `pg_dump --data-only` writes), read
  back with COPY FROM into a schema the store's migrations made (indexes/pg_schema.py).

A restore writes into a store that holds nothing yet, in one transaction: all or nothing."""
from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Callable, Iterator

import duckdb
import pyarrow.parquet as pq

from .store_rows import StoreError

BATCH_ROWS = 50_000
# PostgreSQL's bookkeeping of its own migrations: made by the restoring store's migrations, not copied
PG_OWN = {"schema_migrations"}


class RestoreRefused(StoreError):
    """The target store is not empty, or is of another schema than the backup's."""


class RowsDiffer(StoreError):
    """A table read back does not hold the rows the manifest counted: the restore is rolled back."""


def _check_rows(name: str, got: int, want: int) -> int:
    if got != want:
        raise RowsDiffer(f"the table {name} read back holds {got} rows, the manifest says {want}: nothing was restored")
    return got


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


# ---- reading a snapshot ------------------------------------------------------------------------------
@contextlib.contextmanager
def duck_snapshot(store) -> Iterator["DuckSnapshot"]:
    cur = store.new_cursor()
    cur.execute("BEGIN TRANSACTION")
    try:
        yield DuckSnapshot(cur)
    finally:
        with contextlib.suppress(duckdb.Error):
            cur.execute("ROLLBACK")


class DuckSnapshot:
    kind = "duckdb"

    def __init__(self, cur):
        self.cur = cur
        rows = cur.execute("SELECT table_name, sql FROM duckdb_tables() WHERE database_name = current_database() "
                           "AND schema_name = 'main' AND NOT temporary ORDER BY table_name").fetchall()
        self.ddl = {name: sql for name, sql in rows}
        self.indexes = [sql for (sql,) in cur.execute(
            "SELECT sql FROM duckdb_indexes() WHERE database_name = current_database() AND sql IS NOT NULL "
            "ORDER BY index_name").fetchall()]
        # counted now, inside the transaction: the snapshot every later read sees
        # (fetched to the end: DuckDB refuses other work on a cursor with a result left unread)
        self.counts = {t: cur.execute(f"SELECT count(*) FROM {_q(t)}").fetchall()[0][0] for t in self.ddl}

    def generation(self) -> int:
        rows = self.cur.execute("SELECT value FROM meta WHERE key = 'generation'").fetchall()
        return int(rows[0][0]) if rows else 0

    def page_ids(self) -> list[str]:
        return [r[0] for r in self.cur.execute("SELECT page_id FROM pages ORDER BY page_id").fetchall()]

    def write(self, table: str, path: Path, on_bytes: Callable[[], None] = lambda: None) -> int:
        reader = self.cur.sql(f"SELECT * FROM {_q(table)}").to_arrow_reader(BATCH_ROWS)
        rows = 0
        with pq.ParquetWriter(str(path), reader.schema) as out:
            for batch in reader:
                out.write_batch(batch)
                rows += batch.num_rows
                on_bytes()
        return rows


@contextlib.contextmanager
def pg_snapshot(store) -> Iterator["PgSnapshot"]:
    import psycopg

    con = store._connect()   # a connection of its own, outside the pool, for as long as the copy takes
    try:
        # one transaction, every read in it of the snapshot its first read took (psycopg begins it itself
        # once autocommit is off: a BEGIN of our own would be a second one, and PostgreSQL ignores it)
        con.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        con.read_only = True
        con.autocommit = False
        snap = PgSnapshot(con)
        if con.execute("SHOW transaction_isolation").fetchone()[0] != "repeatable read":
            raise StoreError("the backup's PostgreSQL transaction is not REPEATABLE READ: no consistent snapshot")
        yield snap
    finally:
        with contextlib.suppress(Exception):
            con.rollback()
        con.close()


class PgSnapshot:
    kind = "postgres"

    def __init__(self, con):
        from . import pg_schema

        self.con = con
        names = [r[0] for r in con.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() "
            "AND table_type = 'BASE TABLE' ORDER BY table_name").fetchall()]
        self.ddl = {n: None for n in names if n not in PG_OWN}   # the schema is the migrations' (pg_schema)
        self.indexes: list[str] = []
        self.schema = con.execute("SELECT coalesce(max(version), 0) FROM schema_migrations").fetchone()[0]
        self.latest = pg_schema.LATEST
        self.counts = {t: con.execute(f"SELECT count(*) FROM {_q(t)}").fetchone()[0] for t in self.ddl}

    def generation(self) -> int:
        row = self.con.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()
        return int(row[0]) if row else 0

    def page_ids(self) -> list[str]:
        return [r[0] for r in self.con.execute("SELECT page_id FROM pages ORDER BY page_id").fetchall()]

    def write(self, table: str, path: Path, on_bytes: Callable[[], None] = lambda: None) -> int:
        with open(path, "wb") as out, self.con.cursor().copy(f"COPY {_q(table)} TO STDOUT") as copy:
            for data in copy:
                out.write(data)
                on_bytes()
        return self.counts[table]


def snapshot(store):
    """The store's snapshot reader (a context manager): DuckDB or PostgreSQL."""
    return pg_snapshot(store) if store.kind == "postgres" else duck_snapshot(store)


# ---- writing a store back ----------------------------------------------------------------------------
def load_duckdb(path: Path, tables: dict[str, dict], folder: Path, indexes: list[str]) -> dict[str, int]:
    """A new DuckDB store file at `path` (which must not exist) holding the backup's tables: made as the
    source made them, filled from their Parquet files, indexed, in one transaction."""
    if path.exists():
        raise RestoreRefused(f"{path} exists: a restore writes a new store file")
    con = duckdb.connect(str(path))
    counts = {}
    try:
        con.execute("BEGIN TRANSACTION")
        for name, t in tables.items():
            con.execute(t["ddl"])
            con.execute(f"INSERT INTO {_q(name)} SELECT * FROM read_parquet(?)", [str(folder / t["file"])])
            counts[name] = _check_rows(name, con.execute(f"SELECT count(*) FROM {_q(name)}").fetchone()[0], t["rows"])
        for sql in indexes:
            con.execute(sql)
        con.execute("COMMIT")
        con.execute("CHECKPOINT")
    finally:
        con.close()
    return counts


def load_postgres(url: str, tables: dict[str, dict], folder: Path, schema: int, corpus_version: str) -> dict[str, int]:
    """The backup's tables into the PostgreSQL database at `url`: its schema made by the migrations (and
    refused unless it is the backup's version), which must hold no page, no key and no log yet; every
    table emptied and filled by COPY in one transaction."""
    import psycopg

    from . import pg_schema

    try:
        con = psycopg.connect(url, autocommit=True)
    except psycopg.OperationalError as exc:
        raise StoreError(f"cannot reach the PostgreSQL store to restore into: {exc}".strip()) from exc
    with con:
        had = con.execute("SELECT to_regclass('public.pages') IS NOT NULL").fetchone()[0]
        if had and con.execute("SELECT EXISTS (SELECT 1 FROM pages) OR EXISTS (SELECT 1 FROM api_keys) "
                               "OR EXISTS (SELECT 1 FROM log_queries)").fetchone()[0]:
            raise RestoreRefused("the PostgreSQL store to restore into already holds pages, keys or a query log: "
                                 "restore into an empty database")
        pg_schema.migrate(con, corpus_version)
        if pg_schema.LATEST != schema:
            raise RestoreRefused(f"the backup's PostgreSQL schema is version {schema}, this refindery's {pg_schema.LATEST}: "
                                 "restore it with the release that wrote it, then open it with this one")
        counts = {}
        with con.transaction():
            for name in tables:
                con.execute(f"TRUNCATE {_q(name)}")
            for name, t in tables.items():
                with open(folder / t["file"], "rb") as src, con.cursor().copy(f"COPY {_q(name)} FROM STDIN") as copy:
                    while data := src.read(1 << 20):
                        copy.write(data)
                counts[name] = _check_rows(name, con.execute(f"SELECT count(*) FROM {_q(name)}").fetchone()[0], t["rows"])
    return counts
