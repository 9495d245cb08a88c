"""The public relation verbs: workspaces, loads, search, facts, corrections, region, audit."""
from __future__ import annotations

from fastapi import APIRouter, Query, Request

from engine.readers.criteria import CriterionReader
from engine.relations.facts import (CorrectionRequest, FactsRequest, RegionRequest, audit_events, correct, facts,
                                    region)
from engine.relations.loads import LoadRequest, load
from engine.relations.search import RelationSearch, RelationSearchRequest
from engine.relations.workspaces import WorkspaceCreate, create_workspace, describe_workspace

router = APIRouter()


def _relations(request: Request):
    return request.app.state.corpus.relations


@router.post("/v1/public/workspaces", tags=["relations"], status_code=201)
def workspaces_create(body: WorkspaceCreate, request: Request) -> dict:
    """Create a workspace over one or more relation packs (configs/packs/)."""
    return create_workspace(_relations(request), body)


@router.get("/v1/public/workspaces/{workspace_id}", tags=["relations"])
def workspaces_get(workspace_id: str, request: Request) -> dict:
    return describe_workspace(_relations(request), workspace_id)


@router.post("/v1/public/workspaces/{workspace_id}/loads", tags=["relations"], status_code=201)
def loads_create(workspace_id: str, body: LoadRequest, request: Request) -> dict:
    """Load relation rows from SQL tables (DuckDB, SQLite, Parquet, CSV), with the coverage
    declaration that tells None from Not recorded. One transaction; a re-run supersedes."""
    return load(_relations(request), workspace_id, body)


@router.post("/v1/public/search", tags=["relations"])
def public_search(body: RelationSearchRequest, request: Request) -> dict:
    """Constraints over typed relations -> the closed set with its warrant: matched / none /
    not_recorded / undetermined, counts, groups, absence verdicts, receipts and the licence."""
    c = request.app.state.corpus
    pages = request.app.state.search
    return RelationSearch(c.relations, c.querylog, c.brief_compiler(), pages, CriterionReader(c, pages)).search(body)


@router.post("/v1/public/facts", tags=["relations"])
def public_facts(body: FactsRequest, request: Request) -> dict:
    """An entity's rows of a relation, with the absence verdict (None / Not recorded)."""
    return facts(_relations(request), body)


@router.post("/v1/public/corrections", tags=["relations"])
def public_corrections(body: CorrectionRequest, request: Request) -> dict:
    """Retire a row with a reason; it stops matching, and while its source still states it the
    entity it belonged to is undetermined rather than none."""
    return correct(_relations(request), body)


@router.post("/v1/public/region", tags=["relations"])
def public_region(body: RegionRequest, request: Request) -> dict:
    """Re-read a receipt: the cell a row's slot was loaded from, as the source reads it now."""
    return region(_relations(request), body)


@router.get("/v1/audit/events", tags=["relations"])
def audit(request: Request, request_id: str = Query(min_length=1, max_length=100)) -> dict:
    """What an answer rested on: the rows (and spans) a request delivered."""
    return audit_events(_relations(request), request_id)
