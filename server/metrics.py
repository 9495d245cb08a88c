"""GET /metrics: the server in Prometheus' text format, written by prometheus-client.

Counted as requests are answered (an ASGI middleware, outermost, so a refusal by the key check counts
too): requests by method, route template and status, and their latency; each search stage's time
(from the execution the query log is handed, whether or not the log keeps it); errors by their
`detail.type`. Read when scraped (a collector): pages, chunks and vectors per model, a background
embedding's chunks left, the store's generation and the generation this replica applied (and the
lag), live replicas, the query log's queue and drops.

Labels never carry what a caller typed: a route is its template (`/v1/pages/{page_id}`), and a path
no route matched is "unmatched". Reading it needs a key that may administer on the API's address;
`[server] metrics_listen` serves it on an address of its own too (no key: bind it to loopback)."""
from __future__ import annotations

import logging
import time

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

log = logging.getLogger("refindery.metrics")

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
STAGE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class Metrics:
    """One app's metrics, in a registry of its own (two apps in one process do not share counts)."""

    def __init__(self, engine_of):
        self.engine_of = engine_of
        self.registry = CollectorRegistry(auto_describe=False)
        self.requests = Counter("refindery_requests", "HTTP requests answered, by method, route and status",
                                ["method", "route", "status"], registry=self.registry)
        self.latency = Histogram("refindery_request_duration_seconds", "Time to answer an HTTP request",
                                 ["method", "route"], buckets=LATENCY_BUCKETS, registry=self.registry)
        self.stages = Histogram("refindery_search_stage_duration_seconds", "Time each search stage took",
                                ["stage"], buckets=STAGE_BUCKETS, registry=self.registry)
        self.errors = Counter("refindery_errors", "Executions that ended in an error, by its detail.type",
                              ["type"], registry=self.registry)
        self.registry.register(_State(engine_of))

    def observe_execution(self, entry) -> None:
        """The query log's listener: a search's stage times, an execution's error type."""
        if entry.call_only:
            return
        if entry.error_type:
            self.errors.labels(entry.error_type).inc()
        if entry.endpoint == "search":
            for stage, ms in entry.timings.items():
                if isinstance(ms, (int, float)):
                    self.stages.labels(stage).observe(ms / 1000)

    def text(self) -> bytes:
        return generate_latest(self.registry)


class _State:
    """What a scrape reads from the engine at that moment."""

    def __init__(self, engine_of):
        self.engine_of = engine_of

    def collect(self):
        engine = self.engine_of()
        if engine is None:
            return
        try:
            counts = engine.counts()
        except Exception as exc:   # noqa: BLE001 — a store that does not answer: the rest is still reported
            log.warning("metrics: counts unavailable: %s", exc)
            counts = None
        if counts is not None:
            g = GaugeMetricFamily("refindery_pages", "Pages stored, every workspace")
            g.add_metric([], counts.get("pages", 0))
            yield g
            g = GaugeMetricFamily("refindery_chunks", "Chunks stored")
            g.add_metric([], counts.get("chunks", 0))
            yield g
            g = GaugeMetricFamily("refindery_vectors", "Vectors stored, by embedder", labels=["model"])
            for model, n in sorted((counts.get("embeddings") or {}).items()):
                g.add_metric([model], n)
            yield g
        left = GaugeMetricFamily("refindery_embedding_chunks_left", "A background embedding's chunks still to embed",
                                 labels=["model"])
        for model in sorted(engine._embeds):
            state = engine.embedding(model) or {}
            if state.get("state") == "embedding" and state.get("total"):
                left.add_metric([model], max(0, state["total"] - state.get("done", 0)))
        yield left
        with_store = True
        try:
            stored = engine.store.generation()
        except Exception:   # noqa: BLE001
            with_store = False
        applied = engine.applied_generation()
        g = GaugeMetricFamily("refindery_generation_applied", "The store generation this process's indexes applied")
        g.add_metric([], applied)
        yield g
        if with_store:
            g = GaugeMetricFamily("refindery_generation_stored", "The store's generation")
            g.add_metric([], stored)
            yield g
            g = GaugeMetricFamily("refindery_generation_lag", "Generations the store is ahead of this process")
            g.add_metric([], max(0, stored - applied))
            yield g
        log_stats = engine.querylog.stats()
        g = GaugeMetricFamily("refindery_query_log_queued", "Query log entries waiting to be written")
        g.add_metric([], log_stats.get("queued", 0))
        yield g
        c = CounterMetricFamily("refindery_query_log_dropped", "Query log entries dropped (queue full)")
        c.add_metric([], log_stats.get("dropped", 0))
        yield c


class RouteTemplates:
    """A request's route template: the route it was answered by, or — refused before routing (401, 413,
    429) — the template its path matches among the app's; "unmatched" when none does. Never the path."""

    def __init__(self, templates_of):
        self.templates_of = templates_of
        self._compiled: list | None = None

    def __call__(self, scope) -> str:
        path = getattr(scope.get("route"), "path", None)
        if path:
            return path
        if self._compiled is None:
            from starlette.routing import compile_path

            self._compiled = [(compile_path(t)[0], t) for t in self.templates_of()]
        at = scope.get("path", "")
        return next((t for regex, t in self._compiled if regex.match(at)), "unmatched")


class MetricsMiddleware:
    """Counts every HTTP request by its route's template and status, and times it."""

    def __init__(self, app, metrics_of, template_of):
        self.app = app
        self.metrics_of = metrics_of
        self.template_of = template_of

    async def __call__(self, scope, receive, send):
        metrics = self.metrics_of()
        if scope["type"] != "http" or metrics is None:
            return await self.app(scope, receive, send)
        t0 = time.perf_counter()
        status = {"code": 500}

        async def counted(message):
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, counted)
        finally:
            route = self.template_of(scope)
            method = scope.get("method", "")
            metrics.requests.labels(method, route, str(status["code"])).inc()
            metrics.latency.labels(method, route).observe(time.perf_counter() - t0)


def serve_own(metrics: Metrics, listen: str):
    """The metrics on an address of their own ("HOST:PORT"), in a thread; returns what stops it."""
    from prometheus_client import start_http_server

    host, _, port = listen.rpartition(":")
    server, thread = start_http_server(int(port), addr=host, registry=metrics.registry)
    log.info("metrics on http://%s/metrics", listen)

    def stop() -> None:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
    return stop


CONTENT_TYPE = CONTENT_TYPE_LATEST
