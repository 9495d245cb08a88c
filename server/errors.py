"""Every refusal is JSON {"detail": {"type", "title", ...}} with the right status."""
from __future__ import annotations

import logging
import secrets
from typing import Any, Union

import re

from fastapi import FastAPI, Request

from engine.core.parsing import TextRefused, loads_json
from fastapi.routing import APIRoute
from pydantic import BaseModel, ConfigDict
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException


class ErrorDetail(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: str
    title: str | None = None


class ErrorBody(BaseModel):
    """Every refusal: {"detail": {"type", "title", ...}} — match on detail.type."""
    detail: ErrorDetail


class BareRefusal(BaseModel):
    """The relation-search seed's compile_unavailable refusal, printed whole: {"type", "reason"}."""
    model_config = ConfigDict(extra="allow")
    type: str
    reason: str


_WHAT = {401: "no API key, or a bad one (once keys exist)", 403: "outside the key's grant (read-only, "
         "scoped, or a route over every workspace)", 404: "an unknown reference (or one outside the key's "
         "workspaces)", 409: "it exists already", 413: "the request body is too large",
         422: "a malformed or invalid request", 429: "over the key's rate (see Retry-After)",
         500: "an unexpected failure, logged under the reply's request_id", 502: "an upstream model call failed",
         503: "a capability that is not configured"}
# Documented on every route, so clients (and schemathesis) know each refusal's shape.
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    code: {"model": Union[ErrorBody, BareRefusal] if code == 503 else ErrorBody, "description": what}
    for code, what in _WHAT.items()}


def json_errors() -> dict[int | str, dict[str, Any]]:
    """The same refusals for a route whose own replies are not JSON: their content type spelled out."""
    return {code: {"description": what, "content": {"application/json": {"schema": {
        "$ref": "#/components/schemas/ErrorBody"}}}} for code, what in _WHAT.items() if code != 503}


log = logging.getLogger("refindery.server")
REQUEST_ID = "refindery.request_id"   # the scope key the key middleware puts each request's id under


def internal_error(scope: dict, what: str, exc: BaseException) -> dict:
    """The body of an unexpected failure: no exception text (it can quote SQL or paths), only the
    request id the full traceback is logged under."""
    request_id = scope.get(REQUEST_ID) or f"req_{secrets.token_hex(8)}"
    log.error("internal error in %s (request %s)", what, request_id, exc_info=exc)
    return {"type": "internal_error", "title": "the server failed on this request; the failure is logged under "
                                              "its request_id", "request_id": request_id}


_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def _lone_surrogate(data) -> bool:
    """Whether parsed JSON holds a string with a lone surrogate (iterative, one visit per element)."""
    stack = [data]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:
                return True
        elif isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return False


def body_problem(body: bytes) -> dict | None:
    """What makes a JSON body unreadable for every route, as a validation error item, or None:
    nesting past MAX_NESTING (parsers and validators recurse once per level: past a few hundred levels
    they fail with RecursionError), a number of more than MAX_NUMBER_DIGITS digits (int() refuses
    past 4,300 with a ValueError a library may let escape), or a \\uD800-\\uDFFF escape not half of a
    pair (text no store can hold and no reply can carry; looked for only when such an escape appears
    at all). Returns the parsed body too, under "parsed", when it is JSON and sound."""
    try:
        data = loads_json(body)
    except TextRefused as exc:
        if exc.reason == "json_invalid":
            return None   # not JSON (or not UTF-8): the route's own parsing refuses it
        return {"loc": ["body"], "type": exc.reason, "msg": str(exc)}
    if _SURROGATE_ESCAPE.search(body) and _lone_surrogate(data):
        return {"loc": ["body"], "type": "unicode_surrogate", "msg":
                "the body holds a lone surrogate (\\uD800-\\uDFFF not in a pair): not valid Unicode"}
    return {"parsed": data}


class StrictJSONRoute(APIRoute):
    """A route that refuses, with 422 and before any handler (or the query log, or a reply echoing
    it) meets the body, a JSON body nested too deep or holding a lone surrogate. A sound body is
    parsed once: the route's own parsing reuses it."""

    def get_route_handler(self):
        handler = super().get_route_handler()

        async def strict(request: Request):
            if request.method in ("POST", "PUT", "PATCH"):
                body = await request.body()
                problem = body_problem(body) if body else None
                if problem is not None and "parsed" in problem:
                    request._json = problem["parsed"]   # Starlette's cache: FastAPI's request.json() reads it
                elif problem is not None:
                    raise RequestValidationError([problem])
            return await handler(request)

        return strict


class ApiError(Exception):
    def __init__(self, status: int, type_: str, title: str, **extra: Any):
        self.status = status
        self.body = {"type": type_, "title": title, **extra}


def not_found(kind: str, ref: str) -> ApiError:
    return ApiError(404, f"{kind}_not_found", f"no {kind} with id {ref!r}", ref=ref)


def install_error_handlers(app: FastAPI) -> None:
    from engine.app import StoreUnavailable
    from engine.core.errors import EngineError

    @app.exception_handler(StoreUnavailable)
    async def _store_down(_: Request, exc: Exception):
        # what failed wrote nothing (a write is one transaction): the client may send it again
        return JSONResponse({"detail": {"type": "store_unavailable", "title": str(exc)}}, status_code=503,
                            headers={"Retry-After": "1"})

    @app.exception_handler(EngineError)
    async def _engine_error(_: Request, exc: EngineError):
        if getattr(exc, "bare", False):
            return JSONResponse(exc.public_body(), status_code=exc.status)
        return JSONResponse({"detail": exc.public_body()}, status_code=exc.status)

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError):
        return JSONResponse({"detail": exc.body}, status_code=exc.status)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError):
        errors = [{"loc": list(e.get("loc", ())), "msg": e.get("msg"), "type": e.get("type")} for e in exc.errors()]
        return JSONResponse({"detail": {"type": "validation_error", "title": "the request is malformed",
                                        "errors": errors}}, status_code=422)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception):
        # Starlette's outermost middleware answers with this, then re-raises for the server's log.
        body = internal_error(request.scope, f"{request.method} {request.url.path}", exc)
        return JSONResponse({"detail": body}, status_code=500)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException):
        if isinstance(exc.detail, dict) and "type" in exc.detail:
            body = exc.detail
        else:
            kind = {404: "not_found", 405: "method_not_allowed", 413: "payload_too_large"}.get(exc.status_code, "http_error")
            body = {"type": kind, "title": str(exc.detail)}
        return JSONResponse({"detail": body}, status_code=exc.status_code, headers=getattr(exc, "headers", None))
