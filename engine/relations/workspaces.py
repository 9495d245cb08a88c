"""Relation workspaces: each names its packs, which make its address space (relations, slots,
vocabulary). Workspace ids are shared with the page side, so a workspace's documents and its
relations live under one id."""
from __future__ import annotations

import re
import secrets
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from indexes.relations import EVERYTHING, RelationStore, Sight, TableShape, WorkspaceTaken

from engine.core.errors import PackInvalid, PackUnknown, WorkspaceExists, WorkspaceNotFound
from engine.relations.packs import Pack, PackError, PackNotFound, Relation, Schema, Vocabulary, combine, load_pack
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
    try:
        rstore.create_workspace(ws, body.name, [p.name for p in packs], utcnow())
    except WorkspaceTaken:
        raise WorkspaceExists(f"workspace {ws!r} exists already", workspace_id=ws) from None
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


# What each slot type takes as a value, for a caller that has only the schema to go on.
VALUE_FORMS = {"term": "a term of the slot's vocabulary (or one of its synonyms)", "text": "free text",
               "number": "a number", "month": "YYYY, YYYY-MM or YYYY-MM-DD", "date": "YYYY, YYYY-MM or YYYY-MM-DD"}


def schema_of(rstore: RelationStore, workspace_id: str, scopes: tuple[str, ...] | None = None) -> dict:
    """Everything a caller needs to write constraints for one workspace, and nothing it cannot use:
    each relation's slots with their type, the operators the type answers, and for a term slot its
    allowed values with how many entities hold each (over the rows the caller may read)."""
    space = open_space(rstore, workspace_id, scopes)
    row = rstore.workspace(workspace_id)
    relations = []
    for rel in space.schema.relations.values():
        table = space.shape(rel).name
        slots = []
        example = None
        for s in rel.slots.values():
            slot: dict = {"slot": s.name, "type": s.type, "operators": list(s.ops(space.vocabulary)),
                          "value": VALUE_FORMS.get(s.type, s.type)}
            if s.computed:
                slot["computed"] = "years from period_from to period_to (or to as_of / today while open)"
            if s.type == "term" and s.axis is not None:
                axis = space.vocabulary.axis(s.axis)
                counts = rstore.term_counts(table, workspace_id, s.name, space.sight)
                slot["values"] = []
                for t in axis.terms:
                    if axis.hierarchy.get(t):   # a group: the entities of any of its terms, counted once
                        group = axis.covered(t)
                        slot["values"].append({"term": t, "entities": rstore.entities_with_terms(
                            table, workspace_id, s.name, group, space.sight), "includes": group[1:]})
                    else:
                        slot["values"].append({"term": t, "entities": counts.get(t, 0)})
                if axis.ordered:
                    slot["order"] = list(axis.order)
                best = max(slot["values"], key=lambda v: v["entities"], default=None)
                if example is None and best is not None and best["entities"]:
                    example = {"relation": rel.name, "slot": s.name, "op": "eq", "value": best["term"]}
            elif s.type == "term":
                slot["value"] = "free text compared as a term (this slot has no vocabulary)"
            slots.append(slot)
        relations.append({"relation": rel.name, "subject": rel.subject, "description": rel.description,
                          "slots": slots, "period": list(rel.period) if rel.period else None,
                          "date_slot": rel.date_slot, **({"example_constraint": example} if example else {})})
    return {"workspace_id": workspace_id, "name": row["name"], "packs": row["packs"],
            "entities": rstore.entity_counts(workspace_id, space.sight), "relations": relations}


def installed_constraint_items() -> dict:
    """The JSON Schema of one constraint over every pack installed (configs/packs/): one variant per
    (relation, slot), for a tool schema an agent reads before it knows which workspace it will ask.
    The search still reads what is sent itself (a name no workspace has is a gap, as the seed says)."""
    from engine.relations.packs import pack_names
    from engine.relations.compile import constraint_variants

    variants, seen = [], set()
    for name in pack_names():
        try:
            schema, vocabulary = combine([load_pack(name)])
        except PackError:
            continue
        for v in constraint_variants(schema, vocabulary, ["relation", "slot", "op", "value"]):
            key = (v["properties"]["relation"]["enum"][0], v["properties"]["slot"]["enum"][0])
            if key not in seen:
                seen.add(key)
                variants.append(v)
    return {"anyOf": variants}
