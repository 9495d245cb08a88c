"""Imports (a browser's history: `refindery import history`): where each stands."""
from __future__ import annotations

from typing import Literal

from fastapi import Depends
from pydantic import BaseModel, ConfigDict, Field

from engine.app import Engine
from engine.core.access import Grant
from engine.core.values import StorableDate, Text
from engine.ingest.imports import Entry
from engine.ingest.records import EntityInput

from .deps import current_grant, engine, router

router = router(tags=["imports"])


class ImportEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")
    url: Text = Field(min_length=1, max_length=8192)
    title: Text | None = Field(default=None, max_length=2000)
    visits: list[StorableDate] = Field(default_factory=list, max_length=10_000, description="The visits' times.")
    entities: list[EntityInput] = Field(default_factory=list, max_length=32, description=(
        "Entities the page is linked to (a bookmark's folders, \"bookmarked\")."))
    first_seen: StorableDate | None = Field(default=None, description="A page with no visit: when first known.")


class ImportBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: Literal["history", "bookmarks"]
    source: Text = Field(min_length=1, max_length=4096, description=(
        "What was read (a file's path on the sender's machine): with the kind and the workspace it names "
        "the import, so a batch sent again, or the next batch, joins the same import."))
    entries: list[ImportEntry] = Field(min_length=1, max_length=5000)
    fetch: bool = Field(True, description="Fetch the pages' texts (in the background); false: titles and URLs only.")
    skip: Text = Field("", max_length=100_000, description="Skip rules, one per line (as the extension's).")
    allow: Text = Field("", max_length=100_000, description="Allow rules: only what one names is imported.")
    since: StorableDate | None = Field(default=None, description="Said in the import's options (the sender filtered).")
    workspace: str | None = Field(default=None, max_length=200)


@router.post("/v1/imports", status_code=202)
def start_import(body: ImportBody, e: Engine = Depends(engine), g: Grant = Depends(current_grant)) -> dict:
    """One batch of an import (`refindery import history|bookmarks` sends the file it read in batches):
    the pages and visits are written before the reply — found by their titles and URLs at once — and
    their texts are fetched politely in the background by this server. GET /v1/imports/{id} follows it."""
    entries = [Entry(x.url, x.title, list(x.visits), list(x.entities), x.first_seen) for x in body.entries]
    return e.start_import(entries, body.kind, body.source, body.workspace, fetch=body.fetch, skip=body.skip,
                          allow=body.allow, since=body.since, caller=g)


@router.get("/v1/imports")
def imports(e: Engine = Depends(engine), g: Grant = Depends(current_grant)) -> dict:
    """The imports of the workspaces the key may read, newest first, each with its counts per status."""
    return {"imports": e.imports(g)}


@router.get("/v1/imports/{import_id}")
def import_status(import_id: str, e: Engine = Depends(engine), g: Grant = Depends(current_grant)) -> dict:
    """An import's URLs counted by status — queued (text to fetch), fetched, present (its page had its
    text), titles (kept without fetching), skipped (a rule, a scheme, a type), failed — and the skips and
    failures with their reasons (the first 50)."""
    return e.import_status(import_id, g)
