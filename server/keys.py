"""API key administration over HTTP (a key for every workspace, not read-only; or an open server)."""
from __future__ import annotations

from datetime import datetime

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from engine.core.access import Grant, access_log, create_key, list_keys, revoke_key

from .auth import current_grant
from .errors import StrictJSONRoute

router = APIRouter(tags=["keys"], route_class=StrictJSONRoute)


class KeyCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    workspaces: list[str] = Field(min_length=1, max_length=100, description='Workspace ids, or ["*"] for all.')
    scopes: list[str] = Field(default_factory=list, max_length=100, description="Document scopes it may read.")
    read_only: bool = False
    name: str | None = Field(default=None, max_length=200)


def _admin(g: Grant) -> None:
    g.require_everywhere("managing keys")
    g.require_write()


@router.post("/v1/keys", status_code=201)
def keys_create(body: KeyCreate, request: Request, g: Grant = Depends(current_grant)) -> dict:
    """Make a key. Its token is in this reply and nowhere else: only a salted hash is stored."""
    _admin(g)
    return create_key(request.app.state.corpus.keys, body.workspaces, body.scopes, body.read_only, body.name)


@router.get("/v1/keys")
def keys_list(request: Request, g: Grant = Depends(current_grant)) -> dict:
    _admin(g)
    return {"keys": list_keys(request.app.state.corpus.keys)}


@router.delete("/v1/keys/{key_id}")
def keys_revoke(key_id: str, request: Request, g: Grant = Depends(current_grant)) -> dict:
    _admin(g)
    return revoke_key(request.app.state.corpus.keys, key_id)


@router.get("/v1/audit/access")
def audit_access(request: Request, since: datetime | None = None, key_id: str | None = Query(None, max_length=40),
                 request_id: str | None = Query(None, max_length=40), limit: int = Query(100, ge=1, le=10_000),
                 g: Grant = Depends(current_grant)) -> dict:
    """Every call: request id (also each reply's X-Request-Id header), key id, method, route,
    workspace and status, newest first. Needs a key for every workspace."""
    g.require_everywhere("the access log")
    c = request.app.state.corpus
    c.querylog.flush()
    return {"calls": access_log(c.store, since, key_id, request_id, limit)}
