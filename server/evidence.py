"""Evidence search routes: the verb, the workspace dictionary, the maps and the packets."""
from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import PlainTextResponse
from pydantic import BaseModel, Field

from engine.readers.evidence import service as evidence

router = APIRouter(tags=["evidence"])


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
def evidence_search(req: evidence.EvidenceRequest, request: Request) -> evidence.EvidenceResponse:
    """Gather evidence for a question in bounded rounds and write it to an evidence packet; the reply
    is the packet's path and the operational counts, never the evidence itself."""
    return searcher(request.app).search(req)


@router.get("/v1/evidence/packets/{session_id}", response_class=PlainTextResponse)
def evidence_packet(session_id: str, request: Request, topic: str | None = None,
                    part: Literal["packet", "appendix"] = "packet") -> PlainTextResponse:
    """The packet (or its appendix) of a session as Markdown, for clients without the server's disk."""
    text = evidence.read_packet(request.app.state.corpus, session_id, topic, part)
    return PlainTextResponse(text, media_type="text/markdown; charset=utf-8")


@router.get("/v1/evidence/dictionary")
def get_dictionary(request: Request, workspace: str | None = None,
                   limit: int = Query(1000, ge=1, le=20_000)) -> dict:
    """The workspace's dictionary as evidence search reads it: its own terms, then the packs' vocabularies."""
    return evidence.show_dictionary(request.app.state.corpus, workspace, limit)


@router.put("/v1/evidence/dictionary")
def put_dictionary(body: DictionaryIn, request: Request, workspace: str | None = None) -> dict:
    """Make `text` the workspace's dictionary (checked whole first: 422 dictionary_invalid writes nothing)."""
    return evidence.set_dictionary(request.app.state.corpus, workspace, body.format, body.text)


@router.get("/v1/evidence/maps")
def get_maps(request: Request, workspace: str | None = None) -> dict:
    """The workspace's structural overview and group maps (files under the data dir's maps/)."""
    return evidence.show_maps(request.app.state.corpus, workspace)
