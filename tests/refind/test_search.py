"""The search pipeline end to end: real app, real indexes, real model — every test run over both
index backends: "embedded" (tantivy + FAISS in the process) and "milvus" (both arms in a real
Milvus server: milvus-lite's engine on loopback, started by the session's `milvus_uri`)."""
from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from conftest import STORE_BACKENDS, assert_on_milvus, backend_settings, index_ids, ingest, page
from fastapi.testclient import TestClient

from engine.refind.search import SearchRequest, SearchService
from server.app import create_app


@pytest.fixture(scope="module", params=["embedded", "milvus"])
def backend(request) -> str:
    return request.param


@pytest.fixture(scope="module")
def corpus(backend, request, shared_corpus, pool, demo_subset, tmp_path_factory):
    """The session's ingested demo corpus on the embedded backend; the same pages on Milvus."""
    if backend == "embedded":
        yield shared_corpus
        return
    from engine.core.corpus import open_corpus
    from engine.core.settings import load_settings

    c = open_corpus(load_settings(data_dir=str(tmp_path_factory.mktemp("milvus-search") / "data"),
                                  **backend_settings(backend, request)), pool)
    ingest(c, demo_subset)
    c.flush()
    assert_on_milvus(c)
    yield c
    c.close()


@pytest.fixture
def make(make_corpus, backend, request):
    """make_corpus on this module's backend."""
    return lambda **kw: make_corpus(**backend_settings(backend, request), **kw)


@pytest.fixture(scope="module")
def client(corpus):
    with TestClient(create_app(corpus.settings, corpus)) as c:
        yield c


def search(client, **body):
    r = client.post("/v1/search", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def test_paging_is_a_stable_slice(client):
    q = "how are rows selected and sorted"
    whole = search(client, query=q, k=15)
    parts = [search(client, query=q, k=5, offset=o) for o in (0, 5, 10)]
    ids = [p["page_id"] for part in parts for p in part["pages"]]
    assert len(ids) == len(set(ids)) == 15
    assert ids == [p["page_id"] for p in whole["pages"]]
    assert all(part["total"] == whole["total"] for part in parts)
    assert whole["query_id"] and whole["query_id"] != parts[0]["query_id"]


def test_explain_adds_up_to_the_final_score(client):
    res = search(client, query="transactions and locking", k=8, explain=True, recency_half_life_days=45, rollup="sum",
                 recency_mode="decay")
    assert res["pages"]
    for p in res["pages"]:
        ex = p["explain"]
        for c in ex["chunks"]:
            arms = {k: v for k, v in c["rrf"].items() if k != "total"}
            assert sum(arms.values()) == pytest.approx(c["rrf"]["total"]) == pytest.approx(c["score"])
            for arm, hit in (("dense", c["dense"]), ("sparse", c["sparse"])):
                if hit:
                    assert arms[arm] == pytest.approx(1 / (60 + hit["rank"]))
        assert ex["rollup"]["how"] == "sum"
        assert ex["rollup"]["value"] == pytest.approx(sum(c["score"] for c in ex["chunks"]))
        w = ex["decay"]["weight"]
        assert w == 0.05   # the default weight: decay may take at most 5 % of a score
        assert ex["decay"]["factor"] == pytest.approx(1 - w * (1 - 0.5 ** (ex["decay"]["age_days"] / 45)), rel=1e-4)
        assert p["score"] == pytest.approx(ex["rollup"]["value"] * ex["decay"]["factor"]) == pytest.approx(ex["score"])
    scores = [p["score"] for p in res["pages"]]
    assert scores == sorted(scores, reverse=True)


@pytest.mark.parametrize("normalizer", ["minmax", "zscore", "l2", "dbsf"])
def test_linear_fusion_explains_raw_normalised_and_combined_scores(client, normalizer):
    q = "transactions and locking"
    res = search(client, query=q, k=8, explain=True, fusion="linear", normalizer=normalizer, sparse_weight=0.5)
    assert res["pages"]
    for p in res["pages"]:
        for c in p["explain"]["chunks"]:
            arms = {k: v for k, v in c["rrf"].items() if k != "total"}
            assert set(arms) == set(c["normalised"]) == {a for a in ("dense", "sparse") if c[a]}
            for arm, w in (("dense", 1.0), ("sparse", 0.5)):
                if c[arm]:
                    assert arms[arm] == pytest.approx(w * c["normalised"][arm])
            assert sum(arms.values()) == pytest.approx(c["rrf"]["total"]) == pytest.approx(c["score"])
    rrf = search(client, query=q, k=8, explain=True)
    assert all(c["normalised"] is None for p in rrf["pages"] for c in p["explain"]["chunks"])
    # paging stays a slice of the one ranking
    whole = search(client, query=q, k=12, fusion="linear", normalizer=normalizer)
    parts = [search(client, query=q, k=4, offset=o, fusion="linear", normalizer=normalizer) for o in (0, 4, 8)]
    assert [p["page_id"] for part in parts for p in part["pages"]] == [p["page_id"] for p in whole["pages"]]


@pytest.mark.parametrize("body", [{"fusion": "borda"}, {"fusion": "linear", "normalizer": "softmax"},
                                  {"bm25_k3": -1}])
def test_unknown_fusion_settings_are_422(client, body):
    r = client.post("/v1/search", json={"query": "x", **body})
    assert r.status_code == 422 and r.json()["detail"]["type"] == "validation_error"


def test_single_arm_searches(client):
    dense = search(client, query="serialize python objects to text", dense_weight=1, sparse_weight=0, explain=True)
    sparse = search(client, query="serialize python objects to text", dense_weight=0, explain=True)
    assert "sparse" not in dense["timings_ms"] and "embed" in dense["timings_ms"]
    assert "dense" not in sparse["timings_ms"] and "embed" not in sparse["timings_ms"]
    for p in dense["pages"]:
        assert all(c["sparse"] is None and c["dense"] for c in p["explain"]["chunks"])
    for p in sparse["pages"]:
        assert all(c["dense"] is None and c["sparse"] for c in p["explain"]["chunks"])


def test_filters_are_pushed_down_not_applied_after(client, corpus):
    q = "python module for parsing command line arguments"
    narrow = dict(dense_top_n=5, sparse_top_n=5)
    unfiltered = search(client, query=q, k=10, explain=True, **narrow)
    assert all(p["domain"] != "sqlite.org" for p in unfiltered["pages"])  # a post-filter would starve
    n_sqlite = corpus.store.sql().row(
        "SELECT count(*) FROM pages WHERE domain = 'sqlite.org'")[0]
    assert n_sqlite >= 3
    filtered = search(client, query=q, k=3, filters={"domain": "www.sqlite.org"}, **narrow)
    assert len(filtered["pages"]) == 3 and {p["domain"] for p in filtered["pages"]} == {"sqlite.org"}
    # The arms went deeper than 5 chunks because 5 chunks rolled up to too few pages.
    assert filtered["depth"]["dense"] > 5 and filtered["depth"]["sparse"] > 5


def test_a_page_id_filter_searches_within_a_known_list(client, corpus):
    q = "python module for parsing command line arguments"
    top = search(client, query=q, k=6)["pages"]
    within = [top[3]["page_id"], top[5]["page_id"]]
    res = search(client, query=q, k=10, filters={"page_id": within}, dense_top_n=5, sparse_top_n=5)
    assert sorted(p["page_id"] for p in res["pages"]) == sorted(within) and res["total"] == 2
    # combined with another filter (all must hold), one value, unknown ids, an empty list: nothing widens
    sqlite = corpus.store.sql().row("SELECT page_id FROM pages WHERE domain = 'sqlite.org' "
                                    "ORDER BY page_id LIMIT 1")[0]
    res = search(client, query=q, k=10, filters={"page_id": [sqlite, within[0]], "domain": "sqlite.org"})
    assert [p["page_id"] for p in res["pages"]] == [sqlite]
    assert [p["page_id"] for p in search(client, query=q, filters={"page_id": within[1]})["pages"]] == [within[1]]
    assert search(client, query=q, filters={"page_id": ["pg_nothing"]})["pages"] == []
    assert search(client, query=q, filters={"page_id": []})["pages"] == []
    r = client.post("/v1/search", json={"query": q, "filters": {"page_id": ["x"] * 10_001}})
    assert r.status_code == 422 and r.json()["detail"]["type"] == "validation_error"


def naive(stamp: str) -> datetime:
    """A reply's RFC 3339 UTC time as the store keeps it (UTC, no zone)."""
    return datetime.fromisoformat(stamp).replace(tzinfo=None)


def test_date_and_entity_filters(client, corpus):
    seen = sorted(r[0] for r in corpus.store.sql().rows("SELECT last_seen FROM pages"))
    cut = seen[len(seen) // 2]
    res = search(client, query="functions", k=20, filters={"after": cut.isoformat()})
    assert res["pages"] and all(naive(p["last_seen"]) >= cut for p in res["pages"])
    res = search(client, query="functions", k=20, filters={"before": cut.isoformat()})
    assert res["pages"] and all(naive(p["last_seen"]) < cut for p in res["pages"])
    # An alias, in another case, resolves to the canonical entity.
    res = search(client, query="create a table", k=20, filters={"entity": "POSTGRES"})
    assert res["pages"] and all(p["entities"] == ["PostgreSQL"] for p in res["pages"])
    r = client.post("/v1/search", json={"query": "x", "filters": {"entity": "No Such Thing"}})
    assert r.status_code == 404 and r.json()["detail"]["type"] == "entity_not_found"
    r = client.post("/v1/search", json={"query": "x", "filters": {"colour": "red"}})
    assert r.status_code == 422


def test_url_and_domain_pinning(client, corpus):
    url, pid = corpus.store.sql().row(
        "SELECT url, page_id FROM pages WHERE domain = 'docs.python.org' ORDER BY page_id LIMIT 1")
    messy = url.replace("https://", "http://www.").replace("docs.python.org", "DOCS.python.org") + "#top"
    res = search(client, query=messy, k=3)
    assert res["pages"][0]["page_id"] == pid and res["pages"][0]["pinned"] == "url"
    assert all(p.get("pinned") is None for p in res["pages"][1:])
    assert search(client, query=messy, k=3, pin=False)["pages"][0].get("pinned") is None

    res = search(client, query="sqlite.org", k=20)
    pinned = [p for p in res["pages"] if p.get("pinned") == "domain"]
    assert pinned and res["pages"][: len(pinned)] == pinned
    assert {p["domain"] for p in pinned} == {"sqlite.org"}
    seen = [p["last_seen"] for p in pinned]
    assert seen == sorted(seen, reverse=True)


def test_url_prefixes_and_registrable_domains_pin(make):
    corpus = make()
    ingest(corpus, [
        page("https://docs.python.org/3/library/json.html", "The json module encodes objects.",
             seen_at="2026-05-01T00:00:00Z"),
        page("https://docs.python.org/3/library/csv.html", "The csv module reads rows.", seen_at="2026-06-01T00:00:00Z"),
        page("https://docs.python.org/3/libraryx/other.html", "Not under the library section.",
             seen_at="2026-07-01T00:00:00Z"),
        page("https://docs.python.org/3/tutorial/index.html", "A tutorial on Python.", seen_at="2026-04-01T00:00:00Z"),
        page("https://www.python.org/downloads/", "Download Python releases.", seen_at="2026-03-01T00:00:00Z"),
        page("https://alice.github.io/notes", "Alice writes notes.", seen_at="2026-02-01T00:00:00Z"),
        page("https://bob.github.io/notes", "Bob writes notes.", seen_at="2026-02-02T00:00:00Z"),
    ])
    with TestClient(create_app(corpus.settings, corpus)) as c:
        def pinned(query):
            res = c.post("/v1/search", json={"query": query, "k": 10}).json()
            return [(p["url"].split("://", 1)[1], p["pinned"]) for p in res["pages"] if p["pinned"]]

        section = [("docs.python.org/3/library/csv.html", "prefix"), ("docs.python.org/3/library/json.html", "prefix")]
        # a section of a site: its pages, most recently seen first; case, scheme, www, slash, fragment aside
        for q in ("docs.python.org/3/library", "HTTPS://www.Docs.Python.org/3/Library/#top", "docs.python.org/3/library/"):
            assert pinned(q) == section, q
        assert pinned("https://docs.python.org/3/library/csv.html") == [("docs.python.org/3/library/csv.html", "url")]
        assert pinned("docs.python.org/3/nowhere") == []
        # a registrable domain covers its subdomains; a subdomain covers only itself
        assert [u for u, k in pinned("python.org")] == [
            "docs.python.org/3/libraryx/other.html", "docs.python.org/3/library/csv.html",
            "docs.python.org/3/library/json.html", "docs.python.org/3/tutorial/index.html", "www.python.org/downloads/"]
        assert {k for _, k in pinned("python.org")} == {"domain"}
        assert len(pinned("docs.python.org")) == 4
        # a public suffix is many sites, not one: nothing pins
        assert pinned("github.io") == []
        assert pinned("alice.github.io") == [("alice.github.io/notes", "domain")]
        # a page pinned with no passage the query matched shows how it begins (its first chunk), score 0
        # (with the dense arm off, only the pin brings the pages whose text has none of the query's words)
        res = c.post("/v1/search", json={"query": "python.org", "k": 10, "dense_weight": 0}).json()["pages"]
        unmatched = {p["url"].split("://", 1)[1]: [s["text"] for s in p["snippets"]] for p in res if p["score"] == 0}
        assert unmatched == {"docs.python.org/3/libraryx/other.html": ["Not under the library section."],
                             "docs.python.org/3/library/csv.html": ["The csv module reads rows."],
                             "docs.python.org/3/library/json.html": ["The json module encodes objects."]}


def test_a_pasted_link_with_tracking_parameters_pins_the_page_it_points_to(make):
    corpus = make()
    ingest(corpus, [page("https://ex.org/guide", "A guide to tide pools."),
                    page("https://ex.org/item?id=3", "Item three: anemones."),
                    page("https://ex.org/feed?utm_source=rss", "A page whose own address carries a utm parameter.")])
    with TestClient(create_app(corpus.settings, corpus)) as c:
        def pinned(query):
            res = c.post("/v1/search", json={"query": query, "k": 10}).json()
            return [(p["url"].split("://", 1)[1], p["pinned"]) for p in res["pages"] if p["pinned"]]

        assert pinned("https://ex.org/guide?utm_source=newsletter&utm_medium=email") == [("ex.org/guide", "url")]
        assert pinned("ex.org/guide?fbclid=abc#top") == [("ex.org/guide", "url")]
        # the page's own parameters are kept, in their place; only the tracking ones are dropped
        assert pinned("https://ex.org/item?UTM_campaign=x&id=3&gclid=y") == [("ex.org/item?id=3", "url")]
        assert pinned("https://ex.org/item?id=4&utm_campaign=x") == []        # another item: no pin
        # an address stored with a utm parameter is still found as pasted
        assert pinned("https://ex.org/feed?utm_source=rss") == [("ex.org/feed?utm_source=rss", "url")]


def test_similar_pages_and_suggestions(client, corpus):
    pid = corpus.store.sql().row("SELECT min(page_id) FROM pages")[0]
    sim = client.get(f"/v1/pages/{pid}/similar", params={"k": 5}).json()
    assert len(sim["pages"]) == 5 and pid not in [p["page_id"] for p in sim["pages"]]
    scores = [p["score"] for p in sim["pages"]]
    assert scores == sorted(scores, reverse=True) and scores[0] <= 1.0001
    ent = client.get(f"/v1/pages/{pid}/similar", params={"mediation": "entity", "k": 50}).json()["pages"]
    mine = corpus.store.page(pid)["entities"][0]["canonical"]
    assert ent and all(corpus.store.page(p["page_id"])["entities"][0]["canonical"] == mine for p in ent)
    assert client.get("/v1/pages/pg_nope/similar").json()["detail"]["type"] == "page_not_found"
    assert client.get(f"/v1/pages/{pid}/similar", params={"mediation": "magic"}).status_code == 422
    res = search(client, query="sqlite virtual tables", suggestions=True, k=2)
    assert res["suggestions"]["source_page_id"] == res["pages"][0]["page_id"]
    assert len(res["suggestions"]["pages"]) == 5


@pytest.mark.parametrize("store_backend", STORE_BACKENDS, indirect=True)
def test_clusters_refit_tombstones_old_ids(store_backend, make):
    corpus = make()
    ingest(corpus, [page(f"https://birds.example/{i}", f"Seabird note {i}: gulls and terns at the coast.")
                    for i in range(4)] +
           [page(f"https://stars.example/{i}", f"Astronomy note {i}: galaxies, nebulae and telescopes.")
            for i in range(4)])
    with TestClient(create_app(corpus.settings, corpus)) as c:
        first = c.post("/v1/clusters/refit", params={"k": 2}).json()
        assert first["clusters"] == 2
        old = first["cluster_ids"][0]
        hits = search(c, query="note", k=20, filters={"cluster_id": old})["pages"]
        assert hits and all(h["cluster_id"] == old for h in hits)
        same = {h["page_id"] for h in hits}
        assert len({h["domain"] for h in hits}) == 1  # k-means separates birds from stars
        cl_sim = c.get(f"/v1/pages/{hits[0]['page_id']}/similar", params={"mediation": "cluster"}).json()["pages"]
        assert {p["page_id"] for p in cl_sim} == same - {hits[0]["page_id"]}

        second = c.post("/v1/clusters/refit", params={"k": 2}).json()
        assert set(second["cluster_ids"]).isdisjoint(first["cluster_ids"])
        gone = search(c, query="note", k=20, filters={"cluster_id": old})
        assert gone["pages"] == [] and gone["total"] == 0  # tombstoned: empty, not an error
        assert search(c, query="note", filters={"cluster_id": 987654})["pages"] == []
        listed = c.get("/v1/clusters", params={"include_tombstoned": True}).json()["clusters"]
        assert sum(1 for cl in listed if cl["tombstoned_at"]) == 2
    assert corpus.consistency()["consistent"]


def test_filter_over_the_pushdown_cap_is_422(make):
    corpus = make(search={"filter_pushdown_cap": 2})
    ingest(corpus, [page(f"https://cap.example/{i}", f"Cap test page {i}.") for i in range(3)])
    with TestClient(create_app(corpus.settings, corpus)) as c:
        r = c.post("/v1/search", json={"query": "cap", "filters": {"domain": "cap.example"}})
        assert r.status_code == 422
        assert r.json()["detail"]["type"] == "filter_too_broad" and r.json()["detail"]["matched_pages"] == 3


@pytest.mark.parametrize("store_backend", STORE_BACKENDS, indirect=True)
def test_entities_edited_after_ingest_filter_both_arms(store_backend, make):
    corpus = make()
    rep = ingest(corpus, [page("https://e.example/a", "The lighthouse keeper logs every ship."),
                          page("https://e.example/b", "The harbour master counts the boats.")])
    a = rep.outcomes[0].page_id
    with TestClient(create_app(corpus.settings, corpus)) as c:
        r = c.post("/v1/entities", json={"canonical": "Maritime", "aliases": ["Nautical"], "pages": [a]})
        assert r.status_code == 200 and r.json()["pages"] == 1
        for weights in ({"sparse_weight": 0}, {"dense_weight": 0}):
            hits = search(c, query="ship boats lighthouse harbour", filters={"entity": "nautical"}, **weights)["pages"]
            assert [h["page_id"] for h in hits] == [a]
        r = c.post("/v1/entities", json={"canonical": "X", "pages": ["pg_missing"]})
        assert r.status_code == 404 and r.json()["detail"]["type"] == "page_not_found"
    assert corpus.consistency()["consistent"]


@pytest.mark.parametrize("store_backend", STORE_BACKENDS, indirect=True)
def test_recency_decay_orders_equal_pages_by_last_seen(store_backend, make):
    corpus = make()
    now = datetime.utcnow()
    ingest(corpus, [page("https://r.example/old", "Identical text about tide pools.",
                         seen_at=(now - timedelta(days=90)).isoformat()),
                    page("https://r.example/new", "Identical text about tide pools.",
                         seen_at=(now - timedelta(days=1)).isoformat())])
    with TestClient(create_app(corpus.settings, corpus)) as c:
        plain = search(c, query="tide pools", explain=True)["pages"]             # the default: off
        band = search(c, query="tide pools", explain=True, recency_half_life_days=30)["pages"]
        bounded = search(c, query="tide pools", explain=True, recency_half_life_days=30, recency_mode="decay")["pages"]
        full = search(c, query="tide pools", recency_half_life_days=7, recency_mode="decay", recency_weight=1,
                      explain=True)["pages"]
    # the same words score the same in both arms and fuse to the same score: recency alone orders them
    assert plain[0]["score"] == pytest.approx(plain[1]["score"]) and plain[0]["explain"]["decay"] is None
    assert band[0]["url"] == bounded[0]["url"] == full[0]["url"] == "https://r.example/new"
    assert [p["score"] for p in band] == [p["score"] for p in plain]     # the band orders, it does not rescore
    assert band[0]["explain"]["decay"]["band"] == band[1]["explain"]["decay"]["band"] == 1
    old_plain = plain[[p["url"] for p in plain].index("https://r.example/old")]["score"]
    assert old_plain * 0.95 <= bounded[1]["score"] < old_plain       # at most 5 % taken
    assert full[1]["score"] < old_plain / 100                          # a full decay takes nearly all


def _siblings(now):
    """Three different pages about one thing (a near-equal match each) and one about another, each
    seen at another time; the closest match to the query was seen longest ago."""
    return [page("https://r.example/hives", "Beekeeping: hives, frames, queens and swarm control for the beekeeper.",
                 seen_at=(now - timedelta(days=300)).isoformat()),
            page("https://r.example/swarms", "Beekeeping: swarm control, queens, frames and hives in spring.",
                 seen_at=(now - timedelta(days=2)).isoformat()),
            page("https://r.example/queens", "Beekeeping: queens and swarm control, hives and frames for beginners.",
                 seen_at=(now - timedelta(days=40)).isoformat()),
            page("https://r.example/garden", "A garden diary: tomatoes, compost and a bee now and then.",
                 seen_at=(now - timedelta(hours=1)).isoformat())]


def test_recency_band_orders_pages_about_as_relevant_by_when_they_were_seen_and_no_others(make):
    corpus = make()
    now = datetime.utcnow()
    ingest(corpus, _siblings(now))
    with TestClient(create_app(corpus.settings, corpus)) as c:
        q = "beekeeping hives queens and swarm control"
        off = search(c, query=q, explain=True)["pages"]
        on = search(c, query=q, explain=True, recency_half_life_days=30, recency_band=1.0)["pages"]
        narrow = search(c, query=q, explain=True, recency_half_life_days=30, recency_band=0.0)["pages"]
        paged = [search(c, query=q, k=1, offset=i, recency_half_life_days=30, recency_band=1.0)["pages"][0]["url"]
                 for i in range(4)]
        band = search(c, query=q, explain=True, recency_half_life_days=30)["pages"]      # the shipped band
        full = search(c, query=q, recency_half_life_days=7, recency_mode="decay", recency_weight=1)["pages"]
    bees = {"https://r.example/hives", "https://r.example/swarms", "https://r.example/queens"}
    assert {p["url"] for p in off[:3]} == bees                      # the three match about equally
    # a band as wide as the scale: every page is about as relevant, so last_seen alone orders them
    assert [p["url"] for p in on] == [p["url"] for p in sorted(off, key=lambda p: p["last_seen"], reverse=True)]
    assert {p["explain"]["decay"]["band"] for p in on} == {1}
    levels = [p["explain"]["decay"]["level"] for p in on]
    assert all(0 <= x <= 1 for x in levels) and max(levels) == pytest.approx(1.0, abs=0.2)
    # a band of 0: only equal levels share a band, so the order is relevance's
    assert [p["url"] for p in narrow][:1] == [p["url"] for p in off][:1]
    assert paged == [p["url"] for p in on]                          # paging is a slice of one ranking
    # the shipped band never lets age outvote a clearly better match
    assert band[-1]["url"] == "https://r.example/garden"            # seen an hour ago, but far less relevant
    assert band[-1]["explain"]["decay"]["band"] > band[0]["explain"]["decay"]["band"] == 1
    # ... as a full decay does: the garden page, seen an hour ago, above a far better match seen long ago
    assert [p["url"] for p in full].index("https://r.example/garden") < [p["url"] for p in full].index(
        "https://r.example/hives")


def test_the_title_band_puts_the_most_recent_title_sibling_first_and_no_other_page(make_corpus):
    """recency_title_band: pages whose titles carry the query's words the best page's title carries
    join its band however far their levels lie, so the most recently seen of them comes first; a page
    whose title does not (however recent) does not join, and 0 leaves the band as it was. (Ranking after
    the arms: the embedded backend only.)"""
    corpus = make_corpus()
    now = datetime.utcnow()
    ago = [now - timedelta(days=d) for d in (200, 100, 3, 1)]
    ingest(corpus, [
        page("https://pg.example/alterdomain", "ALTER DOMAIN changes the definition of a domain: alter its default, "
             "alter its constraints, alter its owner.", seen_at=ago[0].isoformat(), title="ALTER DOMAIN"),
        page("https://pg.example/alterextension", "Changes an installed extension: update it to a new version.",
             seen_at=ago[1].isoformat(), title="ALTER EXTENSION"),
        page("https://pg.example/altercollation", "Changes a collation's name, owner or schema; refresh its version.",
             seen_at=ago[2].isoformat(), title="ALTER COLLATION"),
        page("https://pg.example/createdomain", "CREATE DOMAIN defines a domain; to alter one later see ALTER DOMAIN.",
             seen_at=ago[3].isoformat(), title="CREATE DOMAIN")])
    with TestClient(create_app(corpus.settings, corpus)) as c:
        def urls(**kw):
            return [p["url"].rsplit("/", 1)[1] for p in search(c, query="alter", recency_half_life_days=30, **kw)["pages"]]

        shipped, zero, titled = urls(), urls(recency_title_band=0.0), urls(recency_title_band=1.0)
    # the shipped band: the page that says "alter" most is first, however long ago it was seen
    assert shipped[0] == "alterdomain" and zero == shipped
    # the three ALTER pages are one band, most recently seen first; CREATE DOMAIN is not among them
    assert titled[:3] == ["altercollation", "alterextension", "alterdomain"] and titled[3] == "createdomain"


def test_a_workspace_without_pages_answers_nothing_even_beside_the_only_populated_one(corpus):
    """The dense arm skips its restriction only when the asked workspace is the one with pages;
    otherwise FAISS would answer from another workspace."""
    service = SearchService(corpus)
    assert service.search(SearchRequest(workspace="default", query="json encoder"), log=False).total > 0
    res = service.search(SearchRequest(query="json encoder", workspace="nothing-here"), log=False)
    assert (res.total, res.pages) == (0, [])


@pytest.mark.parametrize("store_backend", STORE_BACKENDS, indirect=True)
def test_deleting_a_page_takes_it_from_both_arms_and_a_restart_repairs_what_an_index_missed(store_backend, make, pool):
    from engine.core.corpus import open_corpus

    corpus = make()
    rep = ingest(corpus, [page("https://d.example/keep", "Kittiwakes nest on narrow cliff ledges."),
                          page("https://d.example/drop", "Kittiwakes and fulmars share the cliff ledges.")])
    keep, drop = rep.outcomes[0].page_id, rep.outcomes[1].page_id
    assert corpus.delete_page(drop)
    with TestClient(create_app(corpus.settings, corpus)) as c:
        for weights in ({"sparse_weight": 0}, {"dense_weight": 0}):
            assert [p["page_id"] for p in search(c, query="kittiwakes fulmars cliff", **weights)["pages"]] == [keep]
    assert corpus.consistency()["consistent"]
    # the BM25 arm misses a write (as a crash between the store's commit and the index's would
    # leave it: the page absent, the marker a generation behind); the next start replays it
    late = ingest(corpus, [page("https://d.example/late", "Guillemots crowd the same ledges.")]).outcomes[0].page_id
    corpus.sparse.replace_pages([late], [], corpus.store.generation() - 1)
    assert SearchService(corpus).search(SearchRequest(workspace="default", query="guillemots", dense_weight=0), log=False).pages == []
    settings = corpus.settings
    corpus.close()
    reopened = open_corpus(settings, pool)
    try:
        assert [r.index for r in reopened.repairs] == ["sparse"]
        assert reopened.consistency()["consistent"]
        ids = index_ids(reopened)
        model = settings.models.active
        assert ids["store"] == ids["sparse"] == ids[f"dense:{model}"] == ids[f"vectors:{model}"] and len(ids["store"]) == 2
        hits = SearchService(reopened).search(SearchRequest(workspace="default", query="guillemots", dense_weight=0), log=False).pages
        assert [p.url for p in hits] == ["https://d.example/late"]
    finally:
        reopened.close()


@pytest.mark.parametrize("store_backend", STORE_BACKENDS, indirect=True)
def test_a_scoped_search_reads_only_its_scopes_in_both_arms(store_backend, make):
    corpus = make()
    ingest(corpus, [page(f"https://s.example/{s}/{i}", f"Notes {i} on storm petrels at sea by team {s}.", scope=s)
                    for s in ("a", "b") for i in range(3)] + [page("https://s.example/open", "Open notes on petrels.")])
    service = SearchService(corpus)
    for weights in ({"sparse_weight": 0}, {"dense_weight": 0}, {}):
        req = SearchRequest(workspace="default", query="storm petrels notes", k=10, **weights)
        mine = service.search(req, scopes=("a",), log=False).pages
        assert len(mine) == 3 and all("/a/" in p.url for p in mine)
        assert len(service.search(req, log=False).pages) == 7
        assert service.search(req, scopes=("c",), log=False).pages == []


def test_a_milvus_that_stops_answering_is_a_503_not_a_500(pool, tmp_path):
    from conftest import milvus_lite

    from engine.core.corpus import open_corpus
    from engine.core.settings import load_settings

    server, uri = milvus_lite(tmp_path)      # its own server: this test stops it
    corpus = open_corpus(load_settings(data_dir=str(tmp_path / "data"), index={"backend": "milvus"},
                                       milvus={"uri": uri, "timeout_s": 1}), pool)
    try:
        ingest(corpus, [page("https://m.example/a", "Shearwaters skim the waves.")])
        with TestClient(create_app(corpus.settings, corpus)) as c:
            assert search(c, query="shearwaters")["pages"]
            server.stop()
            for weights in ({"dense_weight": 0}, {"sparse_weight": 0}):
                r = c.post("/v1/search", json={"query": "shearwaters", **weights})
                assert r.status_code == 503, r.text
                assert r.json()["detail"]["type"] == "index_unavailable"
    finally:
        server.stop()
        corpus.close()


def test_word_counts_are_the_stored_chunks_holding_the_word(corpus):
    """doc_freqs (the evidence searcher's word specificity) counts the chunks whose indexed terms
    hold the word's stem, on either backend."""
    from indexes.sparse import index_terms, stems

    docs = [d for batch in corpus.store.index_docs() for d in batch]
    words = ["python", "tables", "transactions", "zzzqx"]
    want = {w: sum(1 for d in docs if stems(w)[0] in index_terms("\n".join(x for x in (d.title, d.section, d.text)
                                                                           if x))) for w in words}
    assert want["python"] > 0 and want["zzzqx"] == 0
    assert corpus.sparse.doc_freqs(words) == want


def test_snippets_from_the_views_texts_are_the_stores(corpus, monkeypatch):
    """The search's view holds the chunk texts (the default budget fits): the snippets it shows are the
    store's to the character — the same response as a view without them, which reads the store."""
    import dataclasses

    view = corpus.hot()
    ids = view.chunk_ids.tolist()
    assert view.chunk_text is not None
    assert view.snippet_chunks(ids) == corpus.store.snippet_chunks(ids)
    assert any(sec for _, sec in view.snippet_chunks(ids).values())   # section paths, not only texts
    svc, now = SearchService(corpus), datetime(2026, 7, 1)
    reqs = [SearchRequest(workspace="default", query=q, k=8, explain=True) for q in ("sqlite storage engine", "python packaging")]
    held = [svc.search(r, now=now, log=False).model_dump(exclude={"query_id", "timings_ms"}) for r in reqs]
    monkeypatch.setattr(corpus._hot, "_view", dataclasses.replace(view, chunk_text=None, chunk_section=None))
    assert corpus.hot().chunk_text is None
    read = [svc.search(r, now=now, log=False).model_dump(exclude={"query_id", "timings_ms"}) for r in reqs]
    assert held == read and all(h["pages"] and h["pages"][0]["snippets"] for h in held)
    # texts past the budget: the view reads them from its text file (nothing of the store)
    from indexes.hot import HotPages

    on_file = HotPages(corpus.store, 1).view()
    assert on_file.chunk_text is None and on_file.text_file is not None and on_file.generation == view.generation
    monkeypatch.setattr(corpus._hot, "_view", on_file)
    assert [svc.search(r, now=now, log=False).model_dump(exclude={"query_id", "timings_ms"}) for r in reqs] == held


def test_pinned_pages_count_once_in_total_and_page_as_a_stable_slice(make):
    """Pinned pages come first and are counted once: `total` is the pages ranked plus the pinned
    ones the ranking did not hold, and every offset is a slice of one order."""
    corpus = make()
    ingest(corpus, [
        page("https://zoo.example/opening", "The zoo opens at nine.", seen_at="2026-05-01T00:00:00Z"),
        page("https://zoo.example/penguins", "Penguins swim in cold water.", seen_at="2026-05-02T00:00:00Z"),
        page("https://other.example/trip", "A zoo far away, and its keepers.", seen_at="2026-05-03T00:00:00Z"),
        page("https://other.example/keepers", "Keepers of the zoo feed lions.", seen_at="2026-05-04T00:00:00Z"),
        page("https://third.example/cats", "Cats sleep all day.", seen_at="2026-05-05T00:00:00Z"),
    ])
    with TestClient(create_app(corpus.settings, corpus)) as c:
        def run(**kw):   # BM25 alone: the penguins page does not say "zoo" and is pinned, not ranked
            r = c.post("/v1/search", json={"query": "zoo.example", "dense_weight": 0, **kw})
            assert r.status_code == 200, r.text
            return r.json()

        plain, whole = run(pin=False, k=50), run(k=50)
        ranked = [p["page_id"] for p in plain["pages"]]
        pinned = [p["page_id"] for p in whole["pages"] if p["pinned"]]
        assert len(pinned) == 2 and len(set(pinned) & set(ranked)) == 1 and len(ranked) == 3
        assert whole["total"] == len(whole["pages"]) == 4 and plain["total"] == 3
        assert [p["page_id"] for p in whole["pages"]] == pinned + [pid for pid in ranked if pid not in pinned]
        for k in (1, 2, 3):
            parts = [run(k=k, offset=o) for o in range(0, 4, k)]
            assert [p["page_id"] for part in parts for p in part["pages"]] == [p["page_id"] for p in whole["pages"]]
            assert {part["total"] for part in parts} == {4}


def test_the_bm25_arm_answers_the_same_whenever_it_starts(corpus):
    """The BM25 arm starts as the encoder starts, or after the query is encoded when it has kept within
    FAISS's time (SearchService.arms, by the arms' recent times): the same responses either way, both
    arms run, and the service learns to start it late when it is the shorter arm."""
    svc, now = SearchService(corpus), datetime(2026, 7, 1)
    reqs = [SearchRequest(workspace="default", query=q, k=8, explain=True) for q in ("sqlite storage engine", "python packaging")]
    clock = svc._clock
    assert not clock.sparse_fits_beside_dense()   # nothing measured yet: it starts with the encoder

    def run(sparse_ms, dense_ms):
        clock._sparse, clock._dense = sparse_ms, dense_ms
        out = [svc.search(r, now=now, log=False) for r in reqs]
        assert all("sparse" in r.timings_ms and "dense" in r.timings_ms for r in out)
        return [r.model_dump(exclude={"query_id", "timings_ms"}) for r in out]

    early, late = run(5.0, 1.0), run(1.0, 5.0)
    assert early == late and all(r["pages"] for r in early)
    clock._sparse, clock._dense = 1000.0, 0.0
    for _ in range(200):
        clock.sparse(0.1)
        clock.dense(1.0)
    assert clock.sparse_fits_beside_dense()


def test_how_pages_were_visited_orders_near_equals_only_when_asked(make_corpus):
    """recency_visits_days / recency_bookmark_days: within a band, a page visited often, or bookmarked,
    is ordered as if seen later; a page less relevant is not lifted past the band; off (the default),
    the most recently seen comes first. explain says each page's credit."""
    corpus = make_corpus()
    now = datetime.utcnow()
    text = "Tide tables for the harbour: high and low water at the quay, spring and neap tides."
    often = [page("https://v.example/often", text, seen_at=(now - timedelta(days=40 - i)).isoformat())
             for i in range(8)]                                                            # 8 visits, last 33 days ago
    ingest(corpus, often + [
        page("https://v.example/recent", text, seen_at=(now - timedelta(days=1)).isoformat()),
        page("https://v.example/marked", text, seen_at=(now - timedelta(days=20)).isoformat(),
             entities=[{"canonical": "bookmarked", "id": "bookmarked"}]),
        page("https://v.example/other", "A ferry timetable; the harbour's tides are elsewhere.",
             seen_at=now.isoformat())])
    with TestClient(create_app(corpus.settings, corpus)) as c:
        def urls(**kw):
            return [p["url"].rsplit("/", 1)[1] for p in search(c, query="harbour tide tables high low water",
                                                               recency_half_life_days=30, **kw)["pages"]]
        assert urls()[:3] == ["recent", "marked", "often"]
        assert urls(recency_visits_days=15)[:3] == ["often", "recent", "marked"]      # 3 doublings: 45 days later
        assert urls(recency_bookmark_days=30)[:3] == ["marked", "recent", "often"]
        assert urls(recency_visits_days=1000, recency_bookmark_days=1000)[3] == "other"   # never past its band
        hits = search(c, query="harbour tide tables high low water", recency_half_life_days=30,
                      recency_visits_days=15, explain=True)["pages"]
        decay = {p["url"].rsplit("/", 1)[1]: p["explain"]["decay"] for p in hits}
        assert decay["often"]["visits"] == 8 and decay["often"]["credit_days"] == 45
        assert decay["recent"]["credit_days"] == 0
