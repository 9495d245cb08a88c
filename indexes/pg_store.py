"""The corpus store in PostgreSQL (psycopg 3): the same verbs, rows and answers as the DuckDB store
(indexes/store.py), for stores that several processes — replicas — open at once.

Writers from any number of processes are serialised by the generation row: every write transaction
first moves `meta.generation` (an UPDATE, whose row lock is held to the commit), so a write reads
what every earlier write committed, two replicas posting the same page one after the other leave one
page and one set of chunks, and generations are committed in the order they are numbered (a replica
that has applied generation g has seen every write up to g). Reads run in autocommit, each on a
connection of its calling thread; a read of the search's in-memory view (hot_read) is one
REPEATABLE READ snapshot. The schema is versioned (indexes/pg_schema.py).
"""
from __future__ import annotations

import contextlib
import logging
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import numpy as np
import psycopg
import pyarrow as pa
from psycopg_pool import ConnectionPool

from . import pg_schema
from .sql import PgSql, Sql
from .store_rows import (MAX_ALIASES, EntityRow, ExistingPage, HotRead, IndexDoc, PageWrite, StoreError, Touch,
                         batch_entities, cut_bodies, duckdb_hash64, entity_answer, facets_answer, merge_vectors,
                         page_filter, quarantined_answer, relinked_pages)

log = logging.getLogger(__name__)

SCHEMA_VERSION = "2"    # the corpus's identifiers (indexes/store.py's SCHEMA_VERSION)
CHANNEL = "refindery_generation"   # NOTIFY channel: each committed generation, in commit order


def _lower(expr: str) -> str:
    """lower() in the database's own locale: under "C" it would fold ASCII letters only."""
    return f'lower(({expr}) COLLATE "default")'


_ALIAS_HIT = f"EXISTS (SELECT 1 FROM unnest(coalesce({{col}}, '{{{{}}}}'::text[])) a WHERE {_lower('a')} = lower(%s))"


def _alias_hit(col: str) -> str:
    return _ALIAS_HIT.format(col=col)


def _configure(con: psycopg.Connection) -> None:
    con.execute("SET TIME ZONE 'UTC'")   # naive timestamps are UTC, as in the DuckDB store


class StoreUnavailable(StoreError):
    """PostgreSQL did not answer (down, restarting, unreachable)."""


def _unavailable(exc: Exception) -> None:
    """A connection lost under a statement: the store's typed error (a route answers it with a 503)."""
    if isinstance(exc, psycopg.OperationalError):
        raise StoreUnavailable(f"the store's PostgreSQL did not answer: {exc}".strip()) from exc


class PgCorpusStore:
    """The corpus store in a PostgreSQL database, named by a postgresql:// URL."""

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
        self._follower: threading.Thread | None = None

    @property
    def scratch_dir(self) -> Path:
        """Where files that only this process reads go (the in-memory view's spilled texts)."""
        return self._scratch

    # Plumbing ----------------------------------------------------------------------------------
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
        no connection to be had within the connect timeout, is StoreUnavailable."""
        try:
            with self._pool.connection() as con:
                yield con
        except psycopg.OperationalError as exc:     # PoolTimeout is one too
            raise StoreUnavailable(f"the store's PostgreSQL did not answer: {exc}".strip()) from exc

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

    @contextlib.contextmanager
    def _write(self, bump: bool = True) -> Iterator[tuple[psycopg.Connection, int]]:
        """One write transaction, serialised with every other writer of the store (of any process) on
        the generation row; yields (connection, new generation), or the current one without `bump`."""
        with self._write_lock:
            if self._writer.closed or self._writer.broken:
                self._writer = self._connect()
            con = self._writer
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

    def schema_version(self) -> str:
        row = self._one("SELECT value FROM meta WHERE key = 'schema_version'")
        return row[0] if row else SCHEMA_VERSION

    def setting(self, key: str) -> str | None:
        row = self._one("SELECT value FROM meta WHERE key = %s", [f"setting:{key}"])
        return row[0] if row else None

    def set_settings(self, values: dict[str, str | None]) -> None:
        with self._write(bump=False) as (con, _):
            for key, value in values.items():
                con.execute("DELETE FROM meta WHERE key = %s", [f"setting:{key}"])
                if value is not None:
                    con.execute("INSERT INTO meta VALUES (%s, %s)", [f"setting:{key}", value])

    def drop_embeddings(self, model: str) -> int:
        with self._write(bump=False) as (con, _):
            return con.execute("DELETE FROM embeddings WHERE model = %s", [model]).rowcount

    def generation(self) -> int:
        """The committed generation (read each time: other processes write too)."""
        return int(self._one("SELECT value FROM meta WHERE key = 'generation'")[0])

    # The change feed ---------------------------------------------------------------------------------
    def on_generation(self, callback: Callable[[int], None]) -> None:
        """Call `callback(generation)` (from the follower thread) whenever the store's committed
        generation moves, whichever process wrote it; with a missed notice (the server restarted)
        the next one, or the follower's own re-read on reconnecting, carries the latest."""
        with self._seen:
            self._callbacks.append(callback)
        self._follow()

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
        for cb in callbacks:
            try:
                cb(generation)
            except Exception:   # a follower's failure is its own
                log.exception("store: a follower of generation %d failed", generation)

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
                            self._saw(int(note.payload))
            except psycopg.Error:
                time.sleep(backoff)
                backoff = min(backoff * 2, 2.0)

    # Workspaces --------------------------------------------------------------------------------
    def ensure_workspace(self, workspace_id: str, name: str | None = None) -> None:
        with self._borrow() as con:
            con.execute("INSERT INTO workspaces VALUES (%s, %s, now()) ON CONFLICT DO NOTHING",
                        [workspace_id, name or workspace_id])

    def workspaces(self) -> list[str]:
        return [r[0] for r in self._q("SELECT workspace_id FROM workspaces ORDER BY 1")]

    # Reads -------------------------------------------------------------------------------------
    def existing_pages(self, page_ids: Iterable[str]) -> dict[str, ExistingPage]:
        ids = list(set(page_ids))
        if not ids:
            return {}
        rows = self._q("""SELECT p.page_id, p.content_hash, p.first_seen, p.last_seen, p.visit_count,
                                 array_agg(c.chunk_id) FILTER (WHERE c.chunk_id IS NOT NULL)
                          FROM pages p LEFT JOIN chunks c USING (page_id)
                          WHERE p.page_id = ANY(%s::text[]) GROUP BY 1, 2, 3, 4, 5""", [ids])
        return {r[0]: ExistingPage(r[0], r[1], r[2], r[3], r[4], set(r[5] or [])) for r in rows}

    def page(self, page_id: str) -> dict | None:
        cols, rows = self._named("SELECT * FROM pages WHERE page_id = %s", [page_id])
        if not rows:
            return None
        out = dict(zip(cols, rows[0]))
        out["entities"] = [
            {"entity_id": r[0], "canonical": r[1], "aliases": list(r[2] or [])}
            for r in self._q("""SELECT e.entity_id, e.canonical, e.aliases FROM page_entities pe
                                JOIN entities e USING (entity_id) WHERE pe.page_id = %s ORDER BY e.canonical""",
                             [page_id])]
        return out

    def pages_by_id(self, page_ids: list[str]) -> dict[str, dict]:
        if not page_ids:
            return {}
        cols, rows = self._named(
            """SELECT p.page_id, p.workspace_id, p.url, p.domain, p.title, p.first_seen, p.last_seen,
                      p.published, p.visit_count, p.cluster_id, p.scope,
                      coalesce((SELECT array_agg(e.canonical ORDER BY e.canonical) FROM page_entities pe
                                JOIN entities e USING (entity_id) WHERE pe.page_id = p.page_id), '{}') AS entities
               FROM pages p WHERE p.page_id = ANY(%s::text[])""", [list(page_ids)])
        pages = {r[0]: dict(zip(cols, r)) for r in rows}
        for p in pages.values():
            p["entities"] = list(p["entities"] or [])
        return pages

    def chunk_pages(self, chunk_ids: list[int]) -> dict[int, str]:
        if not chunk_ids:
            return {}
        return dict(self._q("SELECT chunk_id, page_id FROM chunks WHERE chunk_id = ANY(%s::bigint[])",
                            [[int(c) for c in chunk_ids]]))

    def last_seen_of(self, page_ids: list[str]) -> dict[str, datetime]:
        if not page_ids:
            return {}
        return dict(self._q("SELECT page_id, last_seen FROM pages WHERE page_id = ANY(%s::text[])", [list(page_ids)]))

    def chunks_by_id(self, chunk_ids: list[int]) -> dict[int, dict]:
        if not chunk_ids:
            return {}
        cols, rows = self._named(
            """SELECT chunk_id, page_id, ordinal, text, char_start, char_end, section_path, n_tokens
               FROM chunks WHERE chunk_id = ANY(%s::bigint[])""", [[int(c) for c in chunk_ids]])
        return {r[0]: dict(zip(cols, r)) for r in rows}

    def snippet_chunks(self, chunk_ids: list[int]) -> dict[int, tuple[str, list[str] | None]]:
        if not chunk_ids:
            return {}
        rows = self._q("SELECT chunk_id, text, section_path FROM chunks WHERE chunk_id = ANY(%s::bigint[])",
                       [[int(c) for c in chunk_ids]])
        return {r[0]: (r[1], r[2]) for r in rows}

    def lead_chunks(self, page_ids: list[str]) -> dict[str, int]:
        if not page_ids:
            return {}
        return dict(self._q("SELECT page_id, chunk_id FROM chunks WHERE ordinal = 0 AND page_id = ANY(%s::text[])",
                            [list(page_ids)]))

    def page_chunks(self, page_id: str) -> list[dict]:
        cols, rows = self._named(
            """SELECT chunk_id, ordinal, text, char_start, char_end, section_path, n_tokens
               FROM chunks WHERE page_id = %s ORDER BY ordinal""", [page_id])
        return [dict(zip(cols, r)) for r in rows]

    def index_docs(self, page_ids: list[str] | None = None, batch: int = 5000,
                   chunk_ids: list[int] | None = None) -> Iterator[list[IndexDoc]]:
        where, params = "", []
        if page_ids is not None:
            where, params = "WHERE c.page_id = ANY(%s::text[])", [list(page_ids)]
        if chunk_ids is not None:
            where, params = "WHERE c.chunk_id = ANY(%s::bigint[])", [[int(c) for c in chunk_ids]]
        con = self._connect()   # a cursor of its own on the server, read in batches, in one snapshot
        try:
            with con.transaction(), con.cursor(name="index_docs") as cur:
                cur.itersize = batch
                cur.execute(f"""SELECT c.chunk_id, c.page_id, p.workspace_id, c.text, coalesce(p.title, ''),
                                       array_to_string(coalesce(c.section_path, '{{}}'), ' > '), p.domain,
                                       p.first_seen, p.last_seen, p.published, p.cluster_id, p.scope,
                                       coalesce(pe.ents, '{{}}')
                                FROM chunks c JOIN pages p USING (page_id)
                                LEFT JOIN (SELECT page_id, array_agg(entity_id ORDER BY entity_id) AS ents
                                           FROM page_entities GROUP BY 1) pe USING (page_id)
                                {where} ORDER BY c.chunk_id""", params)
                while True:
                    rows = cur.fetchmany(batch)
                    if not rows:
                        break
                    yield [IndexDoc(*r[:12], list(r[12])) for r in rows]
        finally:
            with self._lock:
                self._conns.remove(con)
            con.close()

    # Filters, entities, pins -----------------------------------------------------------------------
    def resolve_entities(self, workspace: str, ref: str, scopes: list[str] | None = None) -> list[str]:
        in_scope = "" if scopes is None else "AND scope = ANY(%s::text[])"
        rows = self._q(
            f"""SELECT entity_id, CASE WHEN entity_id = %s THEN 0 WHEN {_lower('canonical')} = lower(%s) THEN 1
                                  ELSE 2 END
                FROM entities WHERE workspace_id = %s AND (
                   entity_id = %s OR {_lower('canonical')} = lower(%s) OR {_alias_hit('aliases')})
                {in_scope} ORDER BY 2, 1""",
            [ref, ref, workspace, ref, ref, ref] + ([] if scopes is None else [list(scopes)]))
        return [eid for eid, rank in rows if rank == rows[0][1]] if rows else []

    def filtered_pages(self, workspace: str, domains=(), after=None, before=None, cluster_ids=(),
                       entity_ids=(), scopes=None, page_ids=None) -> list[str]:
        where, params = page_filter(workspace, domains, after, before, cluster_ids, entity_ids, scopes, page_ids, "%s")
        return [r[0] for r in self._q(f"SELECT p.page_id FROM pages p WHERE {where} ORDER BY 1", params)]

    def facets(self, workspace: str, scopes=None, limit: int = 50) -> dict:
        where, params = "p.workspace_id = %s", [workspace]
        if scopes is not None:
            where += " AND p.scope = ANY(%s::text[])"
            params.append(list(scopes))
        n, lo, hi = self._one(f"SELECT count(*), min(last_seen), max(last_seen) FROM pages p WHERE {where}", params)
        domains = self._q(f"""SELECT p.domain, count(*) AS n FROM pages p WHERE {where} AND p.domain IS NOT NULL
                              GROUP BY 1 ORDER BY n DESC, 1 LIMIT %s""", [*params, limit])
        clusters = self._q(
            f"""SELECT p.cluster_id, count(*) AS n,
                       (array_agg(p.title ORDER BY p.last_seen DESC, p.page_id)
                           FILTER (WHERE p.title IS NOT NULL AND p.title <> ''))[1:3]
                FROM pages p JOIN clusters c ON c.cluster_id = p.cluster_id AND c.tombstoned_at IS NULL
                WHERE {where} GROUP BY 1 ORDER BY n DESC, 1 LIMIT %s""", [*params, limit])
        entities = self._q(
            f"""SELECT e.entity_id, e.canonical, count(DISTINCT p.page_id) AS n
                FROM pages p JOIN page_entities pe ON pe.page_id = p.page_id
                JOIN entities e ON e.entity_id = pe.entity_id
                WHERE {where} GROUP BY 1, 2 ORDER BY n DESC, 2, 1 LIMIT %s""", [*params, limit])
        return facets_answer(n, lo, hi, domains, clusters, entities)

    def entity_document_keys(self, workspace: str, refs: list[str], scopes: list[str] | None) -> dict[str, str]:
        if not refs:
            return {}
        alias = _ALIAS_HIT.format(col="e.aliases").replace("lower(%s)", "lower(c.rid)")
        rows = self._q(
            f"""WITH c AS (SELECT unnest(%s::text[]) AS rid),
                     m AS (SELECT DISTINCT c.rid, e.entity_id AS sid FROM c JOIN entities e ON e.workspace_id = %s
                           AND (e.entity_id = c.rid OR {_lower('e.canonical')} = lower(c.rid) OR {alias}))
                SELECT m.rid, md5(string_agg(DISTINCT p.page_id || ':' || p.content_hash, ',' ORDER BY
                                  p.page_id || ':' || p.content_hash))
                FROM m JOIN page_entities pe ON pe.entity_id = m.sid
                       JOIN pages p ON p.page_id = pe.page_id AND p.workspace_id = %s
                                       AND (%s::text[] IS NULL OR p.scope = ANY(%s::text[]))
                GROUP BY m.rid""", [list(refs), workspace, workspace, scopes, scopes])
        return dict(rows)

    def entity_pages(self, workspace: str, ref: str, scopes: list[str] | None, max_chars: int) -> list[tuple]:
        rows = self._q(
            f"""SELECT DISTINCT p.page_id, p.url, p.title, p.body_text
                FROM entities e JOIN page_entities pe ON pe.entity_id = e.entity_id
                     JOIN pages p ON p.page_id = pe.page_id AND p.workspace_id = %s
                                     AND (%s::text[] IS NULL OR p.scope = ANY(%s::text[]))
                WHERE e.workspace_id = %s AND (e.entity_id = %s OR {_lower('e.canonical')} = lower(%s)
                      OR {_alias_hit('e.aliases')})
                ORDER BY p.page_id""", [workspace, scopes, scopes, workspace, ref, ref, ref])
        return cut_bodies(rows, max_chars)

    def hot_read(self, since: int | None, max_changed: int | None, text_budget: int = 0,
                 spill: Callable[[Any], None] | None = None) -> HotRead:
        """As the DuckDB store's hot_read, in one REPEATABLE READ snapshot."""
        with self._borrow() as con:
            return self._hot_read(con, since, max_changed, text_budget, spill)

    def _hot_read(self, con, since, max_changed, text_budget, spill) -> HotRead:
        with con.transaction():
            con.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            gen = int(con.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()[0])
            changed: list[str] | None = None
            if since is not None:
                row = con.execute("SELECT value FROM meta WHERE key = 'pruned_upto'").fetchone()
                if since >= (int(row[0]) if row else 0):
                    changed = [r[0] for r in con.execute(
                        "SELECT DISTINCT page_id FROM changes WHERE generation > %s ORDER BY 1", [since]).fetchall()]
                    if max_changed is not None and len(changed) > max_changed:
                        changed = None
            cols = ["page_id", "workspace_id", "url", "domain", "title", "first_seen", "last_seen", "published",
                    "visit_count", "cluster_id", "scope"]
            texts = text_budget > 0
            if changed is None and texts:
                texts = con.execute("SELECT coalesce(sum(octet_length(text)), 0) FROM chunks").fetchone()[0] <= text_budget
            chunk_cols = ["chunk_id", "page_id", "char_start", "char_end"] + (["text", "section_path"] if texts else [])
            only = "" if changed is None else " WHERE page_id = ANY(%s::text[])"
            params = [] if changed is None else [changed]
            page_rows = con.execute(f"SELECT {', '.join(cols)} FROM pages{only} ORDER BY page_id", params).fetchall()
            links = con.execute(f"SELECT page_id, array_agg(entity_id ORDER BY entity_id) FROM page_entities{only} "
                                "GROUP BY 1", params).fetchall()
            chunk_rows = con.execute(f"SELECT {', '.join(chunk_cols)} FROM chunks{only}", params).fetchall()
            names = dict(con.execute("SELECT entity_id, canonical FROM entities").fetchall())
            spilled = changed is None and text_budget > 0 and not texts and spill is not None
            if spilled:
                self._spill(con, spill)
        pages = {c: list(v) for c, v in zip(cols, zip(*page_rows))} if page_rows else {c: [] for c in cols}
        chunks = _chunk_columns(chunk_cols, chunk_rows)
        seen = np.array(pages["last_seen"], dtype="datetime64[us]").astype(np.int64)
        return HotRead(gen, changed, pages, dict(links), chunks, names, texts, seen, spilled)

    @staticmethod
    def _spill(con: psycopg.Connection, spill: Callable[[Any], None], batch: int = 100_000) -> None:
        with con.cursor(name="hot_spill") as cur:
            cur.execute("SELECT chunk_id, text, coalesce(to_json(section_path)::text, '') FROM chunks")
            while rows := cur.fetchmany(batch):
                ids, texts, sections = zip(*rows)
                spill(pa.record_batch([pa.array(ids, pa.int64()), pa.array(texts, pa.string()),
                                       pa.array(sections, pa.string())], names=["chunk_id", "text", "section"]))

    def workspace_chunk_pages(self, workspace: str) -> list[tuple[int, str]]:
        return self._q("""SELECT c.chunk_id, c.page_id FROM chunks c JOIN pages p USING (page_id)
                          WHERE p.workspace_id = %s ORDER BY c.chunk_id""", [workspace])

    def sample_chunk_texts(self, workspace: str, limit: int) -> list[str]:
        """The DuckDB store's sample, chunk for chunk: ordered by DuckDB's hash of the chunk id
        (computed here), then the id."""
        ids = np.array([r[0] for r in self.workspace_chunk_pages(workspace)], dtype=np.int64)
        if not len(ids) or limit <= 0:
            return []
        pick = ids[np.lexsort((ids, duckdb_hash64(ids)))[:int(limit)]].tolist()
        text = dict(self._q("SELECT chunk_id, text FROM chunks WHERE chunk_id = ANY(%s::bigint[])", [pick]))
        return [text[c] for c in pick]

    def workspace_chunks(self, workspace: str) -> list[tuple]:
        return self._q("""SELECT p.page_id, p.url, p.title, c.chunk_id, c.ordinal, c.text, c.section_path
                          FROM chunks c JOIN pages p USING (page_id) WHERE p.workspace_id = %s
                          ORDER BY p.page_id, c.ordinal""", [workspace])

    def chunk_ids_of_pages(self, page_ids: list[str]) -> np.ndarray:
        if not page_ids:
            return np.zeros(0, dtype=np.int64)
        rows = self._q("SELECT chunk_id FROM chunks WHERE page_id = ANY(%s::text[]) ORDER BY 1", [list(page_ids)])
        return np.array([r[0] for r in rows], dtype=np.int64)

    def page_outline(self, workspace: str) -> list[tuple[str, str, str | None, str | None, int | None]]:
        return self._q("SELECT page_id, url, title, domain, cluster_id FROM pages WHERE workspace_id = %s "
                       "ORDER BY page_id", [workspace])

    def workspaces_with_pages(self) -> frozenset[str]:
        return frozenset(r[0] for r in self._q("SELECT DISTINCT workspace_id FROM pages"))

    @staticmethod
    def _scoped(scopes: list[str] | None) -> tuple[str, list]:
        return ("", []) if scopes is None else (" AND scope = ANY(%s::text[])", [list(scopes)])

    def pages_with_url(self, workspace: str, url_norm: str, scopes: list[str] | None = None) -> list[str]:
        sql, params = self._scoped(scopes)
        return [r[0] for r in self._q(
            f"SELECT page_id FROM pages WHERE workspace_id = %s AND url_norm = %s{sql} ORDER BY page_id",
            [workspace, url_norm, *params])]

    def pages_of_domain(self, workspace: str, domain: str, limit: int, subdomains: bool = False,
                        scopes: list[str] | None = None) -> list[str]:
        sql, params = self._scoped(scopes)
        tail = "." + domain
        return [r[0] for r in self._q(
            f"""SELECT page_id FROM pages WHERE workspace_id = %s
                AND (domain = %s OR (%s AND right(domain, %s) = %s)){sql}
                ORDER BY last_seen DESC, page_id LIMIT %s""",
            [workspace, domain, subdomains, len(tail), tail, *params, limit])]

    def pages_under_prefix(self, workspace: str, prefix: str, limit: int, scopes: list[str] | None = None) -> list[str]:
        p = prefix.lower().rstrip("/")
        sql, params = self._scoped(scopes)
        low = _lower("url_norm")
        return [r[0] for r in self._q(
            f"""SELECT page_id FROM pages WHERE workspace_id = %s AND ({low} = %s
                   OR starts_with({low}, %s || '/') OR starts_with({low}, %s || '?')){sql}
                ORDER BY last_seen DESC, page_id LIMIT %s""", [workspace, p, p, p, *params, limit])]

    def page_entity_sets(self, workspace: str) -> dict[str, set[str]]:
        rows = self._q("""SELECT pe.page_id, array_agg(pe.entity_id) FROM page_entities pe JOIN pages p USING (page_id)
                          WHERE p.workspace_id = %s GROUP BY 1""", [workspace])
        return {pid: set(ents) for pid, ents in rows}

    # Clusters and entity edits -------------------------------------------------------------------
    def next_cluster_id(self) -> int:
        return int(self._one("SELECT coalesce(max(cluster_id), 0) + 1 FROM clusters")[0])

    def replace_clusters(self, workspace: str, model: str, assignment: dict[str, int], sizes: dict[int, int]) -> int:
        with self._write() as (con, gen):
            con.execute("UPDATE clusters SET tombstoned_at = now() WHERE workspace_id = %s AND tombstoned_at IS NULL",
                        [workspace])
            with con.cursor() as cur:
                cur.executemany("INSERT INTO clusters VALUES (%s, %s, %s, %s, now(), NULL)",
                                [(cid, workspace, model, n) for cid, n in sorted(sizes.items())])
            con.execute("UPDATE pages SET cluster_id = NULL, updated_generation = %s WHERE workspace_id = %s",
                        [gen, workspace])
            con.execute("""UPDATE pages SET cluster_id = a.cid FROM unnest(%s::text[], %s::bigint[]) AS a(pid, cid)
                           WHERE pages.page_id = a.pid""", [list(assignment), [int(c) for c in assignment.values()]])
            con.execute("INSERT INTO changes SELECT %s, page_id, 'cluster' FROM pages WHERE workspace_id = %s",
                        [gen, workspace])
            return gen

    def clusters(self, workspace: str, include_tombstoned: bool = False, scopes: list[str] | None = None) -> list[dict]:
        tomb = "" if include_tombstoned else "AND c.tombstoned_at IS NULL"
        if scopes is None:
            cols, rows = self._named(
                f"""SELECT cluster_id, model, size, created_at, tombstoned_at FROM clusters c WHERE workspace_id = %s
                    {tomb} ORDER BY cluster_id""", [workspace])
        else:
            cols, rows = self._named(
                f"""SELECT c.cluster_id, c.model, CAST(count(*) AS INTEGER) AS size, c.created_at, c.tombstoned_at
                    FROM clusters c JOIN pages p ON p.cluster_id = c.cluster_id AND p.workspace_id = c.workspace_id
                    WHERE c.workspace_id = %s AND p.scope = ANY(%s::text[]) {tomb}
                    GROUP BY 1, 2, 4, 5 ORDER BY c.cluster_id""", [workspace, list(scopes)])
        return [dict(zip(cols, r)) for r in rows]

    _SAME_NAMESPACE = ("WHERE entities.workspace_id = excluded.workspace_id "
                       "AND entities.scope IS NOT DISTINCT FROM excluded.scope")
    _MERGED_ALIASES = f"""(SELECT array_agg(DISTINCT a ORDER BY a) FROM unnest(coalesce(entities.aliases, '{{}}')
                           || coalesce(excluded.aliases, '{{}}')) a)[1:{MAX_ALIASES}]"""

    def upsert_entity(self, entity: EntityRow, link_pages: list[str], replace_aliases: bool = False) -> int:
        with self._write() as (con, gen):
            merged = "excluded.aliases" if replace_aliases else self._MERGED_ALIASES
            con.execute(f"""INSERT INTO entities (entity_id, workspace_id, canonical, aliases, scope)
                            VALUES (%s, %s, %s, %s::text[], %s) ON CONFLICT (entity_id) DO UPDATE
                            SET canonical = excluded.canonical, aliases = {merged} {self._SAME_NAMESPACE}""",
                        [entity.entity_id, entity.workspace_id, entity.canonical, sorted(set(entity.aliases)),
                         entity.scope])
            if link_pages:
                con.execute("""INSERT INTO page_entities SELECT unnest(%s::text[]), %s
                               ON CONFLICT DO NOTHING""", [list(link_pages), entity.entity_id])
                con.execute("INSERT INTO changes SELECT %s, unnest(%s::text[]), 'entity'", [gen, list(link_pages)])
            return gen

    def entity(self, entity_id: str) -> dict | None:
        row = self._one(
            """SELECT e.entity_id, e.workspace_id, e.canonical, e.aliases, e.scope,
                      (SELECT count(*) FROM page_entities pe JOIN pages p USING (page_id)
                       WHERE pe.entity_id = e.entity_id AND p.workspace_id = e.workspace_id
                         AND p.scope IS NOT DISTINCT FROM e.scope)
               FROM entities e WHERE entity_id = %s""", [entity_id])
        return entity_answer(row)

    def identity_rows(self) -> dict[str, list[tuple]]:
        return {"pages": self._q("SELECT page_id, workspace_id, url_norm, scope FROM pages"),
                "entities": self._q("SELECT entity_id, workspace_id, canonical, aliases FROM entities"),
                "links": self._q("SELECT page_id, entity_id FROM page_entities")}

    def rekey(self, pages: dict[str, str], entities: list[EntityRow], links: list[tuple[str, str]],
              version: str) -> int:
        with self._write() as (con, gen):
            before = {r[0]: sorted(r[1]) for r in con.execute(
                "SELECT page_id, array_agg(entity_id) FROM page_entities GROUP BY 1").fetchall()}
            if pages:
                old, new = list(pages), list(pages.values())
                tables = {r[0] for r in con.execute(
                    "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()").fetchall()}
                for table in ("pages", *self.PAGE_ID_TABLES):
                    if table in tables:
                        con.execute(f"""UPDATE {table} SET page_id = m.new FROM unnest(%s::text[], %s::text[]) AS m(old, new)
                                        WHERE {table}.page_id = m.old""", [old, new])
                con.execute("""INSERT INTO changes SELECT %s, unnest(%s::text[]), 'delete'
                               UNION ALL SELECT %s, unnest(%s::text[]), 'upsert'""", [gen, old, gen, new])
            con.execute("DELETE FROM page_entities")
            con.execute("DELETE FROM entities")
            if entities:
                with con.cursor() as cur:
                    cur.executemany("INSERT INTO entities (entity_id, workspace_id, canonical, aliases, scope) "
                                    "VALUES (%s, %s, %s, %s::text[], %s)",
                                    [(e.entity_id, e.workspace_id, e.canonical, list(e.aliases), e.scope)
                                     for e in entities])
            if links:
                con.execute("""INSERT INTO page_entities SELECT DISTINCT * FROM unnest(%s::text[], %s::text[])
                               ON CONFLICT DO NOTHING""", [[p for p, _ in links], [e for _, e in links]])
            relinked = relinked_pages(before, links, pages)
            if relinked:
                con.execute("INSERT INTO changes SELECT %s, unnest(%s::text[]), 'entity'", [gen, relinked])
            con.execute("UPDATE meta SET value = %s WHERE key = 'schema_version'", [version])
            return gen

    def embeddings_for(self, model: str, chunk_ids: list[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
        if chunk_ids is None:
            rows = self._q("""SELECT e.chunk_id, e.vector FROM embeddings e JOIN chunks c USING (chunk_id)
                              WHERE e.model = %s ORDER BY e.chunk_id""", [model])
        else:
            rows = self._q("""SELECT chunk_id, vector FROM embeddings WHERE model = %s AND chunk_id = ANY(%s::bigint[])
                              ORDER BY chunk_id""", [model, [int(c) for c in chunk_ids]])
        return _matrix(rows)

    def chunks_missing_embeddings(self, model: str, limit: int | None = None) -> list[tuple[int, str]]:
        sql = """SELECT c.chunk_id, c.text FROM chunks c
                 WHERE NOT EXISTS (SELECT 1 FROM embeddings e WHERE e.model = %s AND e.chunk_id = c.chunk_id)
                 ORDER BY c.chunk_id"""
        if limit:
            sql += f" LIMIT {int(limit)}"
        return self._q(sql, [model])

    def changed_pages_since(self, generation: int) -> list[str]:
        return [r[0] for r in self._q("SELECT DISTINCT page_id FROM changes WHERE generation > %s ORDER BY 1",
                                      [generation])]

    def counts(self) -> dict:
        pages, chunks = self._one("SELECT (SELECT count(*) FROM pages), (SELECT count(*) FROM chunks)")
        per_model = dict(self._q("SELECT model, count(*) FROM embeddings e JOIN chunks c USING (chunk_id) "
                                 "GROUP BY 1 ORDER BY 1"))
        entities = self._one("SELECT count(*) FROM entities")[0]
        per_ws = dict(self._q("SELECT workspace_id, count(*) FROM pages GROUP BY 1 ORDER BY 1"))
        return {"pages": pages, "chunks": chunks, "entities": entities, "embeddings": per_model,
                "pages_per_workspace": per_ws}

    # Writes ------------------------------------------------------------------------------------
    def apply(self, writes: list[PageWrite], touches: list[Touch], deletes: list[str] = ()) -> int:
        with self._write() as (con, gen):
            changes: list[tuple[int, str, str]] = []
            with con.cursor() as cur:
                if touches:
                    cur.executemany("""UPDATE pages SET last_seen = greatest(last_seen, %s),
                                       visit_count = visit_count + %s, updated_generation = %s WHERE page_id = %s""",
                                    [(t.last_seen, t.visits, gen, t.page_id) for t in touches])
                    changes += [(gen, t.page_id, "touch") for t in touches]
                for pid in deletes:
                    self._delete_page(con, pid)
                    changes.append((gen, pid, "delete"))
                self._write_pages(con, writes, gen)
                changes += [(gen, w.page.page_id, "upsert") for w in writes]
                if changes:
                    cur.executemany("INSERT INTO changes VALUES (%s, %s, %s)", changes)
            return gen

    def quarantine(self, reasons: dict[str, str], now: datetime) -> int:
        with self._write() as (con, gen):
            for pid, reason in sorted(reasons.items()):
                con.execute("INSERT INTO quarantine SELECT page_id, workspace_id, url, %s, %s, %s, to_jsonb(p) "
                            "FROM pages p WHERE page_id = %s", [reason, now, gen, pid])
                self._delete_page(con, pid)
            if reasons:
                con.execute("INSERT INTO changes SELECT %s, unnest(%s::text[]), 'delete'", [gen, sorted(reasons)])
            return gen

    def quarantined(self, limit: int = 20) -> dict:
        n = self._one("SELECT count(*) FROM quarantine")[0]
        cols = ["page_id", "workspace_id", "url", "reason", "quarantined_at"]
        rows = self._q(f"SELECT {', '.join(cols)} FROM quarantine ORDER BY quarantined_at DESC, page_id LIMIT %s",
                       [limit])
        return quarantined_answer(n, cols, rows)

    @staticmethod
    def _delete_page(con: psycopg.Connection, page_id: str) -> None:
        con.execute("DELETE FROM embeddings WHERE chunk_id IN (SELECT chunk_id FROM chunks WHERE page_id = %s)",
                    [page_id])
        con.execute("DELETE FROM chunks WHERE page_id = %s", [page_id])
        con.execute("DELETE FROM page_entities WHERE page_id = %s", [page_id])
        con.execute("DELETE FROM pages WHERE page_id = %s", [page_id])

    def _write_pages(self, con: psycopg.Connection, writes: list[PageWrite], gen: int) -> None:
        if not writes:
            return
        ids = [w.page.page_id for w in writes]
        old_chunks = {r[0] for r in con.execute("SELECT chunk_id FROM chunks WHERE page_id = ANY(%s::text[])",
                                                [ids]).fetchall()}
        new_chunks = {c.chunk_id for w in writes for c in w.chunks}
        gone = sorted(old_chunks - new_chunks)
        kept = old_chunks & new_chunks
        if gone:
            con.execute("DELETE FROM embeddings WHERE chunk_id = ANY(%s::bigint[])", [gone])
            con.execute("DELETE FROM chunks WHERE chunk_id = ANY(%s::bigint[])", [gone])
        with con.cursor() as cur:
            cur.executemany(
                """INSERT INTO pages VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
                   ON CONFLICT (page_id) DO UPDATE SET workspace_id = excluded.workspace_id, url = excluded.url,
                   url_norm = excluded.url_norm, domain = excluded.domain, title = excluded.title,
                   body_text = excluded.body_text, content_hash = excluded.content_hash,
                   first_seen = excluded.first_seen, last_seen = excluded.last_seen, published = excluded.published,
                   visit_count = excluded.visit_count, cluster_id = excluded.cluster_id, scope = excluded.scope,
                   updated_generation = excluded.updated_generation""",
                [(p.page_id, p.workspace_id, p.url, p.url_norm, p.domain, p.title, p.body_text, p.content_hash,
                  p.first_seen, p.last_seen, p.published, p.visit_count, p.cluster_id, p.scope, gen)
                 for p in (w.page for w in writes)])
            upd = [(c.ordinal, c.char_start, c.char_end, c.section_path, c.n_tokens, c.chunk_id)
                   for w in writes for c in w.chunks if c.chunk_id in kept]
            if upd:
                cur.executemany("UPDATE chunks SET ordinal=%s, char_start=%s, char_end=%s, section_path=%s::text[], "
                                "n_tokens=%s WHERE chunk_id=%s", upd)
        fresh = [c for w in writes for c in w.chunks if c.chunk_id not in kept]
        if fresh:
            with con.cursor() as cur, cur.copy("COPY chunks (chunk_id, page_id, ordinal, text, char_start, char_end, "
                                                "section_path, n_tokens) FROM STDIN") as copy:
                for c in fresh:
                    copy.write_row((c.chunk_id, c.page_id, c.ordinal, c.text, c.char_start, c.char_end,
                                    c.section_path, c.n_tokens))
        self._insert_vectors(con, merge_vectors(writes))
        con.execute("DELETE FROM page_entities WHERE page_id = ANY(%s::text[])", [ids])
        entities, pairs = batch_entities(writes)
        if entities:
            with con.cursor() as cur:
                cur.executemany(f"""INSERT INTO entities (entity_id, workspace_id, canonical, aliases, scope)
                                    VALUES (%s, %s, %s, %s::text[], %s) ON CONFLICT (entity_id) DO UPDATE
                                    SET aliases = {self._MERGED_ALIASES} {self._SAME_NAMESPACE}""",
                                [(e.entity_id, e.workspace_id, e.canonical, e.aliases, e.scope)
                                 for e in entities.values()])
        if pairs:
            con.execute("INSERT INTO page_entities SELECT * FROM unnest(%s::text[], %s::text[]) ON CONFLICT DO NOTHING",
                        [[p for p, _ in pairs], [e for _, e in pairs]])

    @staticmethod
    def _insert_vectors(con: psycopg.Connection, vectors: dict[str, tuple[list[int], list[np.ndarray]]]) -> None:
        """New vectors; one a concurrent writer already stored for the same (model, chunk) stays."""
        for model, (ids, vecs) in vectors.items():
            if not ids:
                continue
            mat = np.ascontiguousarray(np.vstack(vecs), dtype="<f4")
            con.execute("""INSERT INTO embeddings SELECT %s, * FROM unnest(%s::bigint[], %s::bytea[])
                           ON CONFLICT DO NOTHING""", [model, [int(i) for i in ids], [row.tobytes() for row in mat]])

    def add_embeddings(self, model: str, ids: list[int], vectors: np.ndarray) -> list[int]:
        with self._write(bump=False) as (con, _):
            live = {r[0] for r in con.execute(
                """SELECT chunk_id FROM chunks c WHERE chunk_id = ANY(%s::bigint[]) AND NOT EXISTS
                   (SELECT 1 FROM embeddings e WHERE e.model = %s AND e.chunk_id = c.chunk_id)""",
                [[int(i) for i in ids], model]).fetchall()}
            keep = [i for i, cid in enumerate(ids) if cid in live]
            self._insert_vectors(con, {model: ([ids[i] for i in keep], [vectors[i] for i in keep])})
            return [ids[i] for i in keep]

    def prune_changes(self, upto_generation: int) -> None:
        with self._write(bump=False) as (con, _):
            con.execute("DELETE FROM changes WHERE generation <= %s", [upto_generation])
            con.execute("INSERT INTO meta VALUES ('pruned_upto', %s) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                        [str(upto_generation)])

    def pruned_upto(self) -> int:
        row = self._one("SELECT value FROM meta WHERE key = 'pruned_upto'")
        return int(row[0]) if row else 0

    def embedding_ids(self, model: str) -> tuple[np.ndarray, int]:
        rows = self._q("SELECT e.chunk_id FROM embeddings e JOIN chunks c USING (chunk_id) WHERE e.model = %s "
                       "ORDER BY 1", [model])
        ids = np.array([r[0] for r in rows], dtype=np.int64)
        return ids, len(ids)


def _chunk_columns(cols: list[str], rows: list[tuple]) -> dict[str, np.ndarray]:
    """Fetched chunk rows as the columns the in-memory view reads (DuckDB's fetchnumpy shapes)."""
    kinds = {"chunk_id": np.int64, "char_start": np.int32, "char_end": np.int32}
    out: dict[str, np.ndarray] = {}
    for j, c in enumerate(cols):
        values = [r[j] for r in rows]
        if c in kinds:
            out[c] = np.array(values, dtype=kinds[c])
        else:
            arr = np.empty(len(values), dtype=object)
            for i, v in enumerate(values):
                arr[i] = v
            out[c] = arr
    return out


def _matrix(rows: list[tuple]) -> tuple[np.ndarray, np.ndarray]:
    ids = np.array([r[0] for r in rows], dtype=np.int64)
    if not len(ids):
        return ids, np.zeros((0, 0), dtype=np.float32)
    flat = np.frombuffer(b"".join(bytes(r[1]) for r in rows), dtype="<f4")
    return ids, np.ascontiguousarray(flat.reshape(len(ids), -1).astype(np.float32, copy=False))
