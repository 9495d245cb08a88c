"""The query log's tables in the store (DuckDB or PostgreSQL, through indexes/sql.py), and every query over them (the engine's QueryLog only
queues entries and hands batches here; eval replays and the reranker's feedback pairs read here).

  log_queries(query_id, ts, endpoint, workspace, query, params, models, timings, total, returned,
              pinned, error_type, error_title, scopes)   one row per execution; scopes: the
                                                     document scopes it ran within (NULL: every scope)
  log_candidates / log_fused / log_results / log_agreement      rows of an execution, by query_id
                                                     (log_results.pinned: why a page was put first — url,
                                                     prefix, domain, or shortcut:<the choosing query's id>)
  log_access(request_id, ts, key_id, method, route, workspace, status, duration_ms)   every HTTP call
  feedback(query_id, page_id, kind, ts)              click / found / irrelevant
"""
from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from .store_protocol import Store

DDL = [
    """CREATE TABLE IF NOT EXISTS log_queries (
        query_id VARCHAR PRIMARY KEY, ts TIMESTAMP NOT NULL, endpoint VARCHAR NOT NULL, workspace VARCHAR,
        query VARCHAR, params JSON, models VARCHAR[], timings JSON, total INTEGER, returned INTEGER,
        pinned JSON, error_type VARCHAR, error_title VARCHAR)""",
    # the document scopes an execution ran within (NULL: every scope, and every row logged before
    # scopes were: only a key of every scope may judge those)
    "ALTER TABLE log_queries ADD COLUMN IF NOT EXISTS scopes VARCHAR[]",
    """CREATE TABLE IF NOT EXISTS log_candidates (
        query_id VARCHAR NOT NULL, model VARCHAR NOT NULL, arm VARCHAR NOT NULL, rank INTEGER NOT NULL,
        chunk_id BIGINT NOT NULL, page_id VARCHAR, score DOUBLE)""",
    """CREATE TABLE IF NOT EXISTS log_fused (
        query_id VARCHAR NOT NULL, model VARCHAR NOT NULL, stage VARCHAR NOT NULL, rank INTEGER NOT NULL,
        chunk_id BIGINT NOT NULL, page_id VARCHAR, score DOUBLE)""",
    """CREATE TABLE IF NOT EXISTS log_results (
        query_id VARCHAR NOT NULL, model VARCHAR NOT NULL, rank INTEGER NOT NULL, page_id VARCHAR NOT NULL,
        score DOUBLE, pinned VARCHAR)""",
    """CREATE TABLE IF NOT EXISTS log_agreement (
        query_id VARCHAR NOT NULL, model_a VARCHAR NOT NULL, model_b VARCHAR NOT NULL, k INTEGER,
        jaccard DOUBLE, rbo_ext DOUBLE, rbo_p DOUBLE, kendall_tau_b DOUBLE, shared INTEGER)""",
    """CREATE TABLE IF NOT EXISTS log_access (
        request_id VARCHAR NOT NULL, ts TIMESTAMP NOT NULL, key_id VARCHAR, method VARCHAR, route VARCHAR,
        workspace VARCHAR, status INTEGER, duration_ms DOUBLE)""",
    """CREATE TABLE IF NOT EXISTS feedback (
        query_id VARCHAR NOT NULL, page_id VARCHAR NOT NULL, kind VARCHAR NOT NULL, ts TIMESTAMP NOT NULL)""",
    # the API key that sent a judgment (NULL: no key — an open server, the owner's socket, or a row
    # written before keys were kept): whom its shortcut serves (engine/refind/shortcuts.py)
    "ALTER TABLE feedback ADD COLUMN IF NOT EXISTS key_id VARCHAR",
]
ROW_TABLES = {
    "candidates": ("log_candidates", ["query_id", "model", "arm", "rank", "chunk_id", "page_id", "score"]),
    "fused": ("log_fused", ["query_id", "model", "stage", "rank", "chunk_id", "page_id", "score"]),
    "results": ("log_results", ["query_id", "model", "rank", "page_id", "score", "pinned"]),
    "agreement": ("log_agreement", ["query_id", "model_a", "model_b", "k", "jaccard", "rbo_ext", "rbo_p",
                                    "kendall_tau_b", "shared"]),
    "access": ("log_access", ["request_id", "ts", "key_id", "method", "route", "workspace", "status", "duration_ms"]),
}
QUERY_COLUMNS = ["query_id", "ts", "endpoint", "workspace", "query", "params", "models", "timings", "total",
                 "returned", "pinned", "error_type", "error_title", "scopes"]


class LogTables:
    def __init__(self, store: Store):
        self.sql = store.sql()                 # reads, and the rare writes of a request (feedback)
        self._writer = store.sql(own=True)     # the log writer thread's own connection
        if self.sql.dialect == "duckdb":       # PostgreSQL: a migration made them (indexes/pg_schema.py)
            for stmt in DDL:
                self._writer.run(stmt)

    def write(self, queries: dict[str, list], rows: dict[str, list[tuple]]) -> None:
        """One batch in one transaction: `queries` column -> values (QUERY_COLUMNS), `rows` kind -> tuples
        in the column order of ROW_TABLES[kind]."""
        with self._writer.transaction() as tx:
            if queries.get("query_id"):
                tx.insert("log_queries", QUERY_COLUMNS, list(zip(*(queries[c] for c in QUERY_COLUMNS))),
                          skip_existing=True)
            for kind, (table, cols) in ROW_TABLES.items():
                if rows.get(kind):
                    tx.insert(table, cols, rows[kind])

    def exists(self, query_id: str) -> bool:
        return self.sql.row("SELECT 1 FROM log_queries WHERE query_id = ?", [query_id]) is not None

    def origin_of(self, query_id: str) -> tuple[bool, str | None, list[str] | None]:
        """(whether the query is logged, its workspace, the document scopes it ran within or None)."""
        row = self.sql.row("SELECT workspace, scopes FROM log_queries WHERE query_id = ?", [query_id])
        return (row is not None, row[0] if row else None, list(row[1]) if row and row[1] is not None else None)

    def add_feedback(self, query_id: str, page_id: str, kind: str, ts: datetime, key_id: str | None = None) -> None:
        self.sql.run("INSERT INTO feedback (query_id, page_id, kind, ts, key_id) VALUES (?, ?, ?, ?, ?)",
                     [query_id, page_id, kind, ts, key_id])

    def prune(self, before: datetime) -> dict[str, int]:
        """Delete log rows of executions older than `before` (feedback on them too)."""
        ids = "SELECT query_id FROM log_queries WHERE ts < ?"
        out = {}
        with self.sql.transaction() as tx:
            for table in ("log_candidates", "log_fused", "log_results", "log_agreement", "feedback"):
                out[table] = tx.run(f"DELETE FROM {table} WHERE query_id IN ({ids})", [before])
            out["log_access"] = tx.run("DELETE FROM log_access WHERE ts < ?", [before])
            out["log_queries"] = tx.run("DELETE FROM log_queries WHERE ts < ?", [before])
        return out

    def access(self, since: datetime | None = None, key_id: str | None = None, request_id: str | None = None,
               limit: int = 100) -> list[dict[str, Any]]:
        """The calls the server answered or refused, newest first."""
        where, params = ["1 = 1"], []
        for cond, value in (("ts >= ?", since), ("key_id = ?", key_id), ("request_id = ?", request_id)):
            if value is not None:
                where.append(cond)
                params.append(value)
        cols = ["request_id", "ts", "key_id", "method", "route", "workspace", "status", "duration_ms"]
        rows = self.sql.rows(
            f"SELECT {', '.join(cols)} FROM log_access WHERE {' AND '.join(where)} ORDER BY ts DESC, request_id "
            "LIMIT ?", params + [limit])
        return [dict(zip(cols, r)) | {"ts": r[1].isoformat()} for r in rows]

    def searches_since(self, since: datetime, limit: int) -> list[tuple[str, str, str]]:
        """(query_id, params JSON, model) of the answered searches logged since `since`, oldest first."""
        return self.sql.rows(
            """SELECT query_id, params, models[1] FROM log_queries
               WHERE endpoint = 'search' AND error_type IS NULL AND ts >= ? ORDER BY ts LIMIT ?""",
            [since, limit])

    def results_since(self, since: datetime) -> dict[str, list[str]]:
        """query_id -> the pages that search returned, in rank order."""
        out: dict[str, list[str]] = {}
        for qid, _rank, pid in self.sql.rows(
                """SELECT query_id, rank, page_id FROM log_results WHERE query_id IN
                   (SELECT query_id FROM log_queries WHERE endpoint = 'search' AND ts >= ?)
                   ORDER BY query_id, rank""", [since]):
            out.setdefault(qid, []).append(pid)
        return out

    def stage_rows(self, query_ids: list[str]) -> dict[str, dict[str, Any]]:
        """Per logged execution: its params, and the pages of each stage in rank order (a page as
        often as its chunks appear) — each arm's candidates ("dense", "sparse"), the fused and
        reranked chunks ("fused", "reranked") and the pages returned ("results")."""
        out: dict[str, dict[str, Any]] = {}
        if not query_ids:
            return out
        ids = list(dict.fromkeys(query_ids))
        within = "query_id IN (SELECT unnest(?::VARCHAR[]))"
        for qid, params in self.sql.rows(f"SELECT query_id, params FROM log_queries WHERE {within}", [ids]):
            out[qid] = {"params": params, "dense": [], "sparse": [], "fused": [], "reranked": [], "results": []}
        for sql in (f"SELECT query_id, arm, page_id FROM log_candidates WHERE {within} ORDER BY query_id, arm, rank",
                    f"SELECT query_id, stage, page_id FROM log_fused WHERE {within} ORDER BY query_id, stage, rank",
                    f"SELECT query_id, 'results', page_id FROM log_results WHERE {within} ORDER BY query_id, rank"):
            for qid, stage, page in self.sql.rows(sql, [ids]):
                if qid in out and stage in out[qid]:
                    out[qid][stage].append(page)
        return out

    def judged_searches(self, since: datetime) -> dict[str, tuple[str, list[str]]]:
        """query_id -> (query text, the pages its feedback marks relevant: found / click) of the
        answered searches logged since `since`."""
        out: dict[str, tuple[str, list[str]]] = {}
        for qid, text, page in self.sql.rows(
                """SELECT q.query_id, q.query, f.page_id FROM log_queries q JOIN feedback f USING (query_id)
                   WHERE q.endpoint = 'search' AND q.error_type IS NULL AND q.ts >= ?
                     AND f.kind IN ('found', 'click')
                   ORDER BY q.ts, q.query_id, f.page_id""", [since]):
            pages = out.setdefault(qid, (text, []))[1]
            if page not in pages:
                pages.append(page)
        return out

    def agreement_since(self, since: datetime) -> list[tuple]:
        """(model_a, model_b, k, jaccard, rbo_ext, kendall_tau_b) of every compare logged since `since`."""
        return self.sql.rows(
            """SELECT a.model_a, a.model_b, a.k, a.jaccard, a.rbo_ext, a.kendall_tau_b
               FROM log_agreement a JOIN log_queries q USING (query_id) WHERE q.ts >= ?
               ORDER BY a.model_a, a.model_b, q.ts""", [since])

    def feedback(self) -> list[tuple[str, str, str]]:
        return self.sql.rows("SELECT query_id, page_id, kind FROM feedback")

    def choices(self, workspace: str) -> list[tuple]:
        """The pages chosen for a workspace's logged searches — (query_id, query text, the scopes it ran
        within or None, page_id, kind, ts, key_id) of each (query, page, key) whose latest judgment by
        that key is `found` or `click` — what the shortcuts learn from (engine/refind/shortcuts.py)."""
        latest = "arg_max(kind, ts)" if self.sql.dialect == "duckdb" else "(array_agg(kind ORDER BY ts DESC))[1]"
        return self.sql.rows(
            f"""SELECT query_id, q.query, q.scopes, f.page_id, f.kind, f.ts, f.key_id
               FROM (SELECT query_id, page_id, key_id, {latest} AS kind, max(ts) AS ts
                     FROM feedback GROUP BY query_id, page_id, key_id) f
               JOIN log_queries q USING (query_id)
               WHERE q.workspace = ? AND q.query IS NOT NULL AND q.endpoint = 'search' AND q.error_type IS NULL
                 AND f.kind IN ('found', 'click')
               ORDER BY f.ts, query_id, f.page_id, f.key_id""", [workspace])

    def delete_feedback(self, workspace: str, query_id: str | None = None, page_id: str | None = None,
                        scopes: list[str] | None = None) -> int:
        """Delete the feedback on a workspace's logged queries — of one query, on one page, or both —
        only on queries run within `scopes` (None: any query; else a query whose scopes lie inside
        them). Returns how many rows went."""
        where, params = ["q.workspace = ?"], [workspace]
        if query_id is not None:
            where.append("q.query_id = ?")
            params.append(query_id)
        if scopes is not None:
            where.append("q.scopes IS NOT NULL AND " + ("list_has_all(?::VARCHAR[], q.scopes)" if self.sql.dialect == "duckdb"
                                                        else "q.scopes <@ ?::text[]"))
            params.append(list(scopes))
        sql = f"SELECT q.query_id FROM log_queries q WHERE {' AND '.join(where)}"
        if page_id is not None:
            return self.sql.run(f"DELETE FROM feedback WHERE page_id = ? AND query_id IN ({sql})", [page_id, *params])
        return self.sql.run(f"DELETE FROM feedback WHERE query_id IN ({sql})", params)

    def forget_pages(self, page_ids: list[str]) -> int:
        """Delete what the log holds of these pages (they were deleted): the judgments on them, their
        rows among logged candidates, fused lists and results, and their entries in a query's pins.
        Returns the judgments deleted."""
        if not page_ids:
            return 0
        ids = "(SELECT unnest(?::VARCHAR[]))"
        with self.sql.transaction() as tx:
            n = tx.run(f"DELETE FROM feedback WHERE page_id IN {ids}", [list(page_ids)])
            for table in ("log_candidates", "log_fused", "log_results"):
                tx.run(f"DELETE FROM {table} WHERE page_id IN {ids}", [list(page_ids)])
        self._forget_pins(set(page_ids))
        return n

    def _forget_pins(self, page_ids: set[str]) -> None:
        """A query's `pinned` is a JSON object page_id -> why; the forgotten pages' keys are taken out."""
        rows = self.sql.rows(
            """SELECT query_id, pinned FROM log_queries WHERE pinned IS NOT NULL
                 AND CAST(pinned AS VARCHAR) <> '{}' AND EXISTS (
                   SELECT 1 FROM (SELECT unnest(?::VARCHAR[]) AS pid) AS t
                   WHERE strpos(CAST(pinned AS VARCHAR), t.pid) > 0)""", [sorted(page_ids)])
        with self.sql.transaction() as tx:
            for query_id, pinned in rows:
                held = json.loads(pinned) if isinstance(pinned, str) else (pinned or {})
                kept = {k: v for k, v in held.items() if k not in page_ids}
                if kept != held:
                    tx.run("UPDATE log_queries SET pinned = CAST(? AS JSON) WHERE query_id = ?", [json.dumps(kept), query_id])

    def feedback_with_queries(self, workspace: str) -> list[tuple[str, str, str, str]]:
        """(query_id, query text, page_id, kind) of the feedback on a workspace's logged queries."""
        return self.sql.rows(
            """SELECT f.query_id, q.query, f.page_id, f.kind FROM feedback f JOIN log_queries q USING (query_id)
               WHERE q.workspace = ? AND q.query IS NOT NULL ORDER BY f.query_id, f.page_id""",
            [workspace])
