"""An import of what a browser holds (a history now; bookmarks beside it): every URL's visits become
visits of its page, a page not yet known is written at once with its title and URL as its text (so
it is found by them right away), and the page's text is then fetched in the background
(engine/ingest/fetch.py) and written over that placeholder — never over text the page already had.

The import's state is in the store (indexes/imports.py): its id is derived from the workspace, the
kind and the source, so running the same import again goes on where it stopped. Nothing is counted
twice: a visit no later than its page's last is not a new one, a URL the import holds keeps its row,
and a page whose text is no longer its placeholder (fetched by an earlier run killed before it said
so, or kept by the browser extension meanwhile) is not fetched again."""
from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Callable, Iterable

from engine.core.access import Grant
from engine.core.clock import utcnow
from engine.core.corpus import Corpus
from engine.core.faults import maybe_crash
from engine.core.identity import entity_namespace, named_workspace, page_id_for
from engine.core.urls import normalize_url
from engine.ingest.fetch import Fetcher
from engine.ingest.pipeline import Ingester
from engine.ingest.prepare import prepare
from engine.ingest.entities import EntityUpsert, upsert_entity
from engine.ingest.records import EntityInput, PageInput, VisitInput
from engine.ingest.rules import Rules, decide

WRITE_BATCH = 500   # history entries written (their pages and visits) per ingest call


@dataclass
class Entry:
    """One URL of an import: its title, its visits (naive UTC, any order) and the entities its page is
    linked to (a bookmark's folder, "bookmarked"); `first_seen`: when a page with no visit was first
    known (a bookmark's time added)."""
    url: str
    title: str | None
    visits: list[datetime]
    entities: list[EntityInput] = field(default_factory=list)
    first_seen: datetime | None = None


def import_id_for(workspace: str, scope: str | None, kind: str, source: str) -> str:
    """One import per workspace, document scope, kind and source: a key of another scope importing the
    same file makes an import of its own (and never learns of the other one)."""
    key = json.dumps([workspace, scope, kind, source])
    return "imp_" + hashlib.blake2b(key.encode(), digest_size=10).hexdigest()


def placeholder(entry_title: str | None, url: str, entities: list[EntityInput] | None = None) -> PageInput:
    """The page an imported URL is until its text is fetched: its title and its URL, as text."""
    title = (entry_title or "").strip() or None
    return PageInput(url=url, title=title, body_text=f"{title}\n{url}" if title else url, entities=entities or [])


class Import:
    def __init__(self, corpus: Corpus, workspace: str, caller: Grant, kind: str, source: str,
                 options: dict[str, Any]):
        self.corpus, self.caller = corpus, caller
        self.workspace = named_workspace(workspace)
        self.kind, self.source, self.options = kind, source, options
        self.scope = caller.write_scope(None)
        self.import_id = import_id_for(self.workspace, self.scope, kind, source)
        self.options = {**options, "scope": self.scope}
        self.tables = corpus.imports
        self.settings = corpus.settings.imports
        self._links: dict[tuple[str, str], list[str]] = {}   # (entity's local id, canonical) -> existing pages

    # The URLs ------------------------------------------------------------------------------------
    def write(self, entries: Iterable[Entry], fetch: bool, skip: str = "", allow: str = "",
              tick: Callable[[int], None] | None = None) -> dict[str, int]:
        """Record the import and write every kept entry's page and visits; returns counts."""
        now = utcnow()
        self.tables.begin(self.import_id, self.workspace, self.kind, self.source, self.options, now)
        known = self.tables.known_urls(self.import_id)
        skip_rules, allow_rules = Rules.parse(skip), Rules.parse(allow)
        ing = Ingester(self.corpus, self.workspace, progress=False, caller=self.caller)
        counts = {"entries": 0, "visits": 0, "new_pages": 0, "skipped": 0}
        batch: list[tuple[Entry, str, str]] = []
        rows: list[tuple] = []
        for e in entries:
            counts["entries"] += 1
            counts["visits"] += len(e.visits)
            kept, why = decide(e.url, skip_rules, allow_rules)
            url_norm = None
            if kept:
                try:
                    url_norm = normalize_url(e.url)
                except ValueError as exc:   # InvalidURL, or urllib's own
                    kept, why = False, f"not a URL this keeps: {exc}"
            if not kept:
                counts["skipped"] += 1
                if e.url not in known:
                    rows.append((e.url, None, e.title, "skipped", why, None))
            else:
                batch.append((e, url_norm, page_id_for(self.workspace, url_norm, self.scope)))
            if len(batch) >= WRITE_BATCH:
                rows += self._write_batch(ing, batch, known, fetch, counts)
                batch = []
            if tick and counts["entries"] % WRITE_BATCH == 0:
                tick(WRITE_BATCH)
        if batch:
            rows += self._write_batch(ing, batch, known, fetch, counts)
        if tick and counts["entries"] % WRITE_BATCH:
            tick(counts["entries"] % WRITE_BATCH)
        self._link_existing()
        self.tables.add_urls(self.import_id, rows, utcnow())
        return counts

    def _link_existing(self) -> None:
        """Pages that were there already get the entries' entities as links (their text untouched)."""
        for (local, canonical), pids in sorted(self._links.items()):
            pids = sorted(set(pids))
            for i in range(0, len(pids), 10_000):
                upsert_entity(self.corpus, EntityUpsert(canonical=canonical, id=local, pages=pids[i:i + 10_000]),
                              self.workspace, self.scope, self.caller)
        self._links.clear()

    def _write_batch(self, ing: Ingester, batch: list[tuple[Entry, str, str]], known: set[str], fetch: bool,
                     counts: dict[str, int]) -> list[tuple]:
        existing = self.corpus.store.existing_pages([pid for _, _, pid in batch])
        visits, records, rows, seen = [], [], [], set()
        for e, _, pid in batch:
            holder = placeholder(e.title, e.url, e.entities)
            marker = prepare(0, "import", holder, self.workspace, self.caller).content_hash
            old = existing.get(pid)
            if old is not None or pid in seen:
                visits += [VisitInput(url=e.url, seen_at=v, scope=self.scope) for v in e.visits]
                for ent in e.entities:
                    self._links.setdefault((ent.id or ent.canonical, ent.canonical), []).append(pid)
                # a placeholder of this import or an earlier one (a history's carries no entities)
                bare = prepare(0, "import", placeholder(e.title, e.url), self.workspace, self.caller).content_hash
                needs_text = old is not None and old.content_hash in (marker, bare)
                if needs_text:
                    marker = old.content_hash   # entity links leave a page's hash as it is
            else:
                seen.add(pid)
                counts["new_pages"] += 1
                records += [holder.model_copy(update={"seen_at": v, "scope": self.scope}) for v in e.visits] or \
                    [holder.model_copy(update={"seen_at": e.first_seen, "scope": self.scope})]
                needs_text = True
            if e.url not in known:
                status = ("queued" if fetch else "titles") if needs_text else "present"
                rows.append((e.url, pid, e.title, status, None, marker))
        if records:
            ing.ingest(((i, "import", r) for i, r in enumerate(records)), flush=False)
        if visits:
            ing.visit(list(enumerate(visits)))
        return rows

    # The texts -----------------------------------------------------------------------------------
    def fetch(self, stop: threading.Event | None = None, tick: Callable[[int], None] | None = None,
              fetcher: Fetcher | None = None) -> dict[str, int]:
        """Fetch the text of every URL still queued, politely, writing it over its placeholder."""
        now = utcnow()
        queued = self.tables.queued(self.import_id)
        existing = self.corpus.store.existing_pages([pid for _, pid, _, _ in queued])
        settled, todo = [], {}
        for url, pid, title, marker in queued:
            old = existing.get(pid)
            if old is None:
                settled.append((url, "skipped", "its page was forgotten before its text was fetched"))
            elif old.content_hash != marker:
                settled.append((url, "present", None))   # fetched by a run killed before it said so, or kept meanwhile
            else:
                todo[url] = (pid, title)
        self.tables.settle(self.import_id, settled, now)
        if tick and settled:
            tick(len(settled))
        ing = Ingester(self.corpus, self.workspace, progress=False, caller=self.caller)
        own = fetcher is None
        fetcher = fetcher or Fetcher(self.settings)
        done = {"fetched": 0, "failed": 0, "skipped": 0, "present": len(settled)}
        pending: list[Any] = []
        try:
            for got in fetcher.fetch_all(list(todo), stop=stop):
                if got.ok:
                    pending.append(got)
                    if len(pending) >= self.settings.write_batch:
                        self._write_texts(ing, pending, todo, done)
                        pending = []
                else:
                    status = "skipped" if got.skipped else "failed"
                    done[status] += 1
                    self.tables.settle(self.import_id, [(got.url, status, got.reason)], utcnow())
                if tick:
                    tick(1)
            if pending:
                self._write_texts(ing, pending, todo, done)
        finally:
            if own:
                fetcher.close()
            self.corpus.flush()
        return done

    def _entities_of(self, page_id: str) -> list[EntityInput]:
        """The page's entity links, as a record names them (a write replaces a page's links)."""
        ns = entity_namespace(self.workspace, self.scope) + ":"
        page = self.corpus.store.page(page_id) or {}
        return [EntityInput(canonical=e["canonical"], aliases=e["aliases"], id=e["entity_id"].removeprefix(ns))
                for e in page.get("entities", []) if e["entity_id"].startswith(ns)]

    def _write_texts(self, ing: Ingester, fetched: list, todo: dict[str, tuple[str, str | None]],
                     done: dict[str, int]) -> None:
        # each page written as seen at its last visit: its text changes, its visits do not
        existing = self.corpus.store.existing_pages([todo[f.url][0] for f in fetched])
        records, settled = [], []
        for f in fetched:
            pid, title = todo[f.url]
            old = existing.get(pid)
            if old is None:
                settled.append((f.url, "skipped", "its page was forgotten before its text was written"))
                continue
            body = {"html": f.body} if f.content_type != "text/plain" else {"body_text": f.body}
            records.append((f.url, {"url": f.url, "title": title, "seen_at": old.last_seen, "scope": self.scope,
                                    "entities": self._entities_of(pid), **body}))
        report = ing.ingest(((i, "fetch", r) for i, (_, r) in enumerate(records)), flush=False)
        maybe_crash("import:texts-written")   # test-only: killed between a text's write and its status
        by_index = {o.index: o for o in report.outcomes}
        errors = {e.line: e.error for e in report.errors}
        for i, (url, _) in enumerate(records):
            o = by_index.get(i)
            if o is not None and o.status != "error":
                settled.append((url, "fetched", None))
                done["fetched"] += 1
            else:
                settled.append((url, "failed", (o.error if o else None) or errors.get(i) or "not written"))
                done["failed"] += 1
        self.tables.settle(self.import_id, settled, utcnow())
