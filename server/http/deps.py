"""What every route depends on: the app's Engine and the caller's grant (server/auth.py)."""
from __future__ import annotations

from fastapi import APIRouter, Request

from engine.app import Engine

from ..auth import current_grant  # noqa: F401  (routes import it from here)
from ..errors import StrictJSONRoute


def engine(request: Request) -> Engine:
    return request.app.state.engine


def router(**kwargs) -> APIRouter:
    """A router whose routes refuse a JSON body holding a lone surrogate (server/errors.py)."""
    return APIRouter(route_class=StrictJSONRoute, **kwargs)
