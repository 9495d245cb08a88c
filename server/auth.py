"""API keys on the wire: an ASGI middleware that turns `Authorization: Bearer <key>` into the
request's grant (engine/access.py), and the dependency routes read it with.

While no key exists every request is granted everything (the server then binds to loopback only,
see `refindery serve`); so is every request on the data dir's own Unix socket (server/owner.py),
whose file mode lets only the owner's user connect. Once one exists, /v1/* and /mcp need a key: 401 without or with a bad one
(`WWW-Authenticate: Bearer`); the MCP tools served at /mcp apply the key's grant as the routes do.
Health and the OpenAPI pages stay open.
"""
from __future__ import annotations

import dataclasses
import json
import secrets
import time

from fastapi import Request

from engine.app import StoreUnavailable
from engine.core.access import Forbidden, Grant
from engine.core.errors import EngineError
from engine.core.clock import utcnow
from engine.core.querylog import LogEntry

from .errors import REQUEST_ID, body_problem

REPLICAS_EVERY_S = 5.0
OPEN_PATHS = {"/healthz", "/docs", "/openapi.json", "/redoc", "/docs/oauth2-redirect"}
SCOPE_KEY = "refindery.grant"
# What a pages-only key may call (engine/core/access.py): add pages and visits to its workspace, forget
# them. Every other route — search, reads, keys, MCP — is 403 for it, before any route runs.
PAGES_ONLY_ROUTES = {("POST", "/v1/pages"), ("POST", "/v1/visits"), ("POST", "/v1/forget")}


async def refuse(send, status: int, detail: dict, headers: list | None = None) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode())] + (headers or [])})
    await send({"type": "http.response.body", "body": body})


class RateLimiter:
    """A token bucket per key: `per_minute` a minute on average, `burst` at once."""

    def __init__(self, per_minute: int, burst: int):
        self.rate, self.burst = per_minute / 60.0, burst
        self.buckets: dict[str, tuple[float, float]] = {}   # key -> (tokens, at)

    def take(self, key: str, now: float | None = None, share: int = 1) -> float:
        """0 when the call may go ahead, else the seconds until it may. `share`: how many replicas
        the limit is divided among (each keeps 1/share of the rate and of the burst)."""
        if self.rate <= 0:
            return 0.0
        rate, burst = self.rate / share, max(1.0, self.burst / share)
        now = time.monotonic() if now is None else now
        tokens, at = self.buckets.get(key, (burst, now))
        tokens = min(burst, tokens + (now - at) * rate)
        if tokens >= 1.0:
            self.buckets[key] = (tokens - 1.0, now)
            return 0.0
        self.buckets[key] = (tokens, now)
        return (1.0 - tokens) / rate


class BodyLimit:
    """413 payload_too_large for a body over `server.max_body_bytes`: at once when Content-Length
    says so; a streamed body without one is read up to the limit first (and refused as soon as it
    passes it) before the app sees any of it. Uvicorn holds a body with a Content-Length to it."""

    def __init__(self, app, limit_of):
        self.app, self.limit_of = app, limit_of

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        limit = self.limit_of()
        detail = {"type": "payload_too_large", "title": f"the request body is over {limit} bytes", "limit": limit}
        length = dict(scope.get("headers", [])).get(b"content-length")
        if length is not None:
            if length.isdigit() and int(length) > limit:
                return await refuse(send, 413, detail)
            return await self.app(scope, receive, send)
        if scope.get("method") not in ("POST", "PUT", "PATCH"):
            return await self.app(scope, receive, send)
        buffered, seen = [], 0
        while True:
            message = await receive()
            buffered.append(message)
            if message["type"] != "http.request":
                break
            seen += len(message.get("body", b""))
            if seen > limit:
                return await refuse(send, 413, detail)
            if not message.get("more_body", False):
                break

        async def replay():
            return buffered.pop(0) if buffered else await receive()

        await self.app(scope, replay, send)


class JsonBodyCheck:
    """The same check for an app that reads its JSON itself — the MCP SDK at /mcp, whose JSON-RPC
    parsing fails with a 500 on a body a route refuses with 422: a POST to one of `paths` is read
    whole (BodyLimit, outside this, has bounded it), and refused with 422 validation_error when
    body_problem finds one; else it goes on as it came."""

    def __init__(self, app, paths: tuple[str, ...]):
        self.app, self.paths = app, paths

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope.get("method") != "POST" or scope.get("path") not in self.paths:
            return await self.app(scope, receive, send)
        messages, chunks = [], []
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request":
                break
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        problem = body_problem(body) if body else None
        if problem is not None and "parsed" not in problem:
            return await refuse(send, 422, {"type": "validation_error", "title": "the request is malformed",
                                            "errors": [problem]})

        async def replay():
            return messages.pop(0) if messages else await receive()

        await self.app(scope, replay, send)


def on_owner_socket(scope, owner_socket: str | None) -> bool:
    """Whether a request came in on the data dir's own Unix socket (server/owner.py): uvicorn names a
    Unix socket's path as the request's `server`, with no port."""
    server = scope.get("server")
    return bool(owner_socket) and isinstance(server, (tuple, list)) and len(server) == 2 \
        and server[1] is None and server[0] == owner_socket


class KeyAuth:
    def __init__(self, app, engine_of, owner_socket_of=lambda: None):
        self.app = app
        self.engine_of = engine_of  # () -> the Engine, once the app's lifespan has built it
        self.owner_socket_of = owner_socket_of  # () -> the path of the data dir's own socket, if served
        self.limiter: RateLimiter | None = None    # per key
        self.failures: RateLimiter | None = None   # requests refused for their key, per peer address
        self._replicas_n, self._replicas_at = 1, float("-inf")

    def _replicas(self, engine) -> int:
        """How many live replicas share the store (1 without replicas), read at most every
        REPLICAS_EVERY_S: each counts a key's requests against its share of the limit, so a key
        sending to every replica directly gets the configured rate in all, not N times it."""
        now = time.monotonic()
        if now - self._replicas_at >= REPLICAS_EVERY_S:
            self._replicas_at = now
            try:
                self._replicas_n = max(1, engine.live_replicas())
            except StoreUnavailable:
                pass   # the last count stands until the store answers again
        return self._replicas_n

    @staticmethod
    def _new_limiter(engine) -> RateLimiter:
        s = engine.settings.server
        return RateLimiter(s.rate_limit_per_minute, s.rate_limit_burst)

    def _failed_attempt(self, scope, engine) -> float:
        """Count a request refused for its key (none, or not valid) against its peer address, in a bucket
        of the same size as a key's: 0 while under it, else the seconds until the next may be tried."""
        if self.failures is None:
            self.failures = self._new_limiter(engine)
        if len(self.failures.buckets) > 100_000:   # many addresses: start over rather than grow
            self.failures.buckets.clear()
        return self.failures.take(_peer(scope))

    @staticmethod
    async def _rate_limited(send, engine, wait: float, whose: str) -> None:
        s = engine.settings.server
        retry = max(1, int(wait + 0.999))
        await refuse(send, 429, {
            "type": "rate_limited", "title": f"requests {whose} are over {s.rate_limit_per_minute} a "
            f"minute; retry in {retry} s", "retry_after_s": retry}, [(b"retry-after", str(retry).encode())])

    async def __call__(self, scope, receive, send):
        path = scope.get("path", "")
        if scope["type"] != "http" or path in OPEN_PATHS or not path.startswith(("/v1", "/mcp", "/metrics")):
            return await self.app(scope, receive, send)
        t0 = time.perf_counter()
        request_id = scope.setdefault(REQUEST_ID, f"req_{secrets.token_hex(8)}")   # (the request log's, server/request_log.py)
        outcome = {"status": 500}

        async def send_with_id(message):
            if message["type"] == "http.response.start":
                outcome["status"] = message["status"]
                message = {**message, "headers": [*message.get("headers", []),
                                                  (b"x-request-id", request_id.encode())]}
            await send(message)

        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        engine = self.engine_of()
        grant = None
        try:
            try:
                # the owner's socket: its file mode (0600) already said who may connect
                grant = Grant(None) if on_owner_socket(scope, self.owner_socket_of()) else \
                    dataclasses.replace(engine.grant_for(headers.get("authorization")), seen=[])
            except EngineError as exc:
                if exc.status == 401 and (retry := self._failed_attempt(scope, engine)):
                    return await self._rate_limited(send_with_id, engine, retry, "from this address are refused "
                                                    "for want of a valid key")
                extra = [(b"www-authenticate", b"Bearer")] if exc.status == 401 else []
                return await refuse(send_with_id, exc.status, exc.public_body(), extra)
            except StoreUnavailable as exc:   # the keys could not be read: nothing was done
                return await refuse(send_with_id, 503, {"type": "store_unavailable", "title": str(exc)},
                                    [(b"retry-after", b"1")])
            if grant.key_id is not None:
                if self.limiter is None:
                    self.limiter = self._new_limiter(engine)
                wait = self.limiter.take(grant.key_id, share=self._replicas(engine))
                if wait > 0:
                    return await self._rate_limited(send_with_id, engine, wait, "from this key")
            if grant.pages_only and (scope.get("method"), path) not in PAGES_ONLY_ROUTES:
                return await refuse(send_with_id, 403, Forbidden(
                    "this key only adds pages to its workspace (POST /v1/pages, /v1/visits, /v1/forget)",
                    key_id=grant.key_id).public_body())
            scope[SCOPE_KEY] = grant
            await self.app(scope, receive, send_with_id)
        finally:
            # Every call, answered or refused: who, what, in which workspace, and how it ended.
            route = getattr(scope.get("route"), "path", None) or path
            key_id = grant.key_id if grant is not None else None
            workspace = grant.seen[0] if grant is not None and grant.seen else None
            engine.record(LogEntry(
                query_id=request_id, endpoint="http", workspace=workspace, query=None, params={}, models=[],
                call_only=True, access=[(utcnow(), key_id, scope.get("method"), route, workspace,
                                         outcome["status"], round((time.perf_counter() - t0) * 1000, 3))]))


def _peer(scope) -> str:
    client = scope.get("client")
    return str(client[0]) if isinstance(client, (tuple, list)) and client else "-"


def current_grant(request: Request) -> Grant:
    grant = request.scope.get(SCOPE_KEY)
    return grant if grant is not None else Grant(None)
