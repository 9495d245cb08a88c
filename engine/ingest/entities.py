"""Entities edited after ingest: create or change one, add aliases, link pages to it."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from indexes.store import EntityRow

from engine.core.corpus import Corpus
from engine.core.errors import PageNotFound
from engine.ingest.pipeline import entity_rows
from engine.ingest.records import EntityInput


class EntityUpsert(BaseModel):
    model_config = ConfigDict(extra="forbid")
    canonical: str = Field(min_length=1, max_length=300, description="The entity's canonical form.")
    aliases: list[str] = Field(default_factory=list, max_length=100, description="Other names it goes by.")
    id: str | None = Field(default=None, max_length=200, description="Stable id (default: from the canonical form).")
    workspace: str | None = Field(default=None, max_length=200)
    pages: list[str] = Field(default_factory=list, max_length=10_000, description="Page ids to link to it.")
    replace_aliases: bool = Field(default=False, description="Replace the alias list instead of adding to it.")


def upsert_entity(corpus: Corpus, req: EntityUpsert) -> dict:
    ws = req.workspace or corpus.settings.default_workspace
    row: EntityRow = entity_rows(ws, [EntityInput(canonical=req.canonical, aliases=req.aliases, id=req.id)])[0]
    with corpus.write_lock:
        known = corpus.store.pages_by_id(list(dict.fromkeys(req.pages)))
        for pid in req.pages:
            if pid not in known or known[pid]["workspace_id"] != ws:
                raise PageNotFound(f"no page with id {pid!r} in workspace {ws!r}", ref=pid)
        gen = corpus.store.upsert_entity(row, list(dict.fromkeys(req.pages)), req.replace_aliases)
        corpus.sync_pages(gen)
    return corpus.store.entity(row.entity_id)
