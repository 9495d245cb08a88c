"""Evidence search's wire schemas: the request (every field but `query` optional; the defaults are
[evidence] settings) and the reply (the packet's path and the operational counts, never the evidence)."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from engine.evidence.maps import slug
from engine.refind.search import SearchFilters

SESSION = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,79}$"


class EvidenceRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    query: str = Field(min_length=1, max_length=2000, description="The question to gather evidence for.")
    workspace: str | None = Field(default=None, max_length=200)
    session_id: str | None = Field(default=None, pattern=SESSION, description=(
        "Names the packet (evidence_packet_{session_id}.md); a later call with the same session appends to "
        "it. Letters, digits, _ and -; a new id is made when absent."))
    topic: str | None = Field(default=None, min_length=1, max_length=120, description=(
        "For parallel searchers of one session: the packet becomes evidence_packet_{session_id}_{topic-slug}.md."))
    max_rounds: int | None = Field(default=None, ge=1, le=20,
                                   description="Searches in this call, all sub-queries together.")
    k: int | None = Field(default=None, ge=1, le=50, description="Pages each round asks of the search pipeline.")
    line_budget: int | None = Field(default=None, ge=1, le=1_000_000,
                                    description="Lines of excerpts read before stopping.")
    min_high_sources: int | None = Field(default=None, ge=1, le=50, description=(
        "High-confidence sources (distinct pages) that are sufficient evidence for a sub-query."))
    decompose: bool = Field(default=True, description="Split comparative or multi-part questions into sub-queries.")
    siblings: bool = Field(default=True, description="Explore the folder or cluster of a new source.")
    filters: SearchFilters | None = Field(default=None, description="Restrictions applied to every round.")
    pages: list[str] | None = Field(default=None, max_length=1000, description=(
        "Pages already known to matter (page ids or URLs): each sub-query searches within them first and the "
        "maps are not consulted (the seed: skip the maps when the graph already gave a precise file list). "
        "Names the workspace does not hold are listed in the packet as `pages_unknown`."))
    route_constraints: list[Literal["map_write"]] = Field(default_factory=list, max_length=10, description=(
        "Permissions the caller grants the search. \"map_write\": write what this call found (each new "
        "source, the sub-query that found it, its group) into the workspace's group maps, where the next "
        "call's map consultation reads it. Off by default."))

    @field_validator("topic")
    @classmethod
    def _topic(cls, v):
        if v is not None and not slug(v):
            raise ValueError("topic needs at least one letter or digit")
        return v


class EvidenceResponse(BaseModel):
    query_id: str
    session_id: str
    path: str = Field(description="The packet, relative to the data dir (agent_reports/…).")
    file: str = Field(exclude=True, description="The packet's absolute path: for local callers (the CLI prints "
                      "it), never serialised into a reply, which names `path` relative to the data dir.")
    appendix_path: str | None = None
    reports_written: int
    sources_found: int = Field(description="Sources in the packet (every call of the session so far).")
    new_sources: int = Field(description="Sources this call added.")
    confidence: dict[str, int]
    key_themes: str
    navigation: dict
    summary: str = Field(description="The seed's return text for an orchestrator.")
