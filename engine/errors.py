"""Refusals the engine makes, each with the HTTP status and `detail.type` every face reports.

The HTTP routes and the MCP tools turn these into the same body, {"detail": {"type", "title", ...}},
so the faces can never disagree on what a refusal is.
"""
from __future__ import annotations

from typing import Any


class EngineError(Exception):
    status = 400
    type = "bad_request"

    def __init__(self, title: str, **extra: Any):
        super().__init__(title)
        self.title = title
        self.extra = extra

    def body(self) -> dict[str, Any]:
        return {"type": self.type, "title": self.title, **self.extra}


class PageNotFound(EngineError):
    status, type = 404, "page_not_found"


class QueryNotFound(EngineError):
    status, type = 404, "query_not_found"


class EntityNotFound(EngineError):
    status, type = 404, "entity_not_found"


class FilterTooBroad(EngineError):
    status, type = 422, "filter_too_broad"


class InvalidRequest(EngineError):
    status, type = 422, "validation_error"


class ModelUnavailable(EngineError):
    status, type = 503, "model_unavailable"


class RerankerNotConfigured(EngineError):
    status, type = 503, "reranker_unavailable"
