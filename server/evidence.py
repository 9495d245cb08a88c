"""Evidence search routes: the verb, the workspace dictionary, the maps and the packets."""
from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import PlainTextResponse
from pydantic import BaseModel, Field

from engine.core.access import Forbidden, Grant
from engine.evidence import service as evidence

from .auth import current_grant
from .errors import StrictJSONRoute, json_errors

router = APIRouter(tags=["evidence"], route_class=StrictJSONRoute)


def searcher(app) -> evidence.EvidenceSearch:
    """The app's evidence searcher (made once, over the app's corpus and page search)."""
    es = getattr(app.state, "evidence", None)
    if es is None or es.corpus is not app.state.corpus:
        es = app.state.evidence = evidence.EvidenceSearch(app.state.corpus, app.state.search)
    return es


class DictionaryIn(BaseModel):
    format: Literal["toml", "markdown"] = Field(description="toml ([[terms]] tables) or markdown "
                                                            "(## term headings and/or a table).")
    text: str = Field(min_length=1, max_length=5_000_000)


@router.post("/v1/evidence", response_model=evidence.EvidenceResponse)
def evidence_search(req: evidence.EvidenceRequest, request: Request,
                    g: Grant = Depends(current_grant)) -> evidence.EvidenceResponse:
    """Gather evidence for a question in bounded rounds and write it to an evidence packet; the reply
    is the packet's path and the operational counts, never the evidence itself."""
    req.workspace = g.scoped(req.workspace, request.app.state.corpus.settings.default_workspace)
    return searcher(request.app).search(req, scopes=g.document_scopes)


class MarkdownResponse(PlainTextResponse):
    media_type = "text/markdown"


@router.get("/v1/evidence/packets/{session_id}", response_class=MarkdownResponse, responses=json_errors())
def evidence_packet(session_id: str, request: Request, topic: str | None = None,
                    part: Literal["packet", "appendix"] = "packet",
                    g: Grant = Depends(current_grant)) -> MarkdownResponse:
    """The packet (or its appendix) of a session as Markdown, for clients without the server's disk."""
    text = evidence.read_packet(request.app.state.corpus, session_id, topic, part, may_read=g.may_read,
                                scopes=g.document_scopes)
    return MarkdownResponse(text)


@router.get("/v1/evidence/dictionary")
def get_dictionary(request: Request, workspace: str | None = None,
                   limit: int = Query(1000, ge=1, le=20_000), g: Grant = Depends(current_grant)) -> dict:
    """The workspace's dictionary as evidence search reads it: its own terms, then the packs' vocabularies."""
    c = request.app.state.corpus
    return evidence.show_dictionary(c, g.workspace(workspace, c.settings.default_workspace), limit)


@router.put("/v1/evidence/dictionary")
def put_dictionary(body: DictionaryIn, request: Request, workspace: str | None = None,
                   g: Grant = Depends(current_grant)) -> dict:
    """Make `text` the workspace's dictionary (checked whole first: 422 dictionary_invalid writes nothing)."""
    g.require_write()
    c = request.app.state.corpus
    return evidence.set_dictionary(c, g.workspace(workspace, c.settings.default_workspace), body.format, body.text)


@router.get("/v1/evidence/maps")
def get_maps(request: Request, workspace: str | None = None, g: Grant = Depends(current_grant)) -> dict:
    """The workspace's structural overview and group maps (files under the data dir's maps/)."""
    c = request.app.state.corpus
    ws = g.workspace(workspace, c.settings.default_workspace)
    if g.scopes:
        raise Forbidden("maps are drawn over every document of a workspace; a key with document scopes cannot "
                        "read them", key_id=g.key_id)
    return evidence.show_maps(c, ws)
