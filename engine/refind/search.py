"""SearchService.search — the refind pipeline of seed 001, stage by stage:

    embed query ─▶ dense top-N ┐
    bm25 ───────▶ sparse top-N ┴▶ RRF ▶ rerank (optional) ▶ rollup ▶ hydrate · decay · pin ▶ slice

Filters are pushed into both arms (tantivy filter clauses; a FAISS IDSelector), never applied
after the fact. Paging is the very last step, so pages never move between offsets.
"""
from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import numpy as np
from pydantic import (BaseModel, ConfigDict, Field, SkipValidation, TypeAdapter, create_model, field_serializer,
                      field_validator)

from indexes.dense import set_search_threads, with_search_threads
from indexes.hot import HotView
from indexes.milvus import MilvusUnavailable
from indexes.sparse import SparseFilter
from models.registry import ModelNotFound
from models.reranker import RerankerUnavailable, load_reranker

from indexes.sparse import DATE_MAX, DATE_MIN

from engine.core.corpus import Corpus
from engine.core.settings import SearchSettings, request_fields
from engine.core.values import Int64
from engine.core.errors import (EngineError, EntityNotFound, FilterTooBroad, IndexUnavailable, ModelUnavailable,
                               RerankerNotConfigured)
from engine.core.querylog import LogEntry
from engine.refind.fusion import Fused, arm_levels, contributions, extra_arm, fuse, rrf_arrays
from engine.refind.highlight import highlight_all, query_terms
from engine.core.urls import is_public_suffix
from engine.refind.pinning import pin_intent, without_tracking
from engine.refind.recency import age_days
from engine.refind.ranking import RankedPages, rank_pages
from engine.refind.rollup import Rolled, rollup_rows
from engine.core.clock import utcnow


MIN_TIME, MAX_TIME = DATE_MIN, DATE_MAX


def _listify(v):
    if v is None or isinstance(v, list):
        return v
    return [v]


class SearchFilters(BaseModel):
    """Restrictions pushed into both arms. Several values of one field: any of them; several
    fields: all of them."""
    model_config = ConfigDict(extra="forbid")
    domain: list[str] | None = Field(default=None, max_length=100, description="Domain(s), e.g. sqlite.org.")
    after: datetime | None = Field(default=None, description="last_seen at or after (inclusive).")
    before: datetime | None = Field(default=None, description="last_seen before (exclusive).")
    cluster_id: list[Int64] | None = Field(default=None, max_length=100)
    entity: list[str] | None = Field(default=None, max_length=100,
                                     description="Entity id, canonical form or alias (case-insensitive).")
    page_id: list[str] | None = Field(default=None, max_length=10_000, description=(
        "Only these pages (page ids; unknown ones match nothing): search within a known list."))

    _lists = field_validator("domain", "cluster_id", "entity", "page_id", mode="before")(_listify)

    @field_validator("after", "before")
    @classmethod
    def _utc(cls, v):
        v = v.astimezone(timezone.utc).replace(tzinfo=None) if v is not None and v.tzinfo else v
        if v is not None and not MIN_TIME <= v <= MAX_TIME:  # what the BM25 index's dates can hold
            raise ValueError(f"must be between {MIN_TIME.isoformat()} and {MAX_TIME.isoformat()}")
        return v

    def is_empty(self) -> bool:
        return not (self.domain or self.after or self.before or self.cluster_id is not None or self.entity
                    or self.page_id is not None)


SearchRequest = create_model(
    "SearchRequest", __config__=ConfigDict(extra="forbid"),
    __doc__="A page search. Every parameter but `query`, `workspace`, `explain` and `filters` is a [search] "
            "setting the request may override (declared once, in engine/core/settings.py: SearchSettings).",
    query=(str, Field(min_length=1, max_length=2000, description="What you remember of the page, or its URL.")),
    workspace=(str | None, Field(default=None, max_length=200)),
    **request_fields(SearchSettings),
    explain=(bool, False),
    filters=(SearchFilters | None, None),
)


class Snippet(BaseModel):
    chunk_id: int
    text: str
    section_path: list[str]
    char_start: int
    char_end: int
    score: float
    # (made by the search itself: not validated again — ~25 µs a response at ~250 marked words)
    highlights: SkipValidation[list[tuple[int, int]]] = Field(
        default_factory=list, description="[start, end) offsets in `text` of the words matching a query term "
                                          "(compared by the BM25 index's stems), for marking.")


class ArmHit(BaseModel):
    rank: int
    score: float


class ChunkExplain(BaseModel):
    chunk_id: int
    dense: ArmHit | None
    sparse: ArmHit | None
    rrf: dict[str, float] = Field(description="Each arm's contribution to the fused score and their total: "
                                              "weight / (rrf_k + rank) with fusion rrf, weight x normalised "
                                              "score with fusion linear (the name stays rrf for old clients).")
    normalised: dict[str, float] | None = Field(None, description="fusion linear: each arm's score after the "
                                                                   "normalizer (its raw score is under dense/sparse).")
    rerank: float | None
    score: float = Field(description="The chunk's score entering the rollup (the fused total, or rerank score).")


class PageExplain(BaseModel):
    chunks: list[ChunkExplain]
    rollup: dict[str, Any]
    decay: dict[str, float] | None = Field(description=(
        "Recency, when on. recency_mode band: half_life_days, age_days, band_width, and band (the page's "
        "recency band, from 1: pages of one band are about as relevant and ordered by last_seen) and level "
        "(its arm level, which the band compares). recency_mode decay: half_life_days, weight, age_days and "
        "factor (the score's multiplier)."))
    pinned: str | None
    score: float


class PageHit(BaseModel):
    rank: int
    page_id: str
    url: str
    title: str | None
    domain: str | None
    score: float
    first_seen: datetime
    last_seen: datetime
    published: datetime | None
    cluster_id: int | None
    entities: list[str]
    pinned: str | None = Field(default=None, description='Why the page was pinned: "url" (the query is its URL), '
                                                         '"prefix" (a URL prefix it is under) or "domain".')
    snippets: list[Snippet]
    explain: PageExplain | None = None

    @field_serializer("first_seen", "last_seen", "published")
    def _rfc3339(self, v: datetime | None) -> str | None:
        """Stored times are UTC without a zone; on the wire they say so (RFC 3339, "Z")."""
        if v is None:
            return None
        return (v if v.tzinfo else v.replace(tzinfo=timezone.utc)).isoformat().replace("+00:00", "Z")


_PAGE_HITS = TypeAdapter(list[PageHit])


class SimilarPage(BaseModel):
    page_id: str
    url: str
    title: str | None
    score: float


class Suggestions(BaseModel):
    source_page_id: str
    mediation: str
    pages: list[SimilarPage]


class SearchResponse(BaseModel):
    query_id: str
    query: str
    model: str
    k: int
    offset: int
    total: int = Field(description="Pages in the ranked candidate set before the final slice.")
    depth: dict[str, int] = Field(description="Chunks asked of each arm (grown from *_top_n when the "
                                              "candidates rolled up to too few pages).")
    pages: list[PageHit]
    timings_ms: dict[str, float]
    suggestions: Suggestions | None = None


REQUEST_PARAMS = tuple(request_fields(SearchSettings))
_REQUEST_SET = frozenset(REQUEST_PARAMS)


class Params(SearchSettings):
    """One search's parameters: the [search] settings with the request's overrides, its workspace and
    whether it explains (SearchService.params). Frozen: one is shared by the searches asking the same."""
    model_config = ConfigDict(frozen=True)
    workspace: str
    explain: bool = False


@dataclass
class Restriction:
    """What the filters leave: a tantivy filter and, for FAISS, the allowed chunk ids (None = all)."""
    sparse: SparseFilter
    dense_ids: np.ndarray | None
    page_ids: set[str] | None


@dataclass
class ArmResults:
    dense: list[tuple[int, float]] = field(default_factory=list)
    sparse: list[tuple[int, float]] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)


@dataclass
class Candidates:
    """What candidate generation leaves: the fused chunks best first (their ids and scores, and each
    one's page as its row in `view`; -1 for a chunk the view does not hold) rolled up to pages, both
    arms' lists (for trace and explain) and the depth the arms were run at. `fused` (each chunk's
    ranks and arm scores), `ranked` and `chunk_page` are made when explain, the reranker or the log
    ask for them."""
    ids: np.ndarray
    scores: np.ndarray
    rows: np.ndarray
    rolled: Rolled              # ... rolled up to pages (the request's rollup)
    dense: list[tuple[int, float]]
    sparse: list[tuple[int, float]]
    depth: Params
    view: HotView
    fusion: tuple = ()          # fuse()'s arguments after the arms' lists
    _fused: list[Fused] | None = None
    _chunk_page: dict[int, str] | None = None

    @property
    def fused(self) -> list[Fused]:
        if self._fused is None:
            self._fused = fuse(*self.fusion)
        return self._fused

    @property
    def ranked(self) -> list[tuple[int, float]]:
        """The fused chunks best first as (chunk id, score)."""
        return list(zip(self.ids.tolist(), self.scores.tolist()))

    @property
    def chunk_page(self) -> dict[int, str]:
        """chunk id -> page id, for the fused chunks the view holds."""
        if self._chunk_page is None:
            held = self.rows >= 0
            self._chunk_page = dict(zip(self.ids[held].tolist(), self.view.page_ids_of(self.rows[held])))
        return self._chunk_page


class StageTimer:
    """Milliseconds per named stage (a stage entered twice adds up), and the total since it was made."""

    def __init__(self):
        self.t0 = time.perf_counter()
        self.ms: dict[str, float] = {}

    def add(self, stage: str, ms: float) -> None:
        self.ms[stage] = self.ms.get(stage, 0.0) + ms

    @contextlib.contextmanager
    def __call__(self, stage: str):
        t = time.perf_counter()
        try:
            yield
        finally:
            self.add(stage, (time.perf_counter() - t) * 1000)

    def stop(self, stage: str = "total") -> None:
        self.ms[stage] = (time.perf_counter() - self.t0) * 1000

    def as_dict(self) -> dict[str, float]:
        return {k: round(v, 3) for k, v in self.ms.items()}


def _recency_on(p: Params) -> bool:
    """Recency is off at a half-life of 0, and in decay mode at a weight of 0 (the one place that says so)."""
    return p.recency_half_life_days > 0 and (p.recency_mode == "band" or p.recency_weight > 0)


class _ArmClock:
    """Recent times of the two arms (exponential moving averages, ms): whether the BM25 arm is
    expected to end within FAISS's time, so that it can start after the query's encoding."""

    def __init__(self, alpha: float = 0.1):
        self.alpha = alpha
        self._sparse: float | None = None
        self._dense: float | None = None

    def _mix(self, old: float | None, ms: float) -> float:
        return ms if old is None else old + self.alpha * (ms - old)

    def sparse(self, ms: float) -> None:
        self._sparse = self._mix(self._sparse, ms)

    def dense(self, ms: float) -> None:
        self._dense = self._mix(self._dense, ms)

    def sparse_fits_beside_dense(self) -> bool:
        return self._sparse is not None and self._dense is not None and self._sparse <= self._dense




class SearchService:
    def __init__(self, corpus: Corpus, search_settings=None):
        """`search_settings` overrides the corpus's [search] defaults (replay under another config)."""
        self.corpus = corpus
        self.defaults = search_settings or corpus.settings.search
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="search-arm",
                                        initializer=set_search_threads,
                                        initargs=(corpus.settings.index.search_threads,))
        self._clock = _ArmClock()
        self._params: dict[tuple, Params] = {}

    # Parameters and filters ----------------------------------------------------------------------
    def params(self, req: SearchRequest) -> Params:
        """The request's parameters: the [search] settings with its overrides. Made once per distinct
        set of overrides (a Params is frozen, so one can be shared; validating one cost ~20 µs)."""
        overrides = tuple(sorted((k, v) for k in req.model_fields_set & _REQUEST_SET
                                 if (v := getattr(req, k)) is not None))
        key = (overrides, req.workspace or self.corpus.settings.default_workspace, req.explain)
        p = self._params.get(key)
        if p is None:
            if len(self._params) >= 1024:
                self._params.clear()
            p = self._params[key] = Params(**(self.defaults.model_dump() | dict(overrides)),
                                           workspace=key[1], explain=req.explain)
        return p

    def restriction(self, workspace: str, filters: SearchFilters | None, snapshot=None,
                    scopes: tuple[str, ...] | None = None) -> Restriction:
        """`scopes`: the document scopes a key may read (None: every document). Like the filters they
        are pushed into both arms: tantivy's scope term filter and the FAISS id selector."""
        store = self.corpus.store
        f = filters or SearchFilters()
        entity_ids: list[str] = []
        for ref in f.entity or []:
            eids = store.resolve_entities(workspace, ref, list(scopes) if scopes is not None else None)
            if not eids:
                raise EntityNotFound(f"no entity {ref!r} in workspace {workspace!r}", ref=ref)
            entity_ids += [e for e in eids if e not in entity_ids]
        domains = tuple(d.strip().lower().removeprefix("www.") for d in (f.domain or []))
        sparse = SparseFilter(workspace=workspace, domains=domains, after=f.after, before=f.before,
                              cluster_ids=tuple(f.cluster_id or ()), entities=tuple(entity_ids),
                              scopes=tuple(scopes) if scopes is not None else None,
                              page_ids=tuple(dict.fromkeys(f.page_id)) if f.page_id is not None else None)
        if f.is_empty() and scopes is None:
            populated = self.corpus.populated_workspaces(snapshot)
            if populated == {workspace}:  # the only workspace with pages: nothing to restrict, in either arm
                # (a chunk written after this request's view is not in it, so rollup drops it)
                return Restriction(dataclasses.replace(sparse, workspace=None), None, None)
            # Otherwise the dense arm is restricted too — to nothing, for a workspace with no pages
            # (an unrestricted FAISS search would answer from another workspace).
            pages = (snapshot or self.corpus.hot()).workspace_page_ids(workspace) if workspace in populated else []
        else:
            pages = store.filtered_pages(workspace, domains, f.after, f.before, f.cluster_id or (), entity_ids,
                                         scopes=list(scopes) if scopes is not None else None, page_ids=f.page_id)
            cap = self.corpus.settings.search.filter_pushdown_cap
            if not f.is_empty() and len(pages) > cap:  # a key's scopes are never refused for breadth
                raise FilterTooBroad(
                    f"the filter matches {len(pages)} pages, more than the push-down cap of {cap}; narrow it",
                    matched_pages=len(pages), cap=cap)
        # Milvus reads the filters as an expression (r.sparse): no chunk id list to build for it
        dense_ids = None if self.corpus.milvus is not None else (snapshot or self.corpus.hot()).chunk_ids_of_pages(pages)
        return Restriction(sparse, dense_ids, set(pages))

    # The arms ---------------------------------------------------------------------------------
    def run_sparse(self, query: str, p: Params, r: Restriction) -> tuple[list[tuple[int, float]], float]:
        t = time.perf_counter()
        try:
            hits = self.corpus.sparse.search(query, p.sparse_top_n, r.sparse, p.bm25_k3)
        except MilvusUnavailable as exc:
            raise IndexUnavailable(str(exc), index="sparse") from exc
        return hits, (time.perf_counter() - t) * 1000

    def run_dense(self, query: str, model: str, p: Params, r: Restriction, meanwhile=None,
                  before_dense=None) -> tuple[list[tuple[int, float]], float, float]:
        """The query's encoding and the FAISS search; `meanwhile` is called once when the encoder is
        about to run (Embedder.encode_query), `before_dense` between the encoding and the search."""
        t = time.perf_counter()
        try:
            vec = self.corpus.embedder(model).encode_query(query, meanwhile)
        except ModelNotFound as exc:
            raise ModelUnavailable(str(exc), model=exc.name, install=exc.install) from exc
        t2 = time.perf_counter()
        if before_dense is not None:
            before_dense()
        try:
            hits = self.corpus.dense(model).search(vec, p.dense_top_n, r.dense_ids, r.sparse)
        except MilvusUnavailable as exc:
            raise IndexUnavailable(str(exc), index=f"dense:{model}") from exc
        return hits, (t2 - t) * 1000, (time.perf_counter() - t2) * 1000

    def arms(self, query: str, model: str, p: Params, r: Restriction,
             sparse: list[tuple[int, float]] | None = None) -> ArmResults:
        """Both arms concurrently: the sparse arm on the pool, the dense arm (the query's encoding and
        FAISS) on the calling thread — one hand-off fewer than both on the pool. When the sparse arm
        starts is chosen from the two arms' recent times (`_ArmClock`): while it has taken no longer
        than FAISS, it starts once the query is encoded and runs beside FAISS, which searches on one
        thread (the encoder's threads stop spinning as its run returns), so the other core is free;
        when it takes longer (a large BM25 index), it starts as the encoder starts, to overlap as
        much as it can. Measured at 100k chunks (alternated, 2 cores): 8.6 ms p50 started after the
        encoding against 9.3–9.4 started before it; at 1M, 20.6 against 19.2–19.6; at 10k within
        noise. (Started before the query is tokenised its Python takes the GIL the tokeniser needs;
        started as the encoder runs it takes a core from it: the two cost about the same.) An arm
        whose weight is 0 is not run. A precomputed sparse list (compare shares one across
        embedders) is used as given. (The other way round, the sparse arm on the calling thread and
        the dense arm on the pool, was measured slower: 13.5 vs 9.0 ms p50 at 100k chunks.)"""
        out = ArmResults()
        started = []

        def start_sparse():
            if not started:
                started.append(self._pool.submit(self.run_sparse, query, p, r))

        run_sparse = sparse is None and p.sparse_weight > 0
        if sparse is not None:
            out.sparse = sparse
        if p.dense_weight > 0:
            late = run_sparse and self._clock.sparse_fits_beside_dense()
            try:
                out.dense, out.timings["embed"], out.timings["dense"] = self._on_caller(
                    self.run_dense, query, model, p, r, start_sparse if run_sparse and not late else None,
                    start_sparse if late else None)
            except BaseException:
                for f in started:   # an arm started is waited for, not left running past the request
                    f.cancel() or f.exception()
                raise
            self._clock.dense(out.timings["dense"])
        if run_sparse:
            start_sparse()   # (with the dense arm off, or an encoder that did not call back)
            out.sparse, out.timings["sparse"] = started[0].result()
            self._clock.sparse(out.timings["sparse"])
        return out

    def _on_caller(self, fn, *args):
        """`fn(*args)` on the calling thread with FAISS's threads as on an arm thread (set for the
        call, restored after)."""
        return with_search_threads(self.corpus.settings.index.search_threads, fn, *args)

    def shared_sparse_arm(self, req: SearchRequest, scopes: tuple[str, ...] | None = None
                          ) -> tuple[list[tuple[int, float]], float]:
        """The BM25 arm of `req` once (its hits and milliseconds), for runs of the pipeline that share
        it (compare's embedders): pass the hits as `search(..., sparse=...)`. Empty when its weight is 0."""
        p = self.params(req)
        if p.sparse_weight <= 0:
            return [], 0.0
        return self.run_sparse(req.query, p, self.restriction(p.workspace, req.filters, scopes=scopes))

    # The pipeline -------------------------------------------------------------------------------
    def search(self, req: SearchRequest, model: str | None = None, now: datetime | None = None,
               sparse: list[tuple[int, float]] | None = None, log: bool = True,
               trace: dict | None = None, scopes: tuple[str, ...] | None = None) -> SearchResponse:
        """Run the pipeline; log the execution (or its refusal) to the query log unless `log` is
        False (compare logs its arms itself). `trace`, when given, receives the intermediate lists.
        `scopes` limits it to the documents a key may read (engine/access.py)."""
        trace = {} if trace is None else trace
        try:
            resp = self._search(req, model, now, sparse, trace, scopes)
        except EngineError as exc:
            if log:
                self.corpus.querylog.record(LogEntry(
                    query_id=uuid.uuid4().hex, endpoint="search", workspace=req.workspace, query=req.query,
                    params=req.model_dump(mode="json", exclude_none=True), models=[model or self.corpus.settings.models.active],
                    error_type=exc.type, error_title=exc.title))
            raise
        if log and self.corpus.querylog.enabled:   # the entry's rows are built only for a log that keeps them
            self.corpus.querylog.record(self.log_entry("search", req, resp, trace))
        return resp

    def log_entry(self, endpoint: str, req: SearchRequest, resp: "SearchResponse", trace: dict,
                  shared_sparse: bool = False) -> LogEntry:
        e = LogEntry(query_id=resp.query_id, endpoint=endpoint, workspace=trace.get("workspace"), query=req.query,
                     params=req.model_dump(mode="json", exclude_none=True), models=[resp.model],
                     timings=resp.timings_ms, total=resp.total, returned=len(resp.pages),
                     pinned={h.page_id: h.pinned for h in resp.pages if h.pinned})
        e.candidates, e.fused, e.results = self.trace_rows(resp, trace, include_sparse=not shared_sparse)
        return e

    @staticmethod
    def trace_rows(resp: "SearchResponse", trace: dict, include_sparse: bool = True):
        """The log's rows of one run of the pipeline: each arm's candidates, the fused (and reranked)
        chunks and the pages returned, from the `trace` the run filled."""
        run: Candidates | None = trace.get("candidates")
        cp = run.chunk_page if run is not None else {}
        dense, sparse, ranked = (run.dense, run.sparse, run.ranked) if run is not None else ([], [], [])
        m = resp.model
        cands = [(m, "dense", i, c, cp.get(c), s) for i, (c, s) in enumerate(dense, start=1)]
        if include_sparse:
            cands += [("", "sparse", i, c, cp.get(c), s) for i, (c, s) in enumerate(sparse, start=1)]
        fused = [(m, "fused", i, c, cp.get(c), s) for i, (c, s) in enumerate(ranked, start=1)]
        fused += [(m, "reranked", i, c, cp.get(c), s) for i, (c, s) in enumerate(trace.get("reranked", []), start=1)]
        results = [(m, h.rank, h.page_id, h.score, h.pinned) for h in resp.pages]
        return cands, fused, results

    def _search(self, req: SearchRequest, model: str | None, now: datetime | None,
                sparse: list[tuple[int, float]] | None, trace: dict,
                scopes: tuple[str, ...] | None = None) -> SearchResponse:
        """The stages in order; each is a method below, timed under its name by one StageTimer."""
        model = model or self.corpus.settings.models.active
        now = now or utcnow()
        p = self.params(req)
        timer = StageTimer()
        with timer("filters"):
            snapshot = self.corpus.chunk_page_snapshot()  # one generation check for the whole request
            restriction = self.restriction(p.workspace, req.filters, snapshot, scopes)
        cands = self._candidates(req.query, model, p, restriction, sparse, snapshot, timer)
        trace.update(workspace=p.workspace, candidates=cands)
        ids, scores, rolled, rerank_scores = cands.ids, cands.scores, cands.rolled, {}   # best first, ties by chunk id
        if p.rerank:
            with timer("rerank"):
                chunk_scores, rerank_scores = self._rerank(req.query, p, cands)
                reranked = trace["reranked"] = sorted(chunk_scores.items(), key=lambda t: (-t[1], t[0]))
                ids = np.array([c for c, _ in reranked], dtype=np.int64)
                scores = np.array([s for _, s in reranked], dtype=np.float64)
            with timer("rollup"):
                rolled = rollup_rows(cands.view.chunk_rows(ids), scores, p.rollup)
        with timer("hydrate"):
            intent = pin_intent(req.query) if p.pin else None
            pinned = {pid: kind for pid, kind in (self._pins(intent, p.workspace, restriction, scopes) if intent else [])
                      if pid in cands.view.row_of}   # a page written after this request's view waits for the next
        with timer("decay"):
            on = _recency_on(p)
            # only the pages up to the slice's end are put in order (pinned ones may come out of them)
            levels = self._levels(p, cands, rolled) if on and p.recency_mode == "band" else None
            ranked = rank_pages(rolled, ids, scores, cands.view, now, p.recency_half_life_days if on else 0.0,
                                p.recency_weight if on else 0.0, top=p.offset + p.k + len(pinned),
                                levels=levels, band=p.recency_band)
        order, total = ranked.page_ids, ranked.total
        if pinned:
            order = list(pinned) + [pid for pid in order if pid not in pinned]
            rows = np.fromiter((cands.view.row_of[pid] for pid in pinned), dtype=np.int64, count=len(pinned))
            total += len(pinned) - int(np.isin(rows, rolled.pages).sum())   # a pinned page is counted once
        window = order[p.offset: p.offset + p.k]
        with timer("hydrate"):
            hits = self._hydrate(req.query, window, ranked, pinned, cands, rerank_scores, p, now)
        suggestions = None
        if p.suggestions and order:
            with timer("suggestions"):
                suggestions = self._suggestions(order[0], model, scopes)
        timer.stop("total")
        return SearchResponse(query_id=uuid.uuid4().hex, query=req.query, model=model, k=p.k, offset=p.offset,
                              total=total, pages=hits, suggestions=suggestions,
                              depth={"dense": cands.depth.dense_top_n if p.dense_weight > 0 else 0,
                                     "sparse": cands.depth.sparse_top_n if p.sparse_weight > 0 else 0},
                              timings_ms=timer.as_dict())

    def _candidates(self, query: str, model: str, p: Params, restriction: Restriction,
                    sparse: list[tuple[int, float]] | None, snapshot, timer: "StageTimer") -> Candidates:
        """Both arms, fused. When the chunks roll up to fewer than min_candidate_pages pages and an arm
        was cut off at its depth, the depth doubles (up to max_top_n). The rule never looks at k or
        offset, so every page of a query is a slice of one and the same ranking."""
        settings = self.corpus.settings.search
        depth = p
        timer.add("fusion", 0.0)
        while True:
            arms = self.arms(query, model, depth, restriction, sparse)
            for key, ms in arms.timings.items():
                timer.add(key, ms)
            with timer("fusion"):
                arm_lists = {arm: hits for arm, hits, w in (("dense", arms.dense, p.dense_weight),
                                                            ("sparse", arms.sparse, p.sparse_weight)) if w > 0}
                args = (arm_lists, {"dense": p.dense_weight, "sparse": p.sparse_weight}, p.fusion, p.rrf_k,
                        p.normalizer)
                fused = None
                if p.fusion == "rrf":
                    ids, scores = rrf_arrays(*args[:2], p.rrf_k)
                else:
                    fused = fuse(*args)
                    ids = np.array([f.chunk_id for f in fused], dtype=np.int64)
                    scores = np.array([f.score for f in fused], dtype=np.float64)
            with timer("hydrate"):
                rows = snapshot.chunk_rows(ids)   # each chunk's page (-1: written after this request's view)
            with timer("rollup"):
                rolled = rollup_rows(rows, scores, p.rollup)
            cut_off = ((p.dense_weight > 0 and len(arms.dense) >= depth.dense_top_n) or
                       (p.sparse_weight > 0 and sparse is None and len(arms.sparse) >= depth.sparse_top_n))
            if len(rolled.pages) >= settings.min_candidate_pages or not cut_off or \
                    max(depth.dense_top_n, depth.sparse_top_n) >= settings.max_top_n:
                return Candidates(ids, scores, rows, rolled, arms.dense, arms.sparse, depth, snapshot, args, fused)
            depth = depth.model_copy(update={"dense_top_n": min(depth.dense_top_n * 2, settings.max_top_n),
                                             "sparse_top_n": min(depth.sparse_top_n * 2, settings.max_top_n)})

    @staticmethod
    def _levels(p: Params, cands: Candidates, rolled: Rolled) -> np.ndarray:
        """Each rolled-up page's arm level (fusion.arm_levels), from both arms' chunk lists: the scale
        recency's band is measured on (with rerank on too: the reranker orders, the arms say how close)."""
        arm_rows = {}
        for arm, hits in (("dense", cands.dense), ("sparse", cands.sparse)):
            ids = np.fromiter((c for c, _ in hits), dtype=np.int64, count=len(hits))
            arm_rows[arm] = (cands.view.chunk_rows(ids), np.fromiter((x for _, x in hits), dtype=np.float64,
                                                                     count=len(hits)))
        return arm_levels(rolled.pages, arm_rows, {"dense": p.dense_weight, "sparse": p.sparse_weight})

    def _rerank(self, query: str, p: Params, cands: Candidates) -> tuple[dict[int, float], dict[int, float]]:
        """The cross-encoder over the top rerank_n candidate chunks: (chunk scores, rerank scores). With
        rerank on, the ranked candidate set is the reranked chunks."""
        corpus = self.corpus
        top = [f for f in cands.fused if f.chunk_id in cands.chunk_page][: p.rerank_n]
        texts = corpus.store.chunks_by_id([f.chunk_id for f in top])
        try:
            rr = load_reranker(corpus.registry, corpus.settings.models.reranker, corpus.settings.models.device)
        except RerankerUnavailable as exc:
            raise RerankerNotConfigured(str(exc)) from exc
        scores = rr.score(query, [texts[f.chunk_id]["text"] for f in top])
        rerank_scores = {f.chunk_id: float(x) for f, x in zip(top, scores)}
        if p.rerank_fusion == "rrf":
            arm = extra_arm(rerank_scores, p.rerank_weight, p.fusion, p.rrf_k, p.normalizer)
            return {f.chunk_id: f.score + arm[f.chunk_id] for f in top}, rerank_scores
        return dict(rerank_scores), rerank_scores

    def _hydrate(self, query: str, window: list[str], ranked: RankedPages, pinned: dict[str, str],
                 cands: Candidates, rerank_scores: dict[int, float], p: Params, now: datetime) -> list[PageHit]:
        """The returned pages only, read in full: their rows, their top chunks as snippets (with the
        highlighted query words), and explain when asked."""
        meta = cands.view.page_rows(window)
        by_id = {pid: sp for pid in window if (sp := ranked.page(pid)) is not None}
        snippets_n = self.corpus.settings.search.snippets_per_page
        # a page pinned without a matched passage (a bare domain, a URL) shows how it begins
        unranked = [pid for pid in window if pid not in by_id]
        lead = self.corpus.store.lead_chunks(unranked) if unranked and snippets_n else {}
        shown = [c for pid in window if pid in by_id for c in by_id[pid].chunk_ids[:snippets_n]] + list(lead.values())
        chunk_meta, offsets = cands.view.snippets(shown)   # texts in memory or on file when the view holds them
        if chunk_meta is None:
            chunk_meta = self.corpus.store.snippet_chunks(shown)
        fused_by_id: dict[int, Fused] = {f.chunk_id: f for f in cands.fused} if p.explain else {}
        terms = query_terms(query) if p.highlight else frozenset()
        marked = [c for c in shown if c in chunk_meta]
        marks = dict(zip(marked, highlight_all([chunk_meta[c][0] for c in marked], terms)))
        hits = []
        for i, pid in enumerate(window):
            m = meta[pid]
            sp = by_id.get(pid)
            cids, cscores = (sp.chunk_ids, sp.chunk_scores) if sp else (([lead[pid]], [0.0]) if pid in lead else ([], []))
            snippets = [{"chunk_id": c, "text": chunk_meta[c][0], "section_path": list(chunk_meta[c][1] or []),
                         "char_start": offsets[c][0], "char_end": offsets[c][1], "score": score,
                         "highlights": marks[c]}
                        for c, score in zip(cids[:snippets_n], cscores) if c in chunk_meta and c in offsets]
            explain = self._explain(cids, cscores, fused_by_id, rerank_scores, p, sp, m, now,
                                    pinned.get(pid)) if p.explain else None
            hits.append({
                "rank": p.offset + i + 1, "page_id": pid, "url": m["url"], "title": m["title"], "domain": m["domain"],
                "score": sp.score if sp else 0.0, "first_seen": m["first_seen"], "last_seen": m["last_seen"],
                "published": m["published"], "cluster_id": m["cluster_id"], "entities": m["entities"],
                "pinned": pinned.get(pid), "snippets": snippets, "explain": explain})
        # validated in one call (~25 % less than a model per hit and per snippet)
        return _PAGE_HITS.validate_python(hits)

    def _suggestions(self, source_page: str, model: str, scopes: tuple[str, ...] | None) -> Suggestions:
        from engine.refind.similar import similar_pages

        sims = similar_pages(self.corpus, source_page, "vector", 5, model, scopes=scopes)
        return Suggestions(source_page_id=source_page, mediation="vector", pages=[SimilarPage(**x) for x in sims])

    def _pins(self, intent, workspace: str, r: Restriction, scopes: tuple[str, ...] | None = None
              ) -> list[tuple[str, str]]:
        """The pinned pages of a pin intent, in order, with their kind (engine/refind/pinning.py). Each
        lookup reads only the caller's document scopes, so which fallback applies (a URL, else its
        prefix or domain) never depends on what another scope holds."""
        store = self.corpus.store
        allowed = r.page_ids
        within = list(scopes) if scopes is not None else None
        limit = self.corpus.settings.search.pin_domain_max
        found: list[tuple[str, str]] = []
        domain = intent.value if intent.kind == "domain" else None
        if intent.kind == "url":
            url = intent.value
            found = [(pid, "url") for pid in store.pages_with_url(workspace, url, within)]
            if not found and (clean := without_tracking(url)) is not None:   # a shared link's utm_* and such
                url = clean
                found = [(pid, "url") for pid in store.pages_with_url(workspace, url, within)]
            host, _, path = url.split("?", 1)[0].partition("/")
            if not found and path:
                found = [(pid, "prefix") for pid in store.pages_under_prefix(workspace, url, limit, within)]
            elif not found:
                domain = host
        if not found and domain and not is_public_suffix(domain):
            found = [(pid, "domain") for pid in store.pages_of_domain(workspace, domain, limit, subdomains=True,
                                                                     scopes=within)]
        return [(pid, kind) for pid, kind in found if allowed is None or pid in allowed]

    @staticmethod
    def _explain(cids, cscores, fused_by_id, rerank_scores, p: Params, entry, m, now, pinned) -> PageExplain:
        chunks = []
        for c, score in zip(cids, cscores):
            f = fused_by_id.get(c)
            contrib = {}
            if f is not None:
                contrib = contributions(f, {"dense": p.dense_weight, "sparse": p.sparse_weight}, p.rrf_k, p.fusion)
                if p.rerank and p.rerank_fusion == "rrf" and c in rerank_scores:
                    contrib["rerank"] = score - f.score
                    contrib["total"] = score
            chunks.append(ChunkExplain(
                chunk_id=c,
                dense=ArmHit(rank=f.ranks["dense"], score=f.arm_scores["dense"]) if f and "dense" in f.ranks else None,
                sparse=ArmHit(rank=f.ranks["sparse"], score=f.arm_scores["sparse"]) if f and "sparse" in f.ranks else None,
                rrf=contrib, normalised=dict(f.normalised) if f and p.fusion == "linear" else None,
                rerank=rerank_scores.get(c), score=score))
        decay = None
        if _recency_on(p) and p.recency_mode == "band":
            decay = {"half_life_days": p.recency_half_life_days, "age_days": age_days(m["last_seen"], now),
                     "band_width": p.recency_band}
            if entry is not None and entry.band is not None:
                decay |= {"band": float(entry.band), "level": entry.level}
        elif _recency_on(p):
            decay = {"half_life_days": p.recency_half_life_days, "weight": p.recency_weight,
                     "age_days": age_days(m["last_seen"], now),
                     "factor": entry.factor if entry else 1.0}
        return PageExplain(chunks=chunks, rollup={"how": p.rollup, "value": entry.rollup if entry else 0.0},
                           decay=decay, pinned=pinned, score=entry.score if entry else 0.0)
