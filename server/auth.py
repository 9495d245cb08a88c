"""API keys on the wire: an ASGI middleware that turns `Authorization: Bearer <key>` into the
request's grant (engine/access.py), and the dependency routes read it with.

While no key exists every request is granted everything (the server then binds to loopback only,
see `refindery serve`). Once one exists, /v1/* and /mcp need a key: 401 without or with a bad one
(`WWW-Authenticate: Bearer`), and /mcp needs a key for every workspace (its tools take no grant yet).
Health and the OpenAPI pages stay open.
"""
from __future__ import annotations

import dataclasses
import json
import secrets
import time

from fastapi import Request

from engine.access import Grant, grant_for
from engine.errors import EngineError
from engine.querylog import LogEntry, utcnow

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
        t0 = time.perf_counter()
        request_id = f"req_{secrets.token_hex(8)}"
        outcome = {"status": 500}

        async def send_with_id(message):
            if message["type"] == "http.response.start":
                outcome["status"] = message["status"]
                message = {**message, "headers": [*message.get("headers", []),
                                                  (b"x-request-id", request_id.encode())]}
            await send(message)

        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        corpus = self.corpus_of()
        grant = None
        try:
            try:
                grant = dataclasses.replace(grant_for(corpus.keys, headers.get("authorization")), seen=[])
                if path.startswith("/mcp"):
                    grant.require_everywhere("MCP over HTTP")
            except EngineError as exc:
                body = json.dumps({"detail": exc.body()}).encode()
                extra = [(b"www-authenticate", b"Bearer")] if exc.status == 401 else []
                await send_with_id({"type": "http.response.start", "status": exc.status,
                                    "headers": [(b"content-type", b"application/json"),
                                                (b"content-length", str(len(body)).encode())] + extra})
                await send_with_id({"type": "http.response.body", "body": body})
                return
            scope[SCOPE_KEY] = grant
            await self.app(scope, receive, send_with_id)
        finally:
            # Every call, answered or refused: who, what, in which workspace, and how it ended.
            route = getattr(scope.get("route"), "path", None) or path
            key_id = grant.key_id if grant is not None else None
            workspace = grant.seen[0] if grant is not None and grant.seen else None
            corpus.querylog.record(LogEntry(
                query_id=request_id, endpoint="http", workspace=workspace, query=None, params={}, models=[],
                call_only=True, access=[(utcnow(), key_id, scope.get("method"), route, workspace,
                                         outcome["status"], round((time.perf_counter() - t0) * 1000, 3))]))


def current_grant(request: Request) -> Grant:
    grant = request.scope.get(SCOPE_KEY)
    return grant if grant is not None else Grant(None)
