"""What the PostgreSQL corpus store reads (indexes/pg_store.py is the store: its connections, its
writes' transaction and the change feed; indexes/pg_writes.py its writes; pg_lookups.py its lookups
for filters, pins, entities and clusters): the other read verbs of the Protocol
(indexes/store_protocol.py), each one statement on a pooled connection (the in-memory view's read, one
REPEATABLE READ snapshot), answering exactly as the DuckDB store does."""
from __future__ import annotations

from datetime import datetime
from typing import Any, Callable, Iterable, Iterator

import numpy as np
import psycopg
import pyarrow as pa

from .store_rows import (ExistingPage, HotRead, IndexDoc, chunk_columns, duckdb_hash64, quarantined_answer,
                         vector_matrix)


class PgReads:
    """The read verbs. Uses the store's `_q` (rows), `_one` (a row), `_named` (column names and rows),
    `_borrow` (a pooled connection), `_connect` and `_drop` (a connection of its own, and its end)."""

    def workspaces(self) -> list[str]:
        return [r[0] for r in self._q("SELECT workspace_id FROM workspaces ORDER BY 1")]

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
            self._drop(con)

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
        chunks = chunk_columns(chunk_cols, chunk_rows)
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

    def identity_rows(self) -> dict[str, list[tuple]]:
        return {"pages": self._q("SELECT page_id, workspace_id, url_norm, scope FROM pages"),
                "entities": self._q("SELECT entity_id, workspace_id, canonical, aliases FROM entities"),
                "links": self._q("SELECT page_id, entity_id FROM page_entities")}

    def embeddings_for(self, model: str, chunk_ids: list[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
        if chunk_ids is None:
            rows = self._q("""SELECT e.chunk_id, e.vector FROM embeddings e JOIN chunks c USING (chunk_id)
                              WHERE e.model = %s ORDER BY e.chunk_id""", [model])
        else:
            rows = self._q("""SELECT chunk_id, vector FROM embeddings WHERE model = %s AND chunk_id = ANY(%s::bigint[])
                              ORDER BY chunk_id""", [model, [int(c) for c in chunk_ids]])
        return vector_matrix(rows)

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

    def quarantined(self, limit: int = 20) -> dict:
        n = self._one("SELECT count(*) FROM quarantine")[0]
        cols = ["page_id", "workspace_id", "url", "reason", "quarantined_at"]
        rows = self._q(f"SELECT {', '.join(cols)} FROM quarantine ORDER BY quarantined_at DESC, page_id LIMIT %s",
                       [limit])
        return quarantined_answer(n, cols, rows)

    def pruned_upto(self) -> int:
        row = self._one("SELECT value FROM meta WHERE key = 'pruned_upto'")
        return int(row[0]) if row else 0

    def embedding_ids(self, model: str) -> tuple[np.ndarray, int]:
        rows = self._q("SELECT e.chunk_id FROM embeddings e JOIN chunks c USING (chunk_id) WHERE e.model = %s "
                       "ORDER BY 1", [model])
        ids = np.array([r[0] for r in rows], dtype=np.int64)
        return ids, len(ids)
