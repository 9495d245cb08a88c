"""The query log over a PostgreSQL store that restarts: what was recorded while the server was down is
kept and written once it is back — every entry once, none dropped."""
from __future__ import annotations

import time

from conftest import postgres_server

from engine.core.querylog import LogEntry, QueryLog
from indexes.pg_store import PgCorpusStore


def _entry(i: int) -> LogEntry:
    return LogEntry(query_id=f"q{i}", endpoint="search", workspace="default", query=f"query {i}",
                    params={"k": 10}, models=["m"], timings={"total": 1.0}, total=3, returned=1,
                    results=[("m", 0, f"p{i}", 0.5, None)])


def test_entries_recorded_while_postgresql_restarts_are_written_once_it_is_back(tmp_path):
    server, uri = postgres_server(tmp_path / "pg")
    store = PgCorpusStore(uri, scratch_dir=tmp_path, connect_timeout_s=2)
    qlog = QueryLog(store, flush_interval_s=0.05)
    try:
        for i in range(20):
            qlog.record(_entry(i))
        assert qlog.flush(30) and qlog.written == 20
        server.cleanup()                                   # down
        for i in range(20, 60):
            qlog.record(_entry(i))
        time.sleep(1.0)                                    # the writer tries, and keeps what it could not write
        assert not qlog.flush(0.1)
        server, _ = postgres_server(tmp_path / "pg")       # back
        assert qlog.flush(60)
        rows = store.sql().rows("SELECT query_id FROM log_queries ORDER BY 1")
        results = store.sql().rows("SELECT query_id, page_id FROM log_results ORDER BY 1")
        want = sorted(f"q{i}" for i in range(60))
        assert [r[0] for r in rows] == want and [r[0] for r in results] == want
        assert qlog.dropped == 0 and qlog.written == 60
    finally:
        qlog.close()
        store.close()
        server.cleanup()
