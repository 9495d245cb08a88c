"""A record as the page it writes: checked, in the scope its caller may write, its text extracted, its
ids (page, entities, chunks) derived, and the hash that tells a re-visit from a change."""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

from indexes.store import EntityRow

from engine.core.access import OPEN, Grant
from engine.core.errors import EngineError
from engine.core.identity import entity_id_for, page_id_for
from engine.core.urls import normalize_url
from engine.ingest.extract import html_to_text
from engine.ingest.records import EntityInput, PageInput


@dataclass
class _Prepared:
    index: int
    source: str
    page: PageInput
    page_id: str
    url_norm: str
    body: str
    title: str | None
    content_hash: str
    entities: list[EntityRow]
    scope: str | None


def _slug(text: str) -> str:
    s = re.sub(r"[^\w]+", "-", text.strip().lower()).strip("-")
    return s[:80] or hashlib.sha1(text.encode()).hexdigest()[:12]


def entity_rows(workspace: str, scope: str | None, items: list[str | EntityInput]) -> list[EntityRow]:
    """The entity rows of a namespace (workspace and document scope) that these items name."""
    out: dict[str, EntityRow] = {}
    for it in items:
        ent = EntityInput(canonical=it) if isinstance(it, str) else it
        if not ent.canonical.strip():
            continue
        eid = entity_id_for(workspace, scope, ent.id or _slug(ent.canonical))
        row = out.setdefault(eid, EntityRow(eid, workspace, ent.canonical.strip(), [], scope))
        row.aliases = sorted(set(row.aliases) | {a.strip() for a in ent.aliases if a.strip()})
    return list(out.values())


def chunk_id_for(page_id: str, text: str, occurrence: int) -> int:
    """Stable id of a chunk: the same text on the same page keeps its id (and its vectors)."""
    h = hashlib.blake2b(f"{page_id}\x00{occurrence}\x00{text}".encode(), digest_size=8).digest()
    return int.from_bytes(h, "big") & ((1 << 63) - 1)


def _content_hash(title: str | None, body: str, p: PageInput, scope: str | None, entities: list[EntityRow]) -> str:
    h = hashlib.sha256()
    for part in (title or "", body, p.published.isoformat() if p.published else "", scope or "",
                 str(p.cluster_id) if p.cluster_id is not None else "",
                 "|".join(sorted(f"{e.entity_id}={','.join(e.aliases)}" for e in entities))):
        h.update(part.encode())
        h.update(b"\x00")
    return h.hexdigest()


class PageTooLarge(EngineError):
    status, type = 422, "page_too_large"


def prepare(index: int, source: str, raw: dict[str, Any] | PageInput, workspace: str, caller: Grant = OPEN,
            max_chars: int | None = None, max_entities: int | None = None) -> _Prepared:
    """One record as the page it writes: checked, its scope the one `caller` may write it in
    (Grant.write_scope), its body under `max_chars` and its entities under `max_entities`."""
    page = raw if isinstance(raw, PageInput) else PageInput.model_validate(raw)
    scope = caller.write_scope(page.scope)
    for name in ("body_text", "html"):
        text = getattr(page, name)
        if max_chars is not None and text is not None and len(text) > max_chars:
            raise PageTooLarge(f"{name} has {len(text)} characters; a page holds at most {max_chars} "
                               "([ingest] max_page_chars)")
    if max_entities is not None and len(page.entities) > max_entities:
        raise PageTooLarge(f"{len(page.entities)} entities; a page names at most {max_entities} "
                           "([ingest] max_page_entities)")
    url_norm = normalize_url(page.url)
    title = page.title.strip() if page.title else None
    if page.body_text is not None and page.body_text.strip():
        body = page.body_text
    elif page.html:
        body, html_title = html_to_text(page.html)
        title = title or html_title
    else:
        body = title or ""
    ents = entity_rows(workspace, scope, page.entities)
    return _Prepared(index, source, page, page_id_for(workspace, url_norm, scope), url_norm, body, title,
                     _content_hash(title, body, page, scope, ents), ents, scope)
