"""Evidence search routes: the verb, the workspace dictionary, the maps and the packets."""
from __future__ import annotations

from typing import Literal

from fastapi import Depends, Query
from fastapi.responses import PlainTextResponse
from pydantic import BaseModel, Field

from engine.app import Engine
from engine.core.access import Grant
from engine.evidence.service import EvidenceRequest, EvidenceResponse

from ..errors import json_errors
from .deps import current_grant, engine, router

router = router(tags=["evidence"])


class DictionaryIn(BaseModel):
    format: Literal["toml", "markdown"] = Field(description="toml ([[terms]] tables) or markdown "
                                                            "(## term headings and/or a table).")
    text: str = Field(min_length=1, max_length=5_000_000)


@router.post("/v1/evidence", response_model=EvidenceResponse)
def evidence_search(req: EvidenceRequest, e: Engine = Depends(engine),
                    g: Grant = Depends(current_grant)) -> EvidenceResponse:
    """Gather evidence for a question in bounded rounds and write it to an evidence packet; the reply
    is the packet's path and the operational counts, never the evidence itself. Sessions are the
    workspace's own (and, for a key with document scopes, those scopes' own); `map_write` needs a key
    that may write."""
    return e.evidence(req, g)


class MarkdownResponse(PlainTextResponse):
    media_type = "text/markdown"


@router.get("/v1/evidence/packets/{session_id}", response_class=MarkdownResponse, responses=json_errors())
def evidence_packet(session_id: str, topic: str | None = None, part: Literal["packet", "appendix"] = "packet",
                    workspace: str | None = Query(None, max_length=200), e: Engine = Depends(engine),
                    g: Grant = Depends(current_grant)) -> MarkdownResponse:
    """The packet (or its appendix) of a session of the workspace as Markdown, for clients without the
    server's disk."""
    return MarkdownResponse(e.read_packet(session_id, topic, part, workspace, g))


@router.get("/v1/evidence/dictionary")
def get_dictionary(workspace: str | None = None, limit: int = Query(1000, ge=1, le=20_000),
                   e: Engine = Depends(engine), g: Grant = Depends(current_grant)) -> dict:
    """The workspace's dictionary as evidence search reads it: its own terms, then the packs' vocabularies."""
    return e.dictionary(workspace, limit, g)


@router.put("/v1/evidence/dictionary")
def put_dictionary(body: DictionaryIn, workspace: str | None = None, e: Engine = Depends(engine),
                   g: Grant = Depends(current_grant)) -> dict:
    """Make `text` the workspace's dictionary (checked whole first: 422 dictionary_invalid writes nothing)."""
    return e.set_dictionary(workspace, body.format, body.text, g)


@router.get("/v1/evidence/maps")
def get_maps(workspace: str | None = None, e: Engine = Depends(engine), g: Grant = Depends(current_grant)) -> dict:
    """The workspace's structural overview and group maps (files under the data dir's maps/)."""
    return e.maps(workspace, g)
