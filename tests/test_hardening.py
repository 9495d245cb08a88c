"""Issue 20's findings, one regression test each: a bad page never bricks a data dir, keys never fail
open, loads stay inside their workspace's folder, no plain-text 500, scope-correct counts."""
from __future__ import annotations

import json

import pytest

BAD_DATE = {"url": "https://old.example/x", "body_text": "x", "seen_at": "1600-01-01T00:00:00Z"}


def h(token):
    return {"Authorization": f"Bearer {token}"}


def ingest(corpus, records, workspace=None):
    from engine.ingest import Ingester

    return Ingester(corpus, workspace, progress=False).ingest((i, "test", r) for i, r in enumerate(records))


# 1. One page with an out-of-range date ------------------------------------------------------------

@pytest.mark.parametrize("bad, field", [
    ({"seen_at": "1600-01-01T00:00:00Z"}, "seen_at"),
    ({"published": "2300-01-01"}, "published"),
    ({"cluster_id": 1 << 63}, "cluster_id"),
    ({"title": "a\udc00b"}, "title"),
    ({"url": "https://x.example/\udc00"}, "url"),
    ({"entities": [{"canonical": "k\udc00"}]}, "entities"),
])
def test_a_value_no_index_can_hold_is_refused_alone_and_the_batch_lands(make_corpus, bad, field):
    corpus = make_corpus()
    good = [{"url": f"https://ok.example/{i}", "body_text": f"page {i} about gannets"} for i in range(2)]
    rep = ingest(corpus, [good[0], {"url": "https://bad.example/x", "body_text": "x", **bad}, good[1]], "wsa")
    statuses = [(o.index, o.status) for o in rep.outcomes]
    assert statuses == [(0, "created"), (1, "error"), (2, "created")]
    assert field in rep.outcomes[1].error
    state = corpus.consistency()
    assert state["consistent"] and state["chunks"] == 2 and corpus.store.counts()["pages"] == 2
    # nothing was left locked: another workspace's ingest lands and is indexed
    rep = ingest(corpus, [{"url": "https://b.example/1", "body_text": "puffins"}], "wsb")
    assert rep.count("created") == 1 and corpus.consistency()["consistent"]


def test_the_reported_request_is_a_batch_error_not_a_500_and_the_server_restarts(tmp_path, pool):
    from fastapi.testclient import TestClient

    from engine.corpus import open_corpus
    from engine.settings import load_settings
    from server.app import create_app

    s = load_settings(data_dir=str(tmp_path / "data"))
    corpus = open_corpus(s, pool)
    with TestClient(create_app(s, corpus), raise_server_exceptions=False) as client:
        r = client.post("/v1/pages", json={"workspace": "wsa", "pages": [BAD_DATE]})
        assert r.status_code == 200 and r.json()["errors"] is True
        assert r.json()["items"][0]["status"] == "error" and "seen_at" in r.json()["items"][0]["error"]
        r = client.post("/v1/pages", json={"workspace": "wsb", "pages": [{"url": "https://b.example/", "body_text": "y"}]})
        assert r.json()["items"][0]["status"] == "created"
        assert client.get("/v1/status").json()["generations"]["consistent"] is True
    corpus.close()
    corpus = open_corpus(s, pool)   # a restart
    try:
        assert corpus.consistency()["consistent"] and corpus.store.counts()["pages"] == 1
    finally:
        corpus.close()


def _smuggle_bad_row(corpus):
    """What the code before issue 20 let into the store: a page (and its chunk and vector) whose
    seen_at the BM25 index cannot hold. Written with SQL, as that code's transaction wrote it."""
    import numpy as np

    from indexes.store import ChunkRow, PageRow, PageWrite
    from datetime import datetime

    page = PageRow("pg_bad", corpus.settings.default_workspace, "https://old.example/x", "old.example/x",
                   "old.example", "Old", "an old page", "h", datetime(1600, 1, 1), datetime(1600, 1, 1))
    chunk = ChunkRow(42, "pg_bad", 0, "an old page", 0, 11, [], 3)
    vec = corpus.embedder().encode_documents(["an old page"])[0]
    corpus.store.apply([PageWrite(page, [chunk], {corpus.settings.models.active: {42: np.asarray(vec)}})], [])


def test_a_bad_row_already_in_the_store_is_quarantined_at_start_not_fatal(make_corpus, tmp_path):
    from fastapi.testclient import TestClient

    from server.app import create_app

    corpus = make_corpus(tmp_path / "d")
    ingest(corpus, [{"url": "https://ok.example/1", "body_text": "gannets dive for fish"}])
    _smuggle_bad_row(corpus)
    corpus.close()
    corpus = make_corpus(tmp_path / "d")   # start-up repair used to die here with "out of range"
    state = corpus.consistency()
    assert state["consistent"] and state["chunks"] == 1, state
    assert any("quarantine" in r.detail for r in corpus.repairs)
    with TestClient(create_app(corpus.settings, corpus)) as client:
        status = client.get("/v1/status").json()
        assert status["quarantine"]["pages"] == 1
        q = status["quarantine"]["recent"][0]
        assert q["page_id"] == "pg_bad" and "out of range" in q["reason"]
    # the row is kept (as JSON), not lost
    row = corpus.store.cursor().execute("SELECT page FROM quarantine WHERE page_id = 'pg_bad'").fetchone()
    assert json.loads(row[0])["body_text"] == "an old page"


def test_reindex_skips_a_bad_row_instead_of_dying(make_corpus):
    corpus = make_corpus()
    ingest(corpus, [{"url": "https://ok.example/1", "body_text": "gannets dive for fish"}])
    _smuggle_bad_row(corpus)
    reports = corpus.reindex()
    assert "quarantine" in reports[0].detail
    assert corpus.consistency()["consistent"] and corpus.store.quarantined()["pages"] == 1


# 2. Keys never fail open ----------------------------------------------------------------------------

def test_revoking_the_last_key_leaves_the_server_closed_and_only_the_cli_reopens_it(tmp_path, capsys, monkeypatch):
    from docs.examples import make_client
    from engine.access import create_key
    from server.cli import main

    client = make_client(tmp_path / "data")
    try:
        token = create_key(client.corpus.keys, ["*"])["token"]
        key_id = token.split("_")[1]
        assert client.delete(f"/v1/keys/{key_id}", headers=h(token)).status_code == 200
        r = client.get("/v1/status")
        assert r.status_code == 401 and r.json()["detail"]["type"] == "unauthorized"
        r = client.post("/v1/keys", json={"workspaces": ["*"]})   # no admin key can be minted anonymously
        assert r.status_code == 401 and client.corpus.keys.active == 0
        assert client.get("/mcp").status_code == 401
    finally:
        client.corpus.close()
    # closed survives a restart, and serving beyond loopback is refused without an active key
    monkeypatch.setenv("REFINDERY_DATA_DIR", str(tmp_path / "data"))
    client = make_client(tmp_path / "data")
    try:
        assert client.get("/v1/status").status_code == 401
    finally:
        client.corpus.close()
    assert main(["serve", "--host", "0.0.0.0", "--port", "9"]) == 2
    capsys.readouterr()
    assert main(["keys", "open"]) == 2                       # explicit: needs --yes
    assert main(["keys", "open", "--yes"]) == 0
    capsys.readouterr()
    client = make_client(tmp_path / "data")
    try:
        assert client.get("/v1/status").status_code == 200
    finally:
        client.corpus.close()


def test_keys_open_is_refused_while_a_key_is_active(tmp_path, capsys, monkeypatch):
    from server.cli import main

    monkeypatch.setenv("REFINDERY_DATA_DIR", str(tmp_path / "data"))
    assert main(["keys", "create", "--workspace", "*"]) == 0
    capsys.readouterr()
    assert main(["keys", "open", "--yes"]) == 2
    assert "still active" in capsys.readouterr().err


@pytest.mark.parametrize("host, loopback", [
    ("127.0.0.1", True), ("127.8.9.10", True), ("::1", True), ("[::1]", True), ("localhost", True),
    ("127.0.0.1.example", False), ("127.evil.example", False), ("0.0.0.0", False), ("::", False),
    ("10.0.0.1", False), ("", False)])
def test_the_loopback_check_resolves_addresses(host, loopback):
    from engine.access import is_loopback

    assert is_loopback(host) is loopback
