"""Every refusal is JSON {"detail": {"type", "title", ...}} with the right status."""
from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException


class ApiError(Exception):
    def __init__(self, status: int, type_: str, title: str, **extra: Any):
        self.status = status
        self.body = {"type": type_, "title": title, **extra}


def not_found(kind: str, ref: str) -> ApiError:
    return ApiError(404, f"{kind}_not_found", f"no {kind} with id {ref!r}", ref=ref)


def install_error_handlers(app: FastAPI) -> None:
    from engine.errors import EngineError

    @app.exception_handler(EngineError)
    async def _engine_error(_: Request, exc: EngineError):
        if getattr(exc, "bare", False):
            return JSONResponse(exc.body(), status_code=exc.status)
        return JSONResponse({"detail": exc.body()}, status_code=exc.status)

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError):
        return JSONResponse({"detail": exc.body}, status_code=exc.status)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError):
        errors = [{"loc": list(e.get("loc", ())), "msg": e.get("msg"), "type": e.get("type")} for e in exc.errors()]
        return JSONResponse({"detail": {"type": "validation_error", "title": "the request is malformed",
                                        "errors": errors}}, status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException):
        if isinstance(exc.detail, dict) and "type" in exc.detail:
            body = exc.detail
        else:
            kind = {404: "not_found", 405: "method_not_allowed", 413: "payload_too_large"}.get(exc.status_code, "http_error")
            body = {"type": kind, "title": str(exc.detail)}
        return JSONResponse({"detail": body}, status_code=exc.status_code, headers=getattr(exc, "headers", None))
