"""The way out, in open formats: a workspace's pages as JSONL (one page a line, in the shape `ingest`
and POST /v1/pages read, with what ingest does not take beside it), and the relation tables or the
query log as one Parquet file per table.

A page's line: url, title, body_text, published, scope and entities ({canonical, aliases}), which
`refindery ingest` reads back into the same pages (their ids are made from workspace, URL and scope,
so they are the same ids), with `seen_at` its first visit; and its `first_seen`, `last_seen` and
`visit_count`, which ingest does not take (a backup keeps them; ingest counts one visit)."""
from __future__ import annotations

import gzip
import json
import os
from datetime import datetime
from pathlib import Path
from typing import Callable, Iterator

import pyarrow.parquet as pq

from indexes import exports

from engine.core.errors import InvalidRequest

PAGE_BATCH = 500
LOG_TABLES = ["log_queries", "log_candidates", "log_fused", "log_results", "log_agreement", "log_access", "feedback"]


def _iso(v):
    return v.isoformat() if isinstance(v, datetime) else v


def page_records(store, workspace: str, may_see: Callable[[str | None], bool] = lambda scope: True) -> Iterator[dict]:
    """The workspace's pages the caller may see, in id order, as export lines."""
    after = ""
    while True:
        rows = exports.pages_after(store, workspace, after, PAGE_BATCH)
        if not rows:
            return
        after = rows[-1]["page_id"]
        seen = [r for r in rows if may_see(r["scope"])]
        ents = exports.entities_of(store, [r["page_id"] for r in seen])
        for r in seen:
            line = {"url": r["url"], "title": r["title"], "body_text": r["body_text"], "seen_at": _iso(r["first_seen"]),
                    "published": _iso(r["published"]), "scope": r["scope"], "entities": ents.get(r["page_id"], []),
                    "workspace": workspace, "page_id": r["page_id"], "first_seen": _iso(r["first_seen"]),
                    "last_seen": _iso(r["last_seen"]), "visit_count": r["visit_count"]}
            yield {k: v for k, v in line.items() if v is not None}


def _new_file(dest: Path) -> Path:
    if dest.exists():
        raise InvalidRequest(f"{dest} exists: an export writes a new file", field="dest")
    if not dest.parent.is_dir():
        raise InvalidRequest(f"{dest.parent} is not a folder", field="dest")
    return dest.with_name(f".{dest.name}.writing")


def write_pages(records: Iterator[dict], dest: Path) -> int:
    """JSONL (gzipped when the name ends in .gz) at `dest`, which must not exist: written under a temporary
    name and renamed, so a cut-short export leaves no file that looks whole."""
    tmp = _new_file(dest)
    n = 0
    try:
        with (gzip.open(tmp, "wt", encoding="utf-8") if dest.suffix == ".gz" else open(tmp, "w", encoding="utf-8")) as fh:
            for rec in records:
                fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
                n += 1
        os.replace(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return n


def write_tables(db, names: list[str], dest: Path, where: Callable[[str, list[str]], tuple[str, list] | None]) -> dict:
    """One Parquet file per table of `names` that `db` has, into the new or empty folder `dest`;
    `where(table, columns)` is the filter (SQL with `?`, its values), or None to leave the table out.
    Writes `export.json` last: each table's file and rows."""
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise InvalidRequest(f"{dest} is not an empty folder: an export goes into a new or empty one", field="dest")
    dest.mkdir(mode=0o700, parents=True, exist_ok=True)
    have = set(exports.table_names(db))
    out = {}
    for name in names:
        if name not in have:
            continue
        cond = where(name, exports.columns(db, name))
        if cond is None:
            continue
        path = dest / f"{name}.parquet"
        rows = _parquet(exports.batches(db, name, *cond), path)
        if rows is None:
            continue   # no row: no file (an empty table's schema is the store's, not the export's)
        out[name] = {"file": path.name, "rows": rows}
    (dest / "export.json").write_text(json.dumps({"tables": out}, indent=2))
    return out


def log_filter(workspace: str | None):
    """The query log's rows of one workspace (None: all): a table's own workspace column, else its
    query's."""
    def where(table: str, cols: list[str]):
        if workspace is None:
            return "", []
        if "workspace" in cols:
            return "workspace = ?", [workspace]
        if "query_id" in cols:
            return "query_id IN (SELECT query_id FROM log_queries WHERE workspace = ?)", [workspace]
        return None
    return where


def _parquet(batches, path: Path) -> int | None:
    """The batches into one Parquet file at `path`: its rows, or None when there was no batch (no file)."""
    rows, writer = 0, None
    try:
        for batch in batches:
            if writer is None:
                writer = pq.ParquetWriter(str(path), batch.schema)
            writer.write_batch(batch)
            rows += batch.num_rows
    finally:
        if writer is not None:
            writer.close()
    return rows if writer is not None else None


def write_relations(db, dest: Path, workspace: str | None) -> dict:
    """Each relation workspace (or the one named) as a folder `dest/<workspace>` that `relations load`
    reads back: `entities.parquet` (id, kind, name), one `<relation>.parquet` a relation (entity_id,
    row_key and one column a slot, the cells as text: the rows no correction retired), one
    `coverage__<relation>.parquet` a relation (who the sources said they looked at), `load.json` (the
    load body over that folder) and `workspace.json` (its packs). A document load's rows come out as rows,
    without their span receipts."""
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise InvalidRequest(f"{dest} is not an empty folder: an export goes into a new or empty one", field="dest")
    found = [w for w in exports.relation_workspaces(db) if workspace is None or w[0] == workspace]
    dest.mkdir(mode=0o700, parents=True, exist_ok=True)
    out = {}
    for ws, name, packs in found:
        folder = dest / ws
        folder.mkdir(mode=0o700)
        entities = _parquet(exports.duck_select(db, exports.ENTITIES_SQL, [ws]), folder / "entities.parquet")
        relations, coverage, rows = [], [], {}
        for table, slots in exports.relation_row_tables(db, packs).items():
            relation = table.split("__", 1)[1]
            n = _parquet(exports.duck_select(db, exports.relation_rows_sql(table, slots), [ws]), folder / f"{relation}.parquet")
            covered = _parquet(exports.duck_select(db, exports.COVERAGE_SQL, [ws, relation]),
                               folder / f"coverage__{relation}.parquet")
            if n:
                relations.append({"relation": relation, "table": relation, "entity_column": "entity_id",
                                  "key_column": "row_key", "slots": {s: s for s in slots}})
                rows[relation] = n
            if covered:
                coverage.append({"relation": relation, "table": f"coverage__{relation}", "entity_column": "entity_id"})
        spec = {"source": str(folder.resolve()), "format": "parquet", "relations": relations, "coverage": coverage,
                **({"entities": {"table": "entities", "id_column": "entity_id", "name_column": "name"}} if entities else {})}
        (folder / "load.json").write_text(json.dumps(spec, indent=2))
        (folder / "workspace.json").write_text(json.dumps({"workspace_id": ws, "name": name, "packs": packs}, indent=2))
        out[ws] = {"packs": packs, "entities": entities, "rows": rows}
    return out
