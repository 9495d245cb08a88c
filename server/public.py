"""The public relation verbs: workspaces, loads, search, facts, corrections, region, audit."""
from __future__ import annotations

from fastapi import APIRouter, Depends, Query, Request

from engine.core.access import Forbidden, Grant
from engine.relations.criteria import CriterionReader
from engine.relations.facts import (AuditNotFound, CorrectionRequest, FactsRequest, RegionRequest, audit_events,
                                    correct, facts, region)
from engine.relations.loads import LoadRequest, load, workspace_roots
from engine.relations.search import RelationSearch, RelationSearchRequest
from engine.relations.workspaces import WorkspaceCreate, create_workspace, describe_workspace

from .auth import current_grant
from .errors import StrictJSONRoute

router = APIRouter(route_class=StrictJSONRoute)


def _in(g: Grant, workspace_id: str) -> None:
    """A relation workspace outside the key's grant is answered as one that does not exist."""
    g.workspace(workspace_id, workspace_id)


def _relations(request: Request):
    return request.app.state.corpus.relations


@router.post("/v1/public/workspaces", tags=["relations"], status_code=201)
def workspaces_create(body: WorkspaceCreate, request: Request, g: Grant = Depends(current_grant)) -> dict:
    """Create a workspace over one or more relation packs (configs/packs/)."""
    g.require_write()
    if not g.everywhere and body.workspace_id not in g.workspaces:
        raise Forbidden("this key may create only the workspaces it names", key_id=g.key_id)
    return create_workspace(_relations(request), body)


@router.get("/v1/public/workspaces/{workspace_id}", tags=["relations"])
def workspaces_get(workspace_id: str, request: Request, g: Grant = Depends(current_grant)) -> dict:
    _in(g, workspace_id)
    return describe_workspace(_relations(request), workspace_id)


@router.post("/v1/public/workspaces/{workspace_id}/loads", tags=["relations"], status_code=201)
def loads_create(workspace_id: str, body: LoadRequest, request: Request, g: Grant = Depends(current_grant)) -> dict:
    """Load relation rows from SQL tables (DuckDB, SQLite, Parquet, CSV), with the coverage
    declaration that tells None from Not recorded. One transaction; a re-run supersedes."""
    g.require_write()
    _in(g, workspace_id)
    c = request.app.state.corpus
    roots = workspace_roots(c.settings.relations.source_dirs, c.data_dir, workspace_id, c.keys.closed)
    return load(_relations(request), workspace_id, body, roots)


@router.post("/v1/public/search", tags=["relations"])
def public_search(body: RelationSearchRequest, request: Request, g: Grant = Depends(current_grant)) -> dict:
    """Constraints over typed relations -> the closed set with its warrant: matched / none /
    not_recorded / undetermined, counts, groups, absence verdicts, receipts and the licence."""
    _in(g, body.workspace_id)
    c = request.app.state.corpus
    pages = request.app.state.search
    scopes = g.document_scopes
    return RelationSearch(c.relations, c.querylog, c.brief_compiler(), pages, CriterionReader(c, pages, scopes),
                          scopes=scopes).search(body)


@router.post("/v1/public/facts", tags=["relations"])
def public_facts(body: FactsRequest, request: Request, g: Grant = Depends(current_grant)) -> dict:
    """An entity's rows of a relation, with the absence verdict (None / Not recorded)."""
    _in(g, body.workspace_id)
    return facts(_relations(request), body)


@router.post("/v1/public/corrections", tags=["relations"])
def public_corrections(body: CorrectionRequest, request: Request, g: Grant = Depends(current_grant)) -> dict:
    """Retire a row with a reason; it stops matching, and while its source still states it the
    entity it belonged to is undetermined rather than none."""
    g.require_write()
    _in(g, body.workspace_id)
    return correct(_relations(request), body)


@router.post("/v1/public/region", tags=["relations"])
def public_region(body: RegionRequest, request: Request, g: Grant = Depends(current_grant)) -> dict:
    """Re-read a receipt: the cell a row's slot was loaded from, as the source reads it now."""
    _in(g, body.workspace_id)
    return region(_relations(request), body)


def _within_scopes(g: Grant, event: dict) -> bool:
    """A key with document scopes sees an event only if the search it records read no document
    outside them (an event from before scopes were recorded counts as reading every document)."""
    if not g.scopes:
        return True
    read = (event.get("summary") or {}).get("document_scopes")
    return read is not None and set(read) <= set(g.scopes)


@router.get("/v1/audit/events", tags=["relations"])
def audit(request: Request, request_id: str = Query(min_length=1, max_length=100),
          g: Grant = Depends(current_grant)) -> dict:
    """What an answer rested on: the rows (and spans) a request delivered."""
    out = audit_events(_relations(request), request_id)
    out["events"] = [e for e in out["events"] if g.may_read(e["workspace_id"]) and _within_scopes(g, e)]
    if not out["events"]:
        raise AuditNotFound(f"no audit event for request {request_id!r}", ref=request_id)
    return out
