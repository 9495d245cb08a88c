"""SearchService.search — the refind pipeline of seed 001, stage by stage:

    embed query ─▶ dense top-N ┐
    bm25 ───────▶ sparse top-N ┴▶ RRF ▶ rerank (optional) ▶ rollup · focus ▶ hydrate · decay · pin ▶ slice
                                                      (a shortcut's page first, after a URL pin)

Filters are pushed into both arms (tantivy filter clauses; a FAISS IDSelector), never applied
after the fact. Paging is the very last step, so pages never move between offsets.

This module runs the arms and the stages in order; each stage is a module of its own: `restriction.py`
(the filters and scopes pushed into both arms), `fusion.py`, `rerank.py`, `rollup.py`, `ranking.py`
(recency and order), `pinning.py`, `shortcuts.py`, `hydrate.py`, `explain.py`, over the records of
`candidates.py`, timed by `timing.py`.
"""
from __future__ import annotations

import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime

import numpy as np

from indexes.dense import set_search_threads, with_search_threads
from indexes.backends import BackendUnavailable
from models.registry import ModelNotFound

from engine.core.clock import utcnow
from engine.core.corpus import Corpus, Coverage
from engine.core.identity import named_workspace
from engine.core.errors import EngineError, IndexUnavailable, ModelUnavailable
from engine.core.querylog import LogEntry
from engine.refind.candidates import ArmResults, Candidates, Restriction
from engine.refind.fusion import fuse, merge_catching_up, rrf_arrays
from engine.refind.pinning import lead_first, pin_intent, pinned_pages
from engine.refind.ranking import page_levels, rank_pages, title_cover, visit_credit_us
from engine.refind.recency import recency_on
from engine.refind.rollup import rollup_rows
from engine.refind.focus import focus
from engine.refind.hydrate import hydrate
from engine.refind.rerank import rerank_chunks
from engine.refind.restriction import restriction
from engine.refind.shortcuts import Serving, Shortcut, Shortcuts
# the wire schemas live in engine/refind/schema.py; the faces import the request and reply from here too
from engine.refind.schema import (_REQUEST_SET, CatchUp, Params, SearchFilters, SearchRequest, SearchResponse,
                                  SimilarPage, Suggestions)
from engine.refind.timing import ArmClock, StageTimer


class SearchService:
    def __init__(self, corpus: Corpus, search_settings=None):
        """`search_settings` overrides the corpus's [search] defaults (replay under another config)."""
        self.corpus = corpus
        # the corpus's parts a search reads, named once here (the corpus keeps them in step)
        self.store, self.sparse, self.querylog = corpus.store, corpus.sparse, corpus.querylog
        self.registry = corpus.registry
        self.defaults = search_settings or corpus.settings.search
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="search-arm",
                                        initializer=set_search_threads,
                                        initargs=(corpus.settings.index.search_threads,))
        self._clock = ArmClock()
        self._params: dict[tuple, Params] = {}
        self.shortcuts = Shortcuts(corpus.querylog, corpus.embedder)

    # Parameters and filters ----------------------------------------------------------------------
    def params(self, req: SearchRequest) -> Params:
        """The request's parameters: the [search] settings with its overrides. Made once per distinct
        set of overrides (a Params is frozen, so one can be shared; validating one cost ~20 µs)."""
        overrides = tuple(sorted((k, v) for k in req.model_fields_set & _REQUEST_SET
                                 if (v := getattr(req, k)) is not None))
        key = (overrides, named_workspace(req.workspace), req.explain)
        p = self._params.get(key)
        if p is None:
            if len(self._params) >= 1024:
                self._params.clear()
            p = self._params[key] = Params(**(self.defaults.model_dump() | dict(overrides)),
                                           workspace=key[1], explain=req.explain)
        return p

    # The arms ---------------------------------------------------------------------------------
    def run_sparse(self, query: str, p: Params, r: Restriction) -> tuple[list[tuple[int, float]], float]:
        t = time.perf_counter()
        try:
            hits = self.sparse.search(query, p.sparse_top_n, r.sparse, p.bm25_k3)
        except BackendUnavailable as exc:
            raise IndexUnavailable(str(exc), index="sparse") from exc
        return hits, (time.perf_counter() - t) * 1000

    def run_dense(self, query: str, model: str, p: Params, r: Restriction, meanwhile=None,
                  before_dense=None, coverage: Coverage | None = None) -> tuple[list[tuple[int, float]], float, float]:
        """The query's encoding and the FAISS search; `meanwhile` is called once when the encoder is
        about to run (Embedder.encode_query), `before_dense` between the encoding and the search.
        With `coverage` (`model` is catching up: Corpus.coverage), the fast stand-in's hits among the
        chunks `model` has not embedded yet are merged in by estimated rank (fusion.merge_catching_up)."""
        hits, embed_ms, dense_ms = self._dense_of(query, model, p, r, meanwhile, before_dense)
        if coverage is None:
            return hits, embed_ms, dense_ms
        stand_in, e2, d2 = self._dense_of(query, coverage.fast, p, r)
        ids = np.fromiter((c for c, _ in stand_in), dtype=np.int64, count=len(stand_in))
        waiting = ~coverage.holds(ids)
        stand_in = [h for h, w in zip(stand_in, waiting) if w]
        return merge_catching_up(hits, stand_in, coverage.fraction, p.dense_top_n), embed_ms + e2, dense_ms + d2

    def _dense_of(self, query: str, model: str, p: Params, r: Restriction, meanwhile=None,
                  before_dense=None) -> tuple[list[tuple[int, float]], float, float]:
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
        except BackendUnavailable as exc:
            raise IndexUnavailable(str(exc), index=f"dense:{model}") from exc
        return hits, (t2 - t) * 1000, (time.perf_counter() - t2) * 1000

    def arms(self, query: str, model: str, p: Params, r: Restriction,
             sparse: list[tuple[int, float]] | None = None, coverage: Coverage | None = None) -> ArmResults:
        """Both arms concurrently: the sparse arm on the pool, the dense arm (the query's encoding and
        FAISS) on the calling thread — one hand-off fewer than both on the pool. When the sparse arm
        starts is chosen from the two arms' recent times (`ArmClock`): while it has taken no longer
        than FAISS, it starts once the query is encoded and runs beside FAISS, which searches on one
        thread (the encoder's threads stop spinning as its run returns), so the other core is free;
        when it takes longer (a large BM25 index), it starts as the encoder starts, to overlap as
        much as it can (started earlier, its Python would take the GIL the tokeniser needs). The
        measurements behind each choice are in docs/benchmarks.md ("Where the arms run"). An arm
        whose weight is 0 is not run. A precomputed sparse list (compare shares one across
        embedders) is used as given."""
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
                    start_sparse if late else None, coverage)
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
        return self.run_sparse(req.query, p, restriction(self.corpus, p.workspace, req.filters, scopes=scopes))

    # The pipeline -------------------------------------------------------------------------------
    def search(self, req: SearchRequest, model: str | None = None, now: datetime | None = None,
               sparse: list[tuple[int, float]] | None = None, log: bool = True,
               trace: dict | None = None, scopes: tuple[str, ...] | None = None,
               chooser: str | None = None) -> SearchResponse:
        """Run the pipeline, logged unless `log` is False (compare logs its arms itself); `trace` receives the
        intermediate lists; `scopes`: what a key may read (engine/access.py); `chooser`: the key searching."""
        trace = {} if trace is None else trace
        trace["chooser"] = chooser
        try:
            resp = self._search(req, model, now, sparse, trace, scopes)
        except EngineError as exc:
            if log:
                self.querylog.record(LogEntry(
                    query_id=uuid.uuid4().hex, endpoint="search", workspace=req.workspace, query=req.query,
                    params=req.model_dump(mode="json", exclude_none=True), models=[model or self.corpus.settings.models.active],
                    error_type=exc.type, error_title=exc.title, scopes=_scope_list(scopes)))
            raise
        if log and self.querylog.enabled:   # the entry's rows are built only for a log that keeps them
            self.querylog.record(self.log_entry("search", req, resp, trace))
        return resp

    def log_entry(self, endpoint: str, req: SearchRequest, resp: "SearchResponse", trace: dict,
                  shared_sparse: bool = False) -> LogEntry:
        e = LogEntry(query_id=resp.query_id, endpoint=endpoint, workspace=trace.get("workspace"), query=req.query,
                     params=req.model_dump(mode="json", exclude_none=True), models=[resp.model],
                     timings=resp.timings_ms, total=resp.total, returned=len(resp.pages),
                     pinned={h.page_id: h.pinned or f"shortcut:{h.shortcut.query_id}" for h in resp.pages
                             if h.pinned or h.shortcut},
                     scopes=_scope_list(trace.get("scopes")))
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
        # a page put first by a shortcut is logged as placed by it: "shortcut:<the choosing query's id>"
        results = [(m, h.rank, h.page_id, h.score,
                    h.pinned or (f"shortcut:{h.shortcut.query_id}" if h.shortcut else None)) for h in resp.pages]
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
            restricted = restriction(self.corpus, p.workspace, req.filters, snapshot, scopes)
        coverage = (self.corpus.coverage(snapshot)
                    if model == self.corpus.settings.catch_up_model and p.dense_weight > 0 else None)
        cands = self._candidates(req.query, model, p, restricted, sparse, snapshot, timer, coverage)
        trace.update(workspace=p.workspace, candidates=cands, scopes=scopes)
        ids, scores, rolled, rerank_scores = cands.ids, cands.scores, cands.rolled, {}   # best first, ties by chunk id
        if p.rerank:
            with timer("rerank"):
                chunk_scores, rerank_scores = rerank_chunks(self.store, self.registry, self.corpus.settings.models,
                                                             req.query, p, cands)
                reranked = trace["reranked"] = sorted(chunk_scores.items(), key=lambda t: (-t[1], t[0]))
                ids = np.array([c for c, _ in reranked], dtype=np.int64)
                scores = np.array([s for _, s in reranked], dtype=np.float64)
            with timer("rollup"):
                rolled = focus(rollup_rows(cands.view.chunk_rows(ids), scores, p.rollup), cands.view, p.focus,
                               p.focus_form, p.focus_slack, p.focus_results_page)
        with timer("hydrate"):
            intent = pin_intent(req.query) if p.pin else None
            found = pinned_pages(self.store, intent, p.workspace, restricted.page_ids,
                                 self.corpus.settings.search.pin_domain_max, scopes) if intent else []
            # a page written after this request's view waits for the next
            pinned = {pid: kind for pid, kind in found if pid in cands.view.row_of}
        shortcut = None
        if p.shortcuts:
            with timer("shortcuts"):
                shortcut = trace["shortcut"] = self._shortcut(req.query, model, p, cands.view, rolled, scopes, trace)
        with timer("decay"):
            ranked = self._ranked(req.query, p, cands, rolled, ids, scores, now,
                                  # (a shortcut's page may lie anywhere in the ranking: every page is put in order)
                                  None if shortcut else p.offset + p.k + len(pinned))
        order, total = ranked.page_ids, ranked.total
        if pinned or shortcut:
            order, total = lead_first(order, total, pinned, shortcut.choice.page_id if shortcut else None,
                                      cands.view, rolled.pages)
        window = order[p.offset: p.offset + p.k]
        with timer("hydrate"):
            hits = hydrate(self.store, self.corpus.settings.search.snippets_per_page, req.query, window, ranked,
                           pinned, cands, rerank_scores, p, now, shortcut)
        suggestions = None
        if p.suggestions and order:
            with timer("suggestions"):
                suggestions = self._suggestions(order[0], model, scopes)
        timer.stop("total")
        return SearchResponse(query_id=uuid.uuid4().hex, query=req.query, model=model, k=p.k, offset=p.offset,
                              total=total, pages=hits, suggestions=suggestions,
                              depth={"dense": cands.depth.dense_top_n if p.dense_weight > 0 else 0,
                                     "sparse": cands.depth.sparse_top_n if p.sparse_weight > 0 else 0},
                              timings_ms=timer.as_dict(),
                              catch_up=None if coverage is None else CatchUp(
                                  model=model, coverage=round(coverage.fraction, 4), waiting=coverage.left,
                                  stand_in=coverage.fast))

    @staticmethod
    def _ranked(query: str, p: Params, cands: Candidates, rolled, ids: np.ndarray, scores: np.ndarray,
                now: datetime, top: int | None):
        """The pages in order — recency off, banded by arm levels, or decayed (ranking.py) — the first
        `top` of them at least (None: every page)."""
        on = recency_on(p.recency_half_life_days, p.recency_mode, p.recency_weight)
        levels = page_levels(p, cands, rolled) if on and p.recency_mode == "band" else None
        titles = ((*title_cover(query, cands.view, rolled.pages), p.recency_title_band)
                  if levels is not None and p.recency_title_band > 0 else None)
        credit = (visit_credit_us(cands.view, rolled.pages, p.recency_visits_days, p.recency_bookmark_days)
                  if levels is not None else None)
        return rank_pages(rolled, ids, scores, cands.view, now, p.recency_half_life_days if on else 0.0,
                          p.recency_weight if on else 0.0, top=top, levels=levels, band=p.recency_band,
                          titles=titles, credit_us=credit)

    def _candidates(self, query: str, model: str, p: Params, restriction: Restriction,
                    sparse: list[tuple[int, float]] | None, snapshot, timer: "StageTimer",
                    coverage: Coverage | None = None) -> Candidates:
        """Both arms, fused. When the chunks roll up to fewer than min_candidate_pages pages and an arm
        was cut off at its depth, the depth doubles (up to max_top_n). The rule never looks at k or
        offset, so every page of a query is a slice of one and the same ranking."""
        settings = self.corpus.settings.search
        depth = p
        timer.add("fusion", 0.0)
        while True:
            arms = self.arms(query, model, depth, restriction, sparse, coverage)
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
                if not p.rerank:   # (with rerank on, focus weighs the reranked rollup: _search)
                    with timer("rollup"):
                        rolled = focus(rolled, snapshot, p.focus, p.focus_form, p.focus_slack, p.focus_results_page)
                return Candidates(ids, scores, rows, rolled, arms.dense, arms.sparse, depth, snapshot, args, fused)
            depth = depth.model_copy(update={"dense_top_n": min(depth.dense_top_n * 2, settings.max_top_n),
                                             "sparse_top_n": min(depth.sparse_top_n * 2, settings.max_top_n)})

    def _shortcut(self, query: str, model: str, p: Params, view, rolled, scopes, trace: dict) -> Shortcut | None:
        """The page chosen before for a close query, when it is among this search's candidates
        (engine/refind/shortcuts.py), of the choices that serve the key searching (trace["chooser"])."""
        def is_candidate(page_ids: list[str]) -> np.ndarray:
            rows = np.fromiter((view.row_of.get(pid, -1) for pid in page_ids), dtype=np.int64, count=len(page_ids))
            return (rows >= 0) & np.isin(rows, rolled.pages)

        return self.shortcuts.match(p.workspace, query, model, scopes, is_candidate, p.shortcut_min_similarity,
                                    p.shortcut_min_overlap, Serving.of(self.defaults, trace.get("chooser")))

    def _suggestions(self, source_page: str, model: str, scopes: tuple[str, ...] | None) -> Suggestions:
        from engine.refind.similar import similar_pages

        sims = similar_pages(self.corpus, source_page, "vector", 5, model, scopes=scopes)
        return Suggestions(source_page_id=source_page, mediation="vector", pages=[SimilarPage(**x) for x in sims])


def _scope_list(scopes) -> list[str] | None:
    """The document scopes an execution ran within, as the query log keeps them (None: every scope)."""
    return sorted(scopes) if scopes is not None else None
