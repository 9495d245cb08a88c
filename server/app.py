"""The FastAPI app, assembled: the Engine (built in the lifespan, or around a given corpus), the
middleware (body limit, keys, audit), the error handlers, one router per verb (server/http/), MCP
at /mcp and the web page at /. Routes live in their routers; nothing here answers a request."""
from __future__ import annotations

import asyncio
import contextlib
import logging

from fastapi import FastAPI
from starlette.concurrency import run_in_threadpool

from engine.app import Engine
from engine.core import heap
from engine.core.corpus import Corpus
from engine.core.errors import DeviceUnavailable, ModelUnavailable
from engine.core.settings import Settings, load_settings

from .auth import BodyLimit, JsonBodyCheck, KeyAuth
from .errors import ERROR_RESPONSES, install_error_handlers
from .generations import Generations, Waiters
from .http import clusters, evidence, imports, keys, ops, pages, relations, search
from .mcp import build_mcp
from .metrics import Metrics, MetricsMiddleware, RouteTemplates, serve_own
from .request_log import RequestLog
from .web import mount_web

log = logging.getLogger("refindery.server")

FLUSH_EVERY_S = 30.0
ROUTERS = (ops, pages, imports, search, clusters, relations, evidence, keys)


async def _started(app: FastAPI, settings: Settings | None, embed: list[str] | None, freeze_heap: bool) -> Engine:
    """The lifespan's start: the engine (opened here unless one was given), its active model loaded so
    the first query does not wait for it, the background embeddings asked for (and a live switch
    that was under way) resumed, and the heap frozen where the settings say so."""
    if getattr(app.state, "engine", None) is None:
        app.state.engine = await run_in_threadpool(Engine, settings or load_settings())
    engine: Engine = app.state.engine
    try:
        await run_in_threadpool(engine.load_model)
    except ModelUnavailable as exc:
        log.warning("search will answer 503 until the model is installed: %s", exc)
    except DeviceUnavailable as exc:
        log.warning("whatever needs a model answers 503 device_unavailable: %s", exc)
    target = engine.settings.switch_target   # a live switch under way when the data dir was closed: resumed
    for name in [*(embed or ()), *([target] if target and target not in (embed or ()) else [])]:
        try:
            engine.embed_model_in_background(name, report=True)   # progress lines in the server's log
        except Exception as exc:   # noqa: BLE001 — a model that cannot be embedded does not stop the server
            log.warning("not embedding %s: %s", name, exc)
    if freeze_heap and engine.settings.server.gc_freeze:
        frozen = await run_in_threadpool(heap.freeze)
        log.info("%d objects moved out of the garbage collector's scans", frozen)
    return engine


def _metrics(app: FastAPI) -> Metrics | None:
    """The app's metrics, made on the first request once its engine is there (the query log then hands
    them each execution); None while there is no engine, or with [server] metrics off."""
    m = app.state.metrics
    if m is None and getattr(app.state, "engine", None) is not None and app.state.engine.settings.server.metrics:
        m = app.state.metrics = Metrics(lambda: app.state.engine)
        app.state.engine.querylog.listeners.append(m.observe_execution)
    return m


def create_app(settings: Settings | None = None, corpus: Corpus | None = None, engine: Engine | None = None,
               freeze_heap: bool = False, embed: list[str] | None = None) -> FastAPI:
    """`engine` (or a `corpus` to wrap): serve one already open (the CLI's MCP, tests, examples; its
    owner closes it), else the lifespan opens the data dir of `settings` (or of the default settings)
    and closes it at shutdown. `freeze_heap` (`refindery serve`: the process is the server's own):
    once started, the heap is frozen when `[server] gc_freeze` says so (engine/core/heap.py).
    `embed`: models whose missing vectors are embedded in the background once the app is up
    (`refindery serve --embed`: the demo's compare model), while it serves."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        engine = await _started(app, settings, embed, freeze_heap)

        async def flusher():
            while True:
                await asyncio.sleep(FLUSH_EVERY_S)
                await run_in_threadpool(engine.flush)

        task = asyncio.create_task(flusher())
        listen = engine.settings.server.metrics_listen
        stop_metrics = serve_own(_metrics(app), listen) if listen and _metrics(app) is not None else None
        try:
            async with app.state.mcp.session_manager.run():   # the streamable-HTTP MCP sessions
                yield
        finally:
            task.cancel()
            if stop_metrics is not None:
                stop_metrics()
            await run_in_threadpool(engine.close)

    app = FastAPI(title="Refindery", version="0.1.0", lifespan=lifespan, responses=ERROR_RESPONSES,
                  description="Hybrid retrieval: refind search, relation search, evidence search.")
    if engine is None and corpus is not None:
        engine = Engine(corpus=corpus)
    app.state.engine = engine   # given: usable without the lifespan too (a TestClient outside `with`)
    install_error_handlers(app)
    app.state.owner_socket = None   # `refindery serve` sets the data dir's own socket (server/owner.py)
    # /mcp reads its JSON in the MCP SDK: the routes' body check goes in front of it (innermost: after the key)
    app.add_middleware(JsonBodyCheck, paths=("/mcp", "/mcp/"))
    # Starlette runs the middleware added last first: the key check (KeyAuth) runs before Generations,
    # so a request without a valid key has its 401 before it could wait for a generation
    app.state.waiters = Waiters()   # requests waiting for a generation (/healthz: waiting_for_generation)
    app.add_middleware(Generations, engine_of=lambda: app.state.engine, waiters=app.state.waiters)
    app.add_middleware(KeyAuth, engine_of=lambda: app.state.engine,
                       owner_socket_of=lambda: app.state.owner_socket)
    app.add_middleware(BodyLimit, limit_of=lambda: app.state.engine.settings.server.max_body_bytes)
    # outermost: every request counted, a refusal of the key check's or the body limit's too
    app.state.metrics = None   # made with the engine (_metrics): its counts are the engine's
    templates = RouteTemplates(lambda: [*app.openapi()["paths"], "/metrics", "/mcp"])
    app.add_middleware(MetricsMiddleware, metrics_of=lambda: _metrics(app), template_of=templates)
    app.add_middleware(RequestLog, template_of=templates)   # outermost: the request's id, and its log line
    for module in ROUTERS:
        app.include_router(module.router)
    # MCP over streamable HTTP at /mcp: the same tools as `refindery mcp` (stdio), on this app.
    app.state.mcp = build_mcp(app, (settings.server.host if settings else "127.0.0.1"))
    app.router.routes.extend(app.state.mcp.streamable_http_app().routes)
    mount_web(app)
    return app
