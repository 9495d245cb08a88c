"""API keys on the wire: an ASGI middleware that turns `Authorization: Bearer <key>` into the
request's grant (engine/access.py), and the dependency routes read it with.

While no key exists every request is granted everything (the server then binds to loopback only,
see `refindery serve`). Once one exists, /v1/* and /mcp need a key: 401 without or with a bad one
(`WWW-Authenticate: Bearer`), and /mcp needs a key for every workspace (its tools take no grant yet).
Health and the OpenAPI pages stay open.
"""
from __future__ import annotations

import json

from fastapi import Request

from engine.access import OPEN, Grant, grant_for
from engine.errors import EngineError

OPEN_PATHS = {"/healthz", "/docs", "/openapi.json", "/redoc", "/docs/oauth2-redirect"}
SCOPE_KEY = "refindery.grant"


class KeyAuth:
    def __init__(self, app, corpus_of):
        self.app = app
        self.corpus_of = corpus_of  # () -> the corpus, once the app's lifespan has opened it

    async def __call__(self, scope, receive, send):
        path = scope.get("path", "")
        if scope["type"] != "http" or path in OPEN_PATHS or not path.startswith(("/v1", "/mcp")):
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        try:
            grant = grant_for(self.corpus_of().keys, headers.get("authorization"))
            if path.startswith("/mcp"):
                grant.require_everywhere("MCP over HTTP")
        except EngineError as exc:
            body = json.dumps({"detail": exc.body()}).encode()
            extra = [(b"www-authenticate", b"Bearer")] if exc.status == 401 else []
            await send({"type": "http.response.start", "status": exc.status,
                        "headers": [(b"content-type", b"application/json"),
                                    (b"content-length", str(len(body)).encode())] + extra})
            await send({"type": "http.response.body", "body": body})
            return
        scope[SCOPE_KEY] = grant
        return await self.app(scope, receive, send)


def current_grant(request: Request) -> Grant:
    return request.scope.get(SCOPE_KEY, OPEN)
