"""The browser extension's key (issue 71): a pages-only key adds pages and visits to its one workspace
and forgets them — and does nothing else. Every other route is a 403 for it before the route runs; a
workspace outside it is a 404 as for every key. With the routes it uses: POST /v1/visits (a visit
without a body: a re-visit recorded, nothing extracted or embedded) and POST /v1/forget. On both stores."""
from __future__ import annotations

import pytest

from conftest import page

from engine.app import Engine


def h(token):
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture(scope="module")
def walls(pool, tmp_path_factory, store_settings):
    from docs.examples import make_client
    from engine.core.access import create_key

    client = make_client(tmp_path_factory.mktemp("pages-only") / "data", pool=pool,
                         server={"rate_limit_per_minute": 0}, **store_settings)   # (0: no rate limit)
    keys = client.corpus.keys
    client.admin = create_key(keys, ["*"])["token"]
    client.capture = create_key(keys, ["home"], pages_only=True, name="browser")["token"]
    client.reader = create_key(keys, ["home"], read_only=True)["token"]
    assert client.corpus.store.kind == ("postgres" if store_settings else "duckdb")
    for ws in ("home", "work"):
        r = client.post("/v1/pages", headers=h(client.admin), json={"workspace": ws, "pages": [
            page(f"https://{ws}.example/heron", f"The grey heron of {ws} waits by the reed bed at dawn.")]})
        assert r.status_code == 200 and not r.json()["errors"], r.text
    yield client
    client.corpus.close()


def test_a_pages_only_key_adds_pages_to_its_workspace(walls):
    r = walls.post("/v1/pages", headers=h(walls.capture), json={"pages": [
        page("https://home.example/kestrel", "A kestrel hovers over the motorway verge, tail fanned.")]})
    assert r.status_code == 200 and r.json()["items"][0]["status"] == "created", r.text
    hits = walls.post("/v1/search", headers=h(walls.reader), json={"query": "kestrel hovers"}).json()["pages"]
    assert [p["url"] for p in hits][:1] == ["https://home.example/kestrel"]


@pytest.mark.parametrize("method,path,body", [
    ("POST", "/v1/search", {"query": "heron"}),
    ("POST", "/v1/compare", {"query": "heron", "models": ["all-minilm-l6-v2"]}),
    ("GET", "/v1/pages/{page_id}", None),
    ("DELETE", "/v1/pages/{gone_id}", None),
    ("GET", "/v1/pages/{page_id}/similar", None),
    ("GET", "/v1/keys", None),
    ("POST", "/v1/keys", {"workspaces": ["home"]}),
    ("GET", "/v1/feedback", None),
    ("GET", "/v1/facets", None),
    ("GET", "/v1/status", None),
    ("GET", "/v1/clusters", None),
    ("POST", "/v1/evidence", {"query": "heron"}),
    ("POST", "/v1/public/search", {"workspace_id": "home", "constraints": []}),
    ("POST", "/v1/entities", {"canonical": "Heron"}),
    ("POST", "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
])
def test_every_other_route_is_a_403_for_it(walls, method, path, body):
    def id_of(url):
        return walls.post("/v1/search", headers=h(walls.admin), json={"query": url, "workspace": "home"}
                          ).json()["pages"][0]["page_id"]

    gone = "https://home.example/gone"   # the page the admin's DELETE below removes: a page of its own
    walls.post("/v1/pages", headers=h(walls.admin), json={"workspace": "home", "pages": [page(gone, "To delete.")]})
    path = path.format(page_id=id_of("https://home.example/heron"), gone_id=id_of(gone))
    r = walls.request(method, path, headers=h(walls.capture), json=body)
    assert r.status_code == 403, (path, r.status_code, r.text)
    assert r.json()["detail"]["type"] == "forbidden" and "only adds pages" in r.json()["detail"]["title"]
    if path != "/mcp":   # (the MCP app needs the server's lifespan, which a bare test client does not run)
        # the same call with the admin's key is not refused for its key (the walls are the key's)
        assert walls.request(method, path, headers=h(walls.admin), json=body).status_code != 403


def test_another_workspace_is_as_absent_for_it_as_for_any_key(walls):
    for path, body in (("/v1/pages", {"pages": [page("https://work.example/x", "Not yours to write.")]}),
                       ("/v1/visits", {"visits": [{"url": "https://work.example/heron"}]}),
                       ("/v1/forget", {"url": "https://work.example/heron"})):
        r = walls.post(path, headers=h(walls.capture), json={**body, "workspace": "work"})
        assert r.status_code == 404 and r.json()["detail"]["type"] == "workspace_not_found", (path, r.text)
    hits = walls.post("/v1/search", headers=h(walls.admin), json={"query": "https://work.example/heron",
                                                                 "workspace": "work"}).json()["pages"]
    assert hits and hits[0]["url"] == "https://work.example/heron"   # still there


def test_a_visit_without_a_body_records_a_revisit_and_embeds_nothing(walls):
    def stored():
        pid = walls.post("/v1/search", headers=h(walls.admin), json={"query": "https://home.example/heron",
                                                                     "workspace": "home"}).json()["pages"][0]["page_id"]
        return walls.get(f"/v1/pages/{pid}", headers=h(walls.admin)).json()

    before = stored()
    vectors = walls.get("/v1/status", headers=h(walls.admin)).json()["counts"]["embeddings"]
    r = walls.post("/v1/visits", headers=h(walls.capture), json={"visits": [
        {"url": "https://home.example/heron", "seen_at": "2026-06-02T10:00:00Z"},
        {"url": "https://home.example/heron", "seen_at": "2026-06-03T10:00:00Z"},
        {"url": "https://home.example/never-sent", "seen_at": "2026-06-03T10:00:00Z"},
        {"url": "javascript:alert(1)"}]})
    assert r.status_code == 200, r.text
    items = r.json()["items"]
    assert [i["status"] for i in items] == ["revisited", "revisited", "not_found", "error"]
    assert "send the page itself" in items[2]["error"] and r.json()["summary"]["not_found"] == 1
    after = stored()
    assert after["visit_count"] == before["visit_count"] + 2 and after["last_seen"].startswith("2026-06-03")
    assert after["chunks"] == before["chunks"]
    assert walls.get("/v1/status", headers=h(walls.admin)).json()["counts"]["embeddings"] == vectors
    # the same visits again: nothing later than the page's last visit, so nothing moves
    r = walls.post("/v1/visits", headers=h(walls.capture), json={"visits": [
        {"url": "https://home.example/heron", "seen_at": "2026-06-03T10:00:00Z"}]})
    assert r.json()["items"][0]["status"] == "unchanged" and stored()["visit_count"] == after["visit_count"]


def test_forget_deletes_the_page_at_a_url_from_every_index(walls):
    walls.post("/v1/pages", headers=h(walls.capture), json={"pages": [
        page("https://home.example/wren", "The wren sings loudest in the bramble thicket by the old mill.")]})
    found = walls.post("/v1/search", headers=h(walls.reader), json={"query": "wren bramble thicket"}).json()["pages"]
    pid = next(p["page_id"] for p in found if p["url"] == "https://home.example/wren")
    r = walls.post("/v1/forget", headers=h(walls.capture), json={"url": "HTTPS://home.example/wren#song"})
    assert r.status_code == 200 and r.json()["forgotten"] == 1 and r.json()["page_ids"] == [pid], r.text
    assert walls.get(f"/v1/pages/{pid}", headers=h(walls.admin)).status_code == 404
    hits = walls.post("/v1/search", headers=h(walls.reader), json={"query": "wren bramble thicket"}).json()["pages"]
    assert "https://home.example/wren" not in [p["url"] for p in hits]
    again = walls.post("/v1/forget", headers=h(walls.capture), json={"url": "https://home.example/wren"})
    assert again.status_code == 200 and again.json()["forgotten"] == 0
    bad = walls.post("/v1/forget", headers=h(walls.capture), json={"url": "ftp://home.example/x"})
    assert bad.status_code == 422 and bad.json()["detail"]["type"] == "validation_error"
    # a read-only key may not forget
    assert walls.post("/v1/forget", headers=h(walls.reader), json={"url": "https://home.example/heron"}).status_code == 403


def test_a_pages_only_key_is_made_for_exactly_one_workspace(walls):
    for body in ({"workspaces": ["*"], "pages_only": True}, {"workspaces": ["home", "work"], "pages_only": True},
                 {"workspaces": ["home"], "pages_only": True, "read_only": True}):
        r = walls.post("/v1/keys", headers=h(walls.admin), json=body)
        assert r.status_code == 422 and "one workspace" in r.json()["detail"]["title"], r.text
    r = walls.post("/v1/keys", headers=h(walls.admin), json={"workspaces": ["work"], "pages_only": True})
    assert r.status_code == 201 and r.json()["pages_only"] is True
    listed = {k["key_id"]: k for k in walls.get("/v1/keys", headers=h(walls.admin)).json()["keys"]}
    assert listed[r.json()["key_id"]]["pages_only"] is True
    assert sum(k["pages_only"] for k in listed.values()) == 2


def test_a_huge_page_is_refused_by_its_size_at_once(walls):
    html = "<html><body>" + "<p>lorem ipsum dolor sit amet</p>" * 1_000_000 + "</body></html>"   # ~33 MB
    r = walls.post("/v1/pages", headers=h(walls.capture), json={"pages": [{"url": "https://home.example/big", "html": html}]})
    assert r.status_code == 413 and r.json()["detail"]["type"] == "payload_too_large", r.text[:300]
    assert "the request body is over" in r.json()["detail"]["title"]


def test_visits_and_forget_stay_inside_the_callers_scopes_and_a_read_only_key_does_neither(walls):
    """Another scope's page at the same URL is another page: a scoped key's visit does not count on it
    and its forget does not delete it; a read-only key may do neither."""
    from engine.core.access import create_key

    keys = walls.corpus.keys
    in_a = create_key(keys, ["home"], scopes=["a"])["token"]
    capture_a = create_key(keys, ["home"], scopes=["a"], pages_only=True)["token"]
    url = "https://home.example/scoped-owl"
    r = walls.post("/v1/pages", headers=h(walls.admin), json={"workspace": "home", "pages": [
        page(url, "The barn owl of scope b hunts over the water meadow.", scope="b")]})
    assert r.json()["items"][0]["status"] == "created", r.text
    pid = r.json()["items"][0]["page_id"]

    def visits():
        return walls.get(f"/v1/pages/{pid}", headers=h(walls.admin)).json()["visit_count"]

    for token in (in_a, capture_a):
        r = walls.post("/v1/visits", headers=h(token), json={"visits": [{"url": url, "seen_at": "2026-07-01T00:00:00Z"}]})
        assert r.status_code == 200 and r.json()["items"][0]["status"] == "not_found", r.text
        r = walls.post("/v1/forget", headers=h(token), json={"url": url})
        assert r.status_code == 200 and r.json()["forgotten"] == 0, r.text
    for path, body in (("/v1/visits", {"visits": [{"url": url}]}), ("/v1/forget", {"url": url})):
        r = walls.post(path, headers=h(walls.reader), json=body)
        assert r.status_code == 403 and r.json()["detail"]["type"] == "forbidden", (path, r.text)
    assert visits() == 1
    assert walls.get(f"/v1/pages/{pid}", headers=h(walls.admin)).status_code == 200   # still there


def _logged_rows(corpus, page_ids: list[str]) -> dict[str, int]:
    """How many rows of the query log still name these pages, per table."""
    corpus.querylog.flush()
    sql = corpus.store.sql()
    return {t: sql.row(f"SELECT count(*) FROM {t} WHERE page_id IN (SELECT unnest(?::VARCHAR[]))", [page_ids])[0]
            for t in ("log_candidates", "log_fused", "log_results", "feedback")}


def test_forget_by_domain_takes_its_subdomains_from_every_index_and_the_query_log(walls):
    r = walls.post("/v1/pages", headers=h(walls.admin), json={"workspace": "home", "pages": [
        page("https://birds.example/osprey", "The osprey plunges feet first into the saltmarsh creek."),
        page("https://www.birds.example/avocet", "Avocets sweep the saltmarsh creek mud with upturned bills."),
        page("https://ringing.birds.example/log", "Ringing log: saltmarsh creek, two ospreys, one avocet."),
        page("https://otherbirds.example/gull", "A gull over the saltmarsh creek, on a domain that only ends alike.")]})
    ids = [i["page_id"] for i in r.json()["items"]]
    seen = walls.post("/v1/search", headers=h(walls.admin),
                      json={"workspace": "home", "query": "saltmarsh creek osprey avocet", "k": 10}).json()
    assert set(ids) <= {p["page_id"] for p in seen["pages"]}
    assert walls.post("/v1/feedback", headers=h(walls.admin), json={
        "query_id": seen["query_id"], "page_id": ids[0], "kind": "found"}).status_code == 200
    assert all(_logged_rows(walls.corpus, ids[:3])[t] for t in ("log_candidates", "log_results", "feedback"))
    Engine(corpus=walls.corpus).embed_model("all-minilm-l6-v2-int8")   # a second index to forget from
    # a key of another workspace forgets nothing there
    other = walls.post("/v1/forget", headers=h(walls.capture), json={"domain": "birds.example", "workspace": "work"})
    assert other.status_code == 404, other.text
    r = walls.post("/v1/forget", headers=h(walls.capture), json={"domain": "https://birds.example/"})
    assert r.status_code == 200 and sorted(r.json()["page_ids"]) == sorted(ids[:3]), r.text
    for pid in ids[:3]:
        assert walls.get(f"/v1/pages/{pid}", headers=h(walls.admin)).status_code == 404
    after = walls.post("/v1/search", headers=h(walls.admin),
                       json={"workspace": "home", "query": "saltmarsh creek osprey avocet", "k": 10}).json()
    assert [p["page_id"] for p in after["pages"] if p["page_id"] in ids] == [ids[3]]
    only = walls.post("/v1/search", headers=h(walls.admin),
                      json={"workspace": "home", "query": "plunges feet first", "explain": True}).json()["pages"]
    assert not {p["page_id"] for p in only} & set(ids[:3])   # the phrase only the forgotten osprey page held
    assert _logged_rows(walls.corpus, ids[:3]) == dict.fromkeys(("log_candidates", "log_fused", "log_results", "feedback"), 0)
    assert _logged_rows(walls.corpus, ids[3:])["log_results"] > 0   # the one kept keeps its rows
    similar = walls.get(f"/v1/pages/{ids[3]}/similar", headers=h(walls.admin)).json()["pages"]
    assert not {p["page_id"] for p in similar} & set(ids[:3])
    runs = walls.post("/v1/compare", headers=h(walls.admin), json={
        "workspace": "home", "query": "saltmarsh creek osprey avocet",
        "models": ["all-minilm-l6-v2", "all-minilm-l6-v2-int8"]}).json()["runs"]
    assert len(runs) == 2 and all(not {p["page_id"] for p in run["pages"]} & set(ids[:3]) for run in runs), runs
    assert ids[3] in {p["page_id"] for p in runs[1]["pages"]}   # (the second embedder's index answers)


def test_forget_a_time_range_takes_the_pages_seen_in_it(walls):
    r = walls.post("/v1/pages", headers=h(walls.admin), json={"workspace": "home", "pages": [
        page("https://time.example/early", "A curlew calls over the estuary at first light.", "2026-03-01T08:00:00Z"),
        page("https://time.example/span", "The curlew's estuary, read in March and again in May.", "2026-03-02T08:00:00Z"),
        page("https://time.example/late", "A late curlew roost on the estuary in summer.", "2026-07-01T08:00:00Z")]})
    ids = [i["page_id"] for i in r.json()["items"]]
    walls.post("/v1/visits", headers=h(walls.admin), json={"workspace": "home", "visits": [
        {"url": "https://time.example/span", "seen_at": "2026-05-10T09:00:00Z"}]})
    for bad in ({}, {"since": "2026-05-02T00:00:00Z", "until": "2026-05-01T00:00:00Z"}, {"domain": "not a domain"}):
        e = walls.post("/v1/forget", headers=h(walls.capture), json=bad)
        assert e.status_code == 422 and e.json()["detail"]["type"] in ("invalid_request", "validation_error"), e.text
    r = walls.post("/v1/forget", headers=h(walls.capture),
                   json={"since": "2026-05-01T00:00:00+02:00", "until": "2026-05-31T00:00:00Z"})
    assert r.status_code == 200 and r.json()["page_ids"] == [ids[1]], r.text
    r = walls.post("/v1/forget", headers=h(walls.capture), json={"domain": "time.example", "until": "2026-04-01T00:00:00Z"})
    assert r.json()["page_ids"] == [ids[0]]
    assert walls.get(f"/v1/pages/{ids[2]}", headers=h(walls.admin)).status_code == 200
