"""What the PostgreSQL corpus store writes (indexes/pg_store.py): every write verb of the Protocol,
each inside the store's `_write` transaction, which first moves the generation row and so applies the
writes of every process one at a time, in generation order."""
from __future__ import annotations

from datetime import datetime

import numpy as np
import psycopg

from .pg_schema import CHANNEL, VECTORS_NOTICE
from .store_rows import MAX_ALIASES, EntityRow, PageWrite, Touch, batch_entities, merge_vectors, relinked_pages


class PgWrites:
    """The write verbs. Uses the store's `_write(bump)` (a transaction: the connection and the new
    generation) and `_borrow` (a pooled connection, for a write outside the generation)."""

    _SAME_NAMESPACE = ("WHERE entities.workspace_id = excluded.workspace_id "
                       "AND entities.scope IS NOT DISTINCT FROM excluded.scope")
    _MERGED_ALIASES = f"""(SELECT array_agg(DISTINCT a ORDER BY a) FROM unnest(coalesce(entities.aliases, '{{}}')
                           || coalesce(excluded.aliases, '{{}}')) a)[1:{MAX_ALIASES}]"""


    def set_settings(self, values: dict[str, str | None]) -> None:
        with self._write(bump=False) as (con, _):
            for key, value in values.items():
                con.execute("DELETE FROM meta WHERE key = %s", [f"setting:{key}"])
                if value is not None:
                    con.execute("INSERT INTO meta VALUES (%s, %s)", [f"setting:{key}", value])

    def touch_feedback(self) -> int | None:
        """Mark the feedback (judgments, the shortcuts' choices) changed, at a new generation: every
        replica re-reads it once it has applied that generation (feedback_stamp)."""
        with self._write() as (con, gen):
            con.execute("INSERT INTO meta VALUES ('feedback_version', %s) ON CONFLICT (key) DO UPDATE "
                        "SET value = excluded.value", [str(gen)])
            return gen

    def feedback_stamp(self) -> str | None:
        """The generation of the feedback's last change (touch_feedback), None before any."""
        with self._borrow() as con:
            row = con.execute("SELECT value FROM meta WHERE key = 'feedback_version'").fetchone()
        return row[0] if row else None

    def claim_setting(self, key: str, value: str) -> bool:
        """Set a data dir value only if it is unset: whether this call set it (every replica at once: one wins)."""
        with self._write(bump=False) as (con, _):
            return con.execute("INSERT INTO meta VALUES (%s, %s) ON CONFLICT (key) DO NOTHING",
                               [f"setting:{key}", value]).rowcount == 1

    def drop_embeddings(self, model: str) -> int:
        with self._write(bump=False) as (con, _):
            return con.execute("DELETE FROM embeddings WHERE model = %s", [model]).rowcount

    def ensure_workspace(self, workspace_id: str, name: str | None = None) -> None:
        with self._borrow() as con:
            con.execute("INSERT INTO workspaces VALUES (%s, %s, now()) ON CONFLICT DO NOTHING",
                        [workspace_id, name or workspace_id])

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
            if keep:   # no generation moves: the other replicas hear of the vectors by this notice
                con.execute("SELECT pg_notify(%s, %s)", [CHANNEL, VECTORS_NOTICE + model])
            return [ids[i] for i in keep]

    def prune_changes(self, upto_generation: int) -> None:
        """Drop the change rows up to `upto_generation`, but never past the slowest live replica's
        applied generation (it replays them; a replica gone longer than a day rebuilds instead)."""
        slowest = self.slowest_replica()
        if slowest is not None:
            upto_generation = min(upto_generation, slowest)
        if upto_generation <= self.pruned_upto():
            return
        with self._write(bump=False) as (con, _):
            con.execute("DELETE FROM changes WHERE generation <= %s", [upto_generation])
            con.execute("INSERT INTO meta VALUES ('pruned_upto', %s) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                        [str(upto_generation)])
