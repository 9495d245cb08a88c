"""Compare (A/B of embedders), the query log and feedback."""
from __future__ import annotations

import json

import pytest
from conftest import STORE_BACKENDS, ingest, page
from fastapi.testclient import TestClient

from engine.refind.agreement import jaccard_at_k, kendall_tau_b, rbo_ext
from server.app import create_app


# Values printed by the reference implementation changyaochen/rbo 0.1.3 (PyPI `rbo`,
# `RankingSimilarity(a, b).rbo_ext(p)`, which implements Webber et al. 2010 eq. 32 with its
# uneven-length extension). It cannot be a dependency here: it pins numpy < 2.
REFERENCE = [
    ([24, 13, 1, 8, 16, 15, 12, 9, 19], [24, 13, 1, 8, 16, 6, 4, 9, 22, 3, 17, 20, 21], 0.5, 0.9928850446428572),
    ([24, 13, 1, 8, 16, 15, 12, 9, 19], [24, 13, 1, 8, 16, 6, 4, 9, 22, 3, 17, 20, 21], 0.9, 0.8195279789285714),
    ([24, 13, 1, 8, 16, 15, 12, 9, 19], [24, 13, 1, 8, 16, 6, 4, 9, 22, 3, 17, 20, 21], 0.98, 0.7039966723550912),
    ([18, 24, 2, 8, 3], [18, 24, 2, 15, 20, 12, 6, 3, 0, 22], 0.5, 0.960275607638889),
    ([18, 24, 2, 8, 3], [18, 24, 2, 15, 20, 12, 6, 3, 0, 22], 0.9, 0.7688387291499998),
    ([2, 11, 5], [2, 11, 19, 6, 1, 18, 21], 0.9, 0.73),
    ([2, 11, 5], [2, 11, 19, 6, 1, 18, 21], 0.98, 0.6798666666666667),
    ([18, 17, 4, 11, 19, 15], [18, 17, 4, 11, 19, 2, 0, 15, 8, 7, 6, 21, 16], 0.9, 0.9437311264017361),
    ([9, 3, 12, 15, 4, 2], [12], 0.5, 0.06875),
    ([9, 3, 12, 15, 4, 2], [12], 0.9, 0.156762),
    ([8, 23, 11, 20, 16, 0, 14, 7, 1, 5, 21, 15], [8, 23, 11, 20, 16, 0, 14, 12, 17, 3, 18], 0.98, 0.6919286462821056),
    (list("abcde"), list("bacdf"), 0.9, 0.76878),
]


@pytest.mark.parametrize("a,b,p,expected", REFERENCE)
def test_rbo_ext_matches_the_reference_implementation(a, b, p, expected):
    assert rbo_ext(a, b, p) == pytest.approx(expected, abs=1e-9)
    assert rbo_ext(b, a, p) == pytest.approx(expected, abs=1e-9)  # symmetric


def test_rbo_jaccard_tau_edge_cases():
    assert rbo_ext(list("abc"), list("abc")) == pytest.approx(1.0)
    assert rbo_ext(list("abc"), list("xyz")) == 0.0
    assert jaccard_at_k(list("abcd"), list("cdef"), 4) == pytest.approx(2 / 6)
    assert kendall_tau_b(list("abcd"), list("dcba")) == (pytest.approx(-1.0), 4)
    assert kendall_tau_b(list("ab"), list("xa")) == (None, 1)


@pytest.mark.parametrize("ab_corpus", ["embedded", "milvus"], indirect=True)
def test_compare_two_embedders_shares_the_sparse_arm(ab_corpus):
    with TestClient(create_app(ab_corpus.settings, ab_corpus)) as c:
        r = c.post("/v1/compare", json={"query": "where to find owls at night", "models": ["all-minilm-l6-v2", "minilm-prefixed"],
                                        "k": 5})
        assert r.status_code == 200, r.text
        body = r.json()
        assert [run["model"] for run in body["runs"]] == ["all-minilm-l6-v2", "minilm-prefixed"]
        assert all(len(run["pages"]) == 5 for run in body["runs"])
        (ag,) = body["agreement"]
        a = [p["page_id"] for p in body["runs"][0]["pages"]]
        b = [p["page_id"] for p in body["runs"][1]["pages"]]
        assert ag["jaccard"] == pytest.approx(jaccard_at_k(a, b, 5))
        assert ag["rbo_ext"] == pytest.approx(rbo_ext(a, b, 0.9)) and ag["rbo_p"] == 0.9
        assert ag["shared"] == len(set(a) & set(b))
        assert body["sparse_shared"] and "sparse" not in body["runs"][0]["timings_ms"]
        bad = c.post("/v1/compare", json={"query": "x", "models": ["all-minilm-l6-v2", "nope"]})
        assert bad.status_code == 422 and bad.json()["detail"]["type"] == "model_unknown"
        assert c.post("/v1/compare", json={"query": "x", "models": ["a"]}).status_code == 422
        # a declared model that has embedded nothing: 503, and the server names its operator's fix
        r = c.post("/v1/compare", json={"query": "x", "models": ["all-minilm-l6-v2", "minilm-unembedded"]})
        assert r.status_code == 503 and r.json()["detail"]["type"] == "model_unavailable"
        assert "run `refindery models --embed minilm-unembedded`" in r.json()["detail"]["title"]
    ab_corpus.querylog.flush()
    sql = ab_corpus.store.sql()
    qid = body["query_id"]
    assert tuple(sql.row("SELECT endpoint, models FROM log_queries WHERE query_id = ?", [qid])) == \
        ("compare", ["all-minilm-l6-v2", "minilm-prefixed"])
    arms = dict(sql.rows("""SELECT model || '/' || arm, count(*) FROM log_candidates WHERE query_id = ?
                            GROUP BY 1""", [qid]))
    assert set(arms) == {"/sparse", "all-minilm-l6-v2/dense", "minilm-prefixed/dense"}  # sparse logged once
    assert sql.row("SELECT count(*) FROM log_agreement WHERE query_id = ?", [qid])[0] == 1
    assert sql.row("SELECT count(*) FROM log_results WHERE query_id = ?", [qid])[0] == 10


@pytest.mark.parametrize("store_backend", STORE_BACKENDS, indirect=True)
def test_every_search_is_logged_with_its_candidates(store_backend, make_corpus):
    corpus = make_corpus(log={"flush_interval_s": 0.05})
    ingest(corpus, [page(f"https://log.example/{i}", f"Log test page {i} about herons and egrets.") for i in range(5)])
    with TestClient(create_app(corpus.settings, corpus)) as c:
        ids = [c.post("/v1/search", json={"query": f"herons {i}", "k": 3}).json()["query_id"] for i in range(7)]
        err = c.post("/v1/search", json={"query": "x", "filters": {"entity": "ghost"}})
        assert err.status_code == 404
    corpus.querylog.flush()
    sql = corpus.store.sql()
    rows = sql.rows("SELECT query_id, endpoint, returned, error_type FROM log_queries ORDER BY ts")
    assert [r[0] for r in rows[:7]] == ids and all(r[1] == "search" and r[2] == 3 for r in rows[:7])
    assert rows[7][3] == "entity_not_found"
    per_query = dict(sql.rows("""SELECT query_id, count(*) FROM log_candidates GROUP BY 1"""))
    assert all(per_query[q] >= 2 for q in ids)  # both arms' candidates
    fused = sql.row("SELECT count(*) FROM log_fused WHERE query_id = ? AND stage = 'fused'", [ids[0]])[0]
    assert fused == len({r[0] for r in sql.rows(
        "SELECT chunk_id FROM log_candidates WHERE query_id = ?", [ids[0]])})
    params = json.loads(sql.row("SELECT params FROM log_queries WHERE query_id = ?", [ids[0]])[0])
    # the request as sent, with the workspace it ran in (the verb resolved it: a replay runs there too)
    assert params == {"query": "herons 0", "k": 3, "explain": False, "workspace": "default"}


@pytest.mark.parametrize("store_backend", STORE_BACKENDS, indirect=True)
def test_feedback_needs_a_logged_query_and_a_page(store_backend, make_corpus):
    corpus = make_corpus()
    rep = ingest(corpus, [page("https://fb.example/a", "Feedback page about ospreys.")])
    pid = rep.outcomes[0].page_id
    with TestClient(create_app(corpus.settings, corpus)) as c:
        qid = c.post("/v1/search", json={"query": "ospreys"}).json()["query_id"]
        ok = c.post("/v1/feedback", json={"query_id": qid, "page_id": pid, "kind": "found"})
        assert ok.status_code == 200 and ok.json()["stored"]
        r = c.post("/v1/feedback", json={"query_id": "nope", "page_id": pid, "kind": "click"})
        assert r.status_code == 404 and r.json()["detail"]["type"] == "query_not_found"
        r = c.post("/v1/feedback", json={"query_id": qid, "page_id": "pg_nope", "kind": "click"})
        assert r.status_code == 404 and r.json()["detail"]["type"] == "page_not_found"
        assert c.post("/v1/feedback", json={"query_id": qid, "page_id": pid, "kind": "love"}).status_code == 422
    assert corpus.store.sql().rows("SELECT kind FROM feedback") == [("found",)]


@pytest.mark.parametrize("store_backend", STORE_BACKENDS, indirect=True)
def test_logging_can_be_off_and_old_rows_pruned(store_backend, make_corpus, tmp_path):
    from datetime import datetime, timedelta

    off = make_corpus(tmp_path / "off", log={"enabled": False})
    ingest(off, [page("https://off.example/a", "Quiet page.")])
    with TestClient(create_app(off.settings, off)) as c:
        c.post("/v1/search", json={"query": "quiet"})
    assert off.store.sql().row("SELECT count(*) FROM log_queries")[0] == 0

    on = make_corpus(tmp_path / "on", log={"flush_interval_s": 0.05})
    ingest(on, [page("https://on.example/a", "Loud page.")])
    with TestClient(create_app(on.settings, on)) as c:
        c.post("/v1/search", json={"query": "loud"})
    on.querylog.flush()
    assert on.querylog.prune(datetime.utcnow() - timedelta(days=1))["log_queries"] == 0
    deleted = on.querylog.prune(datetime.utcnow() + timedelta(days=1))
    assert deleted["log_queries"] == 1 and deleted["log_candidates"] >= 1
    assert on.store.sql().row("SELECT count(*) FROM log_candidates")[0] == 0


def test_a_killed_server_keeps_what_the_writer_had_committed(tmp_path, make_corpus):
    """Entries older than one flush interval are on disk when the server is SIGKILLed."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from conftest import ROOT, serving_on

    data = tmp_path / "data"
    seed = make_corpus(data)
    ingest(seed, [page(f"https://kill.example/{i}", f"Kill test page {i} about cormorants.") for i in range(4)])
    seed.close()
    # A Unix socket, so the test needs no network at all (under unshare -n even loopback is down).
    sock = tmp_path / "refindery.sock"
    env = {k: v for k, v in os.environ.items() if not k.startswith("REFINDERY_")}
    env.update(REFINDERY_DATA_DIR=str(data), REFINDERY_LOG__FLUSH_INTERVAL_S="0.2", REFINDERY_MODELS__DEVICE="cpu")
    proc = subprocess.Popen([sys.executable, "-m", "server.cli", "serve", "--uds", str(sock)], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        client = serving_on(sock)
        ids = [client.post("/v1/search", json={"query": f"cormorants {i}"}, timeout=30).json()["query_id"]
               for i in range(5)]
        time.sleep(1.5)  # several flush intervals
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    after = make_corpus(data)
    logged = {r[0] for r in after.store.sql().rows("SELECT query_id FROM log_queries")}
    assert set(ids) <= logged
