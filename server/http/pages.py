"""Pages: batch upsert, read, delete, similar pages; entities."""
from __future__ import annotations

from typing import Any, Literal

from fastapi import Depends, Query
from pydantic import BaseModel, ConfigDict, Field

from engine.app import Engine
from engine.core.access import Grant
from engine.ingest.entities import EntityUpsert
from engine.core.values import StorableDate
from engine.ingest.records import VisitInput

from .deps import current_grant, engine, router

router = router()


class PagesUpsert(BaseModel):
    pages: list[dict[str, Any]] = Field(min_length=1, max_length=1000,
                                        description="Page records: {url, title?, body_text | html, seen_at?, "
                                                    "published?, entities?, scope?}")
    workspace: str | None = Field(default=None, max_length=200)


class UpsertItem(BaseModel):
    index: int
    page_id: str | None
    url: str | None
    status: str
    error: str | None = None


class UpsertResponse(BaseModel):
    errors: bool
    items: list[UpsertItem]
    summary: dict[str, Any]


@router.post("/v1/pages", response_model=UpsertResponse, tags=["pages"])
def upsert_pages(body: PagesUpsert, e: Engine = Depends(engine), g: Grant = Depends(current_grant)) -> UpsertResponse:
    """Create or update pages by URL. A key with document scopes writes each page in its scope (one
    scope: the page's `scope` may be left out); a page it may not write, or one over the per-page caps
    (`[ingest] max_page_chars`, `max_page_entities`), is that item's error and the rest land."""
    # the server saves FAISS files periodically, not once per request (a crash before is repaired)
    report = e.ingest(((i, "request", rec) for i, rec in enumerate(body.pages)), body.workspace, progress=False,
                      flush=False, caller=g)
    items = [UpsertItem(index=o.index, page_id=o.page_id, url=o.url, status=o.status, error=o.error)
             for o in report.outcomes]
    return UpsertResponse(errors=bool(report.errors), items=items, summary=report.summary())


class VisitsBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    visits: list[VisitInput] = Field(min_length=1, max_length=1000, description=(
        "Visits of pages already sent: {url, seen_at?, scope?}. No body is extracted or embedded."))
    workspace: str | None = Field(default=None, max_length=200)


@router.post("/v1/visits", response_model=UpsertResponse, tags=["pages"])
def visits(body: VisitsBody, e: Engine = Depends(engine), g: Grant = Depends(current_grant)) -> UpsertResponse:
    """Record visits of pages already sent, without their content: a page read again and unchanged
    (the browser extension compares a hash of what it sent) moves its `last_seen` and visit count
    (`revisited`; `unchanged` for a visit older than the page's last). A URL with no page in the
    workspace (and the caller's scope) is that item's `not_found`: send the page itself (POST /v1/pages)."""
    report = e.visit(body.visits, body.workspace, caller=g)
    items = [UpsertItem(index=o.index, page_id=o.page_id, url=o.url, status=o.status, error=o.error)
             for o in report.outcomes]
    return UpsertResponse(errors=bool(report.errors), items=items, summary=report.summary())


class ForgetBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    url: str | None = Field(default=None, min_length=1, max_length=8192,
                            description="The page at this URL (normalised as ingest does).")
    domain: str | None = Field(default=None, min_length=1, max_length=253, description=(
        "Every page of this domain and of its subdomains (example.org takes docs.example.org)."))
    since: StorableDate | None = Field(default=None, description=(
        "The pages seen since this time (a page whose visits from first to last meet the range)."))
    until: StorableDate | None = Field(default=None, description="... and until this time (default: now).")
    workspace: str | None = Field(default=None, max_length=200)


@router.post("/v1/forget", tags=["pages"])
def forget(body: ForgetBody, e: Engine = Depends(engine), g: Grant = Depends(current_grant)) -> dict:
    """Forget pages — at a URL, of a domain and its subdomains, or seen in a time range (the last hour,
    as a browser offers); given together, all must hold — from the store, every index and the query
    log's stored results. Within the caller's workspace and scopes; what has no page forgets nothing
    (`forgotten: 0`)."""
    return e.forget(body.url, body.workspace, caller=g, domain=body.domain, since=body.since, until=body.until)


@router.get("/v1/pages/{page_id}", tags=["pages"])
def get_page(page_id: str, e: Engine = Depends(engine), g: Grant = Depends(current_grant)) -> dict:
    return e.page(page_id, g)


@router.delete("/v1/pages/{page_id}", tags=["pages"])
def remove_page(page_id: str, e: Engine = Depends(engine), g: Grant = Depends(current_grant)) -> dict:
    return e.delete_page(page_id, g)


@router.get("/v1/pages/{page_id}/similar", tags=["pages"])
def similar(page_id: str, mediation: Literal["vector", "cluster", "entity"] = "vector",
            k: int = Query(10, ge=1, le=200), e: Engine = Depends(engine), g: Grant = Depends(current_grant)) -> dict:
    """Pages related to this one: `vector` (page-vector cosine), `cluster` (co-members of its
    cluster by cosine), or `entity` (shared entities, IDF-weighted Jaccard)."""
    return {"page_id": page_id, "mediation": mediation, "pages": e.similar(page_id, mediation, k, g)}


@router.post("/v1/entities", tags=["entities"])
def entities(body: EntityUpsert, e: Engine = Depends(engine), g: Grant = Depends(current_grant)) -> dict:
    """Create or edit an entity (canonical form, aliases) of a workspace and document scope, and link
    that scope's pages to it. Entities of other workspaces and scopes are never reached."""
    return e.upsert_entity(body, g)
