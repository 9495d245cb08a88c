"""Bringing a data dir written by an earlier version up to the store's schema, once, at open.

Schema 2 (identities that cannot collide, engine/core/identity.py): a page of a document scope gets
the id of (workspace, URL, scope), and every entity the id of its namespace (workspace and scope).
Before, a scoped page had the id of (workspace, URL) — another scope's page of the same URL was the
same page — and an entity id was `workspace:id`, which a workspace with a colon in its name could
share with another's. Each page keeps its chunks (and their vectors); each entity a page of scope S
named becomes S's own entity (its name and aliases copied), so no two scopes share one.
"""
from __future__ import annotations

import logging

from indexes.store import SCHEMA_VERSION, CorpusStore, EntityRow

from engine.core.identity import entity_id_for, page_id_for

log = logging.getLogger("refindery.migrations")


def _local(entity_id: str, *workspaces: str) -> str:
    """An entity's own id: its id less the first of `workspaces` it was made under (`<ws>:<id>`)."""
    for ws in workspaces:
        if entity_id.startswith(ws + ":"):
            return entity_id[len(ws) + 1:]
    return entity_id


def to_schema_2(store: CorpusStore) -> dict | None:
    """Re-key a schema-1 store; None when it is at schema 2 already. Returns what moved."""
    if store.schema_version() != "1":
        return None
    rows = store.identity_rows()
    page_of = {pid: (ws, url, scope) for pid, ws, url, scope in rows["pages"]}
    renamed = {}
    for pid, (ws, url, scope) in page_of.items():
        new = page_id_for(ws, url, scope)
        if new != pid:
            renamed[pid] = new
    names = {eid: (ws, canonical, list(aliases or [])) for eid, ws, canonical, aliases in rows["entities"]}
    entities: dict[str, EntityRow] = {}
    links: list[tuple[str, str]] = []

    def keep(new: str, ws: str, scope: str | None, old: str) -> None:
        _, canonical, aliases = names[old]
        row = entities.setdefault(new, EntityRow(new, ws, canonical, [], scope))
        row.aliases = sorted(set(row.aliases) | set(aliases))

    linked = set()
    for pid, eid in rows["links"]:
        if pid not in page_of or eid not in names:
            continue
        ws, _, scope = page_of[pid]
        new = entity_id_for(ws, scope, _local(eid, ws, names[eid][0]))
        keep(new, ws, scope, eid)
        links.append((renamed.get(pid, pid), new))
        linked.add(eid)
    for eid, (ws, _, _) in names.items():
        if eid not in linked:   # an entity no page names: its own workspace's, of no scope
            keep(entity_id_for(ws, None, _local(eid, ws)), ws, None, eid)
    gen = store.rekey(renamed, list(entities.values()), links, SCHEMA_VERSION)
    moved = {"pages_renamed": len(renamed), "entities_before": len(names), "entities_after": len(entities),
             "generation": gen}
    log.warning("store brought to schema %s: %s", SCHEMA_VERSION, moved)
    return moved
