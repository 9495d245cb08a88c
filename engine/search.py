"""SearchService.search: embed, dense + sparse arms in parallel, RRF, rollup, hydrate, slice.

This is the core of the refind pipeline (seed 001). Stages that later work adds (rerank,
filters, recency decay, pinning, explain) slot in between fusion and the final slice.
"""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from .corpus import Corpus
from .fusion import rrf
from .rollup import rollup
from indexes.sparse import SparseFilter


class SearchRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    query: str = Field(min_length=1, max_length=2000, description="What you remember of the page.")
    k: int | None = Field(default=None, ge=1, le=200, description="Pages to return (default from settings).")
    offset: int | None = Field(default=None, ge=0, le=10_000, description="Pages to skip, applied last.")
    workspace: str | None = Field(default=None, max_length=200)
    rollup: Literal["max", "sum", "mean_top2"] | None = None
    rrf_k: float | None = Field(default=None, ge=0)
    dense_top_n: int | None = Field(default=None, ge=1, le=5000)
    sparse_top_n: int | None = Field(default=None, ge=1, le=5000)


class Snippet(BaseModel):
    chunk_id: int
    text: str
    section_path: list[str]
    char_start: int
    char_end: int


class PageHit(BaseModel):
    rank: int
    page_id: str
    url: str
    title: str | None
    domain: str | None
    first_seen: datetime
    last_seen: datetime
    published: datetime | None
    score: float
    entities: list[str]
    snippets: list[Snippet]


class SearchResponse(BaseModel):
    query: str
    model: str
    k: int
    offset: int
    total: int = Field(description="Pages the pipeline ranked before the final slice.")
    results: list[PageHit]
    timings_ms: dict[str, float]


class SearchService:
    def __init__(self, corpus: Corpus):
        self.corpus = corpus
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="search-arm")

    def search(self, req: SearchRequest, model: str | None = None) -> SearchResponse:
        s = self.corpus.settings.search
        model = model or self.corpus.settings.models.active
        workspace = req.workspace or self.corpus.settings.default_workspace
        k = req.k or s.k
        offset = req.offset if req.offset is not None else s.offset
        timings: dict[str, float] = {}
        t0 = time.perf_counter()

        def dense_arm():
            ta = time.perf_counter()
            vec = self.corpus.embedder(model).encode_query(req.query)
            tb = time.perf_counter()
            hits = self.corpus.dense(model).search(vec, req.dense_top_n or s.dense_top_n)
            return hits, (tb - ta) * 1000, (time.perf_counter() - tb) * 1000

        def sparse_arm():
            ta = time.perf_counter()
            hits = self.corpus.sparse.search(req.query, req.sparse_top_n or s.sparse_top_n,
                                             SparseFilter(workspace=workspace))
            return hits, (time.perf_counter() - ta) * 1000

        fd = self._pool.submit(dense_arm)
        fs = self._pool.submit(sparse_arm)
        dense_hits, timings["embed"], timings["dense"] = fd.result()
        sparse_hits, timings["sparse"] = fs.result()

        tf = time.perf_counter()
        chunk_meta = self.corpus.store.chunks_by_id(sorted({c for c, _ in dense_hits} | {c for c, _ in sparse_hits}))
        pages_meta = self.corpus.store.pages_by_id(sorted({m["page_id"] for m in chunk_meta.values()}))
        # The dense arm is not yet filtered inside FAISS by workspace; drop other workspaces here.
        in_ws = {pid for pid, p in pages_meta.items() if p["workspace_id"] == workspace}
        dense_hits = [(c, sc) for c, sc in dense_hits if c in chunk_meta and chunk_meta[c]["page_id"] in in_ws]
        fused = rrf({"dense": dense_hits, "sparse": sparse_hits},
                    {"dense": s.dense_weight, "sparse": s.sparse_weight},
                    req.rrf_k if req.rrf_k is not None else s.rrf_k)
        timings["fusion"] = (time.perf_counter() - tf) * 1000

        tr = time.perf_counter()
        pages = rollup(((f.chunk_id, f.score) for f in fused),
                       lambda c: chunk_meta[c]["page_id"] if c in chunk_meta else None,
                       req.rollup or s.rollup)
        timings["rollup"] = (time.perf_counter() - tr) * 1000

        th = time.perf_counter()
        window = pages[offset: offset + k]
        results = []
        for i, (pid, score, cids) in enumerate(window):
            p = pages_meta[pid]
            snippets = [Snippet(chunk_id=c, text=chunk_meta[c]["text"], section_path=list(chunk_meta[c]["section_path"] or []),
                                char_start=chunk_meta[c]["char_start"], char_end=chunk_meta[c]["char_end"])
                        for c in cids[: s.snippets_per_page]]
            results.append(PageHit(rank=offset + i + 1, page_id=pid, url=p["url"], title=p["title"],
                                   domain=p["domain"], first_seen=p["first_seen"], last_seen=p["last_seen"],
                                   published=p["published"], score=score, entities=p["entities"],
                                   snippets=snippets))
        timings["hydrate"] = (time.perf_counter() - th) * 1000
        timings["total"] = (time.perf_counter() - t0) * 1000
        return SearchResponse(query=req.query, model=model, k=k, offset=offset, total=len(pages),
                              results=results, timings_ms={k_: round(v, 3) for k_, v in timings.items()})
