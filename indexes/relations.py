"""The relation store: in the same DuckDB file as the corpus, or (the corpus in PostgreSQL) a DuckDB
file of its own in the data dir. Its tables are described in indexes/relation_schema.py; a search's
judging over them is indexes/judging/; a load's writes indexes/relation_loads.py.
"""
from __future__ import annotations

import threading
from pathlib import Path

import duckdb

from .judging.column_cache import ColumnCache
from .judging.enumeration import Enumerator
from .judging.verdict_cache import VerdictCache
from .relation_shapes import EVERYTHING, Sight, TableShape  # noqa: F401 — named from here too
from .duck_file import DuckFile
from .relation_log import SharedRelations
from .relation_records import RelationRecords
from .relation_schema import DDL, RECORDS_DDL
from .store_protocol import Store


class WorkspaceTaken(Exception):
    """A relation workspace with this id exists already."""


class RelationStore:
    def __init__(self, store: DuckFile, corpus: Store, verdict_cache_mb: float = 256, columns_mb: float = 512):
        """`store`: the DuckDB file the relation tables are in — the corpus store's own file, or (with
        the corpus in PostgreSQL) one of their own in the data dir; `corpus`: the corpus store, which
        keeps the workspace rows."""
        self.store = store
        self.corpus = corpus
        # relation writes every replica replays (indexes/relation_log.py), the corpus in PostgreSQL
        self.shared = store if isinstance(store, SharedRelations) else None
        if self.shared is not None:
            self.shared.on_replayed = self._replayed
        self.records = RelationRecords(corpus.sql())
        # Each relation's current rows of a workspace, held as NumPy columns until its next write
        # and judged there (judging/column_cache.py).
        self.columns = ColumnCache(columns_mb)
        # Each relation's per-entity verdicts for a search's constraints, reused by later searches
        # that name the same constraints until the workspace's next write (enumeration.VerdictCache).
        self.verdicts = VerdictCache(verdict_cache_mb)
        self._known: set[str] = set()
        self._reader_base: duckdb.DuckDBPyConnection | None = None
        self._reader_lock = threading.Lock()
        # Facts about a workspace's rows that only a write can change (enumeration's profiles),
        # cached until the workspace's next load or correction in this process.
        self._versions: dict[str, int] = {}
        self.cache: dict[tuple, object] = {}
        with store.transaction() as con:
            for stmt in DDL + (RECORDS_DDL if self.shared is None else []):
                con.execute(stmt)
            # relation tables from before document scopes gain the column (NULL: every key reads the
            # row); from before source ordinals, src_row (NULL: the receipt's cell is found by its key)
            for column, kind in (("scope", "VARCHAR"), ("src_row", "BIGINT")):
                for (table,) in con.execute(
                        "SELECT table_name FROM information_schema.tables WHERE table_name LIKE 'rel\\_%\\_\\_%' "
                        "ESCAPE '\\' AND table_name NOT IN (SELECT table_name FROM information_schema.columns "
                        "WHERE column_name = ?)", [column]).fetchall():
                    con.execute(f'ALTER TABLE "{table}" ADD COLUMN {column} {kind}')

    def cursor(self) -> duckdb.DuckDBPyConnection:
        return self.store.cursor()

    def transaction(self, changes: list[str] | tuple = ()):
        """A write of the relation tables, all or nothing; `changes`: the workspaces whose rows it
        changes (with replicas, each one that replays the write forgets what it cached of them)."""
        if self.shared is not None:
            return self.shared.shared_transaction(changes)
        return self.store.transaction()

    def _replayed(self, workspaces: list[str]) -> None:
        for ws in workspaces:
            self.changed(ws)

    def ensure_table(self, shape: TableShape, con: duckdb.DuckDBPyConnection | None = None) -> str:
        """Create the relation's table, or add the columns a changed pack declares; never drops one."""
        key = f"{shape.name}:{hash(shape.slots)}"
        if key in self._known:
            return shape.name
        def run(c):
            c.execute(f"CREATE TABLE IF NOT EXISTS {shape.name} ("
                      + ", ".join(f"{n} {t}" for n, t in shape.columns()) + ")")
            have = {r[0] for r in c.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = ?", [shape.name]).fetchall()}
            for n, t in shape.columns():
                if n not in have:
                    c.execute(f"ALTER TABLE {shape.name} ADD COLUMN {n} {t}")
        if con is not None:
            run(con)
        else:
            with self.transaction() as c:
                run(c)
        self._known.add(key)
        return shape.name

    @staticmethod
    def register_entities(con: duckdb.DuckDBPyConnection, workspace_id: str, kind: str, load_id: str,
                          source_sql: str, params: list) -> int:
        """Register the entity ids `source_sql` yields (columns entity_id, name, scope: the document
        scope of what named it, NULL for a source every key reads) that the workspace does not hold
        yet, numbering them on from its highest ent_no, and widen the scopes of the known ones to
        what named them now. Returns how many were new."""
        con.execute(f"CREATE OR REPLACE TEMP TABLE _named AS SELECT entity_id, max(name) AS name, "
                    f"arg_max_null(scope, name) FILTER (WHERE name IS NOT NULL) AS name_scope, bool_or(scope IS NULL) AS open, "
                    f"list_distinct(list(scope)) AS scopes FROM ({source_sql}) WHERE entity_id IS NOT NULL "
                    f"GROUP BY entity_id", params)
        try:
            con.execute("UPDATE rel_entities SET scopes = CASE WHEN n.open THEN NULL "
                        "ELSE list_distinct(list_concat(rel_entities.scopes, n.scopes)) END "
                        "FROM _named n WHERE rel_entities.workspace_id = ? AND rel_entities.entity_id = n.entity_id "
                        "AND rel_entities.scopes IS NOT NULL", [workspace_id])
            return con.execute(
                """INSERT INTO rel_entities (workspace_id, entity_id, kind, name, load_id, ent_no, scopes, name_scope)
                   SELECT ?, s.entity_id, ?, s.name, ?, base.n + CAST(row_number() OVER (ORDER BY s.entity_id) AS INTEGER),
                          CASE WHEN s.open THEN NULL ELSE s.scopes END, CASE WHEN s.name IS NOT NULL THEN s.name_scope END
                   FROM _named s,
                        (SELECT CAST(coalesce(max(ent_no), 0) AS INTEGER) AS n FROM rel_entities
                         WHERE workspace_id = ?) base
                   WHERE s.entity_id NOT IN (SELECT entity_id FROM rel_entities WHERE workspace_id = ?)""",
                [workspace_id, kind, load_id, workspace_id, workspace_id]).fetchall()[0][0]
        finally:
            con.execute("DROP TABLE IF EXISTS _named")

    @staticmethod
    def number_rows(con: duckdb.DuckDBPyConnection, table: str, workspace_id: str, load_id: str) -> None:
        """Give a load's rows (or coverage rows) the ent_no of their entity."""
        con.execute(f"UPDATE {table} SET ent_no = e.ent_no FROM rel_entities e WHERE {table}.load_id = ? "
                    f"AND {table}.workspace_id = ? AND e.workspace_id = ? AND e.entity_id = {table}.entity_id",
                    [load_id, workspace_id, workspace_id])

    def changed(self, workspace_id: str) -> None:
        """A load or correction changed the workspace's rows: what was cached about them is stale."""
        self._versions[workspace_id] = self._versions.get(workspace_id, 0) + 1
        self.verdicts.forget(workspace_id)
        # the relations that were held are read again at once (the workspace is being searched)
        self.columns.forget(workspace_id, self._versions[workspace_id])
        if len(self.cache) > 10_000:
            self.cache.clear()

    def version(self, workspace_id: str) -> int:
        return self._versions.get(workspace_id, 0)

    def enumerator(self, plan) -> Enumerator:
        """The enumeration of a search's plan (engine/relations/plan.py) over this store, with the
        relation profiles cached until the workspace's next write."""
        return Enumerator(self.cursor(), plan, self.cache, self.version(plan.space.workspace_id), self.verdicts,
                          self.columns, self.reader)

    def reader(self) -> duckdb.DuckDBPyConnection:
        """A cursor of its own for a read on another thread (the column cache's reads, which run apart
        from the search that asked, or after a write): made from a connection no statement ever runs
        on, one at a time — never from a cursor another thread may be using. The caller closes it."""
        with self._reader_lock:
            if self._reader_base is None:
                self._reader_base = self.store.new_cursor()
            return self._reader_base.cursor()

    def universe(self, workspace_id: str, kinds: list[str], sight: Sight = EVERYTHING) -> int:
        """How many entities of these kinds the workspace holds (that the caller knows of)."""
        return self.cursor().execute(
            f"SELECT count(*) FROM rel_entities WHERE workspace_id = ? AND list_contains(?, kind) AND {sight.entity()}",
            [workspace_id, kinds]).fetchone()[0]

    def map_version(self, workspace_id: str, base: int, sight: Sight = EVERYTHING) -> int:
        """The workspace map's version as the caller may see it: `base` (rel_workspaces.map_version,
        moved by names every key reads) plus the changes of names carried by documents of the
        scopes the caller reads."""
        where = "TRUE" if sight.everything else f"list_contains({sight._list()}, scope)"
        return base + int(self.cursor().execute(
            f"SELECT coalesce(sum(version), 0) FROM rel_map_versions WHERE workspace_id = ? AND {where}",
            [workspace_id]).fetchone()[0])

    def table_exists(self, name: str) -> bool:
        return self.cursor().execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_name = ?", [name]).fetchone()[0] > 0

    # Workspaces ----------------------------------------------------------------------------------
    def workspace(self, workspace_id: str) -> dict | None:
        row = self.cursor().execute(
            "SELECT workspace_id, name, packs, created_at, map_version FROM rel_workspaces WHERE workspace_id = ?",
            [workspace_id]).fetchone()
        if row is None:
            return None
        return {"workspace_id": row[0], "name": row[1], "packs": list(row[2]), "created_at": row[3],
                "map_version": row[4]}

    def create_workspace(self, workspace_id: str, name: str | None, packs: list[str], now) -> None:
        """Raises WorkspaceTaken when the id is taken — looked up inside the write, after the writes of
        other replicas before it are replayed (two creating one id at once: the second is refused)."""
        with self.transaction() as con:
            if con.execute("SELECT count(*) FROM rel_workspaces WHERE workspace_id = ?", [workspace_id]).fetchone()[0]:
                raise WorkspaceTaken(workspace_id)
            con.execute("INSERT INTO rel_workspaces VALUES (?, ?, ?, ?, 1)", [workspace_id, name, packs, now])
            # the corpus's row of the workspace: in the same transaction when the corpus is this file
            self.corpus.ensure_workspace(workspace_id, name)

    def workspace_ids(self) -> list[str]:
        return [r[0] for r in self.cursor().execute("SELECT workspace_id FROM rel_workspaces ORDER BY workspace_id")
                .fetchall()]

    def term_counts(self, table: str, workspace_id: str, slot: str, sight: Sight = EVERYTHING) -> dict[str, int]:
        """Entities per term of a term slot, over the workspace's current rows the caller may read
        (`slot` is a pack identifier: letters, digits and underscores)."""
        if not self.table_exists(table):
            return {}
        return dict(self.cursor().execute(
            f"SELECT t_{slot}, count(DISTINCT entity_id) FROM {table} WHERE workspace_id = ? AND current "
            f"AND retired IS NULL AND t_{slot} IS NOT NULL AND {sight.row()} GROUP BY 1", [workspace_id]).fetchall())

    def entities_with_terms(self, table: str, workspace_id: str, slot: str, terms: list[str],
                            sight: Sight = EVERYTHING) -> int:
        """Entities with a current row whose term slot holds any of `terms` (a group and its members)."""
        if not self.table_exists(table):
            return 0
        return self.cursor().execute(
            f"SELECT count(DISTINCT entity_id) FROM {table} WHERE workspace_id = ? AND current AND retired IS NULL "
            f"AND list_contains(?, t_{slot}) AND {sight.row()}", [workspace_id, terms]).fetchone()[0]

    def entity_counts(self, workspace_id: str, sight: Sight = EVERYTHING) -> dict[str, int]:
        return dict(self.cursor().execute(
            f"SELECT kind, count(*) FROM rel_entities WHERE workspace_id = ? AND {sight.entity()} "
            "GROUP BY kind ORDER BY kind", [workspace_id]).fetchall())

    def loads(self, workspace_id: str) -> list[dict]:
        res = self.cursor().execute(
            "SELECT load_id, created_at, source, format, summary FROM rel_loads WHERE workspace_id = ? "
            "ORDER BY created_at, load_id", [workspace_id]).fetchall()
        # the source by its file name: replies never carry the server's paths
        return [{"load_id": r[0], "created_at": r[1], "source": Path(r[2]).name, "format": r[3], "summary": r[4]}
                for r in res]

    def load_spec(self, load_id: str) -> dict | None:
        row = self.cursor().execute("SELECT source, format, spec, workspace_id, summary FROM rel_loads "
                                    "WHERE load_id = ?", [load_id]).fetchone()
        return None if row is None else {"source": row[0], "format": row[1], "spec": row[2], "workspace_id": row[3],
                                         "summary": row[4]}

    # Documents ------------------------------------------------------------------------------------
    DOCUMENT = ["document", "path", "entity_id", "name", "content_hash", "fingerprint", "url", "page_id", "load_id",
                "scope"]

    def current_documents(self, workspace_id: str, source_key: str) -> list[dict]:
        """The documents the current load of a document folder read (columns DOCUMENT)."""
        rows = self.cursor().execute(
            f"SELECT {', '.join(self.DOCUMENT)} FROM rel_documents WHERE workspace_id = ? AND source_key = ? "
            "AND current ORDER BY document", [workspace_id, source_key]).fetchall()
        return [dict(zip(self.DOCUMENT, r)) for r in rows]

    def spans(self, workspace_id: str, row_ids: list[str]) -> list[dict]:
        """The span receipts of these extracted rows, each with its document's current record
        (path, url, page id) from the load that wrote the row."""
        if not row_ids:
            return []
        cols = ["row_id", "slot", "document", "char_start", "char_end", "quote", "content_hash", "reader",
                "path", "url", "page_id"]
        rows = self.cursor().execute(
            """SELECT s.row_id, s.slot, s.document, s.char_start, s.char_end, s.quote, s.content_hash, s.reader,
                      d.path, d.url, d.page_id
               FROM rel_spans s LEFT JOIN rel_documents d ON d.workspace_id = s.workspace_id
                    AND d.document = s.document AND d.content_hash = s.content_hash
                    AND d.load_id = split_part(s.row_id, '-', 1)
               WHERE s.workspace_id = ? AND s.row_id IN (SELECT unnest(?))
               ORDER BY s.row_id, s.char_start""", [workspace_id, row_ids]).fetchall()
        return [dict(zip(cols, r)) for r in rows]

    # Rows, entities, corrections, coverage ------------------------------------------------------------
    def current_rows(self, table: str, workspace_id: str, where: str = "TRUE", params: list | None = None,
                     sight: Sight = EVERYTHING) -> list[dict]:
        """A relation table's current rows of a workspace that meet `where` (SQL over its columns)
        and that the caller may read, by row id."""
        res = self.cursor().execute(f"SELECT * FROM {table} WHERE workspace_id = ? AND current AND {where} "
                                    f"AND {sight.row()} ORDER BY row_id", [workspace_id, *(params or [])])
        names = [d[0] for d in res.description]
        return [dict(zip(names, r)) for r in res.fetchall()]

    def entity_name(self, workspace_id: str, entity_id: str, sight: Sight = EVERYTHING) -> tuple[str | None] | None:
        """(display name,) of a registered entity the caller knows of (the name None when there is
        none it may read); None for an unknown one."""
        return self.cursor().execute(f"SELECT {sight.name()} FROM rel_entities WHERE workspace_id = ? "
                                     f"AND entity_id = ? AND {sight.entity()}", [workspace_id, entity_id]).fetchone()

    def corrections(self, workspace_id: str) -> dict[str, str]:
        """correction id -> reason."""
        return dict(self.cursor().execute(
            "SELECT correction_id, reason FROM rel_corrections WHERE workspace_id = ?", [workspace_id]).fetchall())

    def correction_reason(self, correction_id: str) -> str | None:
        row = self.cursor().execute("SELECT reason FROM rel_corrections WHERE correction_id = ?",
                                    [correction_id]).fetchone()
        return row[0] if row else None

    def retire_row(self, table: str, workspace_id: str, relation: str, row: dict, correction_id: str,
                   reason: str, now) -> None:
        """Record a correction and retire the row it names, in one transaction."""
        with self.transaction(changes=[workspace_id]) as con:
            con.execute("INSERT INTO rel_corrections VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        [correction_id, workspace_id, relation, row["row_id"], row["source_key"], row["row_key"],
                         row["vhash"], reason, now])
            con.execute(f"UPDATE {table} SET retired = ? WHERE workspace_id = ? AND row_id = ?",
                        [correction_id, workspace_id, row["row_id"]])

    def coverage_of(self, workspace_id: str, relation: str, entity_id: str, sight: Sight = EVERYTHING) -> list[tuple]:
        """(load id, declared by, declared at) of the current coverage declarations naming the
        entity that the caller may read."""
        return self.cursor().execute(
            "SELECT load_id, declared_by, declared_at FROM rel_coverage WHERE workspace_id = ? "
            f"AND relation = ? AND entity_id = ? AND current AND {sight.row()} ORDER BY declared_at, load_id",
            [workspace_id, relation, entity_id]).fetchall()
