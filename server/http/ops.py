"""Health, status, metrics, backups and the way out (exports)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from fastapi import Depends, Request, Response
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from engine.app import Engine
from engine.core.access import Forbidden, Grant
from engine.core.errors import without_paths

from ..auth import on_owner_socket
from .deps import current_grant, engine, router

router = router(tags=["ops"])


@router.get("/healthz")
def healthz(request: Request, e: Engine = Depends(engine)) -> dict:
    """Up, which profile it runs (default or quality) with the embedder that profile makes active, the
    store generation it has applied (a replica of a PostgreSQL store: its id too), and how many
    requests wait for a later one now (Refindery-Min-Generation)."""
    waiters = getattr(request.app.state, "waiters", None)
    return e.health() | {"waiting_for_generation": waiters.count() if waiters is not None else 0}


@router.get("/v1/status")
def status(e: Engine = Depends(engine), g: Grant = Depends(current_grant)) -> dict:
    out = e.status(g)   # over HTTP without the server's paths (`refindery status` prints them locally)
    out["data_dir"] = Path(out["data_dir"]).name
    out["reranker"].pop("path", None)
    if "reason" in out["reranker"]:
        out["reranker"]["reason"] = without_paths(out["reranker"]["reason"])
    if "note" in out["query_runtime"]:
        out["query_runtime"]["note"] = without_paths(out["query_runtime"]["note"])
    return out


class BackupRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str | None = Field(None, max_length=100, description=(
        "The backup's folder name under [server] backup_dir (default: backup-<UTC time>)."))
    path: str | None = Field(None, max_length=4096, description=(
        "A folder to write into: only on the data dir's own socket (`refindery backup DEST`), never with a key."))


@router.post("/v1/backup")
def take_backup(request: Request, body: BackupRequest | None = None, e: Engine = Depends(engine),
                g: Grant = Depends(current_grant)) -> dict:
    """A consistent backup of the data dir while it serves (a key that may administer): every table of the
    store in one snapshot, the data dir's other files, a manifest with counts and SHA-256s. Written into
    [server] backup_dir under `name`; the reply names it without the server's path."""
    body = body or BackupRequest()
    if body.path is not None and not on_owner_socket(request.scope, request.app.state.owner_socket):
        raise Forbidden("a backup's path is the local operator's to name (refindery backup DEST): "
                        "over HTTP, give it a name", key_id=g.key_id)
    out = e.backup(dest=body.path, name=body.name, caller=g)
    if body.path is None:
        out["backup"] = out["name"]
    return out


@router.get("/metrics", response_class=Response, responses={200: {"content": {"text/plain": {}}}})
def metrics(request: Request, e: Engine = Depends(engine), g: Grant = Depends(current_grant)) -> Response:
    """The server's metrics in Prometheus' text format (server/metrics.py): a key that may administer.
    `[server] metrics_listen` serves them on an address of their own as well. Never open on the API's
    address: an open server (no keys yet) answers 403 here, except on the data dir's own socket."""
    if g.key_id is None and not on_owner_socket(request.scope, request.app.state.owner_socket):
        raise Forbidden("an open server (no keys yet) does not serve its metrics on the API's address: give "
                        "the monitor a key that may administer (refindery keys create --workspace '*'), or serve "
                        "them on an address of their own ([server] metrics_listen = \"127.0.0.1:9464\")")
    e.require_admin("the server's metrics", g)
    from ..metrics import CONTENT_TYPE
    m = getattr(request.app.state, "metrics", None)
    return Response(m.text() if m is not None else b"", media_type=CONTENT_TYPE)


@router.get("/v1/export/pages", response_class=StreamingResponse,
            responses={200: {"content": {"application/x-ndjson": {}}}})
def export_pages(workspace: str | None = None, e: Engine = Depends(engine),
                 g: Grant = Depends(current_grant)) -> StreamingResponse:
    """A workspace's pages (default: the key's), one JSON object a line as they are read, those of the key's
    scopes only: url, title, body_text, seen_at, published, scope, entities (what `refindery ingest` and
    POST /v1/pages read back), with first_seen, last_seen and visit_count beside them."""
    records = e.export_pages(workspace, g)   # the workspace checked now: a 404 before the stream starts
    return StreamingResponse((json.dumps(r, ensure_ascii=False) + "\n" for r in records),
                             media_type="application/x-ndjson")


class ExportRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    what: Literal["pages", "relations", "log"]
    path: str = Field(max_length=4096)
    workspace: str | None = Field(None, max_length=200)


@router.post("/v1/export", include_in_schema=False)
def export_to_path(request: Request, body: ExportRequest, e: Engine = Depends(engine),
                   g: Grant = Depends(current_grant)) -> dict:
    """`refindery export` while the server holds the data dir: written where the operator says — on the
    data dir's own socket only (a key streams pages from GET /v1/export/pages)."""
    if not on_owner_socket(request.scope, request.app.state.owner_socket):
        raise Forbidden("an export's path is the local operator's to name (refindery export): over HTTP, "
                        "GET /v1/export/pages", key_id=g.key_id)
    return e.export(body.what, body.path, body.workspace, g)
