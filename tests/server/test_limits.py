"""Limits on a shared server: request body size (413), per-key rate limits (429 with Retry-After),
and relation loads confined to the configured source folders once keys exist (403)."""
from __future__ import annotations

import pytest


@pytest.fixture
def limited(tmp_path):
    """A server with keys, a small body limit and a slow rate (no model is loaded: none is needed)."""
    from docs.examples import make_client
    from engine.core.access import create_key

    client = make_client(tmp_path / "data", server={"max_body_bytes": 2048, "rate_limit_per_minute": 1,
                                                    "rate_limit_burst": 3})
    client.key = create_key(client.corpus.keys, ["*"])["token"]
    client.other = create_key(client.corpus.keys, ["*"])["token"]
    yield client
    client.corpus.close()


def h(token):
    return {"Authorization": f"Bearer {token}"}


def test_a_body_over_the_limit_is_413_before_it_is_read(limited):
    big = {"pages": [{"url": f"https://x.example/{i}", "body_text": "word " * 100} for i in range(10)]}
    r = limited.post("/v1/pages", json=big, headers=h(limited.key))
    assert r.status_code == 413 and r.json()["detail"]["type"] == "payload_too_large"
    assert limited.corpus.store.counts()["pages"] == 0

    def chunks():  # no Content-Length: counted as it streams
        for _ in range(10):
            yield b" " * 512

    r = limited.post("/v1/pages", content=chunks(), headers={**h(limited.key), "content-type": "application/json"})
    assert r.status_code == 413 and r.json()["detail"]["type"] == "payload_too_large"


def test_a_key_over_its_rate_gets_429_with_retry_after_and_other_keys_do_not(limited):
    codes = [limited.get("/v1/clusters", headers=h(limited.key)).status_code for _ in range(4)]
    assert codes == [200, 200, 200, 429]
    r = limited.get("/v1/clusters", headers=h(limited.key))
    assert r.status_code == 429 and r.json()["detail"]["type"] == "rate_limited"
    assert 1 <= int(r.headers["retry-after"]) <= 60
    assert limited.get("/v1/clusters", headers=h(limited.other)).status_code == 200
    assert limited.get("/healthz").status_code == 200  # health is never limited


def test_with_keys_loads_read_only_from_the_source_folders(tmp_path):
    from docs.examples import make_client
    from docs.examples.roster import LOAD, write_export
    from engine.core.access import create_key

    client = make_client(tmp_path / "data")
    try:
        inside = write_export(client.data_dir / "sources" / "w" / "export.duckdb")  # the workspace's own folder
        outside = write_export(tmp_path / "elsewhere" / "export.duckdb")
        token = create_key(client.corpus.keys, ["*"])["token"]
        assert client.post("/v1/public/workspaces", json={"workspace_id": "w"}, headers=h(token)).status_code == 201
        for src in (outside, client.data_dir / "sources" / "w" / ".." / ".." / ".." / "elsewhere" / "export.duckdb"):
            r = client.post("/v1/public/workspaces/w/loads", json={"source": str(src), **LOAD}, headers=h(token))
            assert r.status_code == 403 and r.json()["detail"]["type"] == "source_forbidden", r.text
        ok = client.post("/v1/public/workspaces/w/loads", json={"source": str(inside), **LOAD}, headers=h(token))
        assert ok.status_code == 201, ok.text
    finally:
        client.corpus.close()
