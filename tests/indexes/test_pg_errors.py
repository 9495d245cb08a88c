"""A PostgreSQL connection lost under a statement is the store's typed StoreUnavailable (a route answers
it with 503 store_unavailable), on a read and inside a write — deterministically: the statement is a
server-side sleep, and its backend is terminated from another connection once it is seen running
(issue 70, row 8: the mapping was met only by chance, in the cluster's PostgreSQL restart)."""
from __future__ import annotations

import threading
import time

import psycopg
import pytest

from indexes.pg_store import PgCorpusStore
from indexes.store_rows import StoreUnavailable

MARK = "refindery-test-terminated"


def _terminate_when_running(url: str, marker: str) -> None:
    """From a connection of its own: wait until a backend runs the statement carrying `marker`, then
    terminate it."""
    deadline = time.monotonic() + 60
    with psycopg.connect(url, autocommit=True) as con:
        while time.monotonic() < deadline:
            pids = [r[0] for r in con.execute(
                "SELECT pid FROM pg_stat_activity WHERE query LIKE %s AND pid <> pg_backend_pid()",
                [f"%{marker}%"]).fetchall()]
            if pids:
                for pid in pids:
                    con.execute("SELECT pg_terminate_backend(%s)", [pid])
                return
            time.sleep(0.02)
    pytest.fail(f"no backend ran the statement marked {marker!r}")


def _raised(call) -> BaseException | None:
    try:
        call()
    except BaseException as exc:   # noqa: BLE001 — what the call raised is the test's subject
        return exc
    return None


@pytest.mark.parametrize("where", ["read", "write"])
def test_a_connection_lost_under_a_statement_is_store_unavailable(postgres_url, tmp_path, where):
    store = PgCorpusStore(postgres_url, scratch_dir=tmp_path)
    assert store.kind == "postgres"
    marker = f"{MARK}-{where}"
    try:
        if where == "read":
            call = lambda: store.sql().rows(f"SELECT pg_sleep(30), '{marker}'")   # noqa: E731
        else:
            def call():
                with store._write(bump=False) as (con, _):
                    con.execute(f"SELECT pg_sleep(30), '{marker}'")
        killer = threading.Thread(target=_terminate_when_running, args=(postgres_url, marker))
        killer.start()
        exc = _raised(call)
        killer.join(60)
        assert isinstance(exc, StoreUnavailable), repr(exc)
        assert "PostgreSQL" in str(exc)
        # and the store goes on: the next read gets a fresh connection
        assert store.generation() >= 0
    finally:
        store.close()
