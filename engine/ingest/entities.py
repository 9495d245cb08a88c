"""Entities edited after ingest: create or change one, add aliases, link pages to it.

An entity belongs to one namespace: a workspace and a document scope (none, or one scope), the same
as the pages that name it (engine/core/identity.py). A caller edits and links only in a namespace its
grant writes (Grant.write_scope); an entity of another workspace or scope is never reached — an id it
names there is a new entity of its own namespace — and a page outside its grant is not found.
"""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from indexes.store import MAX_ALIAS_CHARS, MAX_ALIASES

from engine.core.access import OPEN, Grant
from engine.core.corpus import Corpus
from engine.core.errors import EngineError, PageNotFound
from engine.core.values import Name
from engine.ingest.prepare import entity_rows
from engine.ingest.records import Alias, EntityInput


class EntityScopeMismatch(EngineError):
    status, type = 422, "entity_scope_mismatch"


class TooManyAliases(EngineError):
    status, type = 422, "too_many_aliases"


class EntityUpsert(BaseModel):
    model_config = ConfigDict(extra="forbid")
    canonical: str = Field(min_length=1, max_length=300, description="The entity's canonical form.")
    aliases: list[Alias] = Field(default_factory=list, max_length=MAX_ALIASES, description=(
        f"Other names it goes by: an entity holds at most {MAX_ALIASES}, each of at most {MAX_ALIAS_CHARS} "
        "characters (the ones it has and these together, unless replace_aliases)."))
    id: Name | None = Field(default=None, max_length=200, description="Stable id (default: from the canonical form).")
    workspace: str | None = Field(default=None, max_length=200)
    scope: str | None = Field(default=None, max_length=200, description=(
        "The document scope the entity belongs to, with the pages it may link (absent: no scope; a key with "
        "one document scope writes in that one)."))
    pages: list[str] = Field(default_factory=list, max_length=10_000, description="Page ids to link to it.")
    replace_aliases: bool = Field(default=False, description="Replace the alias list instead of adding to it.")


def upsert_entity(corpus: Corpus, req: EntityUpsert, workspace: str, scope: str | None,
                  caller: Grant = OPEN) -> dict:
    """`workspace` and `scope`: the namespace, already resolved against the caller's grant."""
    row = entity_rows(workspace, scope, [EntityInput(canonical=req.canonical, aliases=req.aliases, id=req.id)])[0]
    pages = list(dict.fromkeys(req.pages))
    with corpus.write_lock:
        known = corpus.store.pages_by_id(pages)
        for pid in pages:
            meta = known.get(pid)
            if meta is None or meta["workspace_id"] != workspace or not caller.may_see(meta["scope"]):
                raise PageNotFound(f"no page with id {pid!r} in workspace {workspace!r}", ref=pid)
            if meta["scope"] != scope:
                raise EntityScopeMismatch(
                    f"page {pid!r} is of " + (f"scope {meta['scope']!r}" if meta["scope"] else "no scope")
                    + "; the entity is of " + (f"scope {scope!r}" if scope else "no scope")
                    + ": an entity links only pages of its own scope", ref=pid)
        if not req.replace_aliases:
            held = (corpus.store.entity(row.entity_id) or {}).get("aliases") or []
            total = len(set(held) | set(row.aliases))
            if total > MAX_ALIASES:
                raise TooManyAliases(f"entity {row.entity_id!r} would hold {total} aliases; an entity holds at most "
                                     f"{MAX_ALIASES} (send replace_aliases to replace them)", ref=row.entity_id,
                                     limit=MAX_ALIASES, aliases=total)
        gen = corpus.store.upsert_entity(row, pages, req.replace_aliases)
        corpus.sync_pages(gen)
    return corpus.store.entity(row.entity_id)
