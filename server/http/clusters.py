"""Clusters of a workspace's pages: list, refit."""
from __future__ import annotations

from fastapi import Depends, Query

from engine.app import Engine
from engine.core.access import Grant

from .deps import current_grant, engine, router

router = router(tags=["clusters"])


@router.get("/v1/clusters")
def clusters(workspace: str | None = None, include_tombstoned: bool = False, e: Engine = Depends(engine),
             g: Grant = Depends(current_grant)) -> dict:
    return e.clusters(workspace, include_tombstoned, g)


@router.post("/v1/clusters/refit")
def clusters_refit(workspace: str | None = None, k: int | None = Query(None, ge=2, le=10_000),
                   e: Engine = Depends(engine), g: Grant = Depends(current_grant)) -> dict:
    """k-means over page vectors; new cluster ids every time, the old ones tombstoned. It re-clusters
    every page of the workspace, so a key with document scopes cannot."""
    return e.refit_clusters(workspace, k, g)
