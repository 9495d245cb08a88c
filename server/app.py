"""FastAPI app: each route parses, calls one engine function, and shapes the reply."""
from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path
from typing import Any, Literal

from fastapi import Depends, FastAPI, Query, Request
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from engine.ingest.clusters import refit_clusters
from engine.refind.compare import CompareRequest, CompareResponse, compare
from engine.core.corpus import Corpus, open_corpus, read_page
from engine.ingest.entities import EntityUpsert, upsert_entity
from engine.ingest.pipeline import Ingester, delete_page
from engine.refind.search import SearchRequest, SearchResponse, SearchService
from engine.refind.similar import similar_pages
from engine.core.errors import without_paths
from engine.core.settings import Settings, load_settings
from models.registry import ModelNotFound

from engine.core.access import Grant, readable_page, readable_query

from .auth import BodyLimit, KeyAuth, current_grant
from .errors import ERROR_RESPONSES, StrictJSONRoute, install_error_handlers, not_found
from .keys import router as keys_router
from .mcp import build_mcp
from .web import mount_web
from .evidence import router as evidence_router
from .public import router as public_router

log = logging.getLogger("refindery.server")

FLUSH_EVERY_S = 30.0


class PagesUpsert(BaseModel):
    pages: list[dict[str, Any]] = Field(min_length=1, max_length=1000,
                                        description="Page records: {url, title?, body_text | html, seen_at?, "
                                                    "published?, entities?, scope?}")
    workspace: str | None = Field(default=None, max_length=200)


class FeedbackIn(BaseModel):
    query_id: str = Field(min_length=1, max_length=100)
    page_id: str = Field(min_length=1, max_length=100)
    kind: Literal["click", "found", "irrelevant"]


class UpsertItem(BaseModel):
    index: int
    page_id: str | None
    url: str | None
    status: str
    error: str | None = None


class UpsertResponse(BaseModel):
    errors: bool
    items: list[UpsertItem]
    summary: dict[str, Any]


def create_app(settings: Settings | None = None, corpus: Corpus | None = None) -> FastAPI:
    owns_corpus = corpus is None

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        nonlocal corpus
        if corpus is None:
            corpus = await run_in_threadpool(open_corpus, settings or load_settings())
        app.state.corpus = corpus
        app.state.search = SearchService(corpus)
        try:  # load the active model now, so the first query is not the one that waits for it
            await run_in_threadpool(corpus.embedder)
        except ModelNotFound as exc:
            log.warning("search will answer 503 until the model is installed: %s", exc)

        async def flusher():
            while True:
                await asyncio.sleep(FLUSH_EVERY_S)
                await run_in_threadpool(corpus.flush)

        task = asyncio.create_task(flusher())
        try:
            async with app.state.mcp.session_manager.run():   # the streamable-HTTP MCP sessions
                yield
        finally:
            task.cancel()
            if owns_corpus:
                await run_in_threadpool(corpus.close)
            else:
                await run_in_threadpool(corpus.querylog.flush)
                await run_in_threadpool(corpus.flush)

    app = FastAPI(title="Refindery", version="0.1.0", lifespan=lifespan, responses=ERROR_RESPONSES,
                  description="Hybrid retrieval: refind search, relation search, evidence search.")
    install_error_handlers(app)
    app.router.route_class = StrictJSONRoute   # the routes declared below; the routers set it themselves
    app.add_middleware(KeyAuth, corpus_of=lambda: app.state.corpus)
    app.add_middleware(BodyLimit, limit_of=lambda: app.state.corpus.settings.server.max_body_bytes)
    app.include_router(public_router)
    app.include_router(evidence_router)
    app.include_router(keys_router)
    # MCP over streamable HTTP at /mcp: the same tools as `refindery mcp` (stdio), on this app.
    app.state.mcp = build_mcp(app, (settings.server.host if settings else "127.0.0.1"))
    app.router.routes.extend(app.state.mcp.streamable_http_app().routes)
    mount_web(app)
    if corpus is not None:  # usable without the lifespan too (a TestClient outside `with`)
        app.state.corpus = corpus
        app.state.search = SearchService(corpus)

    def get_corpus(request: Request) -> Corpus:
        return request.app.state.corpus

    @app.get("/healthz", tags=["ops"])
    def healthz() -> dict:
        return {"status": "ok"}

    @app.get("/v1/status", tags=["ops"])
    def status(c: Corpus = Depends(get_corpus), g: Grant = Depends(current_grant)) -> dict:
        g.require_everywhere("status (counts over every workspace)")
        out = status_of(c)   # over HTTP without the server's paths (`refindery status` prints them locally)
        out["data_dir"] = Path(out["data_dir"]).name
        out["reranker"].pop("path", None)
        if "reason" in out["reranker"]:
            out["reranker"]["reason"] = without_paths(out["reranker"]["reason"])
        return out

    @app.post("/v1/pages", response_model=UpsertResponse, tags=["pages"])
    def upsert_pages(body: PagesUpsert, c: Corpus = Depends(get_corpus),
                     g: Grant = Depends(current_grant)) -> UpsertResponse:
        g.require_write()
        ws = g.workspace(body.workspace, c.settings.default_workspace)
        report = Ingester(c, ws, progress=False).ingest(((i, "request", rec) for i, rec in enumerate(body.pages)),
                                                        flush=False)
        items = [UpsertItem(index=o.index, page_id=o.page_id, url=o.url, status=o.status, error=o.error)
                 for o in report.outcomes]
        return UpsertResponse(errors=bool(report.errors), items=items, summary=report.summary())

    @app.get("/v1/pages/{page_id}", tags=["pages"])
    def get_page(page_id: str, c: Corpus = Depends(get_corpus), g: Grant = Depends(current_grant)) -> dict:
        readable_page(g, c.store, page_id)
        return read_page(c, page_id)

    @app.delete("/v1/pages/{page_id}", tags=["pages"])
    def remove_page(page_id: str, c: Corpus = Depends(get_corpus), g: Grant = Depends(current_grant)) -> dict:
        g.require_write()
        readable_page(g, c.store, page_id)
        if not delete_page(c, page_id):
            raise not_found("page", page_id)
        return {"page_id": page_id, "deleted": True}

    @app.get("/v1/pages/{page_id}/similar", tags=["pages"])
    def similar(page_id: str, mediation: Literal["vector", "cluster", "entity"] = "vector",
                k: int = Query(10, ge=1, le=200), c: Corpus = Depends(get_corpus),
                g: Grant = Depends(current_grant)) -> dict:
        """Pages related to this one: `vector` (page-vector cosine), `cluster` (co-members of its
        cluster by cosine), or `entity` (shared entities, IDF-weighted Jaccard)."""
        readable_page(g, c.store, page_id)
        return {"page_id": page_id, "mediation": mediation,
                "pages": similar_pages(c, page_id, mediation, k, scopes=g.document_scopes)}

    @app.post("/v1/entities", tags=["entities"])
    def entities(body: EntityUpsert, c: Corpus = Depends(get_corpus), g: Grant = Depends(current_grant)) -> dict:
        """Create or edit an entity (canonical form, aliases) and link pages to it."""
        g.require_write()
        body.workspace = g.scoped(body.workspace, c.settings.default_workspace)
        return upsert_entity(c, body)

    @app.get("/v1/facets", tags=["search"])
    def facets(workspace: str | None = None, limit: int = Query(50, ge=1, le=1000), c: Corpus = Depends(get_corpus),
               g: Grant = Depends(current_grant)) -> dict:
        """What a workspace's pages can be filtered by, with page counts: domains, live clusters (with
        a few titles each), entities, and the range of last_seen; the values /v1/search's filters take."""
        ws = g.workspace(workspace, c.settings.default_workspace)
        return {"workspace": ws} | c.store.facets(ws, g.document_scopes, limit)

    @app.get("/v1/models", tags=["search"])
    def models(c: Corpus = Depends(get_corpus)) -> dict:
        """The registry's embedders and rerankers: which is active, which are kept up to date on
        ingest, chunks embedded, installed or not (with how to install) — what /v1/compare can take."""
        # No file paths over HTTP: they tell a caller about the server's disk, not about the models.
        return {"active": c.settings.models.active,
                "models": [{k: v for k, v in m.items() if k != "path"} for m in c.models_status()]}

    @app.get("/v1/clusters", tags=["clusters"])
    def clusters(workspace: str | None = None, include_tombstoned: bool = False,
                 c: Corpus = Depends(get_corpus), g: Grant = Depends(current_grant)) -> dict:
        ws = g.workspace(workspace, c.settings.default_workspace)
        scopes = g.document_scopes
        return {"workspace": ws, "clusters": c.store.clusters(ws, include_tombstoned,
                                                              list(scopes) if scopes is not None else None)}

    @app.post("/v1/clusters/refit", tags=["clusters"])
    def clusters_refit(workspace: str | None = None, k: int | None = Query(None, ge=2, le=10_000),
                       c: Corpus = Depends(get_corpus), g: Grant = Depends(current_grant)) -> dict:
        """k-means over page vectors; new cluster ids every time, the old ones tombstoned."""
        g.require_write()
        return refit_clusters(c, g.workspace(workspace, c.settings.default_workspace), k)

    @app.post("/v1/compare", response_model=CompareResponse, tags=["search"])
    def compare_route(req: CompareRequest, request: Request, g: Grant = Depends(current_grant)) -> CompareResponse:
        """The full pipeline once per embedder over one shared sparse arm, with the agreement of
        every pair of lists at k (Jaccard, extrapolated RBO, Kendall's tau-b over shared pages)."""
        req.workspace = g.scoped(req.workspace, request.app.state.corpus.settings.default_workspace)
        return compare(request.app.state.search, req, scopes=g.document_scopes)

    @app.post("/v1/feedback", tags=["search"])
    def feedback(body: FeedbackIn, c: Corpus = Depends(get_corpus), g: Grant = Depends(current_grant)) -> dict:
        """Implicit judgments on a logged query: click, found (this is the page I was after), irrelevant.
        A read-only key may send them: they judge results, they change no document."""
        readable_query(g, c.store, body.query_id)
        readable_page(g, c.store, body.page_id)
        return c.record_feedback(body.query_id, body.page_id, body.kind)

    @app.post("/v1/search", response_model=SearchResponse, tags=["search"])
    def search(req: SearchRequest, request: Request, g: Grant = Depends(current_grant)) -> SearchResponse:
        """Hybrid search over pages: BM25 and dense arms fused by RRF, optional rerank, rollup to
        pages, recency decay, pinning of exact URL/domain matches, then the slice [offset:offset+k]."""
        req.workspace = g.scoped(req.workspace, request.app.state.corpus.settings.default_workspace)
        return request.app.state.search.search(req, scopes=g.document_scopes)

    return app


def status_of(c: Corpus) -> dict:
    counts = c.store.counts()
    return {
        "data_dir": str(c.data_dir),
        "active_model": c.settings.models.active,
        "counts": counts,
        "generations": c.consistency(),
        "repairs_at_open": [r.__dict__ for r in c.repairs],
        "quarantine": c.store.quarantined(),
        "query_log": c.querylog.stats(),
        "reranker": c.reranker_status(),
    }
