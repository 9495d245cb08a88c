"""Relation workspaces: each names its packs, which make its address space (relations, slots,
vocabulary). Workspace ids are shared with the page side, so a workspace's documents and its
relations live under one id."""
from __future__ import annotations

import re
import secrets
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from indexes.relations import EVERYTHING, RelationStore, Sight, TableShape

from engine.core.errors import PackInvalid, PackUnknown, WorkspaceExists, WorkspaceNotFound
from engine.core.packs import Pack, PackError, PackNotFound, Relation, Schema, Vocabulary, combine, load_pack
from engine.core.clock import utcnow

WORKSPACE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")


class WorkspaceCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    workspace_id: str | None = Field(default=None, pattern=WORKSPACE_ID.pattern,
                                     description="Your id for it; generated (ws_…) when absent.")
    name: str | None = Field(default=None, max_length=200)
    packs: list[str] = Field(default_factory=lambda: ["expert_network"], min_length=1, max_length=20,
                             description="Relation packs in configs/packs/ (without .toml).")


@dataclass
class Space:
    """A workspace's address space: what its constraints and loads may name."""
    workspace_id: str
    packs: list[Pack]
    schema: Schema
    vocabulary: Vocabulary
    map_version: int                  # as the caller may see it (its document scopes)
    sight: Sight = EVERYTHING         # what the caller may see of the rows, entities and names

    def shape(self, relation: Relation) -> TableShape:
        return TableShape(relation.pack, relation.name,
                          tuple((s.name, s.type) for s in relation.slots.values() if not s.computed))

    def subject_kinds(self) -> list[str]:
        return sorted({r.subject for r in self.schema.relations.values()})


def _packs(names: list[str]) -> list[Pack]:
    out = []
    for n in names:
        try:
            out.append(load_pack(n))
        except PackNotFound as exc:
            raise PackUnknown(f"no pack named {n!r}", pack=n) from exc
        except PackError as exc:
            raise PackInvalid(f"pack {n!r} cannot be used: {exc}", pack=n) from exc
    return out


def create_workspace(rstore: RelationStore, body: WorkspaceCreate) -> dict:
    packs = _packs(list(dict.fromkeys(body.packs)))
    try:
        combine(packs)
    except PackError as exc:
        raise PackInvalid(str(exc)) from exc
    ws = body.workspace_id or f"ws_{secrets.token_hex(6)}"
    if rstore.workspace(ws) is not None:
        raise WorkspaceExists(f"workspace {ws!r} exists already", workspace_id=ws)
    rstore.create_workspace(ws, body.name, [p.name for p in packs], utcnow())
    space = open_space(rstore, ws)
    for rel in space.schema.relations.values():
        rstore.ensure_table(space.shape(rel))
    return describe_workspace(rstore, ws)


def open_space(rstore: RelationStore, workspace_id: str, scopes: tuple[str, ...] | None = None) -> Space:
    """The workspace as a caller with these document scopes (None: every document) sees it."""
    row = rstore.workspace(workspace_id)
    if row is None:
        raise WorkspaceNotFound(f"no workspace with id {workspace_id!r}", ref=workspace_id)
    packs = _packs(row["packs"])
    try:
        schema, vocabulary = combine(packs)
    except PackError as exc:
        raise PackInvalid(str(exc)) from exc
    sight = Sight.of(scopes)
    return Space(workspace_id, packs, schema, vocabulary, rstore.map_version(workspace_id, row["map_version"], sight),
                 sight)


def describe_workspace(rstore: RelationStore, workspace_id: str, scopes: tuple[str, ...] | None = None) -> dict:
    space = open_space(rstore, workspace_id, scopes)
    row = rstore.workspace(workspace_id)
    return {
        "workspace_id": workspace_id,
        "name": row["name"],
        "packs": row["packs"],
        "entities": rstore.entity_counts(workspace_id, space.sight),
        "relations": [{"relation": r.name, "subject": r.subject, "pack": r.pack, "description": r.description,
                       "slots": [{"slot": s.name, "type": s.type, "axis": s.axis,
                                  **({"computed": "years from period_from to period_to (or to as_of / today "
                                                  "while open)"} if s.computed else {})}
                                 for s in r.slots.values()],
                       "period": list(r.period) if r.period else None, "date_slot": r.date_slot}
                      for r in space.schema.relations.values()],
        "loads": rstore.loads(workspace_id),
        "map_version": space.map_version,
    }
