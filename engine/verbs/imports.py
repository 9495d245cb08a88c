"""The verbs of imports: a browser's history (and bookmarks) in, their pages' texts fetched, and the
import's status (engine/ingest/imports.py)."""
from __future__ import annotations

import logging
import threading
from datetime import datetime
from typing import Any, Callable, Iterable

from engine.core.access import OPEN, Grant
from engine.core.clock import utcnow
from engine.core.errors import EngineError
from engine.ingest.imports import Entry, Import
from engine.verbs.base import Verbs
from engine.verbs.operations import background_priority

log = logging.getLogger("refindery.imports")


class ImportNotFound(EngineError):
    status, type = 404, "import_not_found"


class ImportVerbs(Verbs):
    def import_visits(self, entries: Iterable[Entry], kind: str, source: str, workspace: str | None = None,
                      fetch: bool = True, skip: str = "", allow: str = "", since: datetime | None = None,
                      caller: Grant = OPEN, tick: Callable[[int], None] | None = None,
                      fetch_tick: Callable[[int], None] | None = None,
                      stop: threading.Event | None = None) -> dict[str, Any]:
        """Write the entries' pages and visits (titles and URLs searchable at once) and, with `fetch`,
        fetch every text still to fetch before returning (a run stopped midway goes on where it stopped
        when run again). `skip`/`allow`: the extension's rules (engine/ingest/rules.py)."""
        caller.require_write()
        ws = self.workspace_for(caller, workspace)
        job = Import(self.corpus, ws, caller, kind, source,
                     {"since": since.isoformat() if since else None, "fetch": fetch, "skip": skip, "allow": allow})
        written = job.write(entries, fetch, skip, allow, tick=tick)
        if fetch:
            job.tables.requeue_titles(job.import_id, utcnow())
        fetched = job.fetch(stop=stop, tick=fetch_tick) if fetch else {}
        return {"import_id": job.import_id, "written": written, "fetched": fetched,
                "status": self.corpus.imports.summary(job.import_id)}

    def start_import(self, entries: Iterable[Entry], kind: str, source: str, workspace: str | None = None,
                     fetch: bool = True, skip: str = "", allow: str = "", since: datetime | None = None,
                     caller: Grant = OPEN) -> dict[str, Any]:
        """A server's import (POST /v1/imports): the entries' pages and visits written now — found by
        title and URL once this returns — and their texts fetched in a thread of this process, which
        goes on until the import has nothing queued (another batch of the same import joins it)."""
        caller.require_write()
        ws = self.workspace_for(caller, workspace)
        job = Import(self.corpus, ws, caller, kind, source,
                     {"since": since.isoformat() if since else None, "fetch": fetch, "skip": skip, "allow": allow})
        written = job.write(entries, fetch, skip, allow)
        if fetch:
            job.tables.requeue_titles(job.import_id, utcnow())
            self._fetch_in_background(job)
        return {"import_id": job.import_id, "written": written, "fetching": fetch,
                "status": self.corpus.imports.summary(job.import_id)}

    def _fetch_in_background(self, job: Import) -> None:
        def run() -> None:
            try:
                background_priority(self.settings.models.catch_up_nice)
                while not self._stop_imports.is_set():
                    with self._imports_lock:   # a batch written meanwhile is seen here, or starts a thread
                        if not self.corpus.imports.queued(job.import_id):
                            self._import_threads.pop(job.import_id, None)
                            return
                    job.fetch(stop=self._stop_imports)
            except Exception:   # noqa: BLE001 — the URLs keep their status; the next POST or run goes on
                log.exception("the fetch of import %s failed", job.import_id)
            with self._imports_lock:
                self._import_threads.pop(job.import_id, None)

        with self._imports_lock:
            running = self._import_threads.get(job.import_id)
            if running is not None and running.is_alive():
                return   # it reads what is queued again before it stops
            t = threading.Thread(target=run, name=f"import-{job.import_id}", daemon=True)
            self._import_threads[job.import_id] = t
            t.start()

    def stop_imports(self) -> None:
        """No new fetch starts; those under way end within their timeouts."""
        self._stop_imports.set()
        for t in list(self._import_threads.values()):
            t.join(timeout=self.settings.imports.total_timeout_s + 5)

    def import_status(self, import_id: str, caller: Grant = OPEN) -> dict[str, Any]:
        """An import's counts per status and its failures and skips with their reasons; an import of a
        workspace the caller may not read is as absent as one that never was."""
        found = self.corpus.imports.summary(import_id)
        if found is None or not self._visible(found, caller):
            raise ImportNotFound(f"no import {import_id!r}", ref=import_id)
        return found

    def imports(self, caller: Grant = OPEN) -> list[dict[str, Any]]:
        """The imports of the workspaces the caller may read, newest first."""
        return [s for s in self.corpus.imports.list(None) if self._visible(s, caller)]

    @staticmethod
    def _visible(found: dict[str, Any], caller: Grant) -> bool:
        """Within the caller's workspaces and, for a key with document scopes, its scopes."""
        return caller.may_read(found["workspace"]) and caller.may_see(found["options"].get("scope"))
