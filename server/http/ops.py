"""Health and status."""
from __future__ import annotations

from pathlib import Path

from fastapi import Depends, Request, Response
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
    `[server] metrics_listen` serves them on an address of their own as well."""
    e.require_admin("the server's metrics", g)
    from ..metrics import CONTENT_TYPE
    m = getattr(request.app.state, "metrics", None)
    return Response(m.text() if m is not None else b"", media_type=CONTENT_TYPE)
