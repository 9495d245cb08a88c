"""Issue 20, generated: whatever pages, dates, URLs and filters a client sends, no reply is a 5xx,
the store and its indexes agree after every request, and the data dir restarts clean. Then a real
server is SIGKILLed right after refusing bad items, and its restart is clean too."""
from __future__ import annotations

import json
import signal
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import HealthCheck, event, example, given, settings
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
    from conftest import serve_uds as serve
    from conftest import serving_on

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


# Issue 41: generated WRITES under a scoped key, a read-only key and a key of another workspace. After
# every example, nothing outside the caller's workspace and scopes changed: the other scopes' and
# workspaces' pages (body, scope, visits, last seen, cluster), their entities and links, map notes
# and dictionaries are exactly as before.

URL_POOL = ["https://s2.example.com/beta", "https://s2.example.com/gamma", "https://hr.example/bands",
            "https://d.example/open", "https://s1.example.com/alpha", "https://new.example/x"]
SCOPES = st.sampled_from([None, "s1", "s2", "a\tb", ""])
WORKSPACES = st.sampled_from([None, None, "default", "default", "acme", "acme:hr", "acme%3Ahr"])
ENTITY = st.one_of(st.sampled_from(["Initech", "Salary Bands", "Open"]),
                   st.fixed_dictionaries({"canonical": st.sampled_from(["PWNED", "Initech"]),
                                          "id": st.sampled_from(["initech", "hr:salary-bands", "salary-bands",
                                                                 "default:initech", "s2:initech"]),
                                          "aliases": st.lists(st.sampled_from(["injected", "x"]), max_size=1)}))
ENTITY_UPSERT = st.builds(
    lambda ws, eid, canon, pages, scope, replace: (
        "POST", "/v1/entities", {}, {"workspace": ws, "id": eid, "canonical": canon, "pages": pages,
                                     "scope": scope, "replace_aliases": replace, "aliases": ["injected"]}),
    WORKSPACES, st.sampled_from([None, "initech", "hr:salary-bands", "salary-bands"]),
    st.sampled_from(["Renamed", "Initech"]),
    st.one_of(st.just([]), st.lists(st.sampled_from(["@s2", "@hr", "@open", "@s1"]), min_size=1, max_size=2)),
    SCOPES, st.booleans())
PAGE_WRITE = st.fixed_dictionaries({"url": st.sampled_from(URL_POOL), "body_text": st.sampled_from(
    ["OVERWRITTEN", "Beta: the s2 team's launch plan for Initech."])},
    optional={"scope": SCOPES, "entities": st.lists(ENTITY, max_size=2)})
PAGES_UPSERT = st.builds(lambda ws, pages: ("POST", "/v1/pages", {}, {"workspace": ws, "pages": pages}),
                         WORKSPACES, st.lists(PAGE_WRITE, min_size=1, max_size=3))
ACTIONS = st.one_of(   # the two writes of documents and entities drawn three times as often as the rest
    PAGES_UPSERT, PAGES_UPSERT, PAGES_UPSERT, ENTITY_UPSERT, ENTITY_UPSERT, ENTITY_UPSERT,
    st.builds(lambda pid: ("DELETE", "/v1/pages/{}", {}, pid), st.sampled_from(["@s2", "@hr", "@open", "@s1"])),
    st.builds(lambda ws: ("POST", "/v1/clusters/refit", {"workspace": ws, "k": 2} if ws else {"k": 2}, None),
              WORKSPACES),
    st.builds(lambda ws: ("PUT", "/v1/evidence/dictionary", {"workspace": ws} if ws else {},
                          {"format": "markdown", "text": "## forged\n- aliases: x\n"}), WORKSPACES),
    st.builds(lambda ws: ("POST", "/v1/evidence", {}, {"workspace": ws, "query": "plans\n## FORGED", "max_rounds": 1,
                                                       "route_constraints": ["map_write"]}), WORKSPACES))


@pytest.fixture(scope="module")
def walled(pool, tmp_path_factory):
    from fastapi.testclient import TestClient

    from engine.core.access import create_key
    from engine.core.corpus import open_corpus
    from engine.core.settings import load_settings
    from server.app import create_app

    s = load_settings(data_dir=str(tmp_path_factory.mktemp("walled") / "data"),
                      server={"rate_limit_per_minute": 0})   # the examples' calls are not to be refused for their rate
    corpus = open_corpus(s, pool)
    client = TestClient(create_app(s, corpus), raise_server_exceptions=False)
    client.corpus = corpus
    admin = {"Authorization": "Bearer " + create_key(corpus.keys, ["*"])["token"]}
    pages = {"acme:hr": [{"url": "https://hr.example/bands", "body_text": "The salary bands.",
                          "entities": [{"canonical": "Salary Bands", "id": "salary-bands"}]}],
             "default": [{"url": "https://s2.example.com/beta", "body_text": "Beta: the s2 plan for Initech.",
                          "scope": "s2", "entities": ["Initech"]},
                         {"url": "https://d.example/open", "body_text": "An open page about plans.",
                          "entities": ["Open"]},
                         {"url": "https://s1.example.com/alpha", "body_text": "Alpha: s1 plans.", "scope": "s1"}]}
    ids = {}
    for ws, recs in pages.items():
        items = client.post("/v1/pages", json={"workspace": ws, "pages": recs}, headers=admin).json()["items"]
        for rec, item in zip(recs, items):
            ids[rec["url"]] = item["page_id"]
    client.post("/v1/clusters/refit", params={"workspace": "default", "k": 2}, headers=admin)
    client.put("/v1/evidence/dictionary", params={"workspace": "acme:hr"}, headers=admin,
               json={"format": "markdown", "text": "## salary band\n- aliases: pay band\n"})
    client.refs = {"@s2": ids["https://s2.example.com/beta"], "@hr": ids["https://hr.example/bands"],
                   "@open": ids["https://d.example/open"], "@s1": ids["https://s1.example.com/alpha"]}
    client.keys = {name: {"Authorization": "Bearer " + create_key(corpus.keys, ws, scopes, ro)["token"]}
                   for name, ws, scopes, ro in (("s1", ["default"], ["s1"], False),
                                                ("reader", ["default"], [], True),
                                                ("acme", ["acme"], [], False))}
    yield client
    if not corpus.store.closed:
        corpus.close()


# what each caller may change: its own workspace and scopes (the read-only key: nothing), and the
# dictionary of a workspace it holds whole
INSIDE = {"s1": (lambda ws, scope: ws == "default" and scope == "s1", None),
          "reader": (lambda ws, scope: False, None),
          "acme": (lambda ws, scope: ws == "acme", "acme")}


def outside_state(client, who) -> dict:
    from test_hardening_writes import entity_rows

    inside, own_dictionary = INSIDE[who]
    sql = client.corpus.store.sql()
    pages = {r[0]: tuple(r[1:]) for r in sql.rows(
        "SELECT page_id, workspace_id, url, body_text, scope, visit_count, last_seen, cluster_id, content_hash "
        "FROM pages") if not inside(r[1], r[4])}
    rows = entity_rows(sql)
    theirs = {r[0] for r in rows if not inside(r[1], r[2])}
    # links of their pages, and links of any page to their entities (a page linked across the wall)
    links = sorted(tuple(r) for r in sql.rows("SELECT page_id, entity_id FROM page_entities")
                   if r[0] in pages or r[1] in theirs)
    linked = {e for p, e in links if p in pages}
    ents = {r[0]: r[1:] for r in rows if r[0] in theirs or r[0] in linked}
    folder = client.corpus.settings.dictionary_dir
    dictionaries = {p.name: p.read_text() for p in folder.glob("*")
                    if p.stem != own_dictionary} if folder.exists() else {}
    notes = {ws: client.corpus.map_notes.version(ws) for ws in ("default", "acme:hr")}
    return {"pages": pages, "entities": ents, "links": links, "notes": notes, "dictionaries": dictionaries}


# The issue's own attacks, always tried besides the generated ones (whichever key sends them).
@example(actions=[("POST", "/v1/entities", {}, {"canonical": "PWNED", "id": "hr:salary-bands", "aliases": ["injected"]})])
@example(actions=[("POST", "/v1/pages", {}, {"pages": [{"url": "https://s2.example.com/beta", "body_text": "OVERWRITTEN",
                                                       "scope": "s1"}]})])
@example(actions=[("POST", "/v1/entities", {}, {"canonical": "Initech", "id": "initech", "replace_aliases": True})])
@example(actions=[("POST", "/v1/evidence", {}, {"query": "plans\n## FORGED", "route_constraints": ["map_write"]})])
@pytest.mark.parametrize("who", sorted(INSIDE))
@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(actions=st.lists(ACTIONS, min_size=1, max_size=3))
def test_generated_writes_change_nothing_outside_the_callers_workspace_and_scopes(walled, who, actions):
    before = outside_state(walled, who)
    for method, path, params, body in actions:
        if method == "DELETE":
            r = walled.delete(path.format(walled.refs[body]), headers=walled.keys[who])
        else:
            if body and body.get("pages") and isinstance(body["pages"][0], str):
                body = {**body, "pages": [walled.refs[p] for p in body["pages"]]}
            r = walled.request(method, path, params=params, json=body, headers=walled.keys[who])
        assert r.status_code < 500 and r.headers["content-type"].startswith("application/json"), r.text
        event(f"{who} {method} {path.split('/')[2]} {r.status_code}")
    assert outside_state(walled, who) == before, (who, actions)
