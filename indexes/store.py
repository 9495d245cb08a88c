"""The corpus store in DuckDB: the source of truth every index is built from.

Tables (one row kind each):
  meta(key, value)                 schema version and the store generation
  workspaces(workspace_id, ...)
  pages(page_id, workspace_id, url, url_norm, domain, title, body_text, content_hash,
        first_seen, last_seen, published, visit_count, cluster_id, scope, updated_generation)
  chunks(chunk_id, page_id, ordinal, text, char_start, char_end, section_path, n_tokens)
  entities(entity_id, workspace_id, canonical, aliases, scope)   an entity of a workspace and document scope
  page_entities(page_id, entity_id)
  embeddings(model, chunk_id, vector)        one vector per (model, chunk)
  changes(generation, page_id, op)           which pages each generation touched; indexes replay
                                             it to catch up after a crash
  quarantine(page_id, ..., reason, page)     pages an index could not hold, moved out of the corpus
                                             whole (row kept as JSON) so store and indexes agree

Every write is one transaction that also bumps the generation, so a reader (or an index
catching up) sees either all of a batch or none of it.

This file holds the store's file, connection, cursors, transactions and generation; its verbs are in
store_reads.py, store_lookups.py (filters, pins, entities, clusters) and store_writes.py. The
PostgreSQL store (indexes/pg_store.py) answers the same verbs (indexes/store_protocol.py).
"""
from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import Callable, Iterator

import duckdb

from .duck_file import DuckFile
from .sql import DuckSql, Sql
from .store_lookups import DuckLookups
from .store_reads import DuckReads
from .store_writes import DuckWrites
from .store_rows import (MAX_ALIAS_CHARS, MAX_ALIASES, ChunkRow, EntityRow, ExistingPage, HotRead,  # noqa: F401
                         IndexDoc, PageRow, PageWrite, StoreBusy, StoreError, StoreUnavailable,  # noqa: F401
                         Touch)   # noqa: F401 — the row types are named from here too

log = logging.getLogger(__name__)

SCHEMA_VERSION = "2"   # 2: entities have a scope, scoped pages and entities their own ids (engine/core/identity.py)

_DDL = [
    "CREATE TABLE IF NOT EXISTS meta (key VARCHAR PRIMARY KEY, value VARCHAR)",
    """CREATE TABLE IF NOT EXISTS workspaces (
        workspace_id VARCHAR PRIMARY KEY, name VARCHAR, created_at TIMESTAMP)""",
    """CREATE TABLE IF NOT EXISTS pages (
        page_id VARCHAR PRIMARY KEY, workspace_id VARCHAR NOT NULL, url VARCHAR NOT NULL,
        url_norm VARCHAR NOT NULL, domain VARCHAR, title VARCHAR, body_text VARCHAR,
        content_hash VARCHAR NOT NULL, first_seen TIMESTAMP NOT NULL, last_seen TIMESTAMP NOT NULL,
        published TIMESTAMP, visit_count INTEGER NOT NULL DEFAULT 1, cluster_id BIGINT,
        scope VARCHAR, updated_generation BIGINT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS chunks (
        chunk_id BIGINT PRIMARY KEY, page_id VARCHAR NOT NULL, ordinal INTEGER NOT NULL,
        text VARCHAR NOT NULL, char_start INTEGER NOT NULL, char_end INTEGER NOT NULL,
        section_path VARCHAR[], n_tokens INTEGER)""",
    "CREATE INDEX IF NOT EXISTS chunks_page ON chunks(page_id)",
    """CREATE TABLE IF NOT EXISTS entities (
        entity_id VARCHAR PRIMARY KEY, workspace_id VARCHAR NOT NULL, canonical VARCHAR NOT NULL,
        aliases VARCHAR[], scope VARCHAR)""",
    "ALTER TABLE entities ADD COLUMN IF NOT EXISTS scope VARCHAR",
    "CREATE TABLE IF NOT EXISTS page_entities (page_id VARCHAR NOT NULL, entity_id VARCHAR NOT NULL)",
    """CREATE TABLE IF NOT EXISTS embeddings (
        model VARCHAR NOT NULL, chunk_id BIGINT NOT NULL, vector FLOAT[] NOT NULL)""",
    "CREATE TABLE IF NOT EXISTS changes (generation BIGINT NOT NULL, page_id VARCHAR NOT NULL, op VARCHAR NOT NULL)",
    """CREATE TABLE IF NOT EXISTS quarantine (
        page_id VARCHAR NOT NULL, workspace_id VARCHAR, url VARCHAR, reason VARCHAR NOT NULL,
        quarantined_at TIMESTAMP NOT NULL, generation BIGINT NOT NULL, page JSON)""",
    """CREATE TABLE IF NOT EXISTS clusters (
        cluster_id BIGINT PRIMARY KEY, workspace_id VARCHAR NOT NULL, model VARCHAR, size INTEGER,
        created_at TIMESTAMP NOT NULL, tombstoned_at TIMESTAMP)""",
]


class CorpusStore(DuckFile, DuckReads, DuckLookups, DuckWrites):
    """DuckDB-backed corpus store. One writer at a time (a lock); readers use their own cursors."""

    # tables beside the corpus's that name a page by its id (kept in step when a page is re-keyed)
    PAGE_ID_TABLES = ("chunks", "page_entities", "rel_documents", "criterion_judgments")

    def __init__(self, path: Path | str):
        DuckFile.__init__(self, path)
        self._epoch = 0                                  # commits that moved the generation (generation())
        self._generation: tuple[int, int] | None = None  # (generation, the epoch it was read at)
        self._callbacks: list[Callable[[int], None]] = []
        with self._write_lock:
            for stmt in _DDL:
                self._con.execute(stmt)
            if self._meta("schema_version") is None:
                self._con.execute("INSERT INTO meta VALUES ('schema_version', ?), ('generation', '0')",
                                  [SCHEMA_VERSION])

    @property
    def scratch_dir(self) -> Path:
        """Where files that only this process reads go (the in-memory view's spilled texts)."""
        return self.path.parent

    def sql(self, own: bool = False) -> Sql:
        """SQL for the tables kept beside the corpus (indexes/sql.py): on the calling thread's cursor,
        its transactions the store's own (under the write lock); with `own`, on a cursor of its own
        with transactions of its own (a thread that writes outside the store's lock, like the query log)."""
        return DuckSql(self.new_cursor()) if own else DuckSql(self.cursor, begin=self.transaction)

    @contextlib.contextmanager
    def _writing(self) -> Iterator[tuple[duckdb.DuckDBPyConnection, int]]:
        """One write transaction that moves the generation: (the writer connection, the new
        generation); after the commit, generation() reads it again and the followers are told."""
        with self._write_lock:
            with self.transaction() as con:
                gen = self._bump(con)
                yield con, gen
            self._epoch += 1
            self._committed(gen)

    def schema_version(self) -> str:
        """The store's schema version; one below SCHEMA_VERSION is brought up by the corpus at open
        (engine/core/corpus.py), which knows the identifiers' formulas."""
        return self._meta("schema_version") or SCHEMA_VERSION

    def _meta(self, key: str) -> str | None:
        row = self._con.execute("SELECT value FROM meta WHERE key = ?", [key]).fetchone()
        return row[0] if row else None

    def setting(self, key: str) -> str | None:
        """A value the data dir keeps for itself (`set_setting`): which embedder it runs after a live
        switch, the one it is switching to (engine/core/switch.py)."""
        row = self.cursor().execute("SELECT value FROM meta WHERE key = ?", [f"setting:{key}"]).fetchone()
        return row[0] if row else None

    def generation(self) -> int:
        """The committed generation, read from the store once per commit: every commit that moves
        it (in this process, the only one that may open the file) bumps `_epoch` after it, and a
        value read while a commit happened is not kept (a search asks for it on every request)."""
        cached = self._generation
        if cached is not None and cached[1] == self._epoch:
            return cached[0]
        epoch = self._epoch
        gen = int(self.cursor().execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()[0])
        if epoch == self._epoch:
            self._generation = (gen, epoch)
        return gen

    def on_generation(self, callback: Callable[[int], None]) -> None:
        """Call `callback(generation)` after each commit that moves the generation."""
        self._callbacks.append(callback)

    def wait_for(self, generation: int, timeout_s: float) -> bool:
        """Whether the store has committed `generation` (here, at once: one process writes it)."""
        return self.generation() >= generation

    def on_vectors(self, callback: Callable[[str], None]) -> None:
        """Nothing to hear: one process owns a DuckDB store, and its own vectors reach its indexes."""

    # One process owns a DuckDB store: there are no other replicas to record or to wait for.
    def report_applied(self, replica_id: str, generation: int, address: str | None = None) -> None:
        return None

    def replicas(self, within_s: float | None = None) -> list[dict]:
        return []

    def slowest_replica(self) -> int | None:
        return None

    def _committed(self, generation: int) -> None:
        for cb in list(self._callbacks):
            try:
                cb(generation)
            except Exception:   # a follower's failure is its own: the write is committed
                log.exception("store: a follower of generation %d failed", generation)

    def _bump(self, con: duckdb.DuckDBPyConnection) -> int:
        gen = int(con.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()[0]) + 1
        con.execute("UPDATE meta SET value = ? WHERE key = 'generation'", [str(gen)])
        return gen
