"""Refusals the engine makes, each with the HTTP status and `detail.type` every face reports.

The HTTP routes and the MCP tools turn these into the same body, {"detail": {"type", "title", ...}},
so the faces can never disagree on what a refusal is.
"""
from __future__ import annotations

import re
from typing import Any

_ABSOLUTE_PATH = re.compile(r"(?<![\w.:/])(?:[A-Za-z]:)?/(?!v1/|mcp\b)(?:[^\s\"'/]+/)+([^\s\"'/]+)")


def without_paths(text: str) -> str:
    """A message without the absolute paths a driver or a resolver may quote: each becomes its last
    part (replies never tell a caller where the server keeps its files)."""
    return _ABSOLUTE_PATH.sub(r"\1", text)


# How an operator carries out a remedy an error names, in the words of the face they work in (the
# server registers its CLI commands here, server/errors.py): the engine names the remedy, never a
# command line. Each value is a format string over the remedy's arguments, appended to the title.
REMEDIES: dict[str, str] = {}


class EngineError(Exception):
    status = 400
    type = "bad_request"

    def __init__(self, title: str, remedy: tuple[str, dict[str, Any]] | None = None, **extra: Any):
        """`remedy`: (key, arguments) of the operator's fix, rendered through REMEDIES."""
        super().__init__(title)
        self._title = title
        self.remedy = remedy
        self.extra = extra

    @property
    def title(self) -> str:
        if self.remedy is None:
            return self._title
        key, args = self.remedy
        how = REMEDIES.get(key)
        return self._title + (how.format(**args) if how else "")

    def __str__(self) -> str:
        return self.title

    def body(self) -> dict[str, Any]:
        return {"type": self.type, "title": self.title, **self.extra}

    def public_body(self) -> dict[str, Any]:
        """The body as a face sends it: no server paths in any text of it (a model folder, a source)."""
        return _scrub(self.body())


def _scrub(v: Any) -> Any:
    if isinstance(v, str):
        return without_paths(v)
    if isinstance(v, dict):
        return {k: _scrub(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_scrub(x) for x in v]
    return v


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


class IndexUnavailable(EngineError):
    """An index backend outside the process (Milvus) did not answer."""
    status, type = 503, "index_unavailable"


class ModelUnknown(EngineError):
    """The request names a model the registry does not hold (a client's mistake, not a missing install)."""
    status, type = 422, "model_unknown"


class RerankerNotConfigured(EngineError):
    status, type = 503, "reranker_unavailable"


class DeviceUnavailable(EngineError):
    """`models.device` names a device this host has not got (cuda with no GPU, or a CPU-only torch):
    whatever needs a model on it is refused, and the rest of the server keeps answering."""
    status, type = 503, "device_unavailable"


class WorkspaceNotFound(EngineError):
    status, type = 404, "workspace_not_found"


class RowNotFound(EngineError):
    status, type = 404, "row_not_found"


class PackUnknown(EngineError):
    status, type = 422, "pack_unknown"


class PackInvalid(EngineError):
    status, type = 422, "pack_invalid"


class LoadInvalid(EngineError):
    """A load that cannot run as written; `reason` says which part (source, table, column, ...)."""
    status, type = 422, "load_invalid"


class LoadNotFound(EngineError):
    status, type = 404, "load_not_found"


class RelationUnknown(EngineError):
    status, type = 422, "relation_unknown"


class SearchConstraintInvalid(EngineError):
    status, type = 422, "search_constraint_invalid"


class SearchRequestInvalid(EngineError):
    status, type = 422, "search_request_invalid"


class ReaderUnavailable(EngineError):
    """A document load asked for the model reader and no compile model is configured."""
    status, type = 503, "model_reader_unavailable"


class CompileUnavailable(EngineError):
    """No brief-compile model is configured. The relation-search seed prints this refusal's body
    as the whole reply ({"type", "reason"}), not wrapped in "detail" like every other refusal."""
    status, type = 503, "compile_unavailable"
    bare = True

    def __init__(self, reason: str = "compile requires a model; pass constraints"):
        super().__init__(reason)
        self.reason = reason

    def body(self) -> dict:
        return {"type": self.type, "reason": self.reason}


class WorkspaceExists(EngineError):
    status, type = 409, "workspace_exists"


class ModelNotInstalled(EngineError):
    """The request names a registered model whose weights are not installed here (`install` says how)."""
    status, type = 422, "model_not_installed"


class ModelInUse(EngineError):
    """A model switch or drop that the data dir's embedders forbid now: the model is active, being
    switched to, or kept up to date on writes; or another switch is under way."""
    status, type = 409, "model_in_use"


class CompileFailed(EngineError):
    """The configured compile endpoint failed (unreachable, refused, or did not call the tool)."""
    status, type = 502, "compile_failed"
