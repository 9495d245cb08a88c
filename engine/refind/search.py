"""SearchService.search — the refind pipeline of seed 001, stage by stage:

    embed query ─▶ dense top-N ┐
    bm25 ───────▶ sparse top-N ┴▶ RRF ▶ rerank (optional) ▶ rollup ▶ hydrate · decay · pin ▶ slice

Filters are pushed into both arms (tantivy filter clauses; a FAISS IDSelector), never applied
after the fact. Paging is the very last step, so pages never move between offsets.
"""
from __future__ import annotations

import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, create_model, field_serializer, field_validator

from indexes.sparse import SparseFilter
from models.registry import ModelNotFound
from models.reranker import RerankerUnavailable, load_reranker

from indexes.sparse import DATE_MAX, DATE_MIN

from engine.core.corpus import Corpus
from engine.core.settings import SearchSettings, request_fields
from engine.core.values import Int64
from engine.core.errors import EngineError, EntityNotFound, FilterTooBroad, ModelUnavailable, RerankerNotConfigured
from engine.core.querylog import LogEntry
from engine.refind.fusion import Fused, contributions, rerank_arm, rrf
from engine.refind.highlight import highlight_spans, query_terms
from engine.refind.pinning import pin_intent
from engine.refind.recency import age_days, decay_factor
from engine.refind.rollup import rollup
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

    _lists = field_validator("domain", "cluster_id", "entity", mode="before")(_listify)

    @field_validator("after", "before")
    @classmethod
    def _utc(cls, v):
        v = v.astimezone(timezone.utc).replace(tzinfo=None) if v is not None and v.tzinfo else v
        if v is not None and not MIN_TIME <= v <= MAX_TIME:  # what the BM25 index's dates can hold
            raise ValueError(f"must be between {MIN_TIME.isoformat()} and {MAX_TIME.isoformat()}")
        return v

    def is_empty(self) -> bool:
        return not (self.domain or self.after or self.before or self.cluster_id is not None or self.entity)


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
    highlights: list[tuple[int, int]] = Field(
        default_factory=list, description="[start, end) offsets in `text` of the words matching a query term "
                                          "(compared by the BM25 index's stems), for marking.")


class ArmHit(BaseModel):
    rank: int
    score: float


class ChunkExplain(BaseModel):
    chunk_id: int
    dense: ArmHit | None
    sparse: ArmHit | None
    rrf: dict[str, float] = Field(description="Each arm's weight / (rrf_k + rank), and their total.")
    rerank: float | None
    score: float = Field(description="The chunk's score entering the rollup (RRF total, or rerank score).")


class PageExplain(BaseModel):
    chunks: list[ChunkExplain]
    rollup: dict[str, Any]
    decay: dict[str, float] | None
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
    pinned: str | None = Field(default=None, description='"url" or "domain" when the page was pinned.')
    snippets: list[Snippet]
    explain: PageExplain | None = None

    @field_serializer("first_seen", "last_seen", "published")
    def _rfc3339(self, v: datetime | None) -> str | None:
        """Stored times are UTC without a zone; on the wire they say so (RFC 3339, "Z")."""
        if v is None:
            return None
        return (v if v.tzinfo else v.replace(tzinfo=timezone.utc)).isoformat().replace("+00:00", "Z")


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


class Params(SearchSettings):
    """One search's parameters: the [search] settings with the request's overrides, its workspace and
    whether it explains (SearchService.params)."""
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


class SearchService:
    def __init__(self, corpus: Corpus, search_settings=None):
        """`search_settings` overrides the corpus's [search] defaults (replay under another config)."""
        self.corpus = corpus
        self.defaults = search_settings or corpus.settings.search
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="search-arm")

    # Parameters and filters ----------------------------------------------------------------------
    def params(self, req: SearchRequest) -> Params:
        overrides = {k: v for k, v in req.model_dump(include=set(REQUEST_PARAMS)).items() if v is not None}
        return Params(**(self.defaults.model_dump() | overrides),
                      workspace=req.workspace or self.corpus.settings.default_workspace, explain=req.explain)

    def restriction(self, workspace: str, filters: SearchFilters | None, snapshot=None,
                    scopes: tuple[str, ...] | None = None) -> Restriction:
        """`scopes`: the document scopes a key may read (None: every document). Like the filters they
        are pushed into both arms: tantivy's scope term filter and the FAISS id selector."""
        store = self.corpus.store
        f = filters or SearchFilters()
        entity_ids: list[str] = []
        for ref in f.entity or []:
            eid = store.resolve_entity(workspace, ref, list(scopes) if scopes is not None else None)
            if eid is None:
                raise EntityNotFound(f"no entity {ref!r} in workspace {workspace!r}", ref=ref)
            entity_ids.append(eid)
        domains = tuple(d.strip().lower().removeprefix("www.") for d in (f.domain or []))
        sparse = SparseFilter(workspace=workspace, domains=domains, after=f.after, before=f.before,
                              cluster_ids=tuple(f.cluster_id or ()), entities=tuple(entity_ids),
                              scopes=tuple(scopes) if scopes is not None else None)
        if f.is_empty() and scopes is None:
            populated = self.corpus.populated_workspaces(snapshot)
            if populated == {workspace}:  # the only workspace with pages: nothing to restrict
                return Restriction(sparse, None, None)
            # Otherwise the dense arm is restricted too — to nothing, for a workspace with no pages
            # (an unrestricted FAISS search would answer from another workspace).
            pages = store.filtered_pages(workspace) if workspace in populated else []
        else:
            pages = store.filtered_pages(workspace, domains, f.after, f.before, f.cluster_id or (), entity_ids,
                                         scopes=list(scopes) if scopes is not None else None)
            cap = self.corpus.settings.search.filter_pushdown_cap
            if not f.is_empty() and len(pages) > cap:  # a key's scopes are never refused for breadth
                raise FilterTooBroad(
                    f"the filter matches {len(pages)} pages, more than the push-down cap of {cap}; narrow it",
                    matched_pages=len(pages), cap=cap)
        return Restriction(sparse, store.chunk_ids_of_pages(pages), set(pages))

    # The arms ---------------------------------------------------------------------------------
    def run_sparse(self, query: str, p: Params, r: Restriction) -> tuple[list[tuple[int, float]], float]:
        t = time.perf_counter()
        hits = self.corpus.sparse.search(query, p.sparse_top_n, r.sparse)
        return hits, (time.perf_counter() - t) * 1000

    def run_dense(self, query: str, model: str, p: Params, r: Restriction) -> tuple[list[tuple[int, float]], float, float]:
        t = time.perf_counter()
        try:
            vec = self.corpus.embedder(model).encode_query(query)
        except ModelNotFound as exc:
            raise ModelUnavailable(str(exc), model=exc.name, install=exc.install) from exc
        t2 = time.perf_counter()
        hits = self.corpus.dense(model).search(vec, p.dense_top_n, r.dense_ids)
        return hits, (t2 - t) * 1000, (time.perf_counter() - t2) * 1000

    def arms(self, query: str, model: str, p: Params, r: Restriction,
             sparse: list[tuple[int, float]] | None = None) -> ArmResults:
        """Both arms concurrently; an arm whose weight is 0 is not run. A precomputed sparse
        list (compare shares one across embedders) is used as given."""
        out = ArmResults()
        fd = self._pool.submit(self.run_dense, query, model, p, r) if p.dense_weight > 0 else None
        fs = None
        if sparse is not None:
            out.sparse = sparse
        elif p.sparse_weight > 0:
            fs = self._pool.submit(self.run_sparse, query, p, r)
        if fd is not None:
            out.dense, out.timings["embed"], out.timings["dense"] = fd.result()
        if fs is not None:
            out.sparse, out.timings["sparse"] = fs.result()
        return out

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
        if log:
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
        cp = trace.get("chunk_page", {})
        m = resp.model
        cands = [(m, "dense", i, c, cp.get(c), s) for i, (c, s) in enumerate(trace.get("dense", []), start=1)]
        if include_sparse:
            cands += [("", "sparse", i, c, cp.get(c), s) for i, (c, s) in enumerate(trace.get("sparse", []), start=1)]
        fused = [(m, "fused", i, c, cp.get(c), s) for i, (c, s) in enumerate(trace.get("fused", []), start=1)]
        fused += [(m, "reranked", i, c, cp.get(c), s) for i, (c, s) in enumerate(trace.get("reranked", []), start=1)]
        results = [(m, h.rank, h.page_id, h.score, h.pinned) for h in resp.pages]
        return cands, fused, results

    def _search(self, req: SearchRequest, model: str | None, now: datetime | None,
                sparse: list[tuple[int, float]] | None, trace: dict,
                scopes: tuple[str, ...] | None = None) -> SearchResponse:
        corpus = self.corpus
        model = model or corpus.settings.models.active
        now = now or utcnow()
        p = self.params(req)
        t0 = time.perf_counter()
        timings: dict[str, float] = {}

        tf = time.perf_counter()
        snapshot = corpus.chunk_page_snapshot()  # one generation check for the whole request
        restriction = self.restriction(p.workspace, req.filters, snapshot, scopes)
        timings["filters"] = (time.perf_counter() - tf) * 1000

        # Candidate generation. Arms return chunks; when those roll up to fewer than
        # min_candidate_pages pages and an arm was cut off at its depth, the depth doubles (up to
        # max_top_n). The rule never looks at k or offset, so every page of a query is a slice of
        # one and the same ranking.
        settings = corpus.settings.search
        depth = p.model_copy()
        fused: list[Fused] = []
        chunk_page: dict[int, str] = {}
        timings["fusion"] = 0.0
        while True:
            arms = self.arms(req.query, model, depth, restriction, sparse)
            for key, v in arms.timings.items():
                timings[key] = timings.get(key, 0.0) + v
            tf = time.perf_counter()
            arm_lists = {}
            if p.dense_weight > 0:
                arm_lists["dense"] = arms.dense
            if p.sparse_weight > 0:
                arm_lists["sparse"] = arms.sparse
            fused = rrf(arm_lists, {"dense": p.dense_weight, "sparse": p.sparse_weight}, p.rrf_k)
            timings["fusion"] += (time.perf_counter() - tf) * 1000
            th = time.perf_counter()
            chunk_page = corpus.chunk_pages([f.chunk_id for f in fused], snapshot)
            timings["hydrate"] = timings.get("hydrate", 0.0) + (time.perf_counter() - th) * 1000
            n_pages = len(set(chunk_page.values()))
            cut_off = ((p.dense_weight > 0 and len(arms.dense) >= depth.dense_top_n) or
                       (p.sparse_weight > 0 and sparse is None and len(arms.sparse) >= depth.sparse_top_n))
            if n_pages >= settings.min_candidate_pages or not cut_off or \
                    max(depth.dense_top_n, depth.sparse_top_n) >= settings.max_top_n:
                break
            depth.dense_top_n = min(depth.dense_top_n * 2, settings.max_top_n)
            depth.sparse_top_n = min(depth.sparse_top_n * 2, settings.max_top_n)

        chunk_scores: dict[int, float] = {f.chunk_id: f.score for f in fused}
        rerank_scores: dict[int, float] = {}
        trace.update(workspace=p.workspace, dense=arms.dense, sparse=arms.sparse, chunk_page=chunk_page,
                     fused=[(f.chunk_id, f.score) for f in fused])
        if p.rerank:
            tr = time.perf_counter()
            top = [f for f in fused if f.chunk_id in chunk_page][: p.rerank_n]
            texts = corpus.store.chunks_by_id([f.chunk_id for f in top])
            try:
                rr = load_reranker(corpus.registry, corpus.settings.models.reranker,
                                   corpus.settings.models.device)
            except RerankerUnavailable as exc:
                raise RerankerNotConfigured(str(exc)) from exc
            scores = rr.score(req.query, [texts[f.chunk_id]["text"] for f in top])
            rerank_scores = {f.chunk_id: float(s) for f, s in zip(top, scores)}
            # With rerank on, the ranked candidate set is the reranked chunks.
            if p.rerank_fusion == "rrf":
                rerank_rrf = rerank_arm(rerank_scores, p.rerank_weight, p.rrf_k)
                chunk_scores = {f.chunk_id: f.score + rerank_rrf[f.chunk_id] for f in top}
            else:
                chunk_scores = dict(rerank_scores)
            trace["reranked"] = sorted(chunk_scores.items(), key=lambda t: (-t[1], t[0]))
            timings["rerank"] = (time.perf_counter() - tr) * 1000

        tr = time.perf_counter()
        ranked = sorted(chunk_scores.items(), key=lambda t: (-t[1], t[0]))
        pages = rollup(ranked, chunk_page.get, p.rollup)
        timings["rollup"] = (time.perf_counter() - tr) * 1000

        th = time.perf_counter()
        intent = pin_intent(req.query) if p.pin else None
        pinned_ids = self._pins(intent, p.workspace, restriction) if intent else []
        page_ids = [pid for pid, _, _ in pages]
        last_seen = corpus.store.last_seen_of(page_ids) if p.recency_half_life_days > 0 else {}
        timings["hydrate"] += (time.perf_counter() - th) * 1000

        td = time.perf_counter()
        scored = []  # (page_id, final score, rollup value, factor, chunk ids)
        for pid, value, cids in pages:
            factor = decay_factor(last_seen[pid], now, p.recency_half_life_days) if p.recency_half_life_days > 0 else 1.0
            scored.append((pid, value * factor, value, factor, cids))
        scored.sort(key=lambda t: (-t[1], t[0]))
        timings["decay"] = (time.perf_counter() - td) * 1000

        th = time.perf_counter()
        pin_kind = dict(pinned_ids)
        by_id = {t[0]: t for t in scored}
        order = [pid for pid, _ in pinned_ids] + [t[0] for t in scored if t[0] not in pin_kind]
        total = len(order)
        window = order[p.offset: p.offset + p.k]
        # Only the returned pages and their snippets are read in full.
        meta = corpus.store.pages_by_id(window)
        snippets_n = corpus.settings.search.snippets_per_page
        snippet_ids = [c for pid in window if pid in by_id for c in by_id[pid][4][:snippets_n]]
        chunk_meta = corpus.store.chunks_by_id(snippet_ids)
        timings["hydrate"] += (time.perf_counter() - th) * 1000

        fused_by_id: dict[int, Fused] = {f.chunk_id: f for f in fused}
        th = time.perf_counter()
        terms = query_terms(req.query) if p.highlight else frozenset()
        hits = []
        for i, pid in enumerate(window):
            m = meta[pid]
            entry = by_id.get(pid)
            score = entry[1] if entry else 0.0
            cids = entry[4] if entry else []
            snippets = [Snippet(chunk_id=c, text=chunk_meta[c]["text"],
                                section_path=list(chunk_meta[c]["section_path"] or []),
                                char_start=chunk_meta[c]["char_start"], char_end=chunk_meta[c]["char_end"],
                                score=chunk_scores[c], highlights=highlight_spans(chunk_meta[c]["text"], terms))
                        for c in cids[:snippets_n]]
            explain = None
            if p.explain:
                explain = self._explain(cids, fused_by_id, rerank_scores, chunk_scores, p, entry, m, now,
                                        pin_kind.get(pid))
            hits.append(PageHit(
                rank=p.offset + i + 1, page_id=pid, url=m["url"], title=m["title"], domain=m["domain"],
                score=score, first_seen=m["first_seen"], last_seen=m["last_seen"], published=m["published"],
                cluster_id=m["cluster_id"], entities=m["entities"], pinned=pin_kind.get(pid),
                snippets=snippets, explain=explain))
        timings["hydrate"] += (time.perf_counter() - th) * 1000

        suggestions = None
        if p.suggestions and order:
            from engine.refind.similar import similar_pages

            ts = time.perf_counter()
            sims = similar_pages(corpus, order[0], "vector", 5, model, scopes=scopes)
            suggestions = Suggestions(source_page_id=order[0], mediation="vector",
                                      pages=[SimilarPage(**s) for s in sims])
            timings["suggestions"] = (time.perf_counter() - ts) * 1000
        timings["total"] = (time.perf_counter() - t0) * 1000
        return SearchResponse(query_id=uuid.uuid4().hex, query=req.query, model=model, k=p.k, offset=p.offset,
                              total=total, pages=hits, suggestions=suggestions,
                              depth={"dense": depth.dense_top_n if p.dense_weight > 0 else 0,
                                     "sparse": depth.sparse_top_n if p.sparse_weight > 0 else 0},
                              timings_ms={k_: round(v, 3) for k_, v in timings.items()})

    def _pins(self, intent, workspace: str, r: Restriction) -> list[tuple[str, str]]:
        store = self.corpus.store
        allowed = r.page_ids
        found = [(pid, "url") for pid in store.pages_with_url(workspace, intent.value)] if intent.kind == "url" else []
        if not found:
            domain = intent.value if intent.kind == "domain" else (
                intent.value.split("/", 1)[0] if "/" not in intent.value.split("?", 1)[0] else None)
            if domain:
                limit = self.corpus.settings.search.pin_domain_max
                found = [(pid, "domain") for pid in store.pages_of_domain(workspace, domain, limit)]
        return [(pid, kind) for pid, kind in found if allowed is None or pid in allowed]

    @staticmethod
    def _explain(cids, fused_by_id, rerank_scores, chunk_scores, p: Params, entry, m, now, pinned) -> PageExplain:
        chunks = []
        for c in cids:
            f = fused_by_id.get(c)
            contrib = {}
            if f is not None:
                contrib = contributions(f, {"dense": p.dense_weight, "sparse": p.sparse_weight}, p.rrf_k)
                if p.rerank and p.rerank_fusion == "rrf" and c in rerank_scores:
                    contrib["rerank"] = chunk_scores[c] - f.score
                    contrib["total"] = chunk_scores[c]
            chunks.append(ChunkExplain(
                chunk_id=c,
                dense=ArmHit(rank=f.ranks["dense"], score=f.arm_scores["dense"]) if f and "dense" in f.ranks else None,
                sparse=ArmHit(rank=f.ranks["sparse"], score=f.arm_scores["sparse"]) if f and "sparse" in f.ranks else None,
                rrf=contrib, rerank=rerank_scores.get(c), score=chunk_scores[c]))
        decay = None
        if p.recency_half_life_days > 0:
            decay = {"half_life_days": p.recency_half_life_days, "age_days": age_days(m["last_seen"], now),
                     "factor": entry[3] if entry else 1.0}
        return PageExplain(chunks=chunks, rollup={"how": p.rollup, "value": entry[2] if entry else 0.0},
                           decay=decay, pinned=pinned, score=entry[1] if entry else 0.0)
