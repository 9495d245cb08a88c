"""Imports (a browser's history: `refindery import history`): where each stands."""
from __future__ import annotations

from fastapi import Depends

from engine.app import Engine
from engine.core.access import Grant

from .deps import current_grant, engine, router

router = router(tags=["imports"])


@router.get("/v1/imports")
def imports(e: Engine = Depends(engine), g: Grant = Depends(current_grant)) -> dict:
    """The imports of the workspaces the key may read, newest first, each with its counts per status."""
    return {"imports": e.imports(g)}


@router.get("/v1/imports/{import_id}")
def import_status(import_id: str, e: Engine = Depends(engine), g: Grant = Depends(current_grant)) -> dict:
    """An import's URLs counted by status — queued (text to fetch), fetched, present (its page had its
    text), titles (kept without fetching), skipped (a rule, a scheme, a type), failed — and the skips and
    failures with their reasons (the first 50)."""
    return e.import_status(import_id, g)
