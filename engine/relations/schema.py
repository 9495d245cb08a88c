"""The relation search request: the fields of POST /v1/public/search and MCP limma_search, declared once."""
from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints


class RelationSearchRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    workspace_id: str = Field(min_length=1, max_length=100)
    constraints: list[Any] | None = Field(
        default=None, description="[{relation, slot, op, value, brief_span?, required?}] — or send `brief`.")
    brief: str | None = Field(default=None, max_length=4000,
                              description="The request in plain language (needs a compile model).")
    idea: str | None = Field(default=None, min_length=1, max_length=2000,
                             description="A question about an idea, answered over the parts of the documents.")
    criteria: list[Annotated[str, StringConstraints(min_length=3, max_length=500)]] | None = Field(
        default=None, max_length=5,
        description="Conditions no relation expresses, read from each candidate's own documents.")
    as_of: str | None = Field(default=None, pattern=r"^\d{4}-(0[1-9]|1[0-2])$",
                              description="YYYY-MM: the month the rows are tested at.")
    limit: int | None = Field(default=None, ge=0, le=500,
                              description="Matches on this page (default 50; 25 with detail compact); "
                                          "the counts stay whole.")
    offset: int = Field(default=0, ge=0, le=1_000_000_000, description="Matches to skip (paging).")
    list_limit: int | None = Field(default=None, ge=0, le=200,
                                   description="Bound on every list of non-matches (default 200).")
    entity_ids: list[str] | None = Field(default=None, max_length=500,
                                         description="Deliver only these entities (counts stay of the whole set).")
    detail: Literal["full", "compact"] = Field(
        default="full", description="full: the whole warrant; compact: the matches, why, who, counts of the rest")
