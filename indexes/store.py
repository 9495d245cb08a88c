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
"""
from __future__ import annotations

import contextlib
import logging
import threading
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import duckdb
import numpy as np
import pyarrow as pa

from .sql import DuckSql, Sql
from .store_rows import (MAX_ALIAS_CHARS, MAX_ALIASES, ChunkRow, EntityRow, ExistingPage, HotRead, IndexDoc,  # noqa: F401
                         PageRow, PageWrite, StoreBusy, StoreError, StoreUnavailable, Touch, arrow_to_matrix, entity_table,
                         batch_entities, cut_bodies, entity_answer, facets_answer, merge_vectors, page_filter, pylist,
                         quarantined_answer, relinked_pages)

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


class CorpusStore:
    """DuckDB-backed corpus store. One writer at a time (a lock); readers use their own cursors."""

    def __init__(self, path: Path | str):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._con = duckdb.connect(str(self.path))
        except duckdb.IOException as exc:
            if "lock" in str(exc).lower():
                raise StoreBusy(self.path, str(exc)) from exc
            raise StoreError(f"cannot open the store {self.path}: {exc}") from exc
        self._write_lock = threading.RLock()
        self._epoch = 0                                  # commits that moved the generation (generation())
        self._generation: tuple[int, int] | None = None  # (generation, the epoch it was read at)
        self._local = threading.local()
        self._cursors: list[duckdb.DuckDBPyConnection] = []  # closed with the store, so the file is let go
        self._callbacks: list[Callable[[int], None]] = []
        self.closed = False
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

    # Plumbing ----------------------------------------------------------------------------------
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

    def sql(self, own: bool = False) -> Sql:
        """SQL for the tables kept beside the corpus (indexes/sql.py): on the calling thread's cursor,
        its transactions the store's own (under the write lock); with `own`, on a cursor of its own
        with transactions of its own (a thread that writes outside the store's lock, like the query log)."""
        return DuckSql(self.new_cursor()) if own else DuckSql(self.cursor, begin=self.transaction)

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

    def set_settings(self, values: dict[str, str | None]) -> None:
        """Set (or, with None, remove) several of the data dir's own values in one transaction."""
        with self.transaction() as con:
            for key, value in values.items():
                con.execute("DELETE FROM meta WHERE key = ?", [f"setting:{key}"])
                if value is not None:
                    con.execute("INSERT INTO meta VALUES (?, ?)", [f"setting:{key}", value])

    def drop_embeddings(self, model: str) -> int:
        """Delete every stored vector of `model` (`refindery models drop`); returns how many."""
        with self.transaction() as con:
            n = con.execute("SELECT count(*) FROM embeddings WHERE model = ?", [model]).fetchone()[0]
            con.execute("DELETE FROM embeddings WHERE model = ?", [model])
        return int(n)

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

    # The change feed: in one process every write is committed before its reply, so a generation a
    # write returned is always there, and followers are called right after each commit.
    def on_generation(self, callback: Callable[[int], None]) -> None:
        """Call `callback(generation)` after each commit that moves the generation."""
        self._callbacks.append(callback)

    def wait_for(self, generation: int, timeout_s: float) -> bool:
        """Whether the store has committed `generation` (here, at once: one process writes it)."""
        return self.generation() >= generation

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

    # Workspaces --------------------------------------------------------------------------------
    def ensure_workspace(self, workspace_id: str, name: str | None = None) -> None:
        with self._write_lock:
            self._con.execute(
                "INSERT INTO workspaces VALUES (?, ?, now()) ON CONFLICT DO NOTHING",
                [workspace_id, name or workspace_id],
            )

    def workspaces(self) -> list[str]:
        return [r[0] for r in self.cursor().execute("SELECT workspace_id FROM workspaces ORDER BY 1").fetchall()]

    # Reads -------------------------------------------------------------------------------------
    def existing_pages(self, page_ids: Iterable[str]) -> dict[str, ExistingPage]:
        ids = list(set(page_ids))
        if not ids:
            return {}
        cur = self.cursor()
        rows = cur.execute(
            """SELECT p.page_id, p.content_hash, p.first_seen, p.last_seen, p.visit_count,
                      list(c.chunk_id) FILTER (WHERE c.chunk_id IS NOT NULL)
               FROM pages p LEFT JOIN chunks c USING (page_id)
               WHERE p.page_id IN (SELECT unnest(?::VARCHAR[]))
               GROUP BY ALL""",
            [ids],
        ).fetchall()
        return {r[0]: ExistingPage(r[0], r[1], r[2], r[3], r[4], set(r[5] or [])) for r in rows}

    def page(self, page_id: str) -> dict | None:
        cur = self.cursor()
        res = cur.execute("SELECT * FROM pages WHERE page_id = ?", [page_id])
        row = res.fetchone()
        if row is None:
            return None
        out = dict(zip([d[0] for d in res.description], row))
        out["entities"] = [
            {"entity_id": r[0], "canonical": r[1], "aliases": list(r[2] or [])}
            for r in cur.execute(
                """SELECT e.entity_id, e.canonical, e.aliases FROM page_entities pe
                   JOIN entities e USING (entity_id) WHERE pe.page_id = ? ORDER BY e.canonical""",
                [page_id],
            ).fetchall()
        ]
        return out

    def pages_by_id(self, page_ids: list[str]) -> dict[str, dict]:
        """Page rows (without body) with their entities' canonical forms, in one query."""
        if not page_ids:
            return {}
        res = self.cursor().execute(
            """SELECT p.page_id, p.workspace_id, p.url, p.domain, p.title, p.first_seen, p.last_seen,
                      p.published, p.visit_count, p.cluster_id, p.scope,
                      coalesce((SELECT list(e.canonical ORDER BY e.canonical) FROM page_entities pe
                                JOIN entities e USING (entity_id) WHERE pe.page_id = p.page_id), []) AS entities
               FROM pages p WHERE p.page_id IN (SELECT unnest(?::VARCHAR[]))""",
            [list(page_ids)],
        )
        cols = [d[0] for d in res.description]
        pages = {r[0]: dict(zip(cols, r)) for r in res.fetchall()}
        for p in pages.values():
            p["entities"] = list(p["entities"] or [])
        return pages

    @staticmethod
    def _int_list(ids) -> str:
        # A literal IN list lets DuckDB use the primary-key index (a semi-join on unnest() scans);
        # int() makes it safe to inline.
        return ",".join(str(int(i)) for i in ids)

    def chunk_pages(self, chunk_ids: list[int]) -> dict[int, str]:
        """chunk id -> page id, for the chunks that exist."""
        if not chunk_ids:
            return {}
        return dict(self.cursor().execute(
            f"SELECT chunk_id, page_id FROM chunks WHERE chunk_id IN ({self._int_list(chunk_ids)})").fetchall())

    def last_seen_of(self, page_ids: list[str]) -> dict[str, datetime]:
        if not page_ids:
            return {}
        return dict(self.cursor().execute(
            "SELECT page_id, last_seen FROM pages WHERE page_id IN (SELECT unnest(?::VARCHAR[]))",
            [list(page_ids)]).fetchall())

    def chunks_by_id(self, chunk_ids: list[int]) -> dict[int, dict]:
        if not chunk_ids:
            return {}
        res = self.cursor().execute(
            f"""SELECT chunk_id, page_id, ordinal, text, char_start, char_end, section_path, n_tokens
               FROM chunks WHERE chunk_id IN ({self._int_list(chunk_ids)})""")
        cols = [d[0] for d in res.description]
        return {r[0]: dict(zip(cols, r)) for r in res.fetchall()}

    def snippet_chunks(self, chunk_ids: list[int]) -> dict[int, tuple[str, list[str] | None]]:
        """chunk id -> (text, section path): what a search reads of the store for the k pages it
        returns (everything else comes from the in-memory view, indexes/hot.py)."""
        if not chunk_ids:
            return {}
        rows = self.cursor().execute(
            f"SELECT chunk_id, text, section_path FROM chunks WHERE chunk_id IN ({self._int_list(chunk_ids)})").fetchall()
        return {r[0]: (r[1], r[2]) for r in rows}

    def lead_chunks(self, page_ids: list[str]) -> dict[str, int]:
        """page id -> its first chunk's id (how the page begins)."""
        if not page_ids:
            return {}
        rows = self.cursor().execute("SELECT page_id, chunk_id FROM chunks WHERE ordinal = 0 AND page_id IN "
                                     "(SELECT unnest(?))", [list(page_ids)]).fetchall()
        return {r[0]: r[1] for r in rows}

    def page_chunks(self, page_id: str) -> list[dict]:
        res = self.cursor().execute(
            """SELECT chunk_id, ordinal, text, char_start, char_end, section_path, n_tokens
               FROM chunks WHERE page_id = ? ORDER BY ordinal""",
            [page_id],
        )
        cols = [d[0] for d in res.description]
        return [dict(zip(cols, r)) for r in res.fetchall()]

    def index_docs(self, page_ids: list[str] | None = None, batch: int = 5000,
                   chunk_ids: list[int] | None = None) -> Iterator[list[IndexDoc]]:
        """Chunks with their page's filter fields, for (re)building indexes; all pages if None
        (or these chunks, with `chunk_ids`)."""
        cur = self._con.cursor()
        where = "" if page_ids is None else "WHERE c.page_id IN (SELECT unnest(?::VARCHAR[]))"
        params = [] if page_ids is None else [list(page_ids)]
        if chunk_ids is not None:
            where = "WHERE c.chunk_id IN (SELECT unnest(?::BIGINT[]))"
            params = [[int(c) for c in chunk_ids]]
        res = cur.execute(
            f"""SELECT c.chunk_id, c.page_id, p.workspace_id, c.text, coalesce(p.title, ''),
                       array_to_string(coalesce(c.section_path, []), ' > '), p.domain,
                       p.first_seen, p.last_seen, p.published, p.cluster_id, p.scope,
                       coalesce(pe.ents, [])
                FROM chunks c JOIN pages p USING (page_id)
                LEFT JOIN (SELECT page_id, list(entity_id ORDER BY entity_id) AS ents
                           FROM page_entities GROUP BY 1) pe USING (page_id)
                {where} ORDER BY c.chunk_id""",
            params,
        )
        while True:
            rows = res.fetchmany(batch)
            if not rows:
                break
            yield [IndexDoc(*r[:12], list(r[12])) for r in rows]
        cur.close()

    # Filters, entities, pins -----------------------------------------------------------------------
    def resolve_entities(self, workspace: str, ref: str, scopes: list[str] | None = None) -> list[str]:
        """The entity ids a reference names: its id, else every entity whose canonical form is it, else
        every one with it as an alias (case-insensitive) — one per namespace (document scope) that
        has it. With `scopes`, only entities of those scopes (to a scoped key, another scope's
        entity does not exist)."""
        in_scope = "" if scopes is None else "AND scope IN (SELECT unnest(?::VARCHAR[]))"
        rows = self.cursor().execute(
            f"""SELECT entity_id, CASE WHEN entity_id = ? THEN 0 WHEN lower(canonical) = lower(?) THEN 1 ELSE 2 END
                FROM entities WHERE workspace_id = ? AND (
                   entity_id = ? OR lower(canonical) = lower(?)
                   OR list_contains(list_transform(coalesce(aliases, []), lambda a: lower(a)), lower(?)))
                {in_scope} ORDER BY 2, 1""",
            [ref, ref, workspace, ref, ref, ref] + ([] if scopes is None else [list(scopes)])).fetchall()
        return [eid for eid, rank in rows if rank == rows[0][1]] if rows else []

    def filtered_pages(self, workspace: str, domains=(), after=None, before=None, cluster_ids=(),
                       entity_ids=(), scopes=None, page_ids=None) -> list[str]:
        """Page ids of a workspace that pass every given restriction (`page_ids`: among these; [] none)."""
        where, params = page_filter(workspace, domains, after, before, cluster_ids, entity_ids, scopes, page_ids)
        rows = self.cursor().execute(f"SELECT p.page_id FROM pages p WHERE {where} ORDER BY 1", params).fetchall()
        return [r[0] for r in rows]

    def facets(self, workspace: str, scopes=None, limit: int = 50) -> dict:
        """What a workspace's pages can be filtered by, with page counts: domains, live clusters
        (with up to three titles of their most recently seen pages), entities, the last_seen range."""
        where, params = "p.workspace_id = ?", [workspace]
        if scopes is not None:
            where += " AND p.scope IN (SELECT unnest(?::VARCHAR[]))"
            params.append(list(scopes))
        cur = self.cursor()
        n, lo, hi = cur.execute(f"SELECT count(*), min(last_seen), max(last_seen) FROM pages p WHERE {where}",
                                params).fetchone()
        domains = cur.execute(
            f"""SELECT p.domain, count(*) AS n FROM pages p WHERE {where} AND p.domain IS NOT NULL
                GROUP BY 1 ORDER BY n DESC, 1 LIMIT ?""", [*params, limit]).fetchall()
        clusters = cur.execute(
            f"""SELECT p.cluster_id, count(*) AS n,
                       list(p.title ORDER BY p.last_seen DESC, p.page_id)
                           FILTER (WHERE p.title IS NOT NULL AND p.title <> '')[1:3]
                FROM pages p JOIN clusters c ON c.cluster_id = p.cluster_id AND c.tombstoned_at IS NULL
                WHERE {where} GROUP BY 1 ORDER BY n DESC, 1 LIMIT ?""", [*params, limit]).fetchall()
        entities = cur.execute(
            f"""SELECT e.entity_id, e.canonical, count(DISTINCT p.page_id) AS n
                FROM pages p JOIN page_entities pe ON pe.page_id = p.page_id
                JOIN entities e ON e.entity_id = pe.entity_id
                WHERE {where} GROUP BY 1, 2 ORDER BY n DESC, 2, 1 LIMIT ?""", [*params, limit]).fetchall()
        return facets_answer(n, lo, hi, domains, clusters, entities)

    def entity_document_keys(self, workspace: str, refs: list[str], scopes: list[str] | None) -> dict[str, str]:
        """Per entity reference (id, canonical form or alias) with pages, an md5 over its pages' ids and
        content hashes (within `scopes` when given): a changed or added document changes it."""
        if not refs:
            return {}
        rows = self.cursor().execute(
            """WITH c AS (SELECT unnest(?) AS rid),
                    m AS (SELECT DISTINCT c.rid, e.entity_id AS sid FROM c JOIN entities e ON e.workspace_id = ?
                          AND (e.entity_id = c.rid OR lower(e.canonical) = lower(c.rid)
                               OR list_contains(list_transform(coalesce(e.aliases, []), lambda a: lower(a)),
                                                lower(c.rid))))
               SELECT m.rid, md5(string_agg(DISTINCT p.page_id || ':' || p.content_hash, ',' ORDER BY
                                 p.page_id || ':' || p.content_hash))
               FROM m JOIN page_entities pe ON pe.entity_id = m.sid
                      JOIN pages p ON p.page_id = pe.page_id AND p.workspace_id = ?
                                      AND (? IS NULL OR list_contains(?, p.scope))
               GROUP BY m.rid""", [refs, workspace, workspace, scopes, scopes]).fetchall()
        return dict(rows)

    def entity_pages(self, workspace: str, ref: str, scopes: list[str] | None, max_chars: int) -> list[tuple]:
        """An entity's own pages (matched as entity_document_keys matches a reference), as
        (page_id, url, title, body_text) by page id, within `scopes` when given, the bodies cut
        so that together they hold at most `max_chars` characters."""
        rows = self.cursor().execute(
            """SELECT DISTINCT p.page_id, p.url, p.title, p.body_text
               FROM entities e JOIN page_entities pe ON pe.entity_id = e.entity_id
                    JOIN pages p ON p.page_id = pe.page_id AND p.workspace_id = ?
                                    AND (? IS NULL OR list_contains(?, p.scope))
               WHERE e.workspace_id = ? AND (e.entity_id = ? OR lower(e.canonical) = lower(?)
                     OR list_contains(list_transform(coalesce(e.aliases, []), lambda a: lower(a)), lower(?)))
               ORDER BY p.page_id""", [workspace, scopes, scopes, workspace, ref, ref, ref]).fetchall()
        return cut_bodies(rows, max_chars)

    def hot_read(self, since: int | None, max_changed: int | None, text_budget: int = 0,
                 spill: Callable[[Any], None] | None = None) -> HotRead:
        """What the search's in-memory view (indexes/hot.py) needs, read in one transaction: the
        pages changed after generation `since` — their rows, entity links and chunks — or, when
        `since` is None, older than the pruned change rows, or more than `max_changed` pages
        changed, every page (`changed` None). The chunks' texts and section paths come too when
        `text_budget` > 0 and, for a full read, all the chunks' texts take at most that many bytes;
        a full read whose texts take more hands them to `spill` instead, when given, as Arrow record
        batches of (chunk_id, text, section path as JSON text, '' for none), in the same transaction
        (HotRead.spilled)."""
        cur = self.cursor()
        cur.begin()
        try:
            gen = int(cur.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()[0])
            changed: list[str] | None = None
            if since is not None:
                row = cur.execute("SELECT value FROM meta WHERE key = 'pruned_upto'").fetchone()
                if since >= (int(row[0]) if row else 0):
                    changed = [r[0] for r in cur.execute(
                        "SELECT DISTINCT page_id FROM changes WHERE generation > ? ORDER BY 1", [since]).fetchall()]
                    if max_changed is not None and len(changed) > max_changed:
                        changed = None
            cols = "page_id, workspace_id, url, domain, title, first_seen, last_seen, published, visit_count, " \
                   "cluster_id, scope"
            texts = text_budget > 0
            if changed is None and texts:
                texts = cur.execute("SELECT coalesce(sum(strlen(text)), 0) FROM chunks").fetchone()[0] <= text_budget
            chunk_cols = "chunk_id, page_id, char_start, char_end" + (", text, section_path" if texts else "")
            if changed is None:
                pages = cur.execute(f"SELECT {cols} FROM pages ORDER BY page_id").fetchnumpy()
                links = cur.execute("SELECT page_id, list(entity_id ORDER BY entity_id) FROM page_entities "
                                    "GROUP BY 1").fetchall()
                chunks = cur.execute(f"SELECT {chunk_cols} FROM chunks").fetchnumpy()
            else:
                pages = cur.execute(f"SELECT {cols} FROM pages WHERE page_id IN (SELECT unnest(?::VARCHAR[])) "
                                    "ORDER BY page_id", [changed]).fetchnumpy()
                links = cur.execute("SELECT page_id, list(entity_id ORDER BY entity_id) FROM page_entities "
                                    "WHERE page_id IN (SELECT unnest(?::VARCHAR[])) GROUP BY 1", [changed]).fetchall()
                chunks = cur.execute(f"SELECT {chunk_cols} FROM chunks "
                                     "WHERE page_id IN (SELECT unnest(?::VARCHAR[]))", [changed]).fetchnumpy()
            names = dict(cur.execute("SELECT entity_id, canonical FROM entities").fetchall())
            spilled = changed is None and text_budget > 0 and not texts and spill is not None
            if spilled:
                cur.execute("SET enable_progress_bar = false")
                for batch in cur.sql("SELECT chunk_id, text, coalesce(CAST(to_json(section_path) AS VARCHAR), '') "
                                     "FROM chunks").to_arrow_reader(100_000):
                    spill(batch)
            cur.commit()
        except BaseException:
            cur.rollback()
            raise
        seen_us = np.ma.getdata(pages["last_seen"]).astype("datetime64[us]").astype(np.int64)
        return HotRead(gen, changed, {k: pylist(v) for k, v in pages.items()}, dict(links), chunks, names, texts,
                       seen_us, spilled)

    def workspace_chunk_pages(self, workspace: str) -> list[tuple[int, str]]:
        """(chunk id, page id) of every chunk of a workspace, by chunk id."""
        return self.cursor().execute(
            """SELECT c.chunk_id, c.page_id FROM chunks c JOIN pages p USING (page_id)
               WHERE p.workspace_id = ? ORDER BY c.chunk_id""", [workspace]).fetchall()

    def sample_chunk_texts(self, workspace: str, limit: int) -> list[str]:
        """At most `limit` chunk texts of a workspace, the same ones every time for the same chunks
        (ordered by a hash of the chunk id): the evidence vocabulary's sample, the benchmarks'."""
        return [r[0] for r in self.cursor().execute(
            """SELECT c.text FROM chunks c JOIN pages p USING (page_id) WHERE p.workspace_id = ?
               ORDER BY hash(c.chunk_id), c.chunk_id LIMIT ?""", [workspace, int(limit)]).fetchall()]

    def workspace_chunks(self, workspace: str) -> list[tuple]:
        """(page id, url, title, chunk id, ordinal, text, section path) of every chunk of a workspace,
        page by page in reading order."""
        return self.cursor().execute(
            """SELECT p.page_id, p.url, p.title, c.chunk_id, c.ordinal, c.text, c.section_path
               FROM chunks c JOIN pages p USING (page_id) WHERE p.workspace_id = ?
               ORDER BY p.page_id, c.ordinal""", [workspace]).fetchall()

    def chunk_ids_of_pages(self, page_ids: list[str]) -> np.ndarray:
        if not page_ids:
            return np.zeros(0, dtype=np.int64)
        res = self.cursor().execute(
            "SELECT chunk_id FROM chunks WHERE page_id IN (SELECT unnest(?::VARCHAR[])) ORDER BY 1",
            [list(page_ids)]).fetchnumpy()
        return res["chunk_id"].astype(np.int64)

    def page_outline(self, workspace: str) -> list[tuple[str, str, str | None, str | None, int | None]]:
        """(page_id, url, title, domain, cluster_id) of every page of a workspace, by page id: what
        the evidence maps are drawn from."""
        return self.cursor().execute(
            """SELECT page_id, url, title, domain, cluster_id FROM pages WHERE workspace_id = ?
               ORDER BY page_id""", [workspace]).fetchall()

    def workspaces_with_pages(self) -> frozenset[str]:
        return frozenset(r[0] for r in self.cursor().execute("SELECT DISTINCT workspace_id FROM pages").fetchall())

    # The pin lookups take the caller's document scopes (None: every document): a page of another scope
    # is not there for it, so whether another scope holds a URL changes nothing a scoped key sees.
    @staticmethod
    def _scoped(scopes: list[str] | None) -> tuple[str, list]:
        return ("", []) if scopes is None else (" AND scope IN (SELECT unnest(?::VARCHAR[]))", [list(scopes)])

    def pages_with_url(self, workspace: str, url_norm: str, scopes: list[str] | None = None) -> list[str]:
        sql, params = self._scoped(scopes)
        return [r[0] for r in self.cursor().execute(
            f"SELECT page_id FROM pages WHERE workspace_id = ? AND url_norm = ?{sql} ORDER BY page_id",
            [workspace, url_norm, *params]).fetchall()]

    def pages_of_domain(self, workspace: str, domain: str, limit: int, subdomains: bool = False,
                        scopes: list[str] | None = None) -> list[str]:
        """A domain's pages (and its subdomains' with `subdomains`), most recently seen first (ties by page id)."""
        sql, params = self._scoped(scopes)
        return [r[0] for r in self.cursor().execute(
            f"""SELECT page_id FROM pages WHERE workspace_id = ? AND (domain = ? OR (? AND ends_with(domain, ?))){sql}
               ORDER BY last_seen DESC, page_id LIMIT ?""",
            [workspace, domain, subdomains, "." + domain, *params, limit]).fetchall()]

    def pages_under_prefix(self, workspace: str, prefix: str, limit: int, scopes: list[str] | None = None) -> list[str]:
        """Pages whose normalised URL is `prefix` or lies under it at a path-segment boundary (a
        following "/", "?" or nothing), compared without case; most recently seen first."""
        p = prefix.lower().rstrip("/")
        sql, params = self._scoped(scopes)
        return [r[0] for r in self.cursor().execute(
            f"""SELECT page_id FROM pages WHERE workspace_id = ? AND (lower(url_norm) = ?
                   OR starts_with(lower(url_norm), ? || '/') OR starts_with(lower(url_norm), ? || '?')){sql}
               ORDER BY last_seen DESC, page_id LIMIT ?""", [workspace, p, p, p, *params, limit]).fetchall()]

    def page_entity_sets(self, workspace: str) -> dict[str, set[str]]:
        rows = self.cursor().execute(
            """SELECT pe.page_id, list(pe.entity_id) FROM page_entities pe JOIN pages p USING (page_id)
               WHERE p.workspace_id = ? GROUP BY 1""", [workspace]).fetchall()
        return {pid: set(ents) for pid, ents in rows}

    # Clusters and entity edits -------------------------------------------------------------------
    def next_cluster_id(self) -> int:
        return int(self.cursor().execute("SELECT coalesce(max(cluster_id), 0) + 1 FROM clusters").fetchone()[0])

    def replace_clusters(self, workspace: str, model: str, assignment: dict[str, int], sizes: dict[int, int]) -> int:
        """Tombstone the workspace's clusters, record new ones and assign every page; one
        transaction, one generation (the sparse index re-indexes the pages' cluster field)."""
        with self._write_lock:
            con = self._con
            con.begin()
            try:
                gen = self._bump(con)
                con.execute("UPDATE clusters SET tombstoned_at = now() WHERE workspace_id = ? AND tombstoned_at IS NULL",
                            [workspace])
                con.executemany("INSERT INTO clusters VALUES (?, ?, ?, ?, now(), NULL)",
                                [(cid, workspace, model, n) for cid, n in sorted(sizes.items())])
                con.execute("UPDATE pages SET cluster_id = NULL, updated_generation = ? WHERE workspace_id = ?",
                            [gen, workspace])
                tbl = pa.table({"page_id": pa.array(list(assignment), pa.string()),
                                "cluster_id": pa.array(list(assignment.values()), pa.int64())})
                con.register("_assign", tbl)
                con.execute("UPDATE pages SET cluster_id = a.cluster_id FROM _assign a WHERE pages.page_id = a.page_id")
                con.unregister("_assign")
                con.execute("INSERT INTO changes SELECT ?, page_id, 'cluster' FROM pages WHERE workspace_id = ?",
                            [gen, workspace])
                con.commit()
                self._epoch += 1   # a committed generation: generation() reads it again
                self._committed(gen)
            except BaseException:
                con.rollback()
                raise
            return gen

    def clusters(self, workspace: str, include_tombstoned: bool = False, scopes: list[str] | None = None) -> list[dict]:
        """A workspace's clusters. With `scopes`, each size counts only the pages of those document
        scopes, and a cluster with none of them is left out (its size would tell of other pages)."""
        tomb = "" if include_tombstoned else "AND c.tombstoned_at IS NULL"
        if scopes is None:
            res = self.cursor().execute(
                f"""SELECT cluster_id, model, size, created_at, tombstoned_at FROM clusters c WHERE workspace_id = ?
                    {tomb} ORDER BY cluster_id""", [workspace])
        else:
            res = self.cursor().execute(
                f"""SELECT c.cluster_id, c.model, CAST(count(*) AS INTEGER) AS size, c.created_at, c.tombstoned_at
                    FROM clusters c JOIN pages p ON p.cluster_id = c.cluster_id AND p.workspace_id = c.workspace_id
                    WHERE c.workspace_id = ? AND p.scope IN (SELECT unnest(?::VARCHAR[])) {tomb}
                    GROUP BY ALL ORDER BY c.cluster_id""", [workspace, list(scopes)])
        cols = [d[0] for d in res.description]
        return [dict(zip(cols, r)) for r in res.fetchall()]

    # An entity row is only ever updated by a write of its own namespace (workspace and scope): the ids
    # of two namespaces never meet (engine/core/identity.py), and the guard keeps it so regardless.
    _SAME_NAMESPACE = "WHERE entities.workspace_id = excluded.workspace_id AND entities.scope IS NOT DISTINCT FROM excluded.scope"

    def upsert_entity(self, entity: EntityRow, link_pages: list[str], replace_aliases: bool = False) -> int:
        """Create or edit an entity and link pages to it; returns the new generation."""
        with self._write_lock:
            con = self._con
            con.begin()
            try:
                gen = self._bump(con)
                aliases = sorted(set(entity.aliases))
                merged = "excluded.aliases" if replace_aliases else \
                    f"list_slice(list_sort(list_distinct(list_concat(entities.aliases, excluded.aliases))), 1, {MAX_ALIASES})"
                con.execute(f"""INSERT INTO entities (entity_id, workspace_id, canonical, aliases, scope)
                                VALUES (?, ?, ?, ?, ?) ON CONFLICT (entity_id) DO UPDATE
                                SET canonical = excluded.canonical, aliases = {merged} {self._SAME_NAMESPACE}""",
                            [entity.entity_id, entity.workspace_id, entity.canonical, aliases, entity.scope])
                if link_pages:
                    con.execute("""INSERT INTO page_entities SELECT unnest(?::VARCHAR[]), ?
                                   EXCEPT SELECT page_id, entity_id FROM page_entities""",
                                [link_pages, entity.entity_id])
                    con.execute("INSERT INTO changes SELECT ?, unnest(?::VARCHAR[]), 'entity'", [gen, link_pages])
                con.commit()
                self._epoch += 1   # a committed generation: generation() reads it again
                self._committed(gen)
            except BaseException:
                con.rollback()
                raise
            return gen

    def entity(self, entity_id: str) -> dict | None:
        """An entity with the number of pages linked to it (all of its own workspace and scope)."""
        row = self.cursor().execute(
            """SELECT e.entity_id, e.workspace_id, e.canonical, e.aliases, e.scope,
                      (SELECT count(*) FROM page_entities pe JOIN pages p USING (page_id)
                       WHERE pe.entity_id = e.entity_id AND p.workspace_id = e.workspace_id
                         AND p.scope IS NOT DISTINCT FROM e.scope)
               FROM entities e WHERE entity_id = ?""", [entity_id]).fetchone()
        return entity_answer(row)

    # Identities (schema 2) ------------------------------------------------------------------------
    def identity_rows(self) -> dict[str, list[tuple]]:
        """What a re-keying reads: every page's (page_id, workspace, url_norm, scope), every entity's
        (entity_id, workspace, canonical, aliases) and every link's (page_id, entity_id)."""
        cur = self.cursor()
        return {"pages": cur.execute("SELECT page_id, workspace_id, url_norm, scope FROM pages").fetchall(),
                "entities": cur.execute("SELECT entity_id, workspace_id, canonical, aliases FROM entities").fetchall(),
                "links": cur.execute("SELECT page_id, entity_id FROM page_entities").fetchall()}

    # tables beside the corpus's that name a page by its id (kept in step when a page is re-keyed)
    PAGE_ID_TABLES = ("chunks", "page_entities", "rel_documents", "criterion_judgments")

    def rekey(self, pages: dict[str, str], entities: list[EntityRow], links: list[tuple[str, str]],
              version: str) -> int:
        """One transaction: pages renamed (old id -> new id, in every table that names them), the
        entities replaced by `entities` and the links by `links` (page_id, entity_id, by new page id),
        the schema version set. Indexes learn of it from the change rows (renamed pages: the old id
        deleted and the new one upserted; relinked pages: 'entity'). Returns the new generation."""
        with self._write_lock:
            con = self._con
            con.begin()
            try:
                gen = self._bump(con)
                before = {r[0]: sorted(r[1]) for r in con.execute(
                    "SELECT page_id, list(entity_id) FROM page_entities GROUP BY 1").fetchall()}
                if pages:
                    con.register("_rekey", pa.table({"old": pa.array(list(pages), pa.string()),
                                                     "new": pa.array(list(pages.values()), pa.string())}))
                    tables = {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
                    for table in ("pages", *self.PAGE_ID_TABLES):
                        if table in tables:
                            con.execute(f"UPDATE {table} SET page_id = m.new FROM _rekey m WHERE {table}.page_id = m.old")
                    con.execute("""INSERT INTO changes SELECT ?, old, 'delete' FROM _rekey
                                   UNION ALL SELECT ?, new, 'upsert' FROM _rekey""", [gen, gen])
                    con.unregister("_rekey")
                con.execute("DELETE FROM page_entities")
                con.execute("DELETE FROM entities")
                if entities:
                    con.register("_ents", entity_table(entities))
                    con.execute("INSERT INTO entities (entity_id, workspace_id, canonical, aliases, scope) "
                                "SELECT entity_id, workspace_id, canonical, aliases, scope FROM _ents")
                    con.unregister("_ents")
                if links:
                    con.register("_links", pa.table({"page_id": pa.array([p for p, _ in links], pa.string()),
                                                     "entity_id": pa.array([e for _, e in links], pa.string())}))
                    con.execute("INSERT INTO page_entities SELECT DISTINCT page_id, entity_id FROM _links")
                    con.unregister("_links")
                relinked = relinked_pages(before, links, pages)
                if relinked:
                    con.execute("INSERT INTO changes SELECT ?, unnest(?::VARCHAR[]), 'entity'", [gen, relinked])
                con.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", [version])
                con.commit()
                self._epoch += 1
                self._committed(gen)
            except BaseException:
                con.rollback()
                raise
            return gen

    def embeddings_for(self, model: str, chunk_ids: list[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(ids int64[n], vectors float32[n, d]) of `model`, for the given chunks or all of them."""
        cur = self._con.cursor()
        try:
            if chunk_ids is None:
                tbl = cur.sql(
                    """SELECT e.chunk_id, e.vector FROM embeddings e JOIN chunks c USING (chunk_id)
                       WHERE e.model = $1 ORDER BY e.chunk_id""", params=[model]).to_arrow_table()
            else:
                tbl = cur.sql(
                    """SELECT chunk_id, vector FROM embeddings
                       WHERE model = $1 AND chunk_id IN (SELECT unnest($2::BIGINT[])) ORDER BY chunk_id""",
                    params=[model, [int(c) for c in chunk_ids]]).to_arrow_table()
        finally:
            cur.close()
        return arrow_to_matrix(tbl)

    def chunks_missing_embeddings(self, model: str, limit: int | None = None) -> list[tuple[int, str]]:
        sql = """SELECT c.chunk_id, c.text FROM chunks c
                 ANTI JOIN (SELECT chunk_id FROM embeddings WHERE model = ?) e USING (chunk_id)
                 ORDER BY c.chunk_id"""
        if limit:
            sql += f" LIMIT {int(limit)}"
        return self.cursor().execute(sql, [model]).fetchall()

    def changed_pages_since(self, generation: int) -> list[str]:
        rows = self.cursor().execute(
            "SELECT DISTINCT page_id FROM changes WHERE generation > ? ORDER BY 1", [generation]
        ).fetchall()
        return [r[0] for r in rows]

    def counts(self) -> dict:
        cur = self.cursor()
        pages, chunks = cur.execute("SELECT (SELECT count(*) FROM pages), (SELECT count(*) FROM chunks)").fetchone()
        per_model = dict(cur.execute(
            """SELECT model, count(*) FROM embeddings e JOIN chunks c USING (chunk_id) GROUP BY 1 ORDER BY 1"""
        ).fetchall())
        entities = cur.execute("SELECT count(*) FROM entities").fetchone()[0]
        per_ws = dict(cur.execute("SELECT workspace_id, count(*) FROM pages GROUP BY 1 ORDER BY 1").fetchall())
        return {"pages": pages, "chunks": chunks, "entities": entities, "embeddings": per_model,
                "pages_per_workspace": per_ws}

    # Writes ------------------------------------------------------------------------------------
    def apply(self, writes: list[PageWrite], touches: list[Touch], deletes: list[str] = ()) -> int:
        """Write a batch in one transaction; return the new generation."""
        with self._write_lock:
            con = self._con
            con.begin()
            try:
                gen = self._bump(con)
                changes: list[tuple[int, str, str]] = []
                for t in touches:
                    con.execute(
                        """UPDATE pages SET last_seen = greatest(last_seen, ?),
                           visit_count = visit_count + ?, updated_generation = ? WHERE page_id = ?""",
                        [t.last_seen, t.visits, gen, t.page_id],
                    )
                    changes.append((gen, t.page_id, "touch"))
                for pid in deletes:
                    self._delete_page(con, pid)
                    changes.append((gen, pid, "delete"))
                self._write_pages(con, writes, gen)
                changes += [(gen, w.page.page_id, "upsert") for w in writes]
                if changes:
                    con.executemany("INSERT INTO changes VALUES (?, ?, ?)", changes)
                con.commit()
                self._epoch += 1   # a committed generation: generation() reads it again
                self._committed(gen)
            except BaseException:
                con.rollback()
                raise
            return gen

    def quarantine(self, reasons: dict[str, str], now: datetime) -> int:
        """Move pages out of the corpus into `quarantine` (their row as JSON, with the reason), in one
        transaction that bumps the generation like a delete; return the new generation."""
        with self._write_lock:
            con = self._con
            con.begin()
            try:
                gen = self._bump(con)
                for pid, reason in sorted(reasons.items()):
                    con.execute("INSERT INTO quarantine SELECT page_id, workspace_id, url, ?, ?, ?, to_json(p) "
                                "FROM pages p WHERE page_id = ?", [reason, now, gen, pid])
                    self._delete_page(con, pid)
                con.executemany("INSERT INTO changes VALUES (?, ?, 'delete')", [(gen, pid) for pid in sorted(reasons)])
                con.commit()
                self._epoch += 1   # a committed generation: generation() reads it again
                self._committed(gen)
            except BaseException:
                con.rollback()
                raise
            return gen

    def quarantined(self, limit: int = 20) -> dict:
        """How many pages are in quarantine, and the newest `limit` of them (without their text)."""
        cur = self.cursor()
        n = cur.execute("SELECT count(*) FROM quarantine").fetchone()[0]
        cols = ["page_id", "workspace_id", "url", "reason", "quarantined_at"]
        rows = cur.execute(f"SELECT {', '.join(cols)} FROM quarantine ORDER BY quarantined_at DESC, page_id "
                           "LIMIT ?", [limit]).fetchall()
        return quarantined_answer(n, cols, rows)

    def _delete_page(self, con, page_id: str) -> None:
        con.execute("DELETE FROM embeddings WHERE chunk_id IN (SELECT chunk_id FROM chunks WHERE page_id = ?)",
                    [page_id])
        con.execute("DELETE FROM chunks WHERE page_id = ?", [page_id])
        con.execute("DELETE FROM page_entities WHERE page_id = ?", [page_id])
        con.execute("DELETE FROM pages WHERE page_id = ?", [page_id])

    def _write_pages(self, con, writes: list[PageWrite], gen: int) -> None:
        if not writes:
            return
        ids = [w.page.page_id for w in writes]
        existing = {r[0] for r in con.execute(
            "SELECT page_id FROM pages WHERE page_id IN (SELECT unnest(?::VARCHAR[]))", [ids]).fetchall()}
        old_chunks = {r[0] for r in con.execute(
            "SELECT chunk_id FROM chunks WHERE page_id IN (SELECT unnest(?::VARCHAR[]))", [ids]).fetchall()}
        new_chunks = {c.chunk_id for w in writes for c in w.chunks}
        gone = sorted(old_chunks - new_chunks)
        kept = old_chunks & new_chunks
        if gone:
            con.execute("DELETE FROM embeddings WHERE chunk_id IN (SELECT unnest(?::BIGINT[]))", [gone])
            con.execute("DELETE FROM chunks WHERE chunk_id IN (SELECT unnest(?::BIGINT[]))", [gone])
        for w in writes:
            p = w.page
            vals = [p.workspace_id, p.url, p.url_norm, p.domain, p.title, p.body_text, p.content_hash,
                    p.first_seen, p.last_seen, p.published, p.visit_count, p.cluster_id, p.scope, gen]
            if p.page_id in existing:
                con.execute(
                    """UPDATE pages SET workspace_id=?, url=?, url_norm=?, domain=?, title=?, body_text=?,
                       content_hash=?, first_seen=?, last_seen=?, published=?, visit_count=?,
                       cluster_id=?, scope=?, updated_generation=? WHERE page_id = ?""",
                    vals + [p.page_id],
                )
            else:
                con.execute("INSERT INTO pages VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                            [p.page_id] + vals)
        # Chunks that survive a change keep their id (and vectors); only place and section move.
        upd = [(c.ordinal, c.char_start, c.char_end, c.section_path, c.n_tokens, c.chunk_id)
               for w in writes for c in w.chunks if c.chunk_id in kept]
        if upd:
            con.executemany(
                "UPDATE chunks SET ordinal=?, char_start=?, char_end=?, section_path=?, n_tokens=? WHERE chunk_id=?",
                upd)
        fresh = [c for w in writes for c in w.chunks if c.chunk_id not in kept]
        if fresh:
            tbl = pa.table({
                "chunk_id": pa.array([c.chunk_id for c in fresh], pa.int64()),
                "page_id": pa.array([c.page_id for c in fresh], pa.string()),
                "ordinal": pa.array([c.ordinal for c in fresh], pa.int32()),
                "text": pa.array([c.text for c in fresh], pa.string()),
                "char_start": pa.array([c.char_start for c in fresh], pa.int32()),
                "char_end": pa.array([c.char_end for c in fresh], pa.int32()),
                "section_path": pa.array([c.section_path for c in fresh], pa.list_(pa.string())),
                "n_tokens": pa.array([c.n_tokens for c in fresh], pa.int32()),
            })
            con.register("_fresh_chunks", tbl)
            con.execute("INSERT INTO chunks SELECT * FROM _fresh_chunks")
            con.unregister("_fresh_chunks")
        vectors = merge_vectors(writes)
        if kept and vectors:   # a kept chunk's vector of a model stays the one stored: never a second one
            have = set(con.execute(
                f"SELECT model, chunk_id FROM embeddings WHERE chunk_id IN ({self._int_list(kept)})").fetchall())
            vectors = {m: ([i for i in ids if (m, i) not in have], [v for i, v in zip(ids, vecs) if (m, i) not in have])
                       for m, (ids, vecs) in vectors.items()}
        self._insert_vectors(con, vectors)
        con.execute("DELETE FROM page_entities WHERE page_id IN (SELECT unnest(?::VARCHAR[]))", [ids])
        # Entities and links set-based, one statement each: the first row of an entity in the batch
        # names it (as one insert after another did), every row adds its aliases.
        entities, pairs = batch_entities(writes)
        if entities:
            rows = list(entities.values())
            con.register("_fresh_entities", entity_table(rows))
            con.execute(f"""INSERT INTO entities (entity_id, workspace_id, canonical, aliases, scope)
                            SELECT entity_id, workspace_id, canonical, aliases, scope FROM _fresh_entities
                            ON CONFLICT (entity_id) DO UPDATE
                            SET aliases = list_slice(list_sort(list_distinct(list_concat(entities.aliases,
                                                                                        excluded.aliases))), 1, {MAX_ALIASES})
                            {self._SAME_NAMESPACE}""")
            con.unregister("_fresh_entities")
        if pairs:
            con.register("_fresh_links", pa.table({"page_id": pa.array([p for p, _ in pairs], pa.string()),
                                                   "entity_id": pa.array([e for _, e in pairs], pa.string())}))
            con.execute("INSERT INTO page_entities SELECT page_id, entity_id FROM _fresh_links")
            con.unregister("_fresh_links")

    def _insert_vectors(self, con, vectors: dict[str, tuple[list[int], list[np.ndarray]]]) -> None:
        for model, (ids, vecs) in vectors.items():
            if not ids:
                continue
            mat = np.ascontiguousarray(np.vstack(vecs), dtype=np.float32)
            tbl = pa.table({
                "model": pa.array([model] * len(ids), pa.string()),
                "chunk_id": pa.array(ids, pa.int64()),
                "vector": pa.ListArray.from_arrays(
                    pa.array(np.arange(0, mat.size + 1, mat.shape[1], dtype=np.int32)), pa.array(mat.ravel())),
            })
            con.register("_fresh_vectors", tbl)
            con.execute("INSERT INTO embeddings SELECT * FROM _fresh_vectors")
            con.unregister("_fresh_vectors")

    def add_embeddings(self, model: str, ids: list[int], vectors: np.ndarray) -> list[int]:
        """Store vectors of an embedder for existing chunks (adding a model embeds only what it
        lacks). Text is unchanged, so the generation does not move; the model's dense index
        notices the new vectors by count and catches up by difference. Only chunks that are still
        there and still lack a vector of `model` get one (the vectors were computed outside any lock:
        a chunk may have been deleted, or embedded by another writer, meanwhile), so a chunk never
        has two vectors of one model. Returns the chunk ids that landed."""
        with self._write_lock:
            con = self._con
            con.begin()
            try:
                wanted = con.execute(
                    """SELECT chunk_id FROM chunks WHERE chunk_id IN (SELECT unnest(?::BIGINT[]))
                       AND chunk_id NOT IN (SELECT chunk_id FROM embeddings WHERE model = ?
                                            AND chunk_id IN (SELECT unnest(?::BIGINT[])))""",
                    [list(ids), model, list(ids)]).fetchall()
                live = {r[0] for r in wanted}
                keep = [i for i, cid in enumerate(ids) if cid in live]
                self._insert_vectors(con, {model: ([ids[i] for i in keep], [vectors[i] for i in keep])})
                con.commit()
            except BaseException:
                con.rollback()
                raise
            return [ids[i] for i in keep]

    def prune_changes(self, upto_generation: int) -> None:
        """Forget change rows every index has already applied; an index older than this point
        can no longer replay and is rebuilt instead."""
        with self._write_lock:
            con = self._con
            con.begin()
            try:
                con.execute("DELETE FROM changes WHERE generation <= ?", [upto_generation])
                con.execute("INSERT INTO meta VALUES ('pruned_upto', ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                            [str(upto_generation)])
                con.commit()
            except BaseException:
                con.rollback()
                raise

    def pruned_upto(self) -> int:
        row = self.cursor().execute("SELECT value FROM meta WHERE key = 'pruned_upto'").fetchone()
        return int(row[0]) if row else 0

    def embedding_ids(self, model: str) -> tuple[np.ndarray, int]:
        """Sorted chunk ids that have a vector of `model`, and how many."""
        rows = self.cursor().execute(
            """SELECT e.chunk_id FROM embeddings e JOIN chunks c USING (chunk_id)
               WHERE e.model = ? ORDER BY 1""", [model]).fetchnumpy()
        ids = rows["chunk_id"].astype(np.int64) if len(rows["chunk_id"]) else np.zeros(0, dtype=np.int64)
        return ids, len(ids)
