"""The reads an export makes (engine/core/export.py): a workspace's pages in id order, a page at a time
from a keyset (never one result held whole), their entities, and any table's rows as Arrow batches —
DuckDB's own Arrow, or PostgreSQL's rows typed by their columns' types."""
from __future__ import annotations

import json
from typing import Any, Iterator

import pyarrow as pa

PAGE_COLUMNS = ["page_id", "url", "title", "body_text", "first_seen", "last_seen", "published", "visit_count", "scope"]
BATCH_ROWS = 10_000


def pages_after(store, workspace: str, after: str, limit: int) -> list[dict]:
    """Up to `limit` of the workspace's pages whose id sorts after `after`, in id order."""
    rows = store.sql().rows(f"SELECT {', '.join(PAGE_COLUMNS)} FROM pages WHERE workspace_id = ? AND page_id > ? "
                            "ORDER BY page_id LIMIT ?", [workspace, after, limit])
    return [dict(zip(PAGE_COLUMNS, r)) for r in rows]


def entities_of(store, page_ids: list[str]) -> dict[str, list[dict]]:
    if not page_ids:
        return {}
    marks = ", ".join("?" for _ in page_ids)
    rows = store.sql().rows(f"""SELECT pe.page_id, e.canonical, e.aliases FROM page_entities pe JOIN entities e
                                USING (entity_id) WHERE pe.page_id IN ({marks}) ORDER BY pe.page_id, e.canonical""",
                            page_ids)
    out: dict[str, list[dict]] = {}
    for pid, canonical, aliases in rows:
        out.setdefault(pid, []).append({"canonical": canonical, "aliases": list(aliases or [])})
    return out


def _rows(db, sql: str, params: list[Any] | None = None) -> list[tuple]:
    if db.kind == "postgres":
        return db.sql().rows(sql, params or [])
    return db.cursor().execute(sql, params or []).fetchall()


def table_names(db) -> list[str]:
    """The base tables of a DuckDB file or a PostgreSQL store."""
    if db.kind == "postgres":
        sql = ("SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() "
               "AND table_type = 'BASE TABLE' ORDER BY table_name")
    else:
        sql = ("SELECT table_name FROM duckdb_tables() WHERE database_name = current_database() AND schema_name = 'main' "
               "AND NOT temporary ORDER BY table_name")
    return [r[0] for r in _rows(db, sql)]


def columns(db, table: str) -> list[str]:
    if db.kind == "postgres":
        sql = ("SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema() "
               "AND table_name = ? ORDER BY ordinal_position")
    else:
        sql = "SELECT column_name FROM duckdb_columns() WHERE database_name = current_database() AND table_name = ? ORDER BY column_index"
    return [r[0] for r in _rows(db, sql, [table])]


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def batches(db, table: str, where: str = "", params: list[Any] | None = None) -> Iterator[pa.RecordBatch]:
    """Every row of `table` (filtered by `where`, with `?` placeholders), as Arrow batches."""
    sql = f"SELECT * FROM {_q(table)}" + (f" WHERE {where}" if where else "")
    if db.kind == "postgres":
        yield from _pg_batches(db, sql.replace("?", "%s"), params or [])
        return
    cur = db.new_cursor()
    try:
        reader = cur.sql(sql, params=params or None).to_arrow_reader(BATCH_ROWS)
        yield from reader
    finally:
        cur.close()


# PostgreSQL's type names as Arrow types: what a column holds decides the type, never a batch's values
_PG_TYPES = {"text": pa.string(), "character varying": pa.string(), "integer": pa.int32(), "bigint": pa.int64(),
             "smallint": pa.int16(), "double precision": pa.float64(), "real": pa.float32(), "boolean": pa.bool_(),
             "timestamp without time zone": pa.timestamp("us"), "timestamp with time zone": pa.timestamp("us", tz="UTC"),
             "bytea": pa.binary(), "json": pa.string(), "jsonb": pa.string(), "ARRAY": pa.list_(pa.string())}


def _pg_batches(store, sql: str, params: list[Any]) -> Iterator[pa.RecordBatch]:
    con = store._connect()
    try:
        with con.transaction(), con.cursor(name="refindery_export") as cur:
            cur.execute(sql, params)
            kinds = None
            while rows := cur.fetchmany(BATCH_ROWS):
                if kinds is None:
                    kinds = _pg_schema(con, cur)
                yield _pg_batch(kinds, rows)
    finally:
        con.close()


def _pg_schema(con, cur) -> pa.Schema:
    names = [d.name for d in cur.description]
    oids = [d.type_code for d in cur.description]
    types = dict(con.execute("SELECT oid, format_type(oid, NULL) FROM pg_type WHERE oid = ANY(%s)", [oids]).fetchall())
    fields = []
    for name, oid in zip(names, oids):
        t = types.get(oid, "text")
        fields.append(pa.field(name, pa.list_(pa.string()) if t.endswith("[]") else _PG_TYPES.get(t, pa.string())))
    return pa.schema(fields)


def _pg_batch(schema: pa.Schema, rows: list[tuple]) -> pa.RecordBatch:
    cols = []
    for i, field in enumerate(schema):
        values = [r[i] for r in rows]
        if pa.types.is_string(field.type):
            values = [v if v is None or isinstance(v, str) else json.dumps(v) for v in values]
        elif pa.types.is_binary(field.type):
            values = [bytes(v) if v is not None else None for v in values]
        cols.append(pa.array(values, type=field.type))
    return pa.RecordBatch.from_arrays(cols, schema=schema)


# ---- a relation workspace, in the shape a relation load reads back ----------------------------------
def relation_workspaces(db) -> list[tuple[str, str | None, list[str]]]:
    """(workspace id, name, packs) of every relation workspace, by id."""
    return [(w, n, list(p or [])) for w, n, p in _rows(db, "SELECT workspace_id, name, packs FROM rel_workspaces "
                                                           "ORDER BY workspace_id")]


def relation_row_tables(db, packs: list[str]) -> dict[str, list[str]]:
    """Each relation of the packs that has a table: its table, and its slots (a `v_<slot>` column each)."""
    out = {}
    for t in table_names(db):
        pack, sep, relation = t[len("rel_"):].partition("__")
        if t.startswith("rel_") and sep and pack in packs:
            out[t] = [c[2:] for c in columns(db, t) if c.startswith("v_")]
    return out


def duck_select(db, sql: str, params: list[Any]) -> Iterator[pa.RecordBatch]:
    """A query's rows on a DuckDB file, as Arrow batches (a cursor of its own)."""
    cur = db.new_cursor()
    try:
        yield from cur.sql(sql, params=params or None).to_arrow_reader(BATCH_ROWS)
    finally:
        cur.close()


def relation_rows_sql(table: str, slots: list[str]) -> str:
    """A relation's rows as a load reads them: the current ones no correction retired, each with its
    entity, its key in its source and its cells as text, one column a slot."""
    cells = ", ".join(f"{_q('v_' + s)} AS {_q(s)}" for s in slots)
    return (f"SELECT entity_id, row_key, {cells} FROM {_q(table)} WHERE workspace_id = ? AND current "
            "AND retired IS NULL ORDER BY row_key, row_id")


ENTITIES_SQL = ("SELECT entity_id, any_value(kind) AS kind, any_value(name) AS name FROM rel_entities "
                "WHERE workspace_id = ? GROUP BY entity_id ORDER BY entity_id")
COVERAGE_SQL = ("SELECT DISTINCT entity_id FROM rel_coverage WHERE workspace_id = ? AND relation = ? AND current "
                "ORDER BY entity_id")
