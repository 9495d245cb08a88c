"""The write side of a relation load: one transaction that supersedes what the same source gave
before, writes the new rows with their typed readings, names the entities, declares coverage and
records the load (engine/relations/loads.py checks and reads the source first; this only writes).

The typed reading of each cell (vocabulary term and rung, number, the first and last day of a
month/date span) is done in SQL, set-based, as the rows are inserted.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

import duckdb
import pyarrow as pa

from .relations import RelationStore, TableShape


@dataclass(frozen=True)
class SlotRead:
    """How one slot of a relation is read from a source table's column."""
    name: str
    type: str                                        # term | number | month | date | text
    column: str | None                               # the source column; None: the load maps no column
    axis: dict[str, tuple[str, int | None]] | None = None   # term slots: normalised surface -> (term, rung)


@dataclass(frozen=True)
class DocumentRow:
    """One slot's span receipt: where in which document an extracted row's value is written."""
    row_id: str
    slot: str
    document: str
    char_start: int
    char_end: int
    quote: str
    content_hash: str
    reader: str


def quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def norm_sql(expr: str) -> str:
    """How surfaces are compared (engine.relations.packs.norm, in SQL)."""
    return f"lower(regexp_replace(trim({expr}), '\\s+', ' ', 'g'))"


def span_sql(v: str) -> tuple[str, str]:
    """SQL for the first and last day of the span a month/date cell names (a year, a month, a day)."""
    lo = (f"CASE WHEN regexp_full_match({v}, '\\d{{4}}') THEN make_date(CAST({v} AS INTEGER), 1, 1) "
          f"WHEN regexp_full_match({v}, '\\d{{4}}-\\d{{1,2}}') THEN TRY_CAST({v} || '-01' AS DATE) "
          f"WHEN regexp_matches({v}, '^\\d{{4}}-\\d{{2}}-\\d{{2}}') THEN TRY_CAST(left({v}, 10) AS DATE) END")
    hi = (f"CASE WHEN regexp_full_match({v}, '\\d{{4}}') THEN make_date(CAST({v} AS INTEGER), 12, 31) "
          f"WHEN regexp_full_match({v}, '\\d{{4}}-\\d{{1,2}}') THEN last_day(TRY_CAST({v} || '-01' AS DATE)) "
          f"WHEN regexp_matches({v}, '^\\d{{4}}-\\d{{2}}-\\d{{2}}') THEN TRY_CAST(left({v}, 10) AS DATE) END")
    return lo, hi


class LoadWriter:
    """Writes one load inside one open transaction (`RelationStore.transaction()`)."""

    def __init__(self, rstore: RelationStore, con: duckdb.DuckDBPyConnection, workspace_id: str, load_id: str):
        self.rstore, self.con, self.workspace_id, self.load_id = rstore, con, workspace_id, load_id

    def supersede(self, shape: TableShape, source_key: str) -> int:
        """Mark the rows this source table gave before as no longer current; how many were."""
        self.rstore.ensure_table(shape, self.con)
        return self.con.execute(
            f"UPDATE {shape.name} SET current = FALSE WHERE workspace_id = ? AND source_key = ? AND current",
            [self.workspace_id, source_key]).fetchall()[0][0]

    def supersede_sources(self, shape: TableShape, sources: list[tuple[str, str | None]]) -> int:
        """Mark the rows these sources (documents) gave before as no longer current; how many were.
        `sources`: (source key, document scope) pairs — a document's rows of that scope only (NULL:
        the rows of the unscoped document), so a load never reaches another scope's rows."""
        self.rstore.ensure_table(shape, self.con)
        if not sources:
            return 0
        self.con.register("load_sources", pa.table({"source_key": pa.array([k for k, _ in sources], pa.string()),
                                                    "scope": pa.array([s for _, s in sources], pa.string())}))
        try:
            return self.con.execute(
                f"UPDATE {shape.name} SET current = FALSE FROM load_sources x WHERE {shape.name}.workspace_id = ? "
                f"AND {shape.name}.current AND {shape.name}.source_key = x.source_key "
                f"AND {shape.name}.scope IS NOT DISTINCT FROM x.scope", [self.workspace_id]).fetchall()[0][0]
        finally:
            self.con.unregister("load_sources")

    def insert_spans(self, spans: list[DocumentRow]) -> None:
        if not spans:
            return
        self.con.register("load_spans", pa.table({
            "row_id": [s.row_id for s in spans], "slot": [s.slot for s in spans],
            "document": [s.document for s in spans],
            "char_start": pa.array([s.char_start for s in spans], pa.int32()),
            "char_end": pa.array([s.char_end for s in spans], pa.int32()),
            "quote": [s.quote for s in spans], "content_hash": [s.content_hash for s in spans],
            "reader": [s.reader for s in spans]}))
        try:
            self.con.execute("INSERT INTO rel_spans SELECT ?, row_id, slot, document, char_start, char_end, quote, "
                             "content_hash, reader FROM load_spans", [self.workspace_id])
        finally:
            self.con.unregister("load_spans")

    def replace_documents(self, source_key: str, documents: list[dict], removed: list[tuple[str, str | None]]) -> None:
        """Record the documents read now (superseding their earlier records of the same scope) and
        retire the removed ((document, scope) pairs): a document is its path and its scope."""
        con, ws = self.con, self.workspace_id
        gone = [(d["document"], d.get("scope")) for d in documents] + list(removed)
        if gone:
            con.register("load_gone", pa.table({"document": pa.array([g[0] for g in gone], pa.string()),
                                                "scope": pa.array([g[1] for g in gone], pa.string())}))
            try:
                con.execute("UPDATE rel_documents SET current = FALSE FROM load_gone g WHERE "
                            "rel_documents.workspace_id = ? AND rel_documents.source_key = ? AND rel_documents.current "
                            "AND rel_documents.document = g.document AND rel_documents.scope IS NOT DISTINCT FROM g.scope",
                            [ws, source_key])
            finally:
                con.unregister("load_gone")
        if documents:
            con.executemany("INSERT INTO rel_documents (workspace_id, source_key, document, path, entity_id, name, "
                            "content_hash, fingerprint, url, page_id, load_id, current, scope) "
                            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, TRUE, ?)",
                            [[ws, source_key, d["document"], d["path"], d["entity_id"], d["name"],
                              d["content_hash"], d["fingerprint"], d["url"], d["page_id"], self.load_id,
                              d.get("scope")] for d in documents])

    def insert_rows(self, shape: TableShape, subject: str, relation: str, entity_column: str,
                    slots: list[SlotRead], data: pa.Table, source_key: str, db_table: str) -> dict:
        """Write a source table's rows (`data`: its columns plus `__key`, and optionally `__source`,
        a source key per row, `__ord`, the row's number in its row id, `__row`, its ordinal in the
        source, and `__scope`, the document scope of the document the row was read from) as the relation's rows,
        registering their entities first; returns what was written (rows, entities, unattributed,
        withheld, retired_by_corrections, unknown_surfaces)."""
        con, table = self.con, shape.name
        if "__ord" not in data.column_names:   # each row's number (in its id) in the source's order, not a
            # scan's: a replica that replays the load numbers its rows alike (indexes/relation_log.py)
            data = data.append_column("__ord", pa.array(range(1, data.num_rows + 1), pa.int64()))
        con.register("load_src", data)
        joins, select, withheld, hashed = _slot_sql(con, slots)
        hashed.insert(0, f"coalesce(trim(s.{quote(entity_column)}), '')")
        withheld_sql = f"nullif(concat_ws('; ', {', '.join(withheld)}), '')" if withheld else "CAST(NULL AS VARCHAR)"
        cols = [c for c, _ in shape.columns()]
        entity = f"nullif(trim(s.{quote(entity_column)}), '')"
        ws, load_id = self.workspace_id, self.load_id
        names = set(data.column_names)
        source = "coalesce(s.__source, ?)" if "__source" in names else "?"
        scope = "s.__scope" if "__scope" in names else "CAST(NULL AS VARCHAR)"
        src_row = "s.__row" if "__row" in names else "CAST(NULL AS BIGINT)"
        try:
            # Register the entities first, so each row is written with its entity number and the
            # load's rows lie clustered by entity: a page of matches then reads few row groups.
            RelationStore.register_entities(con, ws, subject, load_id,
                                            f"SELECT DISTINCT {entity} AS entity_id, CAST(NULL AS VARCHAR) AS name, "
                                            f"{scope} AS scope FROM load_src s", [])
            con.execute(
                f"INSERT INTO {table} ({', '.join(cols)}) "
                f"SELECT ? || '-' || CAST(s.__ord AS VARCHAR), ?, {entity}, e.ent_no, ?, {source}, ?, s.__key, "
                f"md5(concat_ws(chr(31), {', '.join(hashed)})), TRUE, CAST(NULL AS VARCHAR), {withheld_sql}, {scope}, "
                + ", ".join([*select, src_row])
                + " FROM load_src s "
                f"LEFT JOIN rel_entities e ON e.workspace_id = ? AND e.entity_id = {entity} {' '.join(joins)} "
                f"ORDER BY e.ent_no NULLS LAST, s.__ord",
                [f"{load_id}-{relation}", ws, load_id, source_key, db_table, ws])
        finally:
            con.unregister("load_src")
            for j in joins:
                con.unregister(j.split()[2])
        return _written(con, table, load_id, relation, slots)

    def name_entities(self, kind: str, rows: list[tuple],
                      scopes: tuple[str, ...] | None = None) -> tuple[int, dict[str | None, int]]:
        """Register these (entity id, display name or None[, document scope of the name]) and
        rename the known ones; returns (how many were new, how many names changed per scope — the
        scope of the document that carries the name, None for a name every key reads). A name
        that moves between scopes changes in both. `scopes`: the loading key's document scopes
        (None: every scope) — it renames only an entity that has no name yet or a name of its
        scopes; a name another scope (or every key) reads stays as it is."""
        con, ws = self.con, self.workspace_id
        con.register("load_entities", pa.table({"entity_id": pa.array([r[0] for r in rows], pa.string()),
                                                "name": pa.array([r[1] for r in rows], pa.string()),
                                                "scope": pa.array([r[2] if len(r) > 2 else None for r in rows],
                                                                  pa.string())}))
        changed: dict[str | None, int] = {}
        mine = "" if scopes is None else \
            " AND (e.name IS NULL OR e.name_scope IN (SELECT unnest(?::VARCHAR[])))"
        mine_params = [] if scopes is None else [list(scopes)]
        try:
            moved = con.execute(
                "SELECT l.scope, e.name_scope, e.name IS NOT NULL FROM load_entities l JOIN rel_entities e "
                "ON e.entity_id = l.entity_id AND e.workspace_id = ? WHERE l.name IS NOT NULL "
                "AND (e.name IS DISTINCT FROM l.name OR e.name_scope IS DISTINCT FROM l.scope)" + mine,
                [ws, *mine_params]).fetchall()
            for new_scope, old_scope, had in moved:
                changed[new_scope] = changed.get(new_scope, 0) + 1
                if had and old_scope != new_scope:
                    changed[old_scope] = changed.get(old_scope, 0) + 1
            con.execute("UPDATE rel_entities SET name = l.name, name_scope = l.scope FROM load_entities l "
                        "WHERE rel_entities.workspace_id = ? "
                        "AND rel_entities.entity_id = l.entity_id AND l.name IS NOT NULL"
                        + mine.replace("e.", "rel_entities."), [ws, *mine_params])
            added = RelationStore.register_entities(con, ws, kind, self.load_id,
                                                    "SELECT entity_id, name, scope FROM load_entities", [])
            if added:
                for (scope,) in con.execute("SELECT name_scope FROM rel_entities WHERE workspace_id = ? "
                                            "AND load_id = ? AND name IS NOT NULL", [ws, self.load_id]).fetchall():
                    changed[scope] = changed.get(scope, 0) + 1
        finally:
            con.unregister("load_entities")
        return added, changed

    def declare_coverage(self, relation: str, subject: str, source_key: str, ids: list, now: datetime,
                         scopes: tuple[str, ...] | None = None) -> None:
        """This load looked at these entities for the relation (superseding what the same source
        declared); `ids`: entity ids, or (entity id, document scope) pairs when documents of a
        scope say so (a declaration only the scope's keys read). `scopes`: the loading key's
        document scopes (None: every scope) — it supersedes only declarations of its scopes."""
        con, ws = self.con, self.workspace_id
        mine = "" if scopes is None else " AND scope IN (SELECT unnest(?::VARCHAR[]))"
        con.execute("UPDATE rel_coverage SET current = FALSE WHERE workspace_id = ? AND relation = ? "
                    "AND source_key = ? AND current" + mine,
                    [ws, relation, source_key, *([] if scopes is None else [list(scopes)])])
        pairs = [i if isinstance(i, tuple) else (i, None) for i in ids]
        con.register("load_cov", pa.table({"entity_id": pa.array([p[0] for p in pairs], pa.string()),
                                           "scope": pa.array([p[1] for p in pairs], pa.string())}))
        try:
            RelationStore.register_entities(con, ws, subject, self.load_id,
                                            "SELECT entity_id, CAST(NULL AS VARCHAR) AS name, scope FROM load_cov", [])
            con.execute("INSERT INTO rel_coverage (workspace_id, relation, entity_id, load_id, source_key, declared_by, "
                        "declared_at, current, ent_no, scope) "
                        "SELECT ?, ?, entity_id, ?, ?, 'source', ?, TRUE, NULL, scope FROM load_cov",
                        [ws, relation, self.load_id, source_key, now])
        finally:
            con.unregister("load_cov")
        RelationStore.number_rows(con, "rel_coverage", ws, self.load_id)

    def finish(self, now: datetime, source: str, fmt: str, spec: dict, summary: dict,
               names_changed: dict[str | None, int]) -> None:
        """Record the load, and move the workspace's map version as each caller sees it: once for
        every key when a name every key reads changed, once per document scope whose documents'
        names changed (only that scope's keys see it move)."""
        if names_changed.get(None):
            self.con.execute("UPDATE rel_workspaces SET map_version = map_version + 1 WHERE workspace_id = ?",
                             [self.workspace_id])
        for scope in sorted(s for s, n in names_changed.items() if s is not None and n):
            self.con.execute("INSERT INTO rel_map_versions VALUES (?, ?, 1) ON CONFLICT DO UPDATE "
                             "SET version = rel_map_versions.version + 1", [self.workspace_id, scope])
        self.con.execute("INSERT INTO rel_loads VALUES (?, ?, ?, ?, ?, ?, ?)",
                         [self.load_id, self.workspace_id, now, source, fmt, json.dumps(spec), json.dumps(summary)])


def _slot_sql(con, slots: list[SlotRead]) -> tuple[list[str], list[str], list[str], list[str]]:
    """Per slot of a load: its typed reading as SQL over the source row `s` — a term through the
    vocabulary (a table registered on `con`, LEFT JOINed), a number, a span of days — and why a value
    is withheld when it cannot be read as its type. (joins, select columns, withheld tests, the cells
    the row's hash covers.)"""
    joins, select, withheld, hashed = [], [], [], []
    for slot in slots:
        v = f"nullif(trim(s.{quote(slot.column)}), '')" if slot.column else "CAST(NULL AS VARCHAR)"
        select.append(f"{v} AS v_{slot.name}")
        if slot.column:
            hashed.append(f"coalesce(trim(s.{quote(slot.column)}), '')")
        if slot.type == "term":
            if slot.axis is not None and slot.column:
                alias = f"voc_{slot.name}"
                con.register(alias, pa.table({
                    "surface": list(slot.axis), "term": [t for t, _ in slot.axis.values()],
                    "rung": pa.array([r for _, r in slot.axis.values()], pa.int32())}))
                joins.append(f"LEFT JOIN {alias} ON {alias}.surface = {norm_sql(v)}")
                select += [f"{alias}.term AS t_{slot.name}", f"{alias}.rung AS r_{slot.name}"]
            else:
                select += [f"CAST(NULL AS VARCHAR) AS t_{slot.name}", f"CAST(NULL AS INTEGER) AS r_{slot.name}"]
        elif slot.type == "number":
            select.append(f"TRY_CAST({v} AS DOUBLE) AS n_{slot.name}")
            withheld.append(f"CASE WHEN {v} IS NOT NULL AND TRY_CAST({v} AS DOUBLE) IS NULL "
                            f"THEN '{slot.name}: not a number' END")
        elif slot.type in ("month", "date"):
            lo, hi = span_sql(v)
            select += [f"{lo} AS lo_{slot.name}", f"{hi} AS hi_{slot.name}"]
            withheld.append(f"CASE WHEN {v} IS NOT NULL AND ({lo}) IS NULL "
                            f"THEN '{slot.name}: not a {slot.type}' END")
    return joins, select, withheld, hashed


def _written(con, table: str, load_id: str, relation: str, slots: list[SlotRead]) -> dict:
    """After a load's rows are in: the corrections that outlive a re-load applied (the same source
    row, unchanged, comes back retired), and what was written counted."""
    con.execute(
        f"UPDATE {table} SET retired = c.correction_id FROM rel_corrections c "
        f"WHERE {table}.load_id = ? AND c.workspace_id = {table}.workspace_id AND c.relation = ? "
        f"AND c.source_key = {table}.source_key AND c.row_key = {table}.row_key AND c.vhash = {table}.vhash",
        [load_id, relation])
    stats = con.execute(
        f"SELECT count(*), count(*) FILTER (entity_id IS NULL), count(*) FILTER (withheld IS NOT NULL), "
        f"count(DISTINCT entity_id), count(*) FILTER (retired IS NOT NULL) FROM {table} WHERE load_id = ?",
        [load_id]).fetchall()[0]
    unplaced = {}
    for slot in slots:
        if slot.type == "term" and slot.axis is not None and slot.column:
            n = con.execute(f"SELECT count(*) FROM {table} WHERE load_id = ? AND v_{slot.name} IS NOT NULL "
                            f"AND t_{slot.name} IS NULL", [load_id]).fetchall()[0][0]
            if n:
                unplaced[slot.name] = n
    return {"rows": stats[0], "entities": stats[3], "unattributed": stats[1], "withheld": stats[2],
            "retired_by_corrections": stats[4], "unknown_surfaces": unplaced}
