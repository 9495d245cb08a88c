"""Refind search: search, compare, facets, models, feedback."""
from __future__ import annotations

from typing import Literal

from fastapi import Depends, Query
from pydantic import BaseModel, Field

from engine.app import Engine
from engine.core.access import Grant
from engine.refind.compare import CompareRequest, CompareResponse
from engine.refind.search import SearchRequest, SearchResponse

from .deps import current_grant, engine, router

router = router(tags=["search"])


class FeedbackIn(BaseModel):
    query_id: str = Field(min_length=1, max_length=100)
    page_id: str = Field(min_length=1, max_length=100)
    kind: Literal["click", "found", "irrelevant"]


@router.post("/v1/search", response_model=SearchResponse)
def search(req: SearchRequest, e: Engine = Depends(engine), g: Grant = Depends(current_grant)) -> SearchResponse:
    """Hybrid search over pages: BM25 and dense arms fused by RRF, optional rerank, rollup to
    pages, recency decay, pinning of exact URL/domain matches, then the slice [offset:offset+k]."""
    return e.search(req, g)


@router.post("/v1/compare", response_model=CompareResponse)
def compare(req: CompareRequest, e: Engine = Depends(engine), g: Grant = Depends(current_grant)) -> CompareResponse:
    """The full pipeline once per embedder over one shared sparse arm, with the agreement of
    every pair of lists at k (Jaccard, extrapolated RBO, Kendall's tau-b over shared pages)."""
    return e.compare(req, g)


@router.get("/v1/facets")
def facets(workspace: str | None = None, limit: int = Query(50, ge=1, le=1000), e: Engine = Depends(engine),
           g: Grant = Depends(current_grant)) -> dict:
    """What a workspace's pages can be filtered by, with page counts: domains, live clusters (with
    a few titles each), entities, and the range of last_seen; the values /v1/search's filters take."""
    return e.facets(workspace, g, limit)


@router.get("/v1/models")
def models(e: Engine = Depends(engine)) -> dict:
    """The registry's embedders and rerankers: which is active, which are kept up to date on
    ingest, chunks embedded, installed or not (with how to install) — what /v1/compare can take."""
    # No file paths over HTTP: they tell a caller about the server's disk, not about the models.
    return {"active": e.settings.models.active, "profile": e.profile()["profile"],
            "switching_to": e.settings.switch_target,
            "models": [{k: v for k, v in m.items() if k != "path"} for m in e.models()]}


@router.get("/v1/models/switch")
def models_switch_status(e: Engine = Depends(engine)) -> dict:
    """The data dir's embedder, the one a live switch is building (with its progress), and the last
    switch (from, at)."""
    return e.switch_status()


@router.post("/v1/models/{name}/switch", status_code=202)
def models_switch(name: str, e: Engine = Depends(engine), g: Grant = Depends(current_grant)) -> dict:
    """Switch the data dir's embedder to `name` without a pause: its vectors and index are built in
    this server's background while the active embedder answers every search, then it becomes the
    active one atomically (GET /v1/models/switch says how far). Switching to the active embedder
    cancels a switch under way; 409 `model_in_use` while another is under way. A key for every
    workspace that may write; `refindery models switch NAME` sends this when a server runs."""
    return e.switch_model(name, g)


@router.delete("/v1/models/{name}")
def models_drop(name: str, e: Engine = Depends(engine), g: Grant = Depends(current_grant)) -> dict:
    """Delete every vector of `name` and empty its index (the embedder a switch left behind); 409
    `model_in_use` for one the data dir uses. A key for every workspace that may write."""
    return e.drop_model(name, g)


@router.post("/v1/models/{name}/embed", status_code=202)
def models_embed(name: str, e: Engine = Depends(engine), g: Grant = Depends(current_grant)) -> dict:
    """Embed every chunk the model lacks, in the background of this server (it keeps serving; a
    write waits one batch at most). The reply, and `embedding` in GET /v1/models, say how far it
    is: embedding (done, total, percent), then ready (or failed, with the error). A key for every
    workspace that may write; `refindery models --embed NAME` sends this when a server runs."""
    return e.embed_model_in_background(name, g)


@router.post("/v1/feedback")
def feedback(body: FeedbackIn, e: Engine = Depends(engine), g: Grant = Depends(current_grant)) -> dict:
    """Implicit judgments on a logged query: click, found (this is the page I was after), irrelevant.
    A read-only key may send them: they judge results, they change no document."""
    return e.feedback(body.query_id, body.page_id, body.kind, g)


@router.get("/v1/feedback")
def choices(workspace: str | None = None, e: Engine = Depends(engine), g: Grant = Depends(current_grant)) -> dict:
    """The pages chosen (found / click) for a workspace's logged searches, newest first: what the
    shortcuts put first in a later search with a close query (only those of searches run within the
    caller's scopes)."""
    return e.choices(workspace, g)


@router.delete("/v1/feedback")
def clear_feedback(workspace: str | None = None, query_id: str | None = Query(None, min_length=1, max_length=100),
                   page_id: str | None = Query(None, min_length=1, max_length=100), e: Engine = Depends(engine),
                   g: Grant = Depends(current_grant)) -> dict:
    """Forget judgments and the shortcuts they make: those on one logged query (`query_id`), on one page
    (`page_id`), both, or — neither given — every judgment in the workspace; only on queries the caller
    could have run. A key that may write. Returns how many went."""
    return e.clear_feedback(workspace, query_id, page_id, g)
