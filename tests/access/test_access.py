"""API keys: hashed at rest, required once one exists, workspaces isolated (404, never 403),
read-only keys refused writes, admin routes for keys valid everywhere, loopback-only without keys —
with the store in DuckDB and in PostgreSQL."""
from __future__ import annotations

import pytest
from conftest import STORE_BACKENDS, _new_database

PAGES = {"alpha": [("https://a.example/json", "JSON in Python", "The json module encodes and decodes JSON.", None),
                   ("https://a.example/team-a", "Team A JSON notes", "Team A notes on the json module: dumps and "
                    "loads with indent for pretty output.", "team-a"),
                   ("https://a.example/team-b", "Team B JSON secrets", "Team B secret notes on the json module "
                    "encoder and its pretty output.", "team-b")],
         "beta": [("https://b.example/secret", "Beta plans", "The beta team plans a launch of the json toolkit.",
                   None)]}


@pytest.fixture(scope="module", params=STORE_BACKENDS)
def acl(pool, tmp_path_factory, request):
    from docs.examples import make_client
    from engine.core.access import create_key
    from engine.ingest.pipeline import Ingester

    store = {"url": _new_database(request.getfixturevalue("postgres_uri"))} if request.param == "postgres" else {}
    client = make_client(tmp_path_factory.mktemp("access") / "data", pool=pool, store=store)
    for ws, pages in PAGES.items():
        records = ((i, "t", {"url": u, "title": t, "body_text": b, "scope": s}) for i, (u, t, b, s) in enumerate(pages))
        Ingester(client.corpus, ws, progress=False).ingest(records)
    client.corpus.sync()
    for ws in ("alpha", "beta"):  # the server is open while no key exists
        assert client.post("/v1/public/workspaces", json={"workspace_id": ws}).status_code == 201
    keys = client.corpus.keys
    client.admin = create_key(keys, ["*"], name="admin")["token"]
    client.alpha = create_key(keys, ["alpha"])["token"]
    client.reader = create_key(keys, ["alpha"], read_only=True)["token"]
    client.team_a = create_key(keys, ["alpha"], scopes=["team-a"])["token"]
    client.page = {ws: client.corpus.store.filtered_pages(ws)[0] for ws in PAGES}
    pages = client.corpus.store.pages_by_id(client.corpus.store.filtered_pages("alpha"))
    client.by_url = {p["url"]: pid for pid, p in pages.items()}
    yield client
    client.corpus.close()


def auth(token):
    return {"Authorization": f"Bearer {token}"}


def test_tokens_are_shown_once_and_stored_only_as_salted_hashes(acl):
    rows = acl.corpus.store.sql().rows("SELECT * FROM api_keys")
    flat = " ".join(str(c) for r in rows for c in r)
    for token in (acl.admin, acl.alpha, acl.reader):
        assert token.startswith("rfy_") and token not in flat and token.split("_", 2)[2] not in flat
    listed = acl.get("/v1/keys", headers=auth(acl.admin)).json()["keys"]
    mine = {t.split("_")[1] for t in (acl.admin, acl.alpha, acl.reader, acl.team_a)}
    stored = {r[0] for r in acl.corpus.store.sql().rows("SELECT key_id FROM api_keys")}
    assert {k["key_id"] for k in listed} == stored and mine <= stored   # every key, the fixture's four among them
    assert not any("token" in k or "digest" in k or "salt" in k for k in listed)


def test_with_keys_every_v1_route_needs_one_but_health_does_not(acl):
    assert acl.get("/healthz").status_code == 200
    for method, path, body in (("post", "/v1/search", {"query": "json"}), ("get", "/v1/status", None),
                               ("post", "/v1/public/search", {"workspace_id": "beta", "constraints": []}),
                               ("post", "/v1/evidence", {"query": "json"})):
        r = acl.request(method, path, json=body)
        assert r.status_code == 401 and r.json()["detail"]["type"] == "unauthorized", path
        assert r.headers["www-authenticate"] == "Bearer"
    bad = acl.post("/v1/search", json={"query": "json"}, headers=auth(acl.alpha[:-1] + "x"))
    assert bad.status_code == 401
    assert acl.post("/v1/search", json={"query": "json"}, headers={"Authorization": "Basic abc"}).status_code == 401


def test_a_key_sees_only_its_workspaces_and_others_are_404(acl):
    h = auth(acl.alpha)
    own = acl.post("/v1/search", json={"query": "json"}, headers=h).json()
    assert {p["url"] for p in own["pages"]} == {u for u, *_ in PAGES["alpha"]}  # its workspace by default
    for r, kind in ((acl.post("/v1/search", json={"query": "json", "workspace": "beta"}, headers=h), "workspace"),
                    (acl.get(f"/v1/pages/{acl.page['beta']}", headers=h), "page"),
                    (acl.get(f"/v1/pages/{acl.page['beta']}/similar", headers=h), "page"),
                    (acl.get("/v1/public/workspaces/beta", headers=h), "workspace"),
                    (acl.post("/v1/public/facts", json={"workspace_id": "beta", "entity_id": "x",
                                                        "relation": "screening"}, headers=h), "workspace"),
                    (acl.post("/v1/evidence", json={"query": "json", "workspace": "beta"}, headers=h), "workspace"),
                    (acl.get("/v1/evidence/maps", params={"workspace": "beta"}, headers=h), "workspace"),
                    (acl.get("/v1/clusters", params={"workspace": "beta"}, headers=h), "workspace")):
        assert r.status_code == 404 and r.json()["detail"]["type"] == f"{kind}_not_found", r.text
    # the same reply as for a workspace that does not exist at all
    ghost = acl.post("/v1/search", json={"query": "json", "workspace": "ghost"}, headers=h).json()["detail"]
    beta = acl.post("/v1/search", json={"query": "json", "workspace": "beta"}, headers=h).json()["detail"]
    assert ghost["type"] == beta["type"] and ghost["title"].replace("ghost", "X") == beta["title"].replace("beta", "X")
    assert acl.get(f"/v1/pages/{acl.page['alpha']}", headers=h).status_code == 200


def test_evidence_sessions_do_not_cross_workspaces(acl):
    """Each workspace has sessions of its own: the same id in another workspace is another session,
    answered exactly as a fresh id is (issue 41 #5: a 404 there told that the id was in use)."""
    r = acl.post("/v1/evidence", json={"query": "json", "session_id": "shared"}, headers=auth(acl.admin))
    assert r.status_code == 200  # the admin's default workspace
    other = acl.post("/v1/evidence", json={"query": "json", "session_id": "shared"}, headers=auth(acl.alpha))
    fresh = acl.post("/v1/evidence", json={"query": "json", "session_id": "never-used"}, headers=auth(acl.alpha))
    assert other.status_code == fresh.status_code == 200, other.text
    assert other.json()["path"] != r.json()["path"] and other.json()["sources_found"] == other.json()["new_sources"]
    mine = acl.get("/v1/evidence/packets/shared", headers=auth(acl.alpha)).text
    theirs = acl.get("/v1/evidence/packets/shared", headers=auth(acl.admin)).text
    assert "workspace: alpha" in mine and "workspace: default" in theirs
    assert acl.get("/v1/evidence/packets/shared", params={"workspace": "default"},
                   headers=auth(acl.alpha)).json()["detail"]["type"] == "workspace_not_found"


def test_read_only_keys_cannot_write_and_grants_bound_admin_routes(acl):
    h = auth(acl.reader)
    assert acl.post("/v1/search", json={"query": "json"}, headers=h).status_code == 200
    for r in (acl.post("/v1/pages", json={"pages": [{"url": "https://a.example/new", "body_text": "x"}]}, headers=h),
              acl.delete(f"/v1/pages/{acl.page['alpha']}", headers=h),
              acl.put("/v1/evidence/dictionary", json={"format": "toml", "text": "[[terms]]\nterm='x'\n"}, headers=h),
              acl.post("/v1/clusters/refit", headers=h)):
        assert r.status_code == 403 and r.json()["detail"]["type"] == "forbidden", r.text
    assert acl.get(f"/v1/pages/{acl.page['alpha']}", headers=h).status_code == 200  # nothing was deleted
    for token in (acl.alpha, acl.reader):
        assert acl.get("/v1/status", headers=auth(token)).status_code == 403
        assert acl.get("/v1/keys", headers=auth(token)).status_code == 403
        assert acl.post("/v1/public/workspaces", json={"workspace_id": "gamma"}, headers=auth(token)).status_code == 403
    assert acl.get("/v1/status", headers=auth(acl.admin)).status_code == 200
    assert acl.post("/mcp", json={}).status_code == 401  # MCP over HTTP needs a key too


def test_a_revoked_key_is_refused_at_once(acl):
    from engine.core.access import create_key

    token = create_key(acl.corpus.keys, ["alpha"])["token"]
    h = auth(token)
    assert acl.post("/v1/search", json={"query": "json"}, headers=h).status_code == 200
    key_id = token.split("_")[1]
    assert acl.delete(f"/v1/keys/{key_id}", headers=auth(acl.admin)).json() == {"key_id": key_id, "revoked": True}
    assert acl.post("/v1/search", json={"query": "json"}, headers=h).status_code == 401
    assert acl.delete(f"/v1/keys/{key_id}", headers=auth(acl.admin)).json()["detail"]["type"] == "key_not_found"


def test_keys_over_http_and_the_cli(acl, tmp_path, monkeypatch, capsys):
    import json

    from server.cli import main

    made = acl.post("/v1/keys", json={"workspaces": ["alpha"], "read_only": True}, headers=auth(acl.admin))
    assert made.status_code == 201 and made.json()["token"].startswith("rfy_")
    assert acl.post("/v1/keys", json={"workspaces": ["bad id!"]}, headers=auth(acl.admin)).status_code == 422

    monkeypatch.setenv("REFINDERY_DATA_DIR", str(tmp_path / "data"))
    # no key: serving beyond loopback is refused before anything binds
    assert main(["serve", "--host", "0.0.0.0", "--port", "9"]) == 2
    assert "refusing to serve on 0.0.0.0" in capsys.readouterr().err
    assert main(["keys", "create", "--workspace", "alpha", "--scope", "team-a", "--read-only"]) == 0
    made = json.loads(capsys.readouterr().out)
    assert made["scopes"] == ["team-a"] and made["read_only"] is True
    assert main(["keys", "list"]) == 0
    assert made["token"] not in capsys.readouterr().out
    assert main(["keys", "revoke", made["key_id"]]) == 0
    assert main(["keys", "revoke", made["key_id"]]) == 2


def test_a_document_scope_is_never_crossed_by_any_verb(acl):
    """A key scoped to team-a sees only team-a's pages: search and its snippets, pages, similar,
    suggestions, ideas, evidence packets and maps — and relation search withholds its licence (acl)."""
    h = auth(acl.team_a)
    allowed = "https://a.example/team-a"
    hidden = [acl.by_url["https://a.example/team-b"], acl.by_url["https://a.example/json"]]
    res = acl.post("/v1/search", json={"query": "json module pretty output", "k": 10, "suggestions": True},
                   headers=h).json()
    assert [p["url"] for p in res["pages"]] == [allowed] and res["total"] == 1
    assert all("Team B" not in s["text"] for p in res["pages"] for s in p["snippets"])
    assert res["suggestions"] is None or not {s["page_id"] for s in res["suggestions"]["pages"]} & set(hidden)
    # with no scope the same query sees all three
    everything = acl.post("/v1/search", json={"query": "json module pretty output"}, headers=auth(acl.alpha))
    assert everything.json()["total"] == 3
    for pid in hidden:
        assert acl.get(f"/v1/pages/{pid}", headers=h).json()["detail"]["type"] == "page_not_found"
        assert acl.get(f"/v1/pages/{pid}/similar", headers=h).status_code == 404
    similar = acl.get(f"/v1/pages/{acl.by_url[allowed]}/similar", headers=h).json()["pages"]
    assert similar == []  # the only other pages are out of scope
    idea = acl.post("/v1/public/search", json={"workspace_id": "alpha", "idea": "json pretty output"}, headers=h)
    assert idea.status_code == 200, idea.text
    assert "team-b" not in idea.text and "https://a.example/json" not in idea.text
    rel = acl.post("/v1/public/search", json={"workspace_id": "alpha", "constraints": [
        {"relation": "held_role", "slot": "seniority", "op": "gte", "value": "VP"}]}, headers=h).json()
    assert rel["coverage"]["completeness_licensed"] is False and rel["coverage"]["narrowed_by"][0] == "acl"
    whole = acl.post("/v1/public/search", json={"workspace_id": "alpha", "constraints": [
        {"relation": "held_role", "slot": "seniority", "op": "gte", "value": "VP"}]}, headers=auth(acl.alpha)).json()
    assert "acl" not in whole["coverage"].get("narrowed_by", [])
    ev = acl.post("/v1/evidence", json={"query": "json encoder pretty output", "session_id": "scoped"}, headers=h)
    assert ev.status_code == 200 and ev.json()["navigation"]["maps_accessed"] == 0
    text = acl.get("/v1/evidence/packets/scoped", headers=h).text
    assert allowed in text and "team-b" not in text and "https://a.example/json" not in text
    assert acl.get("/v1/evidence/maps", headers=h).status_code == 403
    # a packet written from every document is not readable (nor extendable) with the scoped key
    wide = acl.post("/v1/evidence", json={"query": "json", "session_id": "wide"}, headers=auth(acl.alpha))
    assert wide.status_code == 200
    assert acl.get("/v1/evidence/packets/wide", headers=h).status_code == 404
    # the same id is the scoped key's own session, written from its scope only (not the wide packet)
    assert acl.post("/v1/evidence", json={"query": "json", "session_id": "wide"}, headers=h).status_code == 200
    own = acl.get("/v1/evidence/packets/wide", headers=h).text
    assert "team-b" not in own and "https://a.example/json" not in own
    # a page list cannot reach past the scopes (an out-of-scope page is as unknown as a missing one), and a
    # scoped key's map_write writes nothing into maps drawn over every document
    listed = acl.post("/v1/evidence", json={"query": "json pretty output", "session_id": "listed", "max_rounds": 1,
                                            "pages": [allowed, hidden[0], "https://a.example/nowhere"],
                                            "route_constraints": ["map_write"]}, headers=h)
    assert listed.status_code == 200, listed.text
    nav = listed.json()["navigation"]
    assert nav["pages_listed"] == 1 and nav["pages_unknown"] == [hidden[0], "https://a.example/nowhere"]
    assert nav["map_write"]["notes"] == 0 and nav["map_write"]["version"] is None
    assert acl.corpus.map_notes.version("alpha") == 0
    # the MCP tools apply the same grant: tests/server/test_mcp_transports.py drives them over /mcp with such a key


def test_facets_models_and_the_web_page_under_keys(acl):
    """The page and its scripts load without a key (they hold no data); what they show comes from /v1,
    under the caller's grant: facets count only the pages a key may read, in workspaces it may read."""
    from server.web import WEB_DIR

    modules = sorted(str(p.relative_to(WEB_DIR)) for p in WEB_DIR.rglob("*.js"))
    assert {"app.js", "views/search.js", "views/compare.js"} <= set(modules)
    for path in ("/", "/ui/app.css", *(f"/ui/{m}" for m in modules)):
        got = acl.get(path)
        assert got.status_code == 200, path
        assert path.endswith((".css", "/")) or "javascript" in got.headers["content-type"], path  # a module's type
    assert "text/html" in acl.get("/").headers["content-type"]
    assert acl.get("/v1/facets").status_code == 401 and acl.get("/v1/models").status_code == 401
    whole = acl.get("/v1/facets", params={"workspace": "alpha"}, headers=auth(acl.alpha)).json()
    scoped = acl.get("/v1/facets", params={"workspace": "alpha"}, headers=auth(acl.team_a)).json()
    assert whole["pages"] == 3 and whole["domains"] == [{"domain": "a.example", "pages": 3}]
    assert scoped["pages"] == 1 and scoped["domains"] == [{"domain": "a.example", "pages": 1}]
    hidden = acl.get("/v1/facets", params={"workspace": "beta"}, headers=auth(acl.alpha))
    assert hidden.status_code == 404 and hidden.json()["detail"]["type"] == "workspace_not_found"
    models = acl.get("/v1/models", headers=auth(acl.reader)).json()
    assert models["active"] == "all-minilm-l6-v2"
    assert {m["name"] for m in models["models"]} >= {"all-minilm-l6-v2", "all-minilm-l6-v2-int8"}
    assert not any("path" in m for m in models["models"])  # nothing about the server's disk


def test_every_call_is_audited_with_its_key_route_workspace_and_outcome(acl):
    calls = {
        "ok": acl.post("/v1/search", json={"query": "json"}, headers=auth(acl.alpha)),
        "unauthorized": acl.post("/v1/search", json={"query": "json"}),
        "hidden": acl.get(f"/v1/pages/{acl.page['beta']}", headers=auth(acl.alpha)),
        "forbidden": acl.post("/v1/clusters/refit", headers=auth(acl.reader)),
    }
    log = {}
    for name, r in calls.items():
        rid = r.headers["x-request-id"]
        [row] = acl.get("/v1/audit/access", params={"request_id": rid}, headers=auth(acl.admin)).json()["calls"]
        log[name] = row
    alpha_id, reader_id = acl.alpha.split("_")[1], acl.reader.split("_")[1]
    assert (log["ok"]["key_id"], log["ok"]["route"], log["ok"]["workspace"], log["ok"]["status"]) == \
        (alpha_id, "/v1/search", "alpha", 200)
    assert (log["unauthorized"]["key_id"], log["unauthorized"]["status"]) == (None, 401)
    assert (log["hidden"]["route"], log["hidden"]["status"]) == ("/v1/pages/{page_id}", 404)
    assert (log["forbidden"]["key_id"], log["forbidden"]["status"]) == (reader_id, 403)
    assert acl.get("/v1/audit/access", headers=auth(acl.alpha)).status_code == 403


def test_the_engine_verbs_faces_call_for_counts_urls_and_term_statistics_keep_the_walls(acl):
    """counts and term_stats read every workspace: only a key for every workspace and scope may; a
    page's URL is found only in the caller's workspaces and scopes (another's is as if absent)."""
    from engine.core.access import Forbidden, Grant
    from engine.core.errors import EngineError

    engine = acl.app.state.engine
    everyone = Grant("admin")
    alpha, team_a = Grant("k1", workspaces=("alpha",)), Grant("k2", workspaces=("alpha",), scopes=("team-a",))
    assert engine.counts(everyone)["pages"] == 4
    assert engine.term_stats(["json"], everyone)[1] > 0
    for narrow in (alpha, team_a):
        with pytest.raises(Forbidden):
            engine.counts(narrow)
        with pytest.raises(Forbidden):
            engine.term_stats(["json"], narrow)
    assert engine.pages_with_url("https://a.example/team-b", "alpha", alpha) == [acl.by_url["https://a.example/team-b"]]
    assert engine.pages_with_url("https://a.example/team-b", "alpha", team_a) == []   # another scope's page
    assert engine.pages_with_url("https://a.example/team-a", "alpha", team_a) == [acl.by_url["https://a.example/team-a"]]
    with pytest.raises(EngineError) as refused:   # another workspace: as if absent
        engine.pages_with_url("https://b.example/secret", "beta", alpha)
    assert refused.value.status == 404
