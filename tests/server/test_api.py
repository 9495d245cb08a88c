"""The HTTP face over a real corpus (TestClient runs the real app and lifespan)."""
from __future__ import annotations

import pytest
from conftest import page
from fastapi.testclient import TestClient

from server.app import create_app


@pytest.fixture
def client(make_corpus):
    corpus = make_corpus()
    with TestClient(create_app(corpus.settings, corpus)) as c:
        yield c


@pytest.fixture(scope="module")
def shared_client(shared_corpus):
    with TestClient(create_app(shared_corpus.settings, shared_corpus)) as c:
        yield c


def test_health_and_status(shared_client, demo_subset):
    health = shared_client.get("/healthz").json()
    assert health == {"status": "ok", "profile": "default", "embedder": "all-minilm-l6-v2",
                      "applied_generation": health["applied_generation"], "waiting_for_generation": 0}
    assert health["applied_generation"] >= 1   # the demo subset's writes (one process: what it committed)
    assert shared_client.get("/v1/models").json()["profile"] == "default"
    st = shared_client.get("/v1/status").json()
    assert st["counts"]["pages"] == len(demo_subset)
    assert st["generations"]["consistent"] is True
    assert st["generations"]["sparse"]["count"] == st["counts"]["chunks"]
    assert shared_client.post("/v1/search", json={"query": "json"}).status_code == 200
    # on CPU, queries are encoded by ONNX Runtime over an export of the active model's weights
    assert shared_client.get("/v1/status").json()["query_runtime"] == {
        "model": st["active_model"], "loaded": True, "runtime": "onnx", "device": "cpu"}


def test_search_finds_a_page_by_what_it_says(shared_client, shared_corpus):
    # Take a real page of the fixture and search for words from the middle of one of its chunks.
    pid, title = shared_corpus.store.sql().row(
        "SELECT page_id, title FROM pages ORDER BY page_id LIMIT 1")
    chunk = shared_corpus.store.page_chunks(pid)[0]["text"]
    words = " ".join(chunk.split()[5:20])
    r = shared_client.post("/v1/search", json={"query": words, "k": 5})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["pages"][0]["page_id"] == pid
    assert body["pages"][0]["snippets"] and body["pages"][0]["title"] == title
    assert set(body["timings_ms"]) >= {"embed", "dense", "sparse", "fusion", "rollup", "hydrate", "total"}
    # Paging is a slice of the same ranking.
    full = shared_client.post("/v1/search", json={"query": words, "k": 6}).json()["pages"]
    second = shared_client.post("/v1/search", json={"query": words, "k": 3, "offset": 3}).json()["pages"]
    assert [h["page_id"] for h in second] == [h["page_id"] for h in full[3:6]]
    assert [h["rank"] for h in second] == [4, 5, 6]


@pytest.mark.parametrize("body", [{}, {"query": ""}, {"query": "x", "k": 0}, {"query": "x", "k": "many"},
                                  {"query": "x", "offset": -1}, {"query": "x", "bogus": 1}])
def test_malformed_search_is_422_with_a_type(shared_client, body):
    r = shared_client.post("/v1/search", json=body)
    assert r.status_code == 422
    assert r.json()["detail"]["type"] == "validation_error"


def test_snippets_carry_the_spans_of_the_query_terms(shared_client):
    """Every word of a snippet whose stem is a query term is marked, and nothing else is: checked here
    against plain regular expressions for the forms of the two query words."""
    import re

    body = shared_client.post("/v1/search", json={"query": "Modules functions", "k": 10}).json()
    snippets = [s for p in body["pages"] for s in p["snippets"]]
    assert any(s["highlights"] for s in snippets)
    forms = re.compile(r"(?<![^\W_])(modules?|functions?)(?![^\W_])", re.IGNORECASE)
    for s in snippets:
        marked = [s["text"][a:b].lower() for a, b in s["highlights"]]
        assert marked == [m.group().lower() for m in forms.finditer(s["text"])]
        assert all(0 <= a < b <= len(s["text"]) for a, b in s["highlights"])
    off = shared_client.post("/v1/search", json={"query": "Modules functions", "k": 10, "highlight": False}).json()
    assert [p["page_id"] for p in off["pages"]] == [p["page_id"] for p in body["pages"]]
    assert not any(s["highlights"] for p in off["pages"] for s in p["snippets"])


def test_highlight_offsets_count_characters_and_follow_the_analyzer():
    from engine.refind.highlight import highlight_all, query_terms

    text = "Café naïve — the CAFÉS' transactional_log: transactions, transact; trans-action"
    plain = "Cafe naive - the CAFES' transactional_log: transactions, transact; trans-action"   # ASCII
    spans, ascii_spans = highlight_all([text, plain], query_terms("cafés transaction"))
    assert [text[a:b] for a, b in spans] == ["Café", "CAFÉS", "transactional", "transactions", "transact"]
    assert [plain[a:b] for a, b in ascii_spans] == ["transactional", "transactions", "transact"]
    assert highlight_all([text, plain], query_terms("")) == [[], []]


def test_facets_list_what_the_filters_take(shared_client, shared_corpus, demo_subset):
    f = shared_client.get("/v1/facets").json()
    assert f["workspace"] == shared_corpus.settings.default_workspace
    assert f["pages"] == len(demo_subset) == sum(d["pages"] for d in f["domains"])
    sql = shared_corpus.store.sql()
    lo, hi = sql.row("SELECT min(last_seen), max(last_seen) FROM pages")
    assert f["last_seen"] == {"min": lo.isoformat(), "max": hi.isoformat()}
    by_entity = dict(sql.rows("""SELECT e.canonical, count(DISTINCT pe.page_id) FROM page_entities pe
                                 JOIN entities e USING (entity_id) GROUP BY 1"""))
    assert {e["canonical"]: e["pages"] for e in f["entities"]} == by_entity
    assert f["clusters"] == []  # none fitted yet
    # A domain it lists filters to exactly that many pages.
    d = f["domains"][0]
    r = shared_client.post("/v1/search", json={"query": "the", "k": 200, "filters": {"domain": d["domain"]}}).json()
    assert r["total"] <= d["pages"] and {p["domain"] for p in r["pages"]} == {d["domain"]}
    assert shared_client.get("/v1/facets", params={"limit": 0}).status_code == 422


def test_unknown_page_is_404_with_a_type(shared_client):
    for r in (shared_client.get("/v1/pages/pg_nope"), shared_client.delete("/v1/pages/pg_nope")):
        assert r.status_code == 404
        assert r.json()["detail"]["type"] == "page_not_found"
    assert shared_client.get("/v1/nothing-here").json()["detail"]["type"] == "not_found"


def test_upsert_reports_each_item_and_keeps_the_good_ones(client):
    r = client.post("/v1/pages", json={"pages": [
        page("https://example.org/ok", "Albatrosses cross oceans without flapping."),
        {"url": "https://example.org/empty"},
        {"body_text": "no url"},
        page("https://example.org/ok2", "Petrels patter on the water."),
    ]})
    assert r.status_code == 200
    body = r.json()
    assert body["errors"] is True
    statuses = [(i["index"], i["status"]) for i in body["items"]]
    assert statuses == [(0, "created"), (1, "error"), (2, "error"), (3, "created")]
    pid = body["items"][0]["page_id"]

    got = client.get(f"/v1/pages/{pid}").json()
    assert got["url"] == "https://example.org/ok" and got["chunks"][0]["text"].startswith("Albatrosses")

    again = client.post("/v1/pages", json={"pages": [page("https://example.org/ok", "Albatrosses cross oceans without flapping.")]})
    assert again.json()["items"][0]["status"] == "unchanged"

    assert client.delete(f"/v1/pages/{pid}").json() == {"page_id": pid, "deleted": True}
    assert client.get(f"/v1/pages/{pid}").status_code == 404
    hits = client.post("/v1/search", json={"query": "albatrosses oceans"}).json()["pages"]
    assert pid not in [h["page_id"] for h in hits]


@pytest.mark.parametrize("body", [{}, {"pages": []}, {"pages": "x"}, [1, 2]])
def test_malformed_upsert_is_422(client, body):
    r = client.post("/v1/pages", json=body)
    assert r.status_code == 422 and r.json()["detail"]["type"] == "validation_error"


def test_upserts_are_saved_when_the_server_stops(make_corpus):
    corpus = make_corpus()
    with TestClient(create_app(corpus.settings, corpus)) as client:
        client.post("/v1/pages", json={"pages": [page("https://example.org/s", "Skuas chase other birds.")]})
        assert corpus.dense(corpus.settings.models.active).dirty  # not saved per request
    dense = corpus.dense(corpus.settings.models.active)
    assert not dense.dirty and dense.generation == corpus.store.generation()


@pytest.mark.parametrize("on", [True, False])
def test_the_server_freezes_its_heap_once_started_when_configured(tmp_path, on):
    """`refindery serve` (create_app(freeze_heap=True)) moves what it holds out of the garbage
    collector's scans after startup when `[server] gc_freeze` is on; the app others embed never does."""
    import gc

    from engine.core.settings import load_settings
    from server.app import create_app

    settings = load_settings(data_dir=str(tmp_path / "data"), server={"gc_freeze": on})
    gc.unfreeze()
    try:
        with TestClient(create_app(settings, freeze_heap=True)) as c:
            assert c.get("/v1/status").status_code == 200
            assert (gc.get_freeze_count() > 0) == on
        gc.unfreeze()
        with TestClient(create_app(settings)) as c:       # embedded (tests, notebooks): never
            assert c.get("/v1/status").status_code == 200
            assert gc.get_freeze_count() == 0
    finally:
        gc.unfreeze()
