"""Compare (A/B): the full pipeline once per embedder over one shared sparse arm.

The sparse arm is computed once and handed to every run, and rerank (when asked) uses the same
cross-encoder, so what differs between the lists is the embedder alone. Agreement at k for every
pair: Jaccard@k, RBO_EXT (p = rbo_p) and Kendall's tau-b over the pages both lists share.
"""
from __future__ import annotations

import itertools
import time
import uuid

from pydantic import BaseModel, Field, field_validator

from engine.refind.agreement import agreement
from engine.core.errors import InvalidRequest, ModelUnavailable, ModelUnknown
from engine.core.querylog import LogEntry
from engine.refind.search import SearchRequest, SearchResponse, SearchService


class CompareRequest(SearchRequest):
    models: list[str] = Field(min_length=2, max_length=5, description="Embedders (registry names) to compare.")
    rbo_p: float = Field(default=0.9, gt=0, lt=1, description="RBO persistence p.")

    @field_validator("models")
    @classmethod
    def _distinct(cls, v: list[str]) -> list[str]:
        if len(set(v)) != len(v):
            raise ValueError("models must be distinct")
        return v


class Agreement(BaseModel):
    model_a: str
    model_b: str
    k: int
    jaccard: float
    rbo_ext: float = Field(description="Extrapolated RBO (Webber et al. 2010, eq. 32) at depth k.")
    rbo_p: float
    kendall_tau_b: float | None = Field(description="Over the pages both lists share; null when < 2 shared.")
    shared: int


class CompareResponse(BaseModel):
    query_id: str
    query: str
    k: int
    sparse_shared: bool = Field(description="The sparse arm ran once and was shared by every model.")
    runs: list[SearchResponse]
    agreement: list[Agreement]
    timings_ms: dict[str, float]


def compare(service: SearchService, req: CompareRequest, scopes: tuple[str, ...] | None = None) -> CompareResponse:
    """The pipeline once per embedder over one shared BM25 arm, with the agreement of each pair of
    lists; one log entry for the whole comparison (the page search's own store, registry and log)."""
    registry = service.registry
    t0 = time.perf_counter()
    query_id = uuid.uuid4().hex
    search_req = SearchRequest(**req.model_dump(exclude={"models", "rbo_p"}))
    p = service.params(search_req)
    counts = service.store.counts()
    for m in req.models:
        if m not in registry.names():
            raise ModelUnknown(f"no model {m!r} in the registry (known: {', '.join(registry.names())})",
                               model=m)
        try:
            spec = registry.spec(m)
        except Exception as exc:
            raise ModelUnavailable(str(exc), model=m) from exc
        if spec.kind != "embedder":
            raise InvalidRequest(f"{m!r} is not an embedder", model=m)
        if counts["embeddings"].get(m, 0) == 0 and counts["chunks"]:
            raise ModelUnavailable(f"model {m!r} has embedded nothing yet", remedy=("embed_model", {"model": m}),
                                   model=m)
    shared, t_sparse = service.shared_sparse_arm(search_req, scopes)
    runs, traces = [], []
    entry = LogEntry(query_id=query_id, endpoint="compare", workspace=p.workspace, query=req.query,
                     params=req.model_dump(mode="json", exclude_none=True), models=list(req.models),
                     scopes=sorted(scopes) if scopes is not None else None)
    try:
        for m in req.models:
            trace: dict = {}
            resp = service.search(search_req, model=m, sparse=shared, log=False, trace=trace, scopes=scopes)
            runs.append(resp)
            traces.append(trace)
    except Exception as exc:
        entry.error_type = getattr(exc, "type", type(exc).__name__)
        entry.error_title = str(exc)
        service.querylog.record(entry)
        raise
    k = p.k
    agree = []
    for (a, ra), (b, rb) in itertools.combinations(zip(req.models, runs), 2):
        stats = agreement([h.page_id for h in ra.pages], [h.page_id for h in rb.pages], k, req.rbo_p)
        agree.append(Agreement(model_a=a, model_b=b, k=k, jaccard=stats["jaccard"], rbo_ext=stats["rbo_ext"],
                               rbo_p=req.rbo_p, kendall_tau_b=stats["kendall_tau_b"], shared=stats["shared"]))
    timings = {"sparse_once": round(t_sparse, 3), "total": round((time.perf_counter() - t0) * 1000, 3)}
    # One log entry for the whole comparison: the sparse arm once (model ''), each model's arms.
    for i, (resp, trace) in enumerate(zip(runs, traces)):
        c, f, r = service.trace_rows(resp, trace, include_sparse=(i == 0))
        entry.candidates += c
        entry.fused += f
        entry.results += r
    entry.agreement = [(a.model_a, a.model_b, a.k, a.jaccard, a.rbo_ext, a.rbo_p, a.kendall_tau_b, a.shared)
                       for a in agree]
    entry.timings = {r.model: r.timings_ms for r in runs} | timings
    entry.total = max((r.total for r in runs), default=0)
    entry.returned = sum(len(r.pages) for r in runs)
    service.querylog.record(entry)
    return CompareResponse(query_id=query_id, query=req.query, k=k, sparse_shared=True, runs=runs,
                           agreement=agree, timings_ms=timings)
