"""What evidence searches wrote into a workspace's maps (`map_write`): connections found during
retrieval — a source, the sub-query that found it, the group it sits in — versioned per workspace.

Each write is one version (all its rows in one transaction); a note names its page, so a page deleted
later drops out of what is read. The sub-query's vector is stored with the note: the next search
places its own sub-queries against the notes without encoding them again.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import datetime

import numpy as np

from .store_protocol import Store

DDL = """CREATE TABLE IF NOT EXISTS evidence_map_notes (
    workspace_id VARCHAR NOT NULL, version BIGINT NOT NULL, group_key VARCHAR NOT NULL,
    page_id VARCHAR NOT NULL, url VARCHAR, title VARCHAR, sub_query VARCHAR NOT NULL,
    query_vector FLOAT[] NOT NULL, confidence VARCHAR, session_id VARCHAR, query_id VARCHAR,
    written_at TIMESTAMP NOT NULL)"""


@dataclass(frozen=True)
class MapNote:
    version: int
    group_key: str
    page_id: str
    url: str | None
    title: str | None
    sub_query: str
    vector: np.ndarray
    confidence: str | None
    session_id: str | None
    query_id: str | None
    written_at: datetime


COLUMNS = ["workspace_id", "version", "group_key", "page_id", "url", "title", "sub_query", "query_vector",
           "confidence", "session_id", "query_id", "written_at"]


class MapNotes:
    def __init__(self, store: Store):
        self.sql = store.sql()
        self._lock = threading.Lock()
        if self.sql.dialect == "duckdb":     # PostgreSQL: a migration made it (indexes/pg_schema.py)
            with self.sql.transaction() as tx:
                tx.run(DDL)

    def write(self, workspace: str, rows: list[dict], when: datetime) -> int:
        """Write one version of notes (each row: group_key, page_id, url, title, sub_query, vector,
        confidence, session_id, query_id); returns the version (0: nothing written)."""
        if not rows:
            return 0
        with self._lock, self.sql.transaction() as tx:
            if tx.dialect == "postgres":     # writers of other processes number the same workspace's versions
                tx.row("SELECT pg_advisory_xact_lock(hashtext('evidence_map_notes:' || ?))", [workspace])
            version = tx.row("SELECT coalesce(max(version), 0) + 1 FROM evidence_map_notes "
                             "WHERE workspace_id = ?", [workspace])[0]
            tx.insert("evidence_map_notes", COLUMNS, [
                (workspace, version, r["group_key"], r["page_id"], r.get("url"), r.get("title"), r["sub_query"],
                 [float(x) for x in r["vector"]], r.get("confidence"), r.get("session_id"), r.get("query_id"), when)
                for r in rows])
        return int(version)

    def version(self, workspace: str) -> int:
        """The workspace's latest version of notes (0: none)."""
        return int(self.sql.row("SELECT coalesce(max(version), 0) FROM evidence_map_notes WHERE workspace_id = ?",
                                [workspace])[0])

    def read(self, workspace: str) -> list[MapNote]:
        """The workspace's notes on pages it still holds, by version, group, page."""
        rows = self.sql.rows(
            """SELECT n.version, n.group_key, n.page_id, n.url, n.title, n.sub_query, n.query_vector, n.confidence,
                      n.session_id, n.query_id, n.written_at
               FROM evidence_map_notes n
               WHERE n.workspace_id = ? AND EXISTS (SELECT 1 FROM pages p WHERE p.page_id = n.page_id
                                                    AND p.workspace_id = n.workspace_id)
               ORDER BY n.version, n.group_key, n.page_id, n.sub_query""", [workspace])
        return [MapNote(r[0], r[1], r[2], r[3], r[4], r[5], np.asarray(r[6], dtype=np.float32), *r[7:]) for r in rows]
