"""Loads from SQL: rows of a source table become relation rows, each cell with its receipt.

A load names a source DuckDB can read (a DuckDB or SQLite file, Parquet, CSV), the table for each
relation, the entity column, the column for each slot (and optionally a key column; the row's
position otherwise), the entities it names (with their display names when the source records
them), and its coverage declaration: which entities it looked at for which relation.

Everything is checked before anything is written, and the write is one transaction: a bad load
changes nothing, a crash mid-load leaves the previous state, and re-running a load supersedes the
rows and coverage the same source table gave before (so a re-run is idempotent).
The typed reading of each cell (vocabulary term, number, month span) is done in SQL, set-based.
"""
from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Literal

import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel, ConfigDict, Field, model_validator

from indexes.relations import RelationStore
from indexes.sources import FORMATS, Source, SourceError

from engine.core.errors import EngineError, LoadInvalid, without_paths
from engine.core.packs import Relation
from engine.relations.workspaces import Space, open_space
from engine.core.clock import utcnow


class RelationMap(BaseModel):
    model_config = ConfigDict(extra="forbid")
    relation: str
    table: str
    entity_column: str
    key_column: str | None = Field(default=None, description="A unique row key; the row's position when absent.")
    slots: dict[str, str] = Field(min_length=1, description="slot -> column")


class EntitiesDecl(BaseModel):
    model_config = ConfigDict(extra="forbid")
    table: str
    id_column: str
    name_column: str | None = None
    kind: str | None = Field(default=None, description="Subject kind; the relations' one kind when absent.")


class CoverageDecl(BaseModel):
    """Who the load looked at for a relation: listed ids, or every id in a table's column."""
    model_config = ConfigDict(extra="forbid")
    relation: str
    entity_ids: list[str] | None = None
    table: str | None = None
    entity_column: str | None = None

    @model_validator(mode="after")
    def _one_way(self):
        if (self.entity_ids is None) == (self.table is None or self.entity_column is None):
            raise ValueError("name either entity_ids, or table and entity_column")
        return self


class LoadRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    source: str = Field(min_length=1, description="Path of the source file (or folder of Parquet/CSV files).")
    format: Literal[FORMATS] | None = None  # type: ignore[valid-type]
    relations: list[RelationMap] = Field(default_factory=list, max_length=100)
    entities: EntitiesDecl | None = None
    coverage: list[CoverageDecl] = Field(default_factory=list, max_length=100)


def _maybe_crash(point: str) -> None:
    """Test-only fault injection: SIGKILL this process at a named point inside the load's
    transaction (REFINDERY_TEST_CRASH_AT=load:<relation>; see tests/test_relations_loads.py)."""
    import os
    import signal

    if os.environ.get("REFINDERY_TEST_CRASH_AT") == point:
        os.kill(os.getpid(), signal.SIGKILL)


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _norm_sql(expr: str) -> str:
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


def _check(space: Space, req: LoadRequest, path: Path, roots: list[Path] | None) -> tuple[Source, dict]:
    try:
        src = Source(path, req.format, roots)
    except SourceError as exc:
        raise LoadInvalid(str(exc), reason=exc.kind) from exc
    plan: dict = {"relations": [], "entities": None, "coverage": []}
    try:
        tables = set(src.tables())

        def columns(table: str, where: str) -> set[str]:
            if table not in tables:
                raise LoadInvalid(f"{where}: the source has no table {table!r}", reason="load_table_unknown",
                                  tables=sorted(tables))
            try:
                return set(src.columns(table))
            except SourceError as exc:
                raise LoadInvalid(f"{where}: {exc}", reason=exc.kind) from exc
            except Exception as exc:  # a table DuckDB/sqlite cannot read (a view over a file it may not open)
                raise LoadInvalid(f"{where}: cannot read {table!r} ({type(exc).__name__})",
                                  reason="source_unreadable") from exc

        def need(cols: set[str], col: str, table: str, where: str) -> None:
            if col not in cols:
                raise LoadInvalid(f"{where}: table {table!r} has no column {col!r}", reason="load_column_unknown",
                                  columns=sorted(cols))

        def relation(name: str, where: str) -> Relation:
            rel = space.schema.relation(name)
            if rel is None:
                raise LoadInvalid(f"{where}: no pack of the workspace declares relation {name!r}",
                                  reason="relation_unknown", relations=sorted(space.schema.relations))
            return rel

        for i, m in enumerate(req.relations):
            where = f"relations[{i}]"
            rel = relation(m.relation, where)
            cols = columns(m.table, where)
            need(cols, m.entity_column, m.table, where)
            if m.key_column is not None:
                need(cols, m.key_column, m.table, where)
            for slot, col in m.slots.items():
                if slot not in rel.slots:
                    raise LoadInvalid(f"{where}: relation {rel.name} declares no slot {slot!r}",
                                      reason="slot_unknown", slots=list(rel.slots))
                need(cols, col, m.table, where)
            plan["relations"].append((m, rel))
        kinds = {rel.subject for _, rel in plan["relations"]}
        if req.entities is not None:
            e = req.entities
            cols = columns(e.table, "entities")
            need(cols, e.id_column, e.table, "entities")
            if e.name_column:
                need(cols, e.name_column, e.table, "entities")
            kind = e.kind or (next(iter(kinds)) if len(kinds) == 1 else None)
            if kind is None:
                kinds_known = space.subject_kinds()
                kind = kinds_known[0] if len(kinds_known) == 1 else None
            if kind is None:
                raise LoadInvalid("entities: name the subject `kind` of the entities", reason="entities_kind_missing")
            plan["entities"] = (e, kind)
        for i, c in enumerate(req.coverage):
            where = f"coverage[{i}]"
            rel = relation(c.relation, where)
            if c.table is not None:
                need(columns(c.table, where), c.entity_column, c.table, where)
            plan["coverage"].append((c, rel))
        if not plan["relations"] and plan["entities"] is None and not plan["coverage"]:
            raise LoadInvalid("the load names no relation, entities or coverage", reason="load_empty")
    except BaseException:
        src.close()
        raise
    return src, plan


def _read(src: Source, table: str, cols: list[str], key: str | None, where: str) -> pa.Table:
    try:
        data = src.read(table, cols, key)
    except SourceError as exc:
        raise LoadInvalid(f"{where}: {exc}", reason=exc.kind) from exc
    except Exception as exc:  # a source DuckDB/sqlite cannot read as declared
        raise LoadInvalid(f"{where}: cannot read {table!r}: {without_paths(str(exc))}", reason="source_unreadable") from exc
    if key is not None:
        keys = data.column("__key")
        if keys.null_count or len(pc.unique(keys)) != len(keys):
            raise LoadInvalid(f"{where}: key column {key!r} of {table!r} is not a unique, non-empty key",
                              reason="load_key_not_unique")
    return data


def _insert_rows(con, space: Space, rel: Relation, m: RelationMap, data: pa.Table, load_id: str,
                 source_key: str) -> dict:
    shape = space.shape(rel)
    table = shape.name
    con.register("load_src", data)
    joins, select, withheld, hashed = [], [], [], [f"coalesce(trim(s.{_q(m.entity_column)}), '')"]
    for slot in rel.slots.values():
        col = m.slots.get(slot.name)
        v = f"nullif(trim(s.{_q(col)}), '')" if col else "CAST(NULL AS VARCHAR)"
        select.append(f"{v} AS v_{slot.name}")
        if col:
            hashed.append(f"coalesce(trim(s.{_q(col)}), '')")
        if slot.type == "term":
            if slot.axis is not None and col:
                axis = space.vocabulary.axis(slot.axis)
                voc = pa.table({"surface": list(axis.surfaces().keys()),
                                "term": list(axis.surfaces().values()),
                                "rung": pa.array([axis.rung(t) for t in axis.surfaces().values()], pa.int32())})
                alias = f"voc_{slot.name}"
                con.register(alias, voc)
                joins.append(f"LEFT JOIN {alias} ON {alias}.surface = {_norm_sql(v)}")
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
            withheld.append(f"CASE WHEN {v} IS NOT NULL AND ({lo}) IS NULL THEN '{slot.name}: not a {slot.type}' END")
    withheld_sql = f"nullif(concat_ws('; ', {', '.join(withheld)}), '')" if withheld else "CAST(NULL AS VARCHAR)"
    cols = [c for c, _ in shape.columns()]
    entity = f"nullif(trim(s.{_q(m.entity_column)}), '')"
    # Register the entities first, so each row is written with its entity number and the load's
    # rows lie clustered by entity: a page of matches then reads few row groups.
    RelationStore.register_entities(con, space.workspace_id, rel.subject, load_id,
                                    f"SELECT DISTINCT {entity} AS entity_id, CAST(NULL AS VARCHAR) AS name "
                                    f"FROM load_src s", [])
    con.execute(
        f"INSERT INTO {table} ({', '.join(cols)}) "
        f"SELECT ? || '-' || CAST(s.__ord AS VARCHAR), ?, {entity}, e.ent_no, ?, ?, ?, s.__key, "
        f"md5(concat_ws(chr(31), {', '.join(hashed)})), TRUE, CAST(NULL AS VARCHAR), {withheld_sql}, "
        + ", ".join(select)
        + f" FROM (SELECT *, row_number() OVER () AS __ord FROM load_src) s "
        f"LEFT JOIN rel_entities e ON e.workspace_id = ? AND e.entity_id = {entity} {' '.join(joins)} "
        f"ORDER BY e.ent_no NULLS LAST, s.__ord",
        [f"{load_id}-{rel.name}", space.workspace_id, load_id, source_key, m.table, space.workspace_id])
    con.unregister("load_src")
    for j in joins:
        con.unregister(j.split()[2])
    # a correction outlives a re-load: the same source row, unchanged, comes back retired
    con.execute(
        f"UPDATE {table} SET retired = c.correction_id FROM rel_corrections c "
        f"WHERE {table}.load_id = ? AND c.workspace_id = {table}.workspace_id AND c.relation = ? "
        f"AND c.source_key = {table}.source_key AND c.row_key = {table}.row_key AND c.vhash = {table}.vhash",
        [load_id, rel.name])
    stats = con.execute(
        f"SELECT count(*), count(*) FILTER (entity_id IS NULL), count(*) FILTER (withheld IS NOT NULL), "
        f"count(DISTINCT entity_id), count(*) FILTER (retired IS NOT NULL) FROM {table} WHERE load_id = ?",
        [load_id]).fetchall()[0]
    unplaced = {}
    for slot in rel.slots.values():
        if slot.type == "term" and slot.axis is not None and slot.name in m.slots:
            n = con.execute(f"SELECT count(*) FROM {table} WHERE load_id = ? AND v_{slot.name} IS NOT NULL "
                            f"AND t_{slot.name} IS NULL", [load_id]).fetchall()[0][0]
            if n:
                unplaced[slot.name] = n
    return {"relation": rel.name, "table": m.table, "rows": stats[0], "entities": stats[3],
            "unattributed": stats[1], "withheld": stats[2], "retired_by_corrections": stats[4],
            "unknown_surfaces": unplaced, "unmapped_slots": [s for s in rel.slots if s not in m.slots]}


class SourceForbidden(EngineError):
    status, type = 403, "source_forbidden"


def workspace_roots(source_dirs: list[str], data_dir: Path, workspace_id: str, closed: bool) -> list[Path] | None:
    """The folders a workspace's loads may read: `<dir>/<workspace_id>/` of each configured source
    folder (default `<data_dir>/sources/<workspace_id>/`), so one workspace's key never reads another's
    exports. None (anywhere) only for a server that has never had a key and no source_dirs set."""
    if not source_dirs and not closed:
        return None
    return [Path(d).expanduser() / workspace_id for d in (source_dirs or [str(data_dir / "sources")])]


def _inside(path: Path, roots: list[Path]) -> bool:
    return any(path == r or path.is_relative_to(r) for r in roots)


def confine(source: str, allowed: list[Path] | None) -> Path:
    """The source path a load may read. With `allowed` folders: a relative path is taken inside the
    first of them; the path is resolved (so neither `..` nor a symbolic link leads out), and a folder
    source's files, and any link in the folders a DuckDB export could name in a view, must resolve
    inside too. Refusals name no server path."""
    given = Path(source).expanduser()
    if allowed is None:
        return given
    roots = [r.expanduser().resolve() for r in allowed]
    if not given.is_absolute():
        given = next((r / given for r in roots if (r / given).exists()), roots[0] / given)
    path = given.resolve()
    forbidden = SourceForbidden("loads read only from the workspace's own source folder "
                                "(<source_dirs>/<workspace_id>/); name the source relative to it")
    if not _inside(path, roots):
        raise forbidden
    for root in roots:
        if not root.is_dir():
            continue
        for f in root.rglob("*"):   # a link anywhere in the folders could be read through a view or a table file
            if f.is_symlink() and not _inside(f.resolve(), roots):
                raise SourceForbidden(f"the source folder holds a link that leads outside it ({f.name!r})")
    return path


def shown(path: str | Path) -> str:
    """A source as replies name it: the file's name, never the server's path to it."""
    return Path(path).name


def load(rstore: RelationStore, workspace_id: str, req: LoadRequest, allowed: list[Path] | None = None) -> dict:
    """`allowed`: the folders sources may be read from (None: anywhere); see workspace_roots."""
    space = open_space(rstore, workspace_id)
    path = confine(req.source, allowed)
    src, plan = _check(space, req, path, allowed)
    load_id = f"ld_{secrets.token_hex(5)}"
    now = utcnow()
    with src:
        reads = []
        for i, (m, rel) in enumerate(plan["relations"]):
            cols = list(dict.fromkeys([m.entity_column, *m.slots.values()]))
            reads.append((m, rel, _read(src, m.table, cols, m.key_column, f"relations[{i}]")))
        ent = None
        if plan["entities"] is not None:
            e, kind = plan["entities"]
            cols = [e.id_column] + ([e.name_column] if e.name_column else [])
            ent = (e, kind, _read(src, e.table, cols, None, "entities"))
        cov = []
        for i, (c, rel) in enumerate(plan["coverage"]):
            if c.entity_ids is not None:
                ids = sorted({x.strip() for x in c.entity_ids if x and x.strip()})
            else:
                col = _read(src, c.table, [c.entity_column], None, f"coverage[{i}]").column(c.entity_column)
                ids = sorted({x.strip() for x in col.to_pylist() if x and x.strip()})
            cov.append((c, rel, ids))
    summary: dict = {"relations": [], "entities": None, "coverage": []}
    with rstore.transaction() as con:
        for m, rel, data in reads:
            rstore.ensure_table(space.shape(rel), con)
            source_key = f"{src.key}#{m.table}"
            table = space.shape(rel).name
            superseded = con.execute(
                f"UPDATE {table} SET current = FALSE WHERE workspace_id = ? AND source_key = ? AND current",
                [workspace_id, source_key]).fetchall()[0][0]
            info = _insert_rows(con, space, rel, m, data, load_id, source_key)
            info["superseded"] = superseded
            _maybe_crash(f"load:{rel.name}")
            summary["relations"].append(info)
        names_changed = 0
        if ent is not None:
            e, kind, data = ent
            ids = data.column(e.id_column).to_pylist()
            names = data.column(e.name_column).to_pylist() if e.name_column else [None] * len(ids)
            rows = [(i.strip(), n.strip() if n and n.strip() else None) for i, n in zip(ids, names) if i and i.strip()]
            con.register("load_entities", pa.table({"entity_id": [r[0] for r in rows], "name": [r[1] for r in rows]}))
            names_changed = con.execute(
                "SELECT count(*) FROM load_entities l JOIN rel_entities e ON e.entity_id = l.entity_id "
                "AND e.workspace_id = ? WHERE l.name IS NOT NULL AND e.name IS DISTINCT FROM l.name",
                [workspace_id]).fetchall()[0][0]
            con.execute("UPDATE rel_entities SET name = l.name FROM load_entities l "
                        "WHERE rel_entities.workspace_id = ? "
                        "AND rel_entities.entity_id = l.entity_id AND l.name IS NOT NULL", [workspace_id])
            added = RelationStore.register_entities(con, workspace_id, kind, load_id,
                                                    "SELECT entity_id, name FROM load_entities", [])
            names_changed += con.execute("SELECT count(*) FROM load_entities WHERE name IS NOT NULL").fetchall()[0][0] \
                if added else 0
            con.unregister("load_entities")
            summary["entities"] = {"kind": kind, "listed": len(rows), "added": added,
                                   "named": sum(1 for r in rows if r[1])}
        for c, rel, ids in cov:
            source_key = f"{src.key}#coverage:{rel.name}"
            con.execute("UPDATE rel_coverage SET current = FALSE WHERE workspace_id = ? AND relation = ? "
                        "AND source_key = ? AND current", [workspace_id, rel.name, source_key])
            con.register("load_cov", pa.table({"entity_id": pa.array(ids, pa.string())}))
            RelationStore.register_entities(con, workspace_id, rel.subject, load_id,
                                            "SELECT entity_id, CAST(NULL AS VARCHAR) AS name FROM load_cov", [])
            con.execute("INSERT INTO rel_coverage SELECT ?, ?, entity_id, ?, ?, 'source', ?, TRUE, NULL FROM load_cov",
                        [workspace_id, rel.name, load_id, source_key, now])
            RelationStore.number_rows(con, "rel_coverage", workspace_id, load_id)
            con.unregister("load_cov")
            summary["coverage"].append({"relation": rel.name, "entities": len(ids), "declared_by": "source"})
        if names_changed:
            con.execute("UPDATE rel_workspaces SET map_version = map_version + 1 WHERE workspace_id = ?",
                        [workspace_id])
        con.execute("INSERT INTO rel_loads VALUES (?, ?, ?, ?, ?, ?, ?)",
                    [load_id, workspace_id, now, src.key, src.format,
                     json.dumps(req.model_dump()), json.dumps(summary)])
    rstore.changed(workspace_id)
    return {"load_id": load_id, "workspace_id": workspace_id, "source": shown(src.key), "format": src.format,
            **summary}

