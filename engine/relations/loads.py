"""Loads from SQL: rows of a source table become relation rows, each cell with its receipt.

A load names a source DuckDB can read (a DuckDB or SQLite file, Parquet, CSV), the table for each
relation, the entity column, the column for each slot (and optionally a key column; the row's
position otherwise), the entities it names (with their display names when the source records
them), and its coverage declaration: which entities it looked at for which relation.

Everything is checked before anything is written, and the write is one transaction: a bad load
changes nothing, a crash mid-load leaves the previous state, and re-running a load supersedes the
rows and coverage the same source table gave before (so a re-run is idempotent).
The write is `indexes/relation_loads.py`'s LoadWriter (the typed reading of each cell is done there, in SQL).
"""
from __future__ import annotations

import secrets
from pathlib import Path
from typing import Literal

import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel, ConfigDict, Field, model_validator

from indexes.relation_loads import LoadWriter, SlotRead
from indexes.relations import RelationStore
from indexes.sources import FORMATS, Source, SourceError

from engine.core.errors import EngineError, LoadInvalid, without_paths
from engine.relations.packs import Relation
from engine.relations.workspaces import Space, open_space
from engine.core.clock import utcnow
from engine.core.faults import maybe_crash


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
    """Test-only fault injection inside the load's transaction (engine/core/faults.py:
    REFINDERY_TEST_CRASH_AT=load:<relation> or documents:<relation>)."""
    maybe_crash(point)


def _check(space: Space, req: LoadRequest, path: Path, roots: list[Path] | None) -> tuple[Source, dict]:
    """The source opened and the load checked against it and the workspace's packs before anything is
    written: (the source, the plan — each relation mapping with its relation, the entities with
    their kind, each coverage declaration with its relation). LoadInvalid names what is wrong."""
    try:
        src = Source(path, req.format, roots)
    except SourceError as exc:
        raise LoadInvalid(str(exc), reason=exc.kind) from exc
    try:
        check = _Checker(space, src)
        plan: dict = {"relations": [check.mapping(i, m) for i, m in enumerate(req.relations)],
                      "entities": None, "coverage": []}
        if req.entities is not None:
            plan["entities"] = check.entities(req.entities, {rel.subject for _, rel in plan["relations"]})
        for i, c in enumerate(req.coverage):
            where = f"coverage[{i}]"
            rel = check.relation(c.relation, where)
            if c.table is not None:
                check.need(check.columns(c.table, where), c.entity_column, c.table, where)
            plan["coverage"].append((c, rel))
        if not plan["relations"] and plan["entities"] is None and not plan["coverage"]:
            raise LoadInvalid("the load names no relation, entities or coverage", reason="load_empty")
    except BaseException:
        src.close()
        raise
    return src, plan


class _Checker:
    """The checks of one load against its source's tables and columns and the workspace's packs."""

    def __init__(self, space: Space, src: Source):
        self.space, self.src = space, src
        self.tables = set(src.tables())

    def columns(self, table: str, where: str) -> set[str]:
        if table not in self.tables:
            raise LoadInvalid(f"{where}: the source has no table {table!r}", reason="load_table_unknown",
                              tables=sorted(self.tables))
        try:
            return set(self.src.columns(table))
        except SourceError as exc:
            raise LoadInvalid(f"{where}: {exc}", reason=exc.kind) from exc
        except Exception as exc:  # a table DuckDB/sqlite cannot read (a view over a file it may not open)
            raise LoadInvalid(f"{where}: cannot read {table!r} ({type(exc).__name__})",
                              reason="source_unreadable") from exc

    @staticmethod
    def need(cols: set[str], col: str, table: str, where: str) -> None:
        if col not in cols:
            raise LoadInvalid(f"{where}: table {table!r} has no column {col!r}", reason="load_column_unknown",
                              columns=sorted(cols))

    def relation(self, name: str, where: str) -> Relation:
        rel = self.space.schema.relation(name)
        if rel is None:
            raise LoadInvalid(f"{where}: no pack of the workspace declares relation {name!r}",
                              reason="relation_unknown", relations=sorted(self.space.schema.relations))
        return rel

    def mapping(self, i: int, m) -> tuple:
        """relations[i]: its relation, and every column it names in its table (the slots only those
        a load fills)."""
        where = f"relations[{i}]"
        rel = self.relation(m.relation, where)
        cols = self.columns(m.table, where)
        self.need(cols, m.entity_column, m.table, where)
        if m.key_column is not None:
            self.need(cols, m.key_column, m.table, where)
        for slot, col in m.slots.items():
            if slot not in rel.stored_slots:
                raise LoadInvalid(f"{where}: relation {rel.name} declares no slot {slot!r} a load fills"
                                  + (" (it is computed from the period)" if slot in rel.slots else ""),
                                  reason="slot_computed" if slot in rel.slots else "slot_unknown",
                                  slots=rel.stored_slots)
            self.need(cols, col, m.table, where)
        return m, rel

    def entities(self, e, kinds: set[str]) -> tuple:
        """The entities table's columns, and their subject kind: the one named, else the one kind the
        load's relations (or the workspace) hold."""
        cols = self.columns(e.table, "entities")
        self.need(cols, e.id_column, e.table, "entities")
        if e.name_column:
            self.need(cols, e.name_column, e.table, "entities")
        kind = e.kind or (next(iter(kinds)) if len(kinds) == 1 else None)
        if kind is None:
            kinds_known = self.space.subject_kinds()
            kind = kinds_known[0] if len(kinds_known) == 1 else None
        if kind is None:
            raise LoadInvalid("entities: name the subject `kind` of the entities", reason="entities_kind_missing")
        return e, kind


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


def slot_reads(space: Space, rel: Relation, columns: dict[str, str]) -> list[SlotRead]:
    """How each slot of the relation is read from its column (slot -> column; a term slot through
    its axis)."""
    out = []
    for slot in rel.slots.values():
        if slot.computed:
            continue
        col = columns.get(slot.name)
        axis = None
        if slot.type == "term" and slot.axis is not None and col:
            ax = space.vocabulary.axis(slot.axis)
            axis = {surface: (term, ax.rung(term)) for surface, term in ax.surfaces().items()}
        out.append(SlotRead(slot.name, slot.type, col, axis))
    return out


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
            # a hard link is the same file under two names, the other one possibly another workspace's
            if not f.is_symlink() and f.is_file() and f.stat().st_nlink > 1:
                raise SourceForbidden(f"the source folder holds a file with more than one name (a hard link: "
                                      f"{f.name!r}); copy the file in instead")
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
    with rstore.transaction(changes=[workspace_id]) as con:
        w = LoadWriter(rstore, con, workspace_id, load_id)
        for m, rel, data in reads:
            source_key = f"{src.key}#{m.table}"
            shape = space.shape(rel)
            superseded = w.supersede(shape, source_key)
            written = w.insert_rows(shape, rel.subject, rel.name, m.entity_column, slot_reads(space, rel, m.slots), data,
                                    source_key, m.table)
            summary["relations"].append({"relation": rel.name, "table": m.table, **written,
                                         "unmapped_slots": [s for s in rel.stored_slots if s not in m.slots],
                                         "superseded": superseded})
            _maybe_crash(f"load:{rel.name}")
        names_changed: dict = {}
        if ent is not None:
            e, kind, data = ent
            ids = data.column(e.id_column).to_pylist()
            names = data.column(e.name_column).to_pylist() if e.name_column else [None] * len(ids)
            rows = [(i.strip(), n.strip() if n and n.strip() else None) for i, n in zip(ids, names) if i and i.strip()]
            added, names_changed = w.name_entities(kind, rows)
            summary["entities"] = {"kind": kind, "listed": len(rows), "added": added,
                                   "named": sum(1 for r in rows if r[1])}
        for c, rel, ids in cov:
            w.declare_coverage(rel.name, rel.subject, f"{src.key}#coverage:{rel.name}", ids, now)
            summary["coverage"].append({"relation": rel.name, "entities": len(ids), "declared_by": "source"})
        w.finish(now, src.key, src.format, req.model_dump(), summary, names_changed)
    rstore.changed(workspace_id)
    return {"load_id": load_id, "workspace_id": workspace_id, "source": shown(src.key), "format": src.format,
            **summary}

