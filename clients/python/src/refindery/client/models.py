"""The server's request and reply shapes, as the client sends and reads them.

Every model here names a schema of the server's OpenAPI document (`GET /openapi.json`) and has exactly
its fields, required where the server requires them — the repository's tests compare the two and fail
on any drift. Replies accept fields a newer server adds (`extra="allow"`); requests refuse names the
server does not take (a typo fails before it is sent).
"""
from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict


class Reply(BaseModel):
    model_config = ConfigDict(extra="allow")


class Request(BaseModel):
    model_config = ConfigDict(extra="forbid")

    def body(self) -> dict[str, Any]:
        """The JSON body: the fields set (unset ones take the server's defaults)."""
        return self.model_dump(mode="json", exclude_none=True)


# Requests -------------------------------------------------------------------------------------------

class SearchFilters(Request):
    domain: list[str] | None = None
    after: datetime | None = None
    before: datetime | None = None
    cluster_id: list[int] | None = None
    entity: list[str] | None = None
    page_id: list[str] | None = None


class SearchRequest(Request):
    query: str
    workspace: str | None = None
    filters: SearchFilters | None = None
    explain: bool | None = None
    k: int | None = None
    offset: int | None = None
    dense_top_n: int | None = None
    sparse_top_n: int | None = None
    fusion: Literal["rrf", "linear"] | None = None
    normalizer: Literal["minmax", "zscore", "l2", "dbsf"] | None = None
    rrf_k: float | None = None
    dense_weight: float | None = None
    sparse_weight: float | None = None
    bm25_k3: float | None = None
    rollup: Literal["max", "sum", "mean_top2"] | None = None
    focus: float | None = None
    focus_form: Literal["share", "length"] | None = None
    focus_slack: float | None = None
    focus_results_page: float | None = None
    recency_half_life_days: float | None = None
    recency_mode: Literal["band", "decay"] | None = None
    recency_band: float | None = None
    recency_title_band: float | None = None
    recency_visits_days: float | None = None
    recency_bookmark_days: float | None = None
    recency_weight: float | None = None
    rerank: bool | None = None
    rerank_n: int | None = None
    rerank_fusion: Literal["replace", "rrf"] | None = None
    rerank_weight: float | None = None
    pin: bool | None = None
    shortcuts: bool | None = None
    shortcut_min_similarity: float | None = None
    shortcut_min_overlap: float | None = None
    suggestions: bool | None = None
    highlight: bool | None = None


class CompareRequest(SearchRequest):
    models: list[str]
    rbo_p: float | None = None


class PagesUpsert(Request):
    pages: list[dict[str, Any]]
    workspace: str | None = None


class FeedbackIn(Request):
    query_id: str
    page_id: str
    kind: Literal["click", "found", "irrelevant"]


class RelationSearchRequest(Request):
    workspace_id: str
    constraints: list[Any] | None = None
    brief: str | None = None
    idea: str | None = None
    criteria: list[str] | None = None
    as_of: str | None = None
    limit: int | None = None
    offset: int | None = None
    list_limit: int | None = None
    entity_ids: list[str] | None = None
    detail: Literal["full", "compact"] | None = None


class EvidenceRequest(Request):
    query: str
    workspace: str | None = None
    session_id: str | None = None
    topic: str | None = None
    max_rounds: int | None = None
    k: int | None = None
    line_budget: int | None = None
    min_high_sources: int | None = None
    decompose: bool | None = None
    siblings: bool | None = None
    filters: SearchFilters | None = None
    pages: list[str] | None = None
    route_constraints: list[Literal["map_write"]] | None = None


# Replies --------------------------------------------------------------------------------------------

class Snippet(Reply):
    chunk_id: int
    text: str
    section_path: list[str]
    char_start: int
    char_end: int
    score: float
    highlights: list[tuple[int, int]] = []


class ArmHit(Reply):
    rank: int
    score: float


class ChunkExplain(Reply):
    chunk_id: int
    dense: ArmHit | None
    sparse: ArmHit | None
    rrf: dict[str, float]
    normalised: dict[str, float] | None = None
    rerank: float | None
    score: float


class PageExplain(Reply):
    chunks: list[ChunkExplain]
    rollup: dict[str, Any]
    focus: dict[str, float | str] | None = None
    decay: dict[str, float] | None
    pinned: str | None
    shortcut: str | None = None
    score: float


class ShortcutHit(Reply):
    """Why a page came first: it was chosen (found / click) for a close query before."""
    query_id: str
    query: str
    chosen_at: datetime
    kind: str
    by: str
    closeness: float


class PageHit(Reply):
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
    pinned: str | None = None
    shortcut: ShortcutHit | None = None
    snippets: list[Snippet]
    explain: PageExplain | None = None


class SimilarPage(Reply):
    page_id: str
    url: str
    title: str | None
    score: float


class Suggestions(Reply):
    source_page_id: str
    mediation: str
    pages: list[SimilarPage]


class CatchUp(Reply):
    """The searched embedder is still catching up: it ranked the chunks it covers, `stand_in` the rest."""
    model: str
    coverage: float
    waiting: int
    stand_in: str


class SearchResponse(Reply):
    query_id: str
    query: str
    model: str
    k: int
    offset: int
    total: int
    depth: dict[str, int]
    pages: list[PageHit]
    timings_ms: dict[str, float]
    suggestions: Suggestions | None = None
    catch_up: CatchUp | None = None


class Agreement(Reply):
    model_a: str
    model_b: str
    k: int
    jaccard: float
    rbo_ext: float
    rbo_p: float
    kendall_tau_b: float | None
    shared: int


class CompareResponse(Reply):
    query_id: str
    query: str
    k: int
    sparse_shared: bool
    runs: list[SearchResponse]
    agreement: list[Agreement]
    timings_ms: dict[str, float]


class UpsertItem(Reply):
    index: int
    page_id: str | None
    url: str | None
    status: str
    error: str | None = None


class UpsertResponse(Reply):
    errors: bool
    items: list[UpsertItem]
    summary: dict[str, Any]


class EvidenceResponse(Reply):
    query_id: str
    session_id: str
    path: str
    appendix_path: str | None = None
    reports_written: int
    sources_found: int
    new_sources: int
    confidence: dict[str, int]
    key_themes: str
    navigation: dict[str, Any]
    summary: str


# Replies the server describes as plain objects (no schema of their own to compare): the fields this
# client reads, and whatever else the server sends.

class Page(Reply):
    """GET /v1/pages/{id}: the page's row and its chunks."""
    page_id: str
    url: str
    title: str | None = None


class SimilarResponse(Reply):
    page_id: str
    mediation: str
    pages: list[dict[str, Any]]


class RelationSearchResponse(Reply):
    """POST /v1/public/search: the closed set with its warrant (`detail: "full"`) or the compact reply;
    every field as the server sends it (attribute access, or `.model_dump()`)."""


class FactsResponse(Reply):
    """POST /v1/public/facts."""
