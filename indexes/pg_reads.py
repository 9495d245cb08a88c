"""What the PostgreSQL corpus store reads (indexes/pg_store.py is the store: its connections, its
writes' transaction and the change feed; indexes/pg_writes.py its writes): every read verb of the
Protocol (indexes/store_protocol.py), each one statement on a pooled connection (the in-memory view's
read, one REPEATABLE READ snapshot), answering exactly as the DuckDB store does."""
from __future__ import annotations

from datetime import datetime
from typing import Any, Callable, Iterable, Iterator

import numpy as np
import psycopg
import pyarrow as pa

from .store_rows import (ExistingPage, HotRead, IndexDoc, chunk_columns, cut_bodies, duckdb_hash64, entity_answer,
                         facets_answer, page_filter, quarantined_answer, vector_matrix)


def _lower(expr: str) -> str:
    """lower() in the database's own locale: under "C" it would fold ASCII letters only."""
    return f'lower(({expr}) COLLATE "default")'


_ALIAS_HIT = f"EXISTS (SELECT 1 FROM unnest(coalesce({{col}}, '{{{{}}}}'::text[])) a WHERE {_lower('a')} = lower(%s))"


def _alias_hit(col: str) -> str:
    return _ALIAS_HIT.format(col=col)


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

    def next_cluster_id(self) -> int:
        return int(self._one("SELECT coalesce(max(cluster_id), 0) + 1 FROM clusters")[0])

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
