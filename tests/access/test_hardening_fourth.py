"""The fourth hardening pass (issue 70) on the wire: the key check comes before any wait for a
generation, waits are capped per replica and per key, a refused key is rate limited per address,
and a generation header in another script's digits is a 422."""
from __future__ import annotations

import threading
import time

import pytest

from conftest import page

FUTURE = "999999999"


def h(token):
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def keyed(tmp_path):
    """A DuckDB server with one key (no model is loaded: none of these requests needs one)."""
    from docs.examples import make_client
    from engine.core.access import create_key

    client = make_client(tmp_path / "data", server={"rate_limit_per_minute": 60, "rate_limit_burst": 5})
    client.key = create_key(client.corpus.keys, ["*"])["token"]
    yield client
    client.corpus.close()


def test_a_request_without_a_key_is_refused_before_it_could_wait_for_a_generation(keyed):
    """Issue 70, row 1: the generation header was honoured before the key check, so a keyless caller
    could hold a worker for catch_up_wait_s (a 503 not_caught_up, where the key check says 401)."""
    for headers in ({}, h("rfk_not-a-key")):
        r = keyed.post("/v1/search", json={"query": "x"}, headers={**headers, "Refindery-Min-Generation": FUTURE})
        assert r.status_code == 401, r.text
        assert r.headers["www-authenticate"] == "Bearer"
    # an open path ignores the header (it is read-your-writes for keyed calls, not a way to wait)
    r = keyed.get("/healthz", headers={"Refindery-Min-Generation": FUTURE})
    assert r.status_code == 200 and r.json()["waiting_for_generation"] == 0
    # a keyed caller is answered as before: the generation a DuckDB store has not committed is a 503 at once
    r = keyed.post("/v1/search", json={"query": "x"}, headers={**h(keyed.key), "Refindery-Min-Generation": FUTURE})
    assert r.status_code == 503 and r.json()["detail"]["type"] == "not_caught_up"
    # the refusals are in the audit, with no key
    keyed.corpus.querylog.flush()
    rows = keyed.corpus.store.sql().rows("SELECT key_id, status FROM log_access WHERE route = '/v1/search'")
    assert sorted(r[1] for r in rows if r[0] is None) == [401, 401]


def test_requests_refused_for_their_key_are_rate_limited_per_address(keyed):
    codes = [keyed.get("/v1/clusters", headers=h("rfk_guess")).status_code for _ in range(7)]
    assert codes[:5] == [401] * 5 and codes[5:] == [429, 429]
    r = keyed.get("/v1/clusters", headers=h("rfk_guess"))
    assert r.json()["detail"]["type"] == "rate_limited" and int(r.headers["retry-after"]) >= 1
    # a valid key from the same address still goes through
    assert keyed.get("/v1/clusters", headers=h(keyed.key)).status_code == 200


def test_a_generation_in_superscript_digits_is_a_422_not_a_500(pool, tmp_path):
    """Over a real socket (a test client re-encodes a header's bytes as UTF-8, which no longer reads
    as digits): str.isdigit() takes superscript digits, int() does not — it was a 500."""
    import socket

    from conftest import served_on_socket
    from docs.examples import make_client
    from engine.core.access import create_key
    from server.app import create_app

    client = make_client(tmp_path / "data", pool=pool)
    key = create_key(client.corpus.keys, ["*"])["token"]
    sock = tmp_path / "s.sock"
    try:
        with served_on_socket(create_app(corpus=client.corpus), sock):
            for value in (b"\xb9\xb2", b"\xb3", b"12\xb2"):   # superscript 1, 2, 3 in the latin-1 a header is read as
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.connect(str(sock))
                s.sendall(b"POST /v1/search HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                          b"Authorization: Bearer " + key.encode() + b"\r\nRefindery-Min-Generation: " + value +
                          b"\r\nContent-Length: 14\r\nConnection: close\r\n\r\n{\"query\": \"x\"}")
                reply = b""
                while chunk := s.recv(65536):
                    reply += chunk
                s.close()
                assert reply.startswith(b"HTTP/1.1 422"), reply[:300]
                assert b'"validation_error"' in reply
    finally:
        client.corpus.close()


def _replica(pool, data_dir, url, **store):
    from engine.app import Engine
    from engine.core.settings import load_settings

    return Engine(load_settings(data_dir=str(data_dir), models={"device": "cpu"},
                                store={"url": url, **store}), pool)


def test_waits_for_a_generation_are_capped_per_key_and_per_replica(pool, tmp_path, postgres_url):
    """A replica holds at most catch_up_max_waiters_per_key requests of one key waiting for a
    generation (and catch_up_max_waiters in all): the next is a 503 not_caught_up at once, naming the
    cap, while the first still waits."""
    from fastapi.testclient import TestClient

    from server.app import create_app

    b = _replica(pool, tmp_path / "b", postgres_url, catch_up_wait_s=20, catch_up_max_waiters_per_key=1)
    assert b.corpus.store.kind == "postgres"
    try:
        app = create_app(engine=b)
        with TestClient(app) as cb:
            cb.post("/v1/pages", json={"pages": [page("https://example.org/g", "Gannets dive deep.")]})
            far = str(b.corpus.store.generation() + 1)
            first: dict = {}
            waiting = threading.Thread(target=lambda: first.update(r=cb.post(
                "/v1/search", json={"query": "gannets"}, headers={"Refindery-Min-Generation": far})))
            waiting.start()
            deadline = time.monotonic() + 60
            while app.state.waiters.count() < 1 and time.monotonic() < deadline:
                time.sleep(0.02)
            assert cb.get("/healthz").json()["waiting_for_generation"] == 1
            r = cb.post("/v1/search", json={"query": "gannets"}, headers={"Refindery-Min-Generation": far})
            assert r.status_code == 503 and r.headers["retry-after"] == "1"
            assert r.json()["detail"]["type"] == "not_caught_up"
            assert r.json()["detail"]["reason"] == "this key has too many requests waiting for a generation"
            assert waiting.is_alive()   # the first one still waits: the refusal did not wait for it
            # the generation arrives: the waiting request is answered
            cb.post("/v1/pages", json={"pages": [page("https://example.org/t", "Terns hover.")]})
            waiting.join(60)
            assert first["r"].status_code == 200
            assert app.state.waiters.count() == 0
            b.settings.store.catch_up_max_waiters = 0   # the replica's cap: none may wait
            r = cb.post("/v1/search", json={"query": "gannets"},
                        headers={"Refindery-Min-Generation": str(b.corpus.store.generation() + 5)})
            assert r.json()["detail"]["reason"] == "too many requests wait for a generation on this replica"
    finally:
        b.close()


def test_a_switch_to_a_registered_model_that_is_not_installed_is_refused_at_once(tmp_path):
    """Issue 70, row 5: it was accepted (202) and failed in the background."""
    from docs.examples import make_client
    from engine.core.settings import load_settings

    registry = tmp_path / "models.toml"
    registry.write_text(load_settings().registry_path.read_text() + """
[embedders.absent-embedder]
source = "package"
package = "refindery_absent_embedder_package"
install = "pip install refindery-absent-embedder"
dim = 384
""")
    client = make_client(tmp_path / "data", models={"registry": str(registry)})
    try:
        r = client.post("/v1/models/absent-embedder/switch")
        assert r.status_code == 422, r.text
        detail = r.json()["detail"]
        assert detail["type"] == "model_not_installed" and detail["install"] == "pip install refindery-absent-embedder"
        assert client.get("/v1/models/switch").json()["switching_to"] is None
    finally:
        client.corpus.close()


def test_a_replayed_or_generated_statement_reaches_no_file_and_no_setting(tmp_path):
    """Issue 70, row 7: a replica replays relation_ops SQL on its DuckDB connection, which had external
    access on: a recorded statement could read or write any file the server may. The store's and the
    relation file's connections are opened with external access off and the configuration locked."""
    import duckdb

    from indexes.relation_log import replay
    from indexes.store import CorpusStore

    store = CorpusStore(tmp_path / "store.duckdb")
    try:
        leak = tmp_path / "leak.csv"
        with pytest.raises(duckdb.PermissionException):
            replay(store.cursor(), [["x", f"COPY (SELECT 42) TO '{leak}'", None]], [])
        assert not leak.exists()
        with pytest.raises(duckdb.PermissionException):
            store.cursor().execute("SELECT * FROM read_csv('/etc/passwd')").fetchall()
        with pytest.raises(duckdb.Error):   # and it cannot be turned back on from SQL
            replay(store.cursor(), [["x", "SET enable_external_access = true", None]], [])
        # what the store itself does still works: a registered Arrow table, as a replayed load's
        import pyarrow as pa
        replay(store.cursor(), [["r", "t_rows", 0], ["x", "CREATE TABLE kept AS SELECT * FROM t_rows", None]],
               [_ipc(pa.table({"n": [1, 2, 3]}))])
        assert store.cursor().execute("SELECT sum(n) FROM kept").fetchone()[0] == 6
    finally:
        store.close()


def _ipc(table) -> bytes:
    from indexes.relation_log import _ipc as encode

    return encode(table)


def test_a_read_only_key_of_every_workspace_may_not_start_a_background_embedding(tmp_path):
    """Issue 70, row 8: the read-only refusal was only ever tried with keys the every-workspace check
    refuses first. A read-only key of every workspace and scope passes that one: only the write check
    stands between it and a background embedding of the whole corpus."""
    from docs.examples import make_client
    from engine.core.access import create_key

    client = make_client(tmp_path / "data")
    try:
        reader = create_key(client.corpus.keys, ["*"], read_only=True)["token"]
        r = client.post("/v1/models/all-minilm-l6-v2-int8/embed", headers=h(reader))
        assert r.status_code == 403 and r.json()["detail"]["type"] == "forbidden", r.text
        assert "read-only" in r.json()["detail"]["title"] or "write" in r.json()["detail"]["title"]
        assert client.get("/v1/models", headers=h(reader)).status_code == 200
        assert all("embedding" not in m for m in client.get("/v1/models", headers=h(reader)).json()["models"])
    finally:
        client.corpus.close()


def test_a_pasted_links_second_lookup_reads_only_the_callers_scopes(pool, tmp_path):
    """Issue 70, row 8: a shared link's tracking parameters are dropped and the URL looked up again;
    that lookup must read only the caller's scopes, or another scope's page at the clean URL decides
    that the prefix fallback is not tried (the page itself is filtered out later, which masked it)."""
    from docs.examples import make_client
    from engine.core.access import create_key

    client = make_client(tmp_path / "data", pool=pool)
    try:
        admin = create_key(client.corpus.keys, ["*"])["token"]
        mine = create_key(client.corpus.keys, ["default"], scopes=["a"])["token"]
        pages = [{"url": "https://docs.example/guide", "title": "Their guide", "scope": "b",
                  "body_text": "The guide of scope b, at the clean URL."},
                 {"url": "https://docs.example/guide/install", "title": "Install", "scope": "a",
                  "body_text": "How to install, in scope a, under the guide's path."}]
        assert client.post("/v1/pages", json={"pages": pages}, headers=h(admin)).status_code == 200
        r = client.post("/v1/search", json={"query": "https://docs.example/guide?utm_source=newsletter"},
                        headers=h(mine))
        assert r.status_code == 200, r.text
        top = r.json()["pages"][0]
        assert top["url"] == "https://docs.example/guide/install" and top["pinned"] == "prefix", top
        assert all(p["url"] != "https://docs.example/guide" for p in r.json()["pages"])
    finally:
        client.corpus.close()
