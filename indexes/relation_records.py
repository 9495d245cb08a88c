"""What the relation search records as it runs, beside the relation tables: audit events (one per
search), criterion judgments (what a criterion's reader found in an entity's documents) and criterion
facets (a criterion's decomposition by a model). They are only ever read back by their keys, so they
live in the corpus store — the DuckDB file with the relation tables, or PostgreSQL, where every
replica reads what any replica recorded without a new generation (the relation tables' own writes
are replayed by each replica instead: indexes/relation_log.py). One SQL text for both
(indexes/sql.py)."""
from __future__ import annotations

from .sql import Sql

AUDIT = ("request_id", "ts", "verb", "workspace_id", "request", "rows", "spans", "summary")
# a judgment as callers hand it and read it back (the rest of the row is its key and read_at)
JUDGMENT = ["entity_id", "doc_key", "state", "quote", "page_id", "url", "chunk_id", "char_start", "char_end", "score"]


class RelationRecords:
    def __init__(self, sql: Sql):
        self.sql = sql

    # Audit ---------------------------------------------------------------------------------------
    def record_audit(self, request_id: str, ts, verb: str, workspace_id: str | None, request: str,
                     rows: str, spans: str, summary: str) -> None:
        self.sql.run(f"INSERT INTO audit_events ({', '.join(AUDIT)}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                     [request_id, ts, verb, workspace_id, request, rows, spans, summary])

    def audit_events(self, request_id: str) -> list[dict]:
        res = self.sql.rows(f"SELECT {', '.join(AUDIT)} FROM audit_events WHERE request_id = ? ORDER BY ts",
                            [request_id])
        return [dict(zip(AUDIT, r)) for r in res]

    # Criterion facets ----------------------------------------------------------------------------
    def criterion_facets(self, criterion: str, model: str) -> tuple[str, str] | None:
        """A stored decomposition of this criterion by this model: (facets JSON, dropped JSON)."""
        row = self.sql.row("SELECT facets, dropped FROM criterion_facets WHERE criterion = ? AND model = ? "
                           "ORDER BY created_at DESC LIMIT 1", [criterion, model])
        return None if row is None else (row[0], row[1])

    def store_criterion_facets(self, criterion: str, model: str, facets: str, dropped: str, now) -> None:
        self.sql.run("INSERT INTO criterion_facets (criterion, model, facets, dropped, created_at) "
                     "VALUES (?, ?, ?, ?, ?)", [criterion, model, facets, dropped, now])

    # Criterion judgments ---------------------------------------------------------------------------
    def judgments(self, workspace_id: str, criterion_key: str, entity_ids: list[str]) -> list[tuple]:
        """Stored judgments of a criterion (columns JUDGMENT) for these entities."""
        return self.sql.rows(
            f"SELECT {', '.join(JUDGMENT)} FROM criterion_judgments WHERE workspace_id = ? AND criterion_key = ? "
            "AND entity_id = ANY(?::VARCHAR[])", [workspace_id, criterion_key, list(entity_ids)])

    def replace_judgments(self, workspace_id: str, criterion_key: str, rows: list[list], now) -> None:
        """Store judgments (each a row in JUDGMENT's order), replacing the entities' earlier ones."""
        placeholders = ", ".join(["?"] * (len(JUDGMENT) + 3))
        columns = ", ".join(["workspace_id", "criterion_key", *JUDGMENT, "read_at"])
        with self.sql.transaction() as tx:
            tx.run("DELETE FROM criterion_judgments WHERE workspace_id = ? AND criterion_key = ? "
                   "AND entity_id = ANY(?::VARCHAR[])", [workspace_id, criterion_key, [r[0] for r in rows]])
            for r in rows:   # a criterion reads a page of entities at a time: a few dozen rows
                tx.run(f"INSERT INTO criterion_judgments ({columns}) VALUES ({placeholders})",
                       [workspace_id, criterion_key, *r, now])
