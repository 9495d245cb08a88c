"""Issue 20, generated: whatever pages, dates, URLs and filters a client sends, no reply is a 5xx,
the store and its indexes agree after every request, and the data dir restarts clean. Then a real
server is SIGKILLed right after refusing bad items, and its restart is clean too."""
from __future__ import annotations

import json
import signal
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

# text with lone surrogates, NUL and control characters among ordinary letters
TEXT = st.text(st.characters(categories=["L", "N", "P", "Zs", "Cs", "Cc"]), max_size=40)
HOSTS = st.sampled_from(["a.example", "www.A.example", "b.example:8080", "localhost:9", "", "x\udc00.example"])
SCHEMES = st.sampled_from(["https://", "http://", "", "javascript:", "data:", "ftp://", "file://"])
URLS = st.builds(lambda s, h, p: f"{s}{h}/{p}", SCHEMES, HOSTS, TEXT)
DATES = st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30),
                     timezones=st.sampled_from([None, timezone.utc, timezone(timedelta(hours=-11))]))
INTS = st.one_of(st.integers(-5, 5), st.integers(-(1 << 70), 1 << 70))
PAGE = st.fixed_dictionaries(
    {"url": URLS},
    optional={"title": TEXT, "body_text": TEXT, "seen_at": DATES.map(datetime.isoformat),
              "published": DATES.map(datetime.isoformat), "cluster_id": INTS, "scope": TEXT,
              "entities": st.lists(TEXT, max_size=3)})
FILTERS = st.fixed_dictionaries({}, optional={
    "after": DATES.map(datetime.isoformat), "before": DATES.map(datetime.isoformat),
    "cluster_id": st.lists(INTS, max_size=3), "domain": st.lists(TEXT, max_size=2),
    "entity": st.lists(TEXT, max_size=2)})
STATUSES = {"created", "updated", "revisited", "unchanged", "merged", "error"}


def post(client, path, body):
    # ensure_ascii: a lone surrogate travels as its \\u escape, as any JSON client may send it
    return client.post(path, content=json.dumps(body), headers={"content-type": "application/json"})


@pytest.fixture(scope="module")
def served(pool, tmp_path_factory):
    from fastapi.testclient import TestClient

    from engine.core.corpus import open_corpus
    from engine.core.settings import load_settings
    from server.app import create_app

    s = load_settings(data_dir=str(tmp_path_factory.mktemp("props") / "data"))
    corpus = open_corpus(s, pool)
    client = TestClient(create_app(s, corpus), raise_server_exceptions=False)   # no lifespan: the test closes it
    client.corpus, client.settings = corpus, s
    yield client
    if not corpus.store.closed:
        corpus.close()


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(pages=st.lists(PAGE, min_size=1, max_size=4), query=TEXT, filters=FILTERS,
       workspace=st.sampled_from(["default", "wsa", "wsb"]))
def test_generated_pages_and_searches_never_5xx_and_leave_the_store_consistent(served, pages, query, filters,
                                                                               workspace):
    r = post(served, "/v1/pages", {"workspace": workspace, "pages": pages})
    assert r.status_code < 500 and r.headers["content-type"] == "application/json", r.text
    if r.status_code == 200:
        items = r.json()["items"]
        assert len(items) == len(pages) and {i["status"] for i in items} <= STATUSES
        assert all(i["error"] for i in items if i["status"] == "error")
    state = served.get("/v1/status").json()
    assert state["generations"]["consistent"] is True, state["generations"]
    assert state["quarantine"]["pages"] == 0      # the edge refused them all: nothing got in to quarantine
    r = post(served, "/v1/search", {"query": query or "x", "workspace": workspace, "filters": filters, "k": 5})
    assert r.status_code in (200, 404, 422) and r.headers["content-type"] == "application/json", r.text


def test_after_the_generated_traffic_a_restart_is_clean(served, pool):
    from engine.core.corpus import open_corpus

    pages = served.corpus.store.counts()["pages"]
    served.corpus.close()
    corpus = open_corpus(served.settings, pool)
    try:
        state = corpus.consistency()
        assert state["consistent"] and corpus.store.counts()["pages"] == pages
        assert [r for r in corpus.repairs if r.action == "rebuilt"] == []
    finally:
        corpus.close()


def test_a_server_killed_right_after_refusing_bad_items_restarts_clean(tmp_path):
    from conftest import serving_on
    from test_crash_server import serve

    data, sock = tmp_path / "data", tmp_path / "refindery.sock"
    bad = [{"url": "https://old.example/x", "body_text": "x", "seen_at": "1600-01-01T00:00:00Z"},
           {"url": "https://big.example/x", "body_text": "x", "cluster_id": 1 << 63},
           {"url": "javascript:1", "body_text": "x"}]
    good = [{"url": f"https://ok.example/{i}", "body_text": f"gannets and puffins {i}"} for i in range(3)]
    proc = serve(data, sock)
    try:
        client = serving_on(sock)
        r = client.post("/v1/pages", content=json.dumps({"workspace": "wsa", "pages": bad + good}),
                        headers={"content-type": "application/json"}, timeout=120)
        assert [i["status"] for i in r.json()["items"]] == ["error"] * 3 + ["created"] * 3
        proc.send_signal(signal.SIGKILL)   # at once: the dense files are not saved, nothing is flushed
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    proc = serve(data, sock)
    try:
        client = serving_on(sock)
        status = client.get("/v1/status", timeout=60).json()
        assert status["generations"]["consistent"] is True and status["counts"]["pages"] == 3
        assert status["quarantine"]["pages"] == 0
        hits = client.post("/v1/search", json={"query": "puffins", "workspace": "wsa"}, timeout=60).json()
        assert hits["total"] == 3
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
