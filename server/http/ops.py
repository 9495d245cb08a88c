"""Health and status."""
from __future__ import annotations

from pathlib import Path

from fastapi import Depends, Request

from engine.app import Engine
from engine.core.access import Grant
from engine.core.errors import without_paths

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
