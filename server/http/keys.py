"""API key administration over HTTP (a key for every workspace, not read-only; or an open server)."""
from __future__ import annotations

from datetime import datetime

from fastapi import Depends, Query
from pydantic import BaseModel, ConfigDict, Field

from engine.app import Engine
from engine.core.access import Grant

from .deps import current_grant, engine, router

router = router(tags=["keys"])


class KeyCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    workspaces: list[str] = Field(min_length=1, max_length=100, description='Workspace ids, or ["*"] for all.')
    scopes: list[str] = Field(default_factory=list, max_length=100, description="Document scopes it may read.")
    read_only: bool = False
    pages_only: bool = Field(default=False, description=(
        "Only adds pages (POST /v1/pages, /v1/visits) to its one workspace and forgets them "
        "(POST /v1/forget): every other route is 403 for it. The browser extension's key."))
    name: str | None = Field(default=None, max_length=200)


@router.post("/v1/keys", status_code=201)
def keys_create(body: KeyCreate, e: Engine = Depends(engine), g: Grant = Depends(current_grant)) -> dict:
    """Make a key. Its token is in this reply and nowhere else: only a salted hash is stored."""
    return e.create_key(body.workspaces, body.scopes, body.read_only, body.name, g, body.pages_only)


@router.get("/v1/keys")
def keys_list(e: Engine = Depends(engine), g: Grant = Depends(current_grant)) -> dict:
    return {"keys": e.list_keys(g)}


@router.delete("/v1/keys/{key_id}")
def keys_revoke(key_id: str, e: Engine = Depends(engine), g: Grant = Depends(current_grant)) -> dict:
    return e.revoke_key(key_id, g)


@router.get("/v1/audit/access")
def audit_access(since: datetime | None = None, key_id: str | None = Query(None, max_length=40),
                 request_id: str | None = Query(None, max_length=40), limit: int = Query(100, ge=1, le=10_000),
                 e: Engine = Depends(engine), g: Grant = Depends(current_grant)) -> dict:
    """Every call: request id (also each reply's X-Request-Id header), key id, method, route,
    workspace and status, newest first. Needs a key for every workspace."""
    return {"calls": e.access_log(since, key_id, request_id, limit, g)}
