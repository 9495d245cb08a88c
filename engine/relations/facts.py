"""The per-entity verbs around search: facts (an entity's rows of a relation with the absence
verdict search groups carry), corrections (retire a row with a reason), region (re-read a
receipt) and the audit events (what an answer rested on)."""
from __future__ import annotations

import json
import secrets

from pydantic import BaseModel, ConfigDict, Field

from indexes.relations import RelationStore

from engine.core.access import Forbidden
from engine.core.errors import EngineError, EntityNotFound, RelationUnknown, RowNotFound
from engine.relations.packs import Relation
from engine.relations.receipts import ReceiptReader, provenance, slot_value
from engine.relations.workspaces import Space, open_space
from engine.core.clock import utcnow


class FactsRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    workspace_id: str = Field(min_length=1, max_length=100)
    entity_id: str = Field(min_length=1, max_length=200)
    relation: str = Field(min_length=1, max_length=100)


class CorrectionRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    workspace_id: str = Field(min_length=1, max_length=100)
    row_id: str = Field(min_length=1, max_length=200)
    reason: str = Field(min_length=1, max_length=2000)


class RegionRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    workspace_id: str = Field(min_length=1, max_length=100)
    row_id: str = Field(min_length=1, max_length=200)
    slot: str = Field(min_length=1, max_length=100)


class AuditNotFound(EngineError):
    status, type = 404, "audit_event_not_found"



def _rows(rstore: RelationStore, space: Space, rel: Relation, where: str, params: list) -> list[dict]:
    return rstore.current_rows(space.shape(rel).name, space.workspace_id, where, params, sight=space.sight)


def _find_row(rstore: RelationStore, space: Space, row_id: str) -> tuple[Relation, dict]:
    for rel in space.schema.relations.values():
        if not rstore.table_exists(space.shape(rel).name):
            continue
        rows = _rows(rstore, space, rel, "row_id = ?", [row_id])
        if rows:
            return rel, rows[0]
    raise RowNotFound(f"no current row with id {row_id!r} in workspace {space.workspace_id!r}", ref=row_id)


def row_out(rel: Relation, row: dict, corrections: dict[str, str]) -> dict:
    receipts = row.get("_receipts", {})
    slots = {s: slot_value(rel, s, row) for s in sorted(rel.value_slots) if row.get(f"v_{s}") is not None}
    out = {"row_id": row["row_id"], "relation": rel.name, "slots": slots}
    if rel.period:
        out["period"] = {"from": row.get(f"v_{rel.period[0]}"), "to": row.get(f"v_{rel.period[1]}"),
                         "receipts": {k: receipts[k] for k in rel.period if k in receipts}}
    out.update(**provenance(row),
               slot_receipts={k: v for k, v in receipts.items() if k in slots}, load_id=row["load_id"],
               unrecorded_slots=[s for s in rel.value_slots if row.get(f"v_{s}") is None])
    if row.get("retired"):
        out["retired"] = {"correction_id": row["retired"], "reason": corrections.get(row["retired"])}
    if row.get("withheld"):
        out["withheld"] = row["withheld"]
    return out


def facts(rstore: RelationStore, req: FactsRequest, scopes: tuple[str, ...] | None = None) -> dict:
    """`scopes`: the caller's document scopes (None: every document): rows read from documents of
    other scopes, and entities and names only such documents carry, do not exist for it."""
    space = open_space(rstore, req.workspace_id, scopes)
    rel = space.schema.relation(req.relation)
    if rel is None:
        raise RelationUnknown(f"no pack of the workspace declares relation {req.relation!r}",
                              relations=sorted(space.schema.relations))
    known = rstore.entity_name(space.workspace_id, req.entity_id, space.sight)
    if known is None:
        raise EntityNotFound(f"no entity {req.entity_id!r} in workspace {space.workspace_id!r}", ref=req.entity_id)
    rows = _rows(rstore, space, rel, "entity_id = ?", [req.entity_id]) \
        if rstore.table_exists(space.shape(rel).name) else []
    ReceiptReader(rstore, space.workspace_id).attach(rel, rows)
    corrections = rstore.corrections(space.workspace_id)
    coverage = [{"declared_by": by, "load_id": lid, "declared_at": at.isoformat()}
                for lid, by, at in rstore.coverage_of(space.workspace_id, rel.name, req.entity_id, space.sight)]
    live = [r for r in rows if not r.get("retired")]
    if live:
        kind = "recorded"
    elif rows or coverage:
        kind = "none"
    else:
        kind = "not_recorded"
    out_rows = [row_out(rel, r, corrections) for r in rows]
    unrecorded = sorted({s for r in out_rows if not r.get("retired") for s in r["unrecorded_slots"]})
    narrowed = []
    if kind == "not_recorded":
        narrowed.append("entity_not_recorded")
    if unrecorded:
        narrowed.append("slot_unrecorded_rows")
    if any(r.get("retired") for r in out_rows):
        narrowed.append("corrected_rows")
    if any(r.get("withheld") for r in out_rows):
        narrowed.append("withheld_rows")
    licence = {"completeness_licensed": not narrowed}
    if narrowed:
        licence.update(withheld_because="narrowed", narrowed_by=narrowed)
    return {
        "workspace_id": space.workspace_id, "entity_id": req.entity_id, "name": known[0], "relation": rel.name,
        "rows": out_rows,
        "absence": {"entity_id": req.entity_id, "kind": kind,
                    "denominator": None if kind == "not_recorded" else len(live), "coverage": coverage},
        "relations": {"slot_unrecorded": unrecorded},
        "coverage": licence,
        "labels": {"map_version": space.map_version},
    }


def correct(rstore: RelationStore, req: CorrectionRequest, scopes: tuple[str, ...] | None = None) -> dict:
    """Retire a row the caller may read (`scopes` as for facts: another scope's row is not found). A
    caller with document scopes retires only rows read from documents of those scopes: a row of no
    scope (a SQL export's, a document's without one) is every key's, not its own to change."""
    space = open_space(rstore, req.workspace_id, scopes)
    rel, row = _find_row(rstore, space, req.row_id)
    if scopes is not None and row.get("scope") not in scopes:
        raise Forbidden("this row is read by every key of the workspace: a key with document scopes retires only "
                        "rows of documents of its scopes", ref=req.row_id)
    if row.get("retired"):
        return {"correction_id": row["retired"], "row_id": req.row_id, "relation": rel.name,
                "entity_id": row["entity_id"], "retired": True, "reason": rstore.correction_reason(row["retired"]),
                "already": True}
    cid = f"cr_{secrets.token_hex(6)}"
    rstore.retire_row(space.shape(rel).name, space.workspace_id, rel.name, row, cid, req.reason, utcnow())
    rstore.changed(space.workspace_id)
    return {"correction_id": cid, "row_id": req.row_id, "relation": rel.name, "entity_id": row["entity_id"],
            "retired": True, "reason": req.reason, "already": False}


def region(rstore: RelationStore, req: RegionRequest, scopes: tuple[str, ...] | None = None) -> dict:
    """Re-read a receipt of a row the caller may read (`scopes` as for facts)."""
    space = open_space(rstore, req.workspace_id, scopes)
    rel, row = _find_row(rstore, space, req.row_id)
    if req.slot not in rel.slots:
        raise RelationUnknown(f"relation {rel.name} declares no slot {req.slot!r}", slots=list(rel.slots))
    ReceiptReader(rstore, space.workspace_id).attach(rel, [row])
    receipt = row["_receipts"].get(req.slot)
    return {"row_id": req.row_id, "relation": rel.name, "entity_id": row["entity_id"], "slot": req.slot,
            "receipt": receipt, "value_loaded": row.get(f"v_{req.slot}"),
            "value_now": None if receipt is None else receipt.get("read_now", receipt["value"]),
            "byte_verified": None if receipt is None else receipt["byte_verified"]}


def audit_events(rstore: RelationStore, request_id: str) -> dict:
    events = rstore.records.audit_events(request_id)
    if not events:
        raise AuditNotFound(f"no audit event for request {request_id!r}", ref=request_id)
    for e in events:
        e["ts"] = e["ts"].isoformat()
        for k in ("request", "rows", "spans", "summary"):
            e[k] = json.loads(e[k]) if isinstance(e[k], str) else e[k]
    return {"request_id": request_id, "events": events}
