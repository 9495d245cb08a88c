"""What the DuckDB corpus store reads (indexes/store.py is the store: its file, its connection and
cursors, the generation; indexes/store_writes.py its writes): every read verb of the Protocol
(indexes/store_protocol.py) but the lookups for filters, pins, entities and clusters
(store_lookups.py), each on the calling thread's cursor."""
from __future__ import annotations

from datetime import datetime
from typing import Any, Callable, Iterable, Iterator

import numpy as np

from .store_rows import ExistingPage, HotRead, IndexDoc, arrow_to_matrix, pylist, quarantined_answer


def int_list(ids) -> str:
    """Ids as a literal IN list: it lets DuckDB use the primary-key index (a semi-join on unnest()
    scans); int() makes it safe to inline."""
    return ",".join(str(int(i)) for i in ids)


class DuckReads:
    """The read verbs. Uses the store's `cursor()` (this thread's) and `_con` (for a cursor of its own)."""

    def workspaces(self) -> list[str]:
        return [r[0] for r in self.cursor().execute("SELECT workspace_id FROM workspaces ORDER BY 1").fetchall()]

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

    def chunk_pages(self, chunk_ids: list[int]) -> dict[int, str]:
        """chunk id -> page id, for the chunks that exist."""
        if not chunk_ids:
            return {}
        return dict(self.cursor().execute(
            f"SELECT chunk_id, page_id FROM chunks WHERE chunk_id IN ({int_list(chunk_ids)})").fetchall())

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
               FROM chunks WHERE chunk_id IN ({int_list(chunk_ids)})""")
        cols = [d[0] for d in res.description]
        return {r[0]: dict(zip(cols, r)) for r in res.fetchall()}

    def snippet_chunks(self, chunk_ids: list[int]) -> dict[int, tuple[str, list[str] | None]]:
        """chunk id -> (text, section path): what a search reads of the store for the k pages it
        returns (everything else comes from the in-memory view, indexes/hot.py)."""
        if not chunk_ids:
            return {}
        rows = self.cursor().execute(
            f"SELECT chunk_id, text, section_path FROM chunks WHERE chunk_id IN ({int_list(chunk_ids)})").fetchall()
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
            if spilled:   # (no progress bar on a reader: the connection opens with it off, duck_file.py)
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

    def identity_rows(self) -> dict[str, list[tuple]]:
        """What a re-keying reads: every page's (page_id, workspace, url_norm, scope), every entity's
        (entity_id, workspace, canonical, aliases) and every link's (page_id, entity_id)."""
        cur = self.cursor()
        return {"pages": cur.execute("SELECT page_id, workspace_id, url_norm, scope FROM pages").fetchall(),
                "entities": cur.execute("SELECT entity_id, workspace_id, canonical, aliases FROM entities").fetchall(),
                "links": cur.execute("SELECT page_id, entity_id FROM page_entities").fetchall()}

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

    def quarantined(self, limit: int = 20) -> dict:
        """How many pages are in quarantine, and the newest `limit` of them (without their text)."""
        cur = self.cursor()
        n = cur.execute("SELECT count(*) FROM quarantine").fetchone()[0]
        cols = ["page_id", "workspace_id", "url", "reason", "quarantined_at"]
        rows = cur.execute(f"SELECT {', '.join(cols)} FROM quarantine ORDER BY quarantined_at DESC, page_id "
                           "LIMIT ?", [limit]).fetchall()
        return quarantined_answer(n, cols, rows)

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
