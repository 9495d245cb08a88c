"""What the DuckDB corpus store writes (indexes/store.py): every write verb of the Protocol, each one
transaction under the store's write lock that also moves the generation (but for settings, vectors
added or dropped, and pruned change rows), followers told after the commit."""
from __future__ import annotations

from datetime import datetime

import numpy as np
import pyarrow as pa

from .store_reads import int_list
from .store_rows import (MAX_ALIASES, EntityRow, PageWrite, Touch, batch_entities, entity_table, merge_vectors,
                         relinked_pages)


class DuckWrites:
    """The write verbs. Uses the store's `_writing()` (a transaction that moves the generation),
    `transaction()` (one that does not), `_con` and `_write_lock` (for a workspace row)."""

    # An entity row is only ever updated by a write of its own namespace (workspace and scope): the ids
    # of two namespaces never meet (engine/core/identity.py), and the guard keeps it so regardless.
    _SAME_NAMESPACE = "WHERE entities.workspace_id = excluded.workspace_id AND entities.scope IS NOT DISTINCT FROM excluded.scope"

    def set_settings(self, values: dict[str, str | None]) -> None:
        """Set (or, with None, remove) several of the data dir's own values in one transaction."""
        with self.transaction() as con:
            for key, value in values.items():
                con.execute("DELETE FROM meta WHERE key = ?", [f"setting:{key}"])
                if value is not None:
                    con.execute("INSERT INTO meta VALUES (?, ?)", [f"setting:{key}", value])

    def touch_feedback(self) -> int | None:
        """One process holds a DuckDB store: its QueryLog's own version says the feedback changed."""
        return None

    def feedback_stamp(self) -> str | None:
        return None

    def claim_setting(self, key: str, value: str) -> bool:
        """Set a data dir value only if it is unset, in one transaction: whether this call set it (two
        callers at once: one wins)."""
        with self.transaction() as con:
            if con.execute("SELECT 1 FROM meta WHERE key = ?", [f"setting:{key}"]).fetchone():
                return False
            con.execute("INSERT INTO meta VALUES (?, ?)", [f"setting:{key}", value])
            return True

    def drop_embeddings(self, model: str) -> int:
        """Delete every stored vector of `model` (`refindery models drop`); returns how many."""
        with self.transaction() as con:
            n = con.execute("SELECT count(*) FROM embeddings WHERE model = ?", [model]).fetchone()[0]
            con.execute("DELETE FROM embeddings WHERE model = ?", [model])
        return int(n)

    def ensure_workspace(self, workspace_id: str, name: str | None = None) -> None:
        with self._write_lock:
            self._con.execute(
                "INSERT INTO workspaces VALUES (?, ?, now()) ON CONFLICT DO NOTHING",
                [workspace_id, name or workspace_id],
            )

    def replace_clusters(self, workspace: str, model: str, assignment: dict[str, int], sizes: dict[int, int]) -> int:
        """Tombstone the workspace's clusters, record new ones and assign every page; one
        transaction, one generation (the sparse index re-indexes the pages' cluster field)."""
        with self._writing() as (con, gen):
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
        return gen

    def upsert_entity(self, entity: EntityRow, link_pages: list[str], replace_aliases: bool = False) -> int:
        """Create or edit an entity and link pages to it; returns the new generation."""
        with self._writing() as (con, gen):
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
        return gen

    def rekey(self, pages: dict[str, str], entities: list[EntityRow], links: list[tuple[str, str]],
              version: str) -> int:
        """One transaction: pages renamed (old id -> new id, in every table that names them), the
        entities replaced by `entities` and the links by `links` (page_id, entity_id, by new page id),
        the schema version set. Indexes learn of it from the change rows (renamed pages: the old id
        deleted and the new one upserted; relinked pages: 'entity'). Returns the new generation."""
        with self._writing() as (con, gen):
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
        return gen

    def apply(self, writes: list[PageWrite], touches: list[Touch], deletes: list[str] = ()) -> int:
        """Write a batch in one transaction; return the new generation."""
        with self._writing() as (con, gen):
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
        return gen

    def quarantine(self, reasons: dict[str, str], now: datetime) -> int:
        """Move pages out of the corpus into `quarantine` (their row as JSON, with the reason), in one
        transaction that bumps the generation like a delete; return the new generation."""
        with self._writing() as (con, gen):
            for pid, reason in sorted(reasons.items()):
                con.execute("INSERT INTO quarantine SELECT page_id, workspace_id, url, ?, ?, ?, to_json(p) "
                            "FROM pages p WHERE page_id = ?", [reason, now, gen, pid])
                self._delete_page(con, pid)
            con.executemany("INSERT INTO changes VALUES (?, ?, 'delete')", [(gen, pid) for pid in sorted(reasons)])
        return gen

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
        self._write_chunks(con, writes, kept)
        vectors = merge_vectors(writes)
        if kept and vectors:   # a kept chunk's vector of a model stays the one stored: never a second one
            have = set(con.execute(
                f"SELECT model, chunk_id FROM embeddings WHERE chunk_id IN ({int_list(kept)})").fetchall())
            vectors = {m: ([i for i in ids if (m, i) not in have], [v for i, v in zip(ids, vecs) if (m, i) not in have])
                       for m, (ids, vecs) in vectors.items()}
        self._insert_vectors(con, vectors)
        self._write_entities(con, writes, ids)

    @staticmethod
    def _write_chunks(con, writes: list[PageWrite], kept: set[int]) -> None:
        """The pages' chunks: those that survive a change keep their id (and vectors) — only place and
        section move —, the others are inserted in one statement."""
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

    def _write_entities(self, con, writes: list[PageWrite], ids: list[str]) -> None:
        """The pages' entity links replaced, and their entities written set-based, one statement each:
        the first row of an entity in the batch names it (as one insert after another did), every row
        adds its aliases."""
        con.execute("DELETE FROM page_entities WHERE page_id IN (SELECT unnest(?::VARCHAR[]))", [ids])
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
        with self.transaction() as con:
            wanted = con.execute(
                """SELECT chunk_id FROM chunks WHERE chunk_id IN (SELECT unnest(?::BIGINT[]))
                   AND chunk_id NOT IN (SELECT chunk_id FROM embeddings WHERE model = ?
                                        AND chunk_id IN (SELECT unnest(?::BIGINT[])))""",
                [list(ids), model, list(ids)]).fetchall()
            live = {r[0] for r in wanted}
            keep = [i for i, cid in enumerate(ids) if cid in live]
            self._insert_vectors(con, {model: ([ids[i] for i in keep], [vectors[i] for i in keep])})
        return [ids[i] for i in keep]

    def prune_changes(self, upto_generation: int) -> None:
        """Forget change rows every index has already applied; an index older than this point
        can no longer replay and is rebuilt instead."""
        with self.transaction() as con:
            con.execute("DELETE FROM changes WHERE generation <= ?", [upto_generation])
            con.execute("INSERT INTO meta VALUES ('pruned_upto', ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                        [str(upto_generation)])
