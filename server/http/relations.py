"""The public relation verbs: workspaces, loads, search, facts, corrections, region, audit."""
from __future__ import annotations

from typing import Annotated, Union

from fastapi import Body, Depends, Query
from pydantic import Discriminator, Tag

from engine.app import Engine
from engine.core.access import Grant
from engine.relations.facts import CorrectionRequest, FactsRequest, RegionRequest
from engine.relations.documents import DocumentLoadRequest
from engine.relations.loads import LoadRequest
from engine.relations.search import RelationSearchRequest
from engine.relations.workspaces import WorkspaceCreate

from .deps import current_grant, engine, router

router = router(tags=["relations"])


@router.post("/v1/public/workspaces", status_code=201)
def workspaces_create(body: WorkspaceCreate, e: Engine = Depends(engine), g: Grant = Depends(current_grant)) -> dict:
    """Create a workspace over one or more relation packs (configs/packs/)."""
    return e.create_relation_workspace(body, g)


@router.get("/v1/public/workspaces")
def workspaces_list(e: Engine = Depends(engine), g: Grant = Depends(current_grant)) -> dict:
    """The workspaces this key may read, each with what a constraint may name: relations, slots,
    their types and operators, and for a term slot its allowed values with how many entities hold
    each (over the rows the key may read)."""
    return e.relation_workspaces(g)


@router.get("/v1/public/workspaces/{workspace_id}")
def workspaces_get(workspace_id: str, e: Engine = Depends(engine), g: Grant = Depends(current_grant)) -> dict:
    """The workspace's packs, relations and entity counts, and its loads (for a key with document scopes:
    the SQL loads and the document loads of its scopes)."""
    return e.describe_relation_workspace(workspace_id, g)


def _load_kind(body) -> str:
    return "documents" if isinstance(body, dict) and "documents" in body else "sql"


# A load body names SQL tables (`relations`, `entities`, `coverage`) or a folder of documents
# (`documents`, `readers`, `model_reader`): the presence of `documents` tells them apart.
AnyLoad = Annotated[Union[Annotated[LoadRequest, Tag("sql")], Annotated[DocumentLoadRequest, Tag("documents")]],
                    Discriminator(_load_kind)]


@router.post("/v1/public/workspaces/{workspace_id}/loads", status_code=201)
def loads_create(workspace_id: str, body: Annotated[AnyLoad, Body()], e: Engine = Depends(engine),
                 g: Grant = Depends(current_grant)) -> dict:
    """Load relation rows from SQL tables (DuckDB, SQLite, Parquet, CSV) with the coverage
    declaration that tells None from Not recorded, or from a folder of documents (front matter,
    labelled lines, tables, and optionally the compile model), each extracted row with its span
    receipt; the documents become the workspace's pages. One transaction; a re-run supersedes
    (for documents: exactly the rows of the documents that changed)."""
    return e.load(workspace_id, body, g)


@router.post("/v1/public/workspaces/{workspace_id}/loads/{load_id}/sync", status_code=201)
def loads_sync(workspace_id: str, load_id: str, e: Engine = Depends(engine), g: Grant = Depends(current_grant)) -> dict:
    """Re-sync a load from its source: for documents or JSON records (a connected export) exactly
    the rows of the records that changed are superseded, corrections surviving; a SQL load is
    re-read whole. Answers the new load (`synced_from` names this one)."""
    return e.sync_load(workspace_id, load_id, g)


# Where a compact reply's follow-up calls (`more`) are sent over HTTP (MCP replies name them too).
ROUTES = {"search": {"method": "POST", "path": "/v1/public/search"},
          "facts": {"method": "POST", "path": "/v1/public/facts"},
          "region": {"method": "POST", "path": "/v1/public/region"}}


@router.post("/v1/public/search")
def public_search(body: RelationSearchRequest, e: Engine = Depends(engine), g: Grant = Depends(current_grant)) -> dict:
    """Constraints over typed relations -> the closed set with its warrant: matched / none /
    not_recorded / undetermined, counts, groups, absence verdicts, receipts and the licence."""
    return e.relation_search(body, g, routes=ROUTES)


@router.post("/v1/public/facts")
def public_facts(body: FactsRequest, e: Engine = Depends(engine), g: Grant = Depends(current_grant)) -> dict:
    """An entity's rows of a relation, with the absence verdict (None / Not recorded)."""
    return e.facts(body, g)


@router.post("/v1/public/corrections")
def public_corrections(body: CorrectionRequest, e: Engine = Depends(engine), g: Grant = Depends(current_grant)) -> dict:
    """Retire a row with a reason; it stops matching, and while its source still states it the
    entity it belonged to is undetermined rather than none."""
    return e.correct(body, g)


@router.post("/v1/public/region")
def public_region(body: RegionRequest, e: Engine = Depends(engine), g: Grant = Depends(current_grant)) -> dict:
    """Re-read a receipt: the cell a row's slot was loaded from, as the source reads it now."""
    return e.region(body, g)


@router.get("/v1/audit/events")
def audit(request_id: str = Query(min_length=1, max_length=100), e: Engine = Depends(engine),
          g: Grant = Depends(current_grant)) -> dict:
    """What an answer rested on: the rows (and spans) a request delivered (the key's own workspaces and
    scopes only; an event from before scopes were recorded counts as reading every document)."""
    return e.audit_events(request_id, g)
