"""The server's log: one line per request, and what never goes in it.

Every request gets an id (`req_<16 hex>`) that its reply carries as `X-Request-Id` and that a failure
is logged under (server/errors.py), and, once answered, one line: method, route template, status,
milliseconds, request id, the key's id (never the key) and the client's address — never a body or a
query string, where page text and search words travel. `[server] log_format = "json"` writes every
log record (these lines, a failure's traceback, uvicorn's own) as one JSON object a line. Whatever the
format, a record that quotes an API key has it blanked before it is written."""
from __future__ import annotations

import json
import logging
import re
import secrets
import time
from datetime import datetime, timezone

from .auth import SCOPE_KEY
from .errors import REQUEST_ID

log = logging.getLogger("refindery.requests")
KEY_PATTERN = re.compile(r"rfy_[0-9a-f]{12}_[A-Za-z0-9_\-]{20,}")


def blank_keys(text: str) -> str:
    return KEY_PATTERN.sub("rfy_<key>", text)


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return blank_keys(super().format(record))


class JsonFormatter(logging.Formatter):
    """One JSON object a line: ts, level, logger, message, the request's fields when it is a request
    line, and the traceback of a failure as one string."""

    def format(self, record: logging.LogRecord) -> str:
        out = {"ts": datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds"),
               "level": record.levelname.lower(), "logger": record.name, "message": record.getMessage()}
        out.update(getattr(record, "request", None) or {})
        if record.exc_info:
            out["traceback"] = self.formatException(record.exc_info)
        return blank_keys(json.dumps(out, ensure_ascii=False, default=str))


def configure(log_format: str) -> None:
    """The serving process's logging: request lines at INFO, every handler's records through the format's
    formatter (a key blanked in either)."""
    formatter = JsonFormatter() if log_format == "json" else TextFormatter("%(levelname)s %(name)s: %(message)s")
    root = logging.getLogger()
    if not root.handlers:
        root.addHandler(logging.StreamHandler())
    for logger in (root, logging.getLogger("uvicorn"), logging.getLogger("uvicorn.error")):
        for handler in logger.handlers:
            handler.setFormatter(formatter)
    log.setLevel(logging.INFO)


class RequestLog:
    """Outermost: gives each request its id (X-Request-Id on the reply) and logs its line once answered."""

    def __init__(self, app, template_of):
        self.app = app
        self.template_of = template_of   # scope -> the route's template (server/metrics.py)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        request_id = scope.setdefault(REQUEST_ID, f"req_{secrets.token_hex(8)}")
        t0 = time.perf_counter()
        status = {"code": 500}

        async def with_id(message):
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
                headers = list(message.get("headers", []))
                if not any(k.lower() == b"x-request-id" for k, _ in headers):
                    message = {**message, "headers": [*headers, (b"x-request-id", request_id.encode())]}
            await send(message)

        try:
            await self.app(scope, receive, with_id)
        finally:
            grant = scope.get(SCOPE_KEY)
            client = scope.get("client")
            fields = {"request_id": request_id, "method": scope.get("method"), "route": self.template_of(scope),
                      "status": status["code"], "ms": round((time.perf_counter() - t0) * 1000, 2),
                      "key_id": getattr(grant, "key_id", None),
                      "client": client[0] if isinstance(client, (tuple, list)) and client else None}
            log.info("%s %s %s %.2fms %s key=%s client=%s", fields["method"], fields["route"], fields["status"],
                     fields["ms"], request_id, fields["key_id"] or "-", fields["client"] or "-",
                     extra={"request": fields})
