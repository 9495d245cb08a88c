"""The page search's wire schemas — its request (every [search] setting a request may override, declared
once in engine/core/settings.py: SearchSettings), filters, reply, hits, snippets and explain — and
`Params`, one search's settings with the request's values."""
from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from pydantic import (BaseModel, ConfigDict, Field, SkipValidation, TypeAdapter, create_model, field_serializer,
                      field_validator)

from indexes.sparse import DATE_MAX, DATE_MIN

from engine.core.settings import SearchSettings, request_fields
from engine.core.values import Int64


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
    rollup: dict[str, Any] = Field(description="how: the rollup; value: the page's value after it and after focus.")
    focus: dict[str, float | str] | None = Field(None, description=(
        "Focus, when on (engine/refind/focus.py): form, strength and slack; chunks_matched (the page's chunks "
        "among the candidates) and chunks (all its chunks); results_page (the multiplier a search results page "
        "takes, 1 for any other page); factor (what the rolled-up value was multiplied by, results_page "
        "included); before and after (the value)."))
    decay: dict[str, float] | None = Field(description=(
        "Recency, when on. recency_mode band: half_life_days, age_days, band_width, and band (the page's "
        "recency band, from 1: pages of one band are about as relevant and ordered by last_seen) and level "
        "(its arm level, which the band compares); with recency_visits_days or recency_bookmark_days, visits, "
        "bookmarked (1 or 0) and credit_days (how much later than its last_seen the page is ordered in its band). "
        "recency_mode decay: half_life_days, weight, age_days and factor (the score's multiplier)."))
    pinned: str | None
    shortcut: str | None = Field(None, description='Why the page came first as a shortcut: "chosen on DATE for '
                                                   'QUERY" (the search whose feedback chose it).')
    score: float


class ShortcutHit(BaseModel):
    """The choice that put a page first (engine/refind/shortcuts.py)."""
    query_id: str = Field(description="The logged search the page was chosen for.")
    query: str
    chosen_at: datetime
    kind: str = Field(description="The feedback that chose it: found or click.")
    by: str = Field(description='"words" (terms in common) or "meaning" (the queries\' vectors).')
    closeness: float = Field(description="The share of terms in common, or the cosine, that qualified it.")

    @field_serializer("chosen_at")
    def _rfc3339(self, v: datetime) -> str:
        return (v if v.tzinfo else v.replace(tzinfo=timezone.utc)).isoformat().replace("+00:00", "Z")


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
    shortcut: ShortcutHit | None = Field(default=None, description="Set when the page comes first because it was "
                                                                   "chosen for a close query before (shortcuts).")
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


class CatchUp(BaseModel):
    """The searched embedder is still catching up (the quality profile: docs/operations.md, "Profiles"):
    the dense arm ranked by it the chunks it covers and by `stand_in` the `waiting` ones it does not yet."""
    model: str
    coverage: float = Field(description="Share of the chunks the model has embedded (0..1).")
    waiting: int = Field(description="Chunks that wait for the model: the stand-in ranked them.")
    stand_in: str


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
    catch_up: CatchUp | None = Field(None, description="Present while the searched embedder catches up.")


REQUEST_PARAMS = tuple(request_fields(SearchSettings))
_REQUEST_SET = frozenset(REQUEST_PARAMS)


class Params(SearchSettings):
    """One search's parameters: the [search] settings with the request's overrides, its workspace and
    whether it explains (SearchService.params). Frozen: one is shared by the searches asking the same."""
    model_config = ConfigDict(frozen=True)
    workspace: str
    explain: bool = False
