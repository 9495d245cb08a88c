"""What an import (`refindery import history|bookmarks`) has done and has left to do, kept in the
store so that a run stopped or killed midway goes on where it stopped, and every replica answers
GET /v1/imports/{id} alike: one row per import, one per URL with its status — `queued` (its text to
fetch), `fetched`, `present` (its page had its text already), `titles` (kept without fetching: --no-fetch),
`skipped` (by a rule, its scheme or its type) or `failed` — and the reason in words."""
from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from .store_protocol import Store

DDL = [
    """CREATE TABLE IF NOT EXISTS imports (
        import_id VARCHAR PRIMARY KEY, workspace VARCHAR NOT NULL, kind VARCHAR NOT NULL, source VARCHAR NOT NULL,
        options JSON, created TIMESTAMP NOT NULL, updated TIMESTAMP NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS import_urls (
        import_id VARCHAR NOT NULL, url VARCHAR NOT NULL, page_id VARCHAR, title VARCHAR, status VARCHAR NOT NULL,
        reason VARCHAR, placeholder VARCHAR, updated TIMESTAMP NOT NULL, PRIMARY KEY (import_id, url))""",
]
URL_COLUMNS = ["import_id", "url", "page_id", "title", "status", "reason", "placeholder", "updated"]
FINAL = ("fetched", "present", "titles", "skipped", "failed")


class ImportTables:
    def __init__(self, store: Store):
        self.sql = store.sql()
        if self.sql.dialect == "duckdb":     # PostgreSQL: a migration made them (indexes/pg_schema.py)
            with self.sql.transaction() as tx:
                for stmt in DDL:
                    tx.run(stmt)

    def begin(self, import_id: str, workspace: str, kind: str, source: str, options: dict, now: datetime) -> bool:
        """Record an import (True), or note that it runs again (False: it was there)."""
        with self.sql.transaction() as tx:
            if tx.row("SELECT 1 FROM imports WHERE import_id = ?", [import_id]):
                tx.run("UPDATE imports SET updated = ?, options = CAST(? AS JSON) WHERE import_id = ?",
                       [now, json.dumps(options), import_id])
                return False
            tx.run("INSERT INTO imports VALUES (?, ?, ?, ?, CAST(? AS JSON), ?, ?)",
                   [import_id, workspace, kind, source, json.dumps(options), now, now])
            return True

    def add_urls(self, import_id: str, rows: list[tuple], now: datetime) -> None:
        """(url, page_id, title, status, reason, placeholder) rows; a URL the import holds already keeps
        its row (a second run never resets what the first did)."""
        with self.sql.transaction() as tx:
            tx.insert("import_urls", URL_COLUMNS, [(import_id, *r, now) for r in rows], skip_existing=True)

    def known_urls(self, import_id: str) -> set[str]:
        return {r[0] for r in self.sql.rows("SELECT url FROM import_urls WHERE import_id = ?", [import_id])}

    def queued(self, import_id: str) -> list[tuple[str, str, str | None, str | None]]:
        """(url, page_id, title, placeholder) of the URLs whose text is still to fetch, in URL order."""
        return self.sql.rows("SELECT url, page_id, title, placeholder FROM import_urls "
                             "WHERE import_id = ? AND status = 'queued' ORDER BY url", [import_id])

    def requeue_titles(self, import_id: str, now: datetime) -> None:
        """The titles-only URLs of an earlier --no-fetch run: to fetch now."""
        self.sql.run("UPDATE import_urls SET status = 'queued', reason = NULL, updated = ? "
                     "WHERE import_id = ? AND status = 'titles'", [now, import_id])

    def settle(self, import_id: str, outcomes: list[tuple[str, str, str | None]], now: datetime) -> None:
        """(url, status, reason) of URLs whose fetch has ended."""
        with self.sql.transaction() as tx:
            for url, status, reason in outcomes:
                tx.run("UPDATE import_urls SET status = ?, reason = ?, updated = ? WHERE import_id = ? AND url = ?",
                       [status, reason, now, import_id, url])
            tx.run("UPDATE imports SET updated = ? WHERE import_id = ?", [now, import_id])

    def summary(self, import_id: str, limit: int = 50) -> dict[str, Any] | None:
        head = self.sql.row("SELECT workspace, kind, source, options, created, updated FROM imports "
                            "WHERE import_id = ?", [import_id])
        if head is None:
            return None
        counts = dict(self.sql.rows("SELECT status, count(*) FROM import_urls WHERE import_id = ? GROUP BY status",
                                    [import_id]))
        problems = self.sql.rows(
            "SELECT url, status, reason FROM import_urls WHERE import_id = ? AND status IN ('failed', 'skipped') "
            "ORDER BY status, url LIMIT ?", [import_id, limit])
        options = head[3] if isinstance(head[3], dict) else json.loads(head[3] or "{}")
        return {"import_id": import_id, "workspace": head[0], "kind": head[1], "source": head[2], "options": options,
                "created": head[4].isoformat(), "updated": head[5].isoformat(),
                "urls": sum(counts.values()), "counts": {s: counts.get(s, 0) for s in ("queued", *FINAL)},
                "done": counts.get("queued", 0) == 0,
                "problems": [{"url": u, "status": s, "reason": r} for u, s, r in problems]}

    def list(self, workspaces: list[str] | None) -> list[dict[str, Any]]:
        ids = self.sql.rows("SELECT import_id, workspace FROM imports ORDER BY created DESC, import_id")
        return [self.summary(i, limit=0) for i, ws in ids if workspaces is None or ws in workspaces]
