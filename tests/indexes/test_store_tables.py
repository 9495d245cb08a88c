"""The tables kept beside the corpus — API keys and the query log — on both store databases, through
one SQL layer (indexes/sql.py): one history written to DuckDB and to PostgreSQL reads back the same,
and over PostgreSQL what one process does to the keys, every other process sharing the store sees."""
from __future__ import annotations

import json
import time
from datetime import datetime, timedelta

import pytest

import numpy as np

from indexes.keys import SHARED_TTL_S, KeyStore
from indexes.map_notes import MapNotes
from indexes.pg_store import PgCorpusStore
from indexes.querylog import QUERY_COLUMNS, LogTables
from indexes.sql import to_pyformat
from indexes.store import ChunkRow, CorpusStore, PageRow, PageWrite

T0 = datetime(2026, 5, 1, 9, 0, 0, 250000)


def _query(qid: str, minutes: int, endpoint: str = "search", workspace: str = "default", query: str | None = "json",
           scopes: list[str] | None = None, error: str | None = None) -> dict:
    return {"query_id": qid, "ts": T0 + timedelta(minutes=minutes), "endpoint": endpoint, "workspace": workspace,
            "query": query, "params": json.dumps({"query": query, "k": 10}), "models": ["m", "m2"],
            "timings": json.dumps({"total": 3.5}), "total": 12, "returned": 2, "pinned": json.dumps([]),
            "error_type": error, "error_title": error and "bad", "scopes": scopes}


def _log_history(tables: LogTables) -> None:
    qs = [_query("q1", 1), _query("q2", 2, scopes=["hr"]), _query("q3", 3, error="invalid_request"),
          _query("q4", 4, endpoint="compare"), _query("q5", 5, workspace="other", query="α β")]
    rows = {
        "candidates": [(q, "m", arm, r, 100 * r + i, f"p{r}", 1.0 / (r + 1))
                       for i, q in enumerate(("q1", "q2")) for arm in ("dense", "sparse") for r in range(3)],
        "fused": [("q1", "m", stage, r, 100 * r, f"p{r}", 0.5 - r / 10) for stage in ("fused", "reranked") for r in range(2)],
        "results": [("q1", "m", 0, "p0", 0.9, "url"), ("q1", "m", 1, "p1", 0.8, None), ("q2", "m", 0, "p2", 0.7, None)],
        "agreement": [("q4", "m", "m2", 10, 0.5, 0.6, 0.9, 0.25, 5)],
        "access": [(f"r{i}", T0 + timedelta(seconds=i), "k1" if i % 2 else None, "POST", "/v1/search", "default",
                    200 if i < 3 else 429, 1.5 * i) for i in range(5)],
    }
    batch = {c: [q[c] for q in qs] for c in QUERY_COLUMNS}
    tables.write(batch, rows)
    tables.write({c: [qs[0][c]] for c in QUERY_COLUMNS}, {})      # logged twice: kept once
    for qid, page, kind, minutes in (("q1", "p0", "click", 1), ("q1", "p0", "found", 2), ("q1", "p1", "click", 3),
                                     ("q1", "p1", "irrelevant", 4), ("q2", "p2", "found", 5), ("q5", "p9", "click", 6)):
        tables.add_feedback(qid, page, kind, T0 + timedelta(minutes=10 + minutes))


def _log_reads(tables: LogTables) -> dict:
    return {
        "exists": [tables.exists(q) for q in ("q1", "q5", "nope")],
        "origin": [tables.origin_of(q) for q in ("q1", "q2", "nope")],
        "access": tables.access(), "access_key": tables.access(key_id="k1", limit=1),
        "access_since": tables.access(since=T0 + timedelta(seconds=3)),
        "searches": tables.searches_since(T0, 10), "results": tables.results_since(T0),
        "stages": tables.stage_rows(["q1", "q2", "q1", "nope"]), "judged": tables.judged_searches(T0),
        "agreement": tables.agreement_since(T0), "feedback": sorted(tables.feedback()),
        "choices": tables.choices("default"), "with_queries": tables.feedback_with_queries("default"),
    }


def test_the_query_log_reads_back_the_same_from_duckdb_and_postgresql(tmp_path, postgres_url):
    duck, pg = CorpusStore(tmp_path / "store.duckdb"), PgCorpusStore(postgres_url, scratch_dir=tmp_path)
    try:
        a_tables, b_tables = LogTables(duck), LogTables(pg)
        _log_history(a_tables)
        _log_history(b_tables)
        a, b = _log_reads(a_tables), _log_reads(b_tables)
        for key in a:
            assert a[key] == b[key], key
        assert a["exists"] == [True, True, False] and a["origin"][1] == (True, "default", ["hr"])
        assert [r["request_id"] for r in a["access"]] == ["r4", "r3", "r2", "r1", "r0"]
        assert [q for q, _, _ in a["searches"]] == ["q1", "q2", "q5"] and json.loads(a["searches"][0][1])["k"] == 10
        assert a["stages"]["q1"]["results"] == ["p0", "p1"] and a["stages"]["q2"]["dense"] == ["p0", "p1", "p2"]
        # the latest judgment of each (query, page) counts: p1 was clicked, then marked irrelevant
        assert [(q, p, k) for q, _, _, p, k, _, _ in a["choices"]] == [("q1", "p0", "found"), ("q2", "p2", "found")]
        # deletes: within scopes only queries run inside them; pages forgotten; then pruned by age
        for t in (a_tables, b_tables):
            assert t.delete_feedback("default", scopes=["hr"]) == 1
            assert t.forget_pages(["p0"]) == 2
            assert t.delete_feedback("default", query_id="q1", page_id="p1") == 2
        assert _log_reads(a_tables) == _log_reads(b_tables)
        assert "p0" not in _log_reads(a_tables)["stages"]["q1"]["results"]   # a forgotten page leaves the log's rows
        # (the rows naming p0 went with forget_pages: 4 candidates, 2 fused, 1 result fewer to prune)
        assert a_tables.prune(T0 + timedelta(minutes=3)) == b_tables.prune(T0 + timedelta(minutes=3)) == {
            "log_candidates": 8, "log_fused": 2, "log_results": 2, "log_agreement": 0, "feedback": 0,
            "log_access": 5, "log_queries": 2}
        assert _log_reads(a_tables) == _log_reads(b_tables)
    finally:
        duck.close()
        pg.close()


def _key(keys: KeyStore, key_id: str, workspaces=("default",), scopes=("*",)) -> None:
    keys.insert(key_id, f"name {key_id}", "salt", "digest-" + key_id, list(workspaces), list(scopes), False, T0)


def test_keys_are_kept_alike_on_both_databases(new_store):
    keys = KeyStore(new_store())
    assert not keys.closed and keys.active == 0
    _key(keys, "k1")
    _key(keys, "k2", workspaces=("a", "b"), scopes=("hr",))
    assert keys.closed and keys.active == 2
    assert keys.secret_row("k2") == ("salt", "digest-k2", ["a", "b"], ["hr"], False, False)
    assert [k["key_id"] for k in keys.list()] == ["k1", "k2"] and keys.list()[0]["revoked_at"] is None
    with pytest.raises(ValueError, match="still active"):
        keys.reopen()
    assert keys.revoke("k1", T0) and not keys.revoke("k1", T0) and keys.secret_row("k1") is None
    assert keys.revoke("k2", T0) and keys.active == 0 and keys.closed      # closed until reopened
    keys.reopen()
    assert not keys.closed and not KeyStore(new_store()).closed    # kept in the store, not in this object
    keys.insert("k3", None, "salt", "digest-k3", ["a"], [], False, T0, pages_only=True)   # the extension's kind
    assert keys.secret_row("k3")[-1] is True and keys.list()[-1]["pages_only"] is True


def test_a_key_revoked_through_one_process_is_refused_by_every_other_at_once(postgres_url, tmp_path):
    """Two stores over one PostgreSQL database, as two replicas hold them."""
    a, b = PgCorpusStore(postgres_url, scratch_dir=tmp_path), PgCorpusStore(postgres_url, scratch_dir=tmp_path)
    try:
        ka, kb = KeyStore(a), KeyStore(b)
        assert not kb.closed
        _key(ka, "k1")
        assert kb.secret_row("k1") is not None                 # a key made on one is known to the other
        deadline = time.monotonic() + 2 * SHARED_TTL_S + 1
        while not kb.closed and time.monotonic() < deadline:   # the other one closes within SHARED_TTL_S
            time.sleep(0.05)
        assert kb.closed and kb.active == 1
        assert ka.revoke("k1", T0)
        assert kb.secret_row("k1") is None                     # refused by the other at once
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("sql, want", [
    ("SELECT ? , '?' , 'it''s ?%' , 5 % 2 , ?", "SELECT %s , '?' , 'it''s ?%' , 5 %% 2 , %s"),
    ("SELECT 1", "SELECT 1"),
])
def test_placeholders_become_psycopg_s_outside_quoted_strings(sql, want):
    assert to_pyformat(sql) == want


def _notes_history(store) -> tuple:
    store.ensure_workspace("default")
    store.apply([PageWrite(PageRow(f"p{n}", "default", f"https://ex.org/{n}", f"ex.org/{n}", "ex.org", f"T{n}",
                                   "body", f"h{n}", T0, T0), [ChunkRow(n, f"p{n}", 0, "text", 0, 4, None, 1)])
                 for n in range(3)], [])
    notes = MapNotes(store)
    row = {"group_key": "g1", "page_id": "p0", "url": "https://ex.org/0", "title": "T0", "sub_query": "what is α",
           "vector": np.array([0.25, -1.5, 3.0], dtype=np.float32), "confidence": "high", "session_id": "s",
           "query_id": "q1"}
    v1 = notes.write("default", [row, {**row, "page_id": "p1", "group_key": "g2"}], T0)
    v2 = notes.write("default", [{**row, "page_id": "p2", "sub_query": "then β"}], T0 + timedelta(minutes=1))
    before = notes.read("default")
    store.apply([], [], deletes=["p1"])              # a deleted page's note drops out of what is read
    return v1, v2, notes.version("default"), notes.write("default", [], T0), before, notes.read("default")


def test_evidence_map_notes_read_back_the_same_from_duckdb_and_postgresql(tmp_path, postgres_url):
    duck, pg = CorpusStore(tmp_path / "store.duckdb"), PgCorpusStore(postgres_url, scratch_dir=tmp_path)
    try:
        a, b = _notes_history(duck), _notes_history(pg)
        assert a[:4] == b[:4] == (1, 2, 2, 0)
        for before_or_after in (4, 5):
            assert [(n.version, n.group_key, n.page_id, n.sub_query, n.vector.tolist(), n.written_at)
                    for n in a[before_or_after]] == \
                   [(n.version, n.group_key, n.page_id, n.sub_query, n.vector.tolist(), n.written_at)
                    for n in b[before_or_after]]
        assert [n.page_id for n in a[4]] == ["p0", "p1", "p2"] and [n.page_id for n in a[5]] == ["p0", "p2"]
        assert a[5][0].vector.tolist() == [0.25, -1.5, 3.0]
    finally:
        duck.close()
        pg.close()


def test_a_key_table_from_before_pages_only_keys_is_brought_up(tmp_path):
    """A DuckDB data dir whose api_keys has no pages_only column (made before the extension's keys) gets
    it at open; its keys read as not pages-only. (PostgreSQL: migration 8, indexes/pg_schema.py.)"""
    from indexes.keys import DDL
    from indexes.store import CorpusStore

    store = CorpusStore(tmp_path / "old.duckdb")
    try:
        with store.sql().transaction() as tx:
            tx.run(DDL)
            tx.run("INSERT INTO api_keys VALUES ('k0', NULL, 'salt', 'digest', ['default'], [], false, ?, NULL)", [T0])
        keys = KeyStore(store)
        assert keys.secret_row("k0") == ("salt", "digest", ["default"], [], False, False)
        assert keys.list()[0]["pages_only"] is False
    finally:
        store.close()
