"""Typed errors: the server's JSON `detail` (its `type`, `title` and any other fields) as exceptions."""
from __future__ import annotations

from typing import Any


class RefinderyError(Exception):
    """Any error reply: `status`, `type` (the server's `detail.type`), `title`, `detail` (the whole body)."""

    def __init__(self, status: int, type: str, title: str, detail: dict[str, Any] | None = None):
        super().__init__(f"{status} {type}: {title}")
        self.status, self.type, self.title, self.detail = status, type, title, detail or {}


class NotFound(RefinderyError):
    """404: an unknown reference (page, entity, packet, workspace ...)."""


class Invalid(RefinderyError):
    """422 (or 400, 413): a malformed request; `detail["errors"]` says where, when the server says."""


class Unauthorized(RefinderyError):
    """401: no key, or not a valid one."""


class Forbidden(Unauthorized):
    """403: a valid key that may not do this (read-only, another workspace, document scopes)."""


class RateLimited(RefinderyError):
    """429: too many requests; `retry_after` seconds to wait, as the server says."""

    def __init__(self, status: int, type: str, title: str, detail: dict[str, Any] | None = None,
                 retry_after: float | None = None):
        super().__init__(status, type, title, detail)
        self.retry_after = retry_after


class Unavailable(RefinderyError):
    """503: a capability that is not configured or not reachable (a model, a reranker, Milvus)."""


class ServerError(RefinderyError):
    """Any other 5xx."""


CLASSES = {400: Invalid, 401: Unauthorized, 403: Forbidden, 404: NotFound, 413: Invalid, 422: Invalid,
           429: RateLimited, 503: Unavailable}


def from_response(status: int, body: Any, headers: dict[str, str]) -> RefinderyError:
    detail = body.get("detail") if isinstance(body, dict) else None
    if not isinstance(detail, dict):   # a proxy's page, or a body that is not the server's
        detail = {"type": "http_error", "title": str(detail or body or "")[:500]}
    cls = CLASSES.get(status, ServerError if status >= 500 else RefinderyError)
    title = str(detail.get("title", ""))
    errors = detail.get("errors")
    if isinstance(errors, list) and errors and isinstance(errors[0], dict):   # say which field, and what
        first = errors[0]
        where = ".".join(str(x) for x in first.get("loc", ()) if x != "body")
        title = f"{title}: {where}: {first.get('msg')}" if where else f"{title}: {first.get('msg')}"
    args = (status, str(detail.get("type", "http_error")), title, detail)
    if cls is RateLimited:
        retry = headers.get("retry-after") or detail.get("retry_after")
        try:
            return RateLimited(*args, retry_after=float(retry) if retry is not None else None)
        except (TypeError, ValueError):
            return RateLimited(*args)
    return cls(*args)
