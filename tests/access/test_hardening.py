"""Issue 20's findings, one regression test each: a bad page never bricks a data dir, keys never fail
open, loads stay inside their workspace's folder, no plain-text 500, scope-correct counts."""
from __future__ import annotations

import json

import pytest

BAD_DATE = {"url": "https://old.example/x", "body_text": "x", "seen_at": "1600-01-01T00:00:00Z"}


def h(token):
    return {"Authorization": f"Bearer {token}"}


def ingest(corpus, records, workspace="default"):
    from engine.ingest.pipeline import Ingester

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

    from engine.core.corpus import open_corpus
    from engine.core.settings import load_settings
    from server.app import create_app

    s = load_settings(data_dir=str(tmp_path / "data"))
    corpus = open_corpus(s, pool)
    with TestClient(create_app(s, corpus), raise_server_exceptions=False) as client:
        r = client.post("/v1/pages", json={"workspace": "wsa", "pages": [BAD_DATE]})
        assert r.status_code == 200 and r.json()["errors"] is True
        assert r.json()["items"][0]["status"] == "error" and "seen_at" in r.json()["items"][0]["error"]
        r = client.post("/v1/pages", json={"workspace": "wsb",
                                           "pages": [{"url": "https://b.example/", "body_text": "y"}]})
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
    row = corpus.store.sql().row("SELECT page FROM quarantine WHERE page_id = 'pg_bad'")
    stored = row[0] if isinstance(row[0], dict) else json.loads(row[0])   # PostgreSQL: jsonb, read as a dict
    assert stored["body_text"] == "an old page"


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
    from engine.core.access import create_key
    from server.cli import main

    client = make_client(tmp_path / "data")
    try:
        token = create_key(client.corpus.keys, ["*"])["token"]
        key_id = token.split("_")[1]
        assert client.delete(f"/v1/keys/{key_id}", headers=h(token)).status_code == 200
        r = client.get("/v1/status")
        assert r.status_code == 401 and r.json()["detail"]["type"] == "unauthorized"
        assert "(refindery keys create --workspace '*')" in r.json()["detail"]["title"]   # the server's remedy
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
    from engine.core.access import is_loopback

    assert is_loopback(host) is loopback


# 3, 4. Loads stay inside their workspace's folder ---------------------------------------------------

@pytest.fixture
def keyed(tmp_path):
    """A server with keys and two relation workspaces, each key bound to one."""
    from docs.examples import make_client
    from engine.core.access import create_key

    client = make_client(tmp_path / "data")
    admin = create_key(client.corpus.keys, ["*"])["token"]
    for ws in ("wa", "wb"):
        r = client.post("/v1/public/workspaces", json={"workspace_id": ws, "packs": ["expert_network"]},
                        headers=h(admin))
        assert r.status_code == 201, r.text
    client.a = create_key(client.corpus.keys, ["wa"])["token"]
    client.sources = client.data_dir / "sources"
    yield client
    client.corpus.close()


def _load(client, ws, source, token):
    from docs.examples.roster import LOAD

    return client.post(f"/v1/public/workspaces/{ws}/loads", json={"source": str(source), **LOAD}, headers=h(token))


def test_a_key_cannot_load_another_workspaces_export_and_refusals_name_no_server_path(keyed):
    from docs.examples.roster import write_export

    b_export = write_export(keyed.sources / "wb" / "export.duckdb")
    for src in (b_export, "../wb/export.duckdb"):
        r = _load(keyed, "wa", src, keyed.a)
        assert r.status_code == 403 and r.json()["detail"]["type"] == "source_forbidden", r.text
        assert str(keyed.data_dir) not in r.text, r.text
    write_export(keyed.sources / "wa" / "export.duckdb")
    ok = _load(keyed, "wa", "export.duckdb", keyed.a)   # relative to the workspace's own folder
    assert ok.status_code == 201, ok.text
    assert ok.json()["source"] == "export.duckdb" and str(keyed.data_dir) not in ok.text
    described = keyed.get("/v1/public/workspaces/wa", headers=h(keyed.a))
    assert described.status_code == 200 and str(keyed.data_dir) not in described.text


def test_a_view_in_an_export_cannot_read_files_outside_and_views_are_a_clear_422(keyed, tmp_path):
    import duckdb

    from docs.examples.roster import write_export

    secret = tmp_path / "outside-secret.csv"
    secret.write_text("person_id\nroot:x:0:0\n")
    export = write_export(keyed.sources / "wa" / "export.duckdb")
    con = duckdb.connect(str(export))
    con.execute("DROP TABLE people")
    con.execute(f"CREATE VIEW people AS SELECT * FROM read_csv('{secret}', all_varchar = true)")
    con.close()
    r = _load(keyed, "wa", "export.duckdb", keyed.a)
    assert r.status_code == 422, r.text
    assert r.json()["detail"]["reason"] in ("source_view_unsupported", "source_unreadable")
    assert "root:x" not in r.text and str(tmp_path) not in r.text
    from indexes.sources import Source
    with Source(export, roots=[keyed.sources / "wa"]) as src:      # and not by reading the view either
        with pytest.raises(Exception) as err:
            src._con.execute(f"SELECT * FROM {src._alias}.people").fetchall()
        assert "disabled" in str(err.value) or "Permission" in str(err.value)
    # a view over the export's own tables: a clear 422 naming the view, nothing loaded
    export = write_export(keyed.sources / "wa" / "export.duckdb")
    con = duckdb.connect(str(export))
    con.execute("ALTER TABLE people RENAME TO people_t")
    con.execute("CREATE VIEW people AS SELECT * FROM people_t")
    con.close()
    r = _load(keyed, "wa", "export.duckdb", keyed.a)
    assert r.status_code == 422 and r.json()["detail"]["reason"] == "source_view_unsupported", r.text
    assert keyed.corpus.relations.loads("wa") == []


def test_a_folder_source_whose_file_links_outside_is_refused(keyed, tmp_path):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "roles.csv").write_text("role_id,person_id\nr1,p1\n")
    folder = keyed.sources / "wa" / "csvs"
    folder.mkdir(parents=True)
    (folder / "people.csv").write_text("person_id\np1\n")
    (folder / "roles.csv").symlink_to(outside / "roles.csv")
    r = keyed.post("/v1/public/workspaces/wa/loads", headers=h(keyed.a), json={
        "source": "csvs", "format": "csv", "entities": {"table": "people", "id_column": "person_id"}})
    assert r.status_code == 403 and r.json()["detail"]["type"] == "source_forbidden", r.text
    assert str(tmp_path) not in r.text
    (folder / "roles.csv").unlink()
    r = keyed.post("/v1/public/workspaces/wa/loads", headers=h(keyed.a), json={
        "source": "csvs", "format": "csv", "entities": {"table": "people", "id_column": "person_id"}})
    assert r.status_code == 201, r.text


# 5. The dictionary read route opens no file outside the dictionary folder ---------------------------

def test_the_dictionary_routes_open_no_file_outside_the_dictionary_folder(tmp_path):
    """A workspace's dictionary file is named by the workspace's escaped name (engine/core/identity.py):
    a name that is a path reads (and writes) a file of that escaped name in the folder, never the path."""
    from docs.examples import make_client

    secret = tmp_path / "x" / "outside-secret.md"
    secret.parent.mkdir()
    secret.write_text("## hidden-term\n\nsecret-alias\n")
    client = make_client(tmp_path / "data")
    try:
        for name in (str(secret.with_suffix("")), "../../x/outside-secret", "/work/pyproject"):
            r = client.get("/v1/evidence/dictionary", params={"workspace": name})
            assert r.status_code == 200 and r.json()["entries"] == 0, r.text
            assert "hidden-term" not in r.text and "secret-alias" not in r.text
            w = client.put("/v1/evidence/dictionary", params={"workspace": name},
                           json={"format": "markdown", "text": "## gannet\n\nsula\n"})
            assert w.status_code == 200 and "/" not in w.json()["file"], w.text
            assert (client.data_dir / "dictionaries" / w.json()["file"]).is_file()
        assert secret.read_text() == "## hidden-term\n\nsecret-alias\n"
        ok = client.put("/v1/evidence/dictionary", params={"workspace": "birds"},
                        json={"format": "markdown", "text": "## gannet\n\nsula\n"})
        assert ok.status_code == 200 and ok.json()["file"] == "birds.md"   # no server path in the reply
        assert client.get("/v1/evidence/dictionary", params={"workspace": "birds"}).json()["entries"] == 1
    finally:
        client.corpus.close()


# 6. No plain-text 5xx --------------------------------------------------------------------------------

@pytest.fixture
def roster_client(tmp_path, pool):
    from docs.examples import make_client
    from docs.examples.roster import roster

    client = make_client(tmp_path / "data", pool)
    client.ws = roster(client).workspace_id
    client.post("/v1/pages", json={"pages": [{"url": "https://a.example/1", "body_text": "gannets dive"}]})
    yield client
    if not client.corpus.store.closed:
        client.corpus.close()


@pytest.mark.parametrize("body, status, kind", [
    # an unknown slot is a gap, as the seed's contract says (slot_unknown:<name>), never a TypeError
    ({"constraints": [{"relation": "held_role", "slot": "nope", "op": "eq", "value": "x"}]}, 200, None),
    ({"constraints": [{"relation": "held_role", "slot": "seniority", "op": "eq", "value": "VP"}],
      "offset": 9223372036854775808}, 422, "validation_error"),
    ({"constraints": [{"relation": "held_role", "slot": "seniority", "op": "eq", "value": "NaN"}]}, None, None),
])
def test_relation_search_never_answers_a_500(roster_client, body, status, kind):
    r = roster_client.post("/v1/public/search", json={"workspace_id": roster_client.ws, **body})
    assert r.status_code < 500 and r.headers["content-type"].startswith("application/json"), r.text
    if status:
        assert r.status_code == status, r.text
    if kind:
        assert r.json()["detail"]["type"] == kind
    if status == 200:
        assert r.json()["bound"] is False
        assert "slot_unknown:nope" in json.dumps(r.json()["gaps"])
        coverage = r.json()["coverage"]   # a constraint that could not run: the set is never licensed whole
        assert coverage["completeness_licensed"] is False and "constraint_unbound:0" in coverage["narrowed_by"]


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_are_refused_as_constraint_values(roster_client, value):
    raw = ('{"workspace_id": "%s", "constraints": [{"relation": "held_role", "slot": "seniority", '
           '"op": "eq", "value": %s}]}') % (roster_client.ws, value)
    r = roster_client.post("/v1/public/search", content=raw, headers={"content-type": "application/json"})
    assert r.status_code == 422 and r.json()["detail"]["type"] == "search_constraint_invalid", r.text


def test_search_filters_take_only_int64_cluster_ids(roster_client):
    r = roster_client.post("/v1/search", json={"query": "gannets", "filters": {"cluster_id": [1 << 63]}})
    assert r.status_code == 422 and r.json()["detail"]["type"] == "validation_error", r.text
    r = roster_client.post("/v1/search", json={"query": "gannets", "filters": {"cluster_id": [(1 << 63) - 1]}})
    assert r.status_code == 200 and r.json()["total"] == 0


def test_every_integer_the_api_takes_is_bounded(roster_client):
    spec = roster_client.get("/openapi.json").json()
    schemas = spec["components"]["schemas"]
    unbounded = []

    def walk(node, where, seen=()):
        if isinstance(node, list):
            for x in node:
                walk(x, where, seen)
        if not isinstance(node, dict):
            return
        ref = node.get("$ref", "").split("/")[-1]
        if ref and ref not in seen:
            walk(schemas[ref], ref, seen + (ref,))
        if node.get("type") == "integer" and ("minimum" not in node or "maximum" not in node):
            unbounded.append(where)
        for k, v in node.items():
            walk(v, f"{where}.{k}", seen)

    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            for prm in op.get("parameters", []):
                walk(prm.get("schema", {}), f"{method} {path} ?{prm['name']}")
            body = op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")
            walk(body or {}, f"{method} {path} body")
    assert unbounded == []


def test_an_unexpected_failure_is_a_json_500_with_a_request_id_over_http_and_mcp(roster_client, caplog):
    from docs.examples.over_mcp import call_tool

    roster_client.corpus.store.close()   # a real failure: the database has gone away under the server
    from fastapi.testclient import TestClient

    client = TestClient(roster_client.app, raise_server_exceptions=False)
    r = client.post("/v1/search", json={"query": "gannets"})
    assert r.status_code == 500 and r.headers["content-type"] == "application/json"
    detail = r.json()["detail"]
    assert detail["type"] == "internal_error" and detail["request_id"].startswith("req_")
    assert "SELECT" not in r.text and "duckdb" not in r.text.lower()
    assert detail["request_id"] in caplog.text            # logged under the id the client sees
    res = call_tool(roster_client, "get_page", {"page_id": "pg_x"})
    assert res.isError
    text = res.content[0].text
    body = json.loads(text[text.index("{"):])
    assert body["status"] == 500 and body["path"] == "/v1/pages/{id}"
    assert body["detail"]["type"] == "internal_error" and "SELECT" not in text


# 7. Scoped keys learn nothing of what they may not read ---------------------------------------------

def test_scoped_keys_get_scope_correct_clusters_entities_and_audit_events(tmp_path, pool):
    from docs.examples import make_client
    from docs.examples.roster import roster
    from engine.core.access import create_key

    client = make_client(tmp_path / "data", pool)
    try:
        ws = roster(client).workspace_id
        pages = [{"url": f"https://{s}.example/{i}", "body_text": f"{s} notes {i} on gannets and puffins at sea",
                  "scope": s, "entities": ["Alpha" if s == "team-a" else "Bravo"]}
                 for s in ("team-a", "team-b") for i in range(3)]
        assert client.post("/v1/pages", json={"workspace": ws, "pages": pages}).json()["errors"] is False
        assert client.post("/v1/clusters/refit", params={"workspace": ws, "k": 2}).status_code == 200
        admin = create_key(client.corpus.keys, ["*"])["token"]
        team_a = create_key(client.corpus.keys, [ws], scopes=["team-a"])["token"]

        every = client.get("/v1/clusters", params={"workspace": ws}, headers=h(admin)).json()["clusters"]
        mine = client.get("/v1/clusters", params={"workspace": ws}, headers=h(team_a)).json()["clusters"]
        assert sum(c["size"] for c in every) == 6 and sum(c["size"] for c in mine) == 3
        assert all(c["size"] > 0 for c in mine)

        def entity_search(token, ref):
            return client.post("/v1/search", headers=h(token), json={
                "query": "gannets", "workspace": ws, "filters": {"entity": ref}})

        assert entity_search(team_a, "Alpha").status_code == 200
        unknown, other = entity_search(team_a, "Nope"), entity_search(team_a, "Bravo")
        assert unknown.status_code == other.status_code == 404
        assert unknown.json()["detail"]["type"] == other.json()["detail"]["type"] == "entity_not_found"
        assert entity_search(admin, "Bravo").status_code == 200

        body = {"workspace_id": ws, "constraints": [{"relation": "held_role", "slot": "seniority", "op": "gte",
                                                      "value": "VP"}]}
        by_admin = client.post("/v1/public/search", json=body, headers=h(admin)).json()["request_id"]
        by_a = client.post("/v1/public/search", json=body, headers=h(team_a)).json()["request_id"]
        seen = client.get("/v1/audit/events", params={"request_id": by_admin}, headers=h(team_a))
        assert seen.status_code == 404 and seen.json()["detail"]["type"] == "audit_event_not_found"
        assert client.get("/v1/audit/events", params={"request_id": by_a}, headers=h(team_a)).status_code == 200
        assert client.get("/v1/audit/events", params={"request_id": by_admin}, headers=h(admin)).status_code == 200
    finally:
        client.corpus.close()


# 8. URLs, duplicates in a batch ----------------------------------------------------------------------

@pytest.mark.parametrize("url", ["javascript:1", "javascript:alert(1)", "JavaScript:1//x", "data:text/html,x",
                                 "vbscript:x", "ftp://files.example/x"])
def test_only_http_https_and_file_urls_are_pages(make_corpus, url):
    rep = ingest(make_corpus(), [{"url": url, "body_text": "x"}])
    assert rep.outcomes[0].status == "error" and "scheme" in rep.outcomes[0].error


def test_three_spellings_of_one_url_in_a_batch_report_one_created_page(make_corpus):
    corpus = make_corpus()
    rep = ingest(corpus, [{"url": u, "body_text": "gannets"} for u in
                          ("https://www.Example.com/a/", "http://example.com/a", "example.com/a#top")])
    assert [o.status for o in rep.outcomes].count("created") == 1
    assert {o.page_id for o in rep.outcomes} == {rep.outcomes[0].page_id}
    assert [o.status for o in rep.outcomes].count("merged") == 2
    assert rep.summary()["created"] == 1 and corpus.store.counts()["pages"] == 1
    assert corpus.store.page(rep.outcomes[0].page_id)["visit_count"] == 3


def test_a_lone_surrogate_anywhere_in_a_json_body_is_a_422_not_a_500(roster_client):
    for path, raw in (("/v1/search", '{"query": "gannets \\udc00"}'),
                      ("/v1/pages", '{"pages": [{"url": "https://x.example/\\udc00", "body_text": "x"}]}'),
                      ("/v1/public/search", '{"workspace_id": "%s", "brief": "VPs \\ud800"}' % roster_client.ws)):
        r = roster_client.post(path, content=raw, headers={"content-type": "application/json"})
        assert r.status_code == 422 and r.json()["detail"]["type"] == "validation_error", (path, r.text)
    # a surrogate pair is a character like any other (an emoji, as ensure_ascii JSON clients send it)
    r = roster_client.post("/v1/search", content='{"query": "gannets \\ud83d\\ude00"}',
                           headers={"content-type": "application/json"})
    assert r.status_code == 200, r.text


def test_status_over_http_names_no_server_path(roster_client):
    r = roster_client.get("/v1/status")
    assert r.status_code == 200 and str(roster_client.data_dir.parent) not in r.text
    assert r.json()["data_dir"] == "data" and r.json()["quarantine"] == {"pages": 0, "recent": []}


def test_a_value_that_slips_past_the_edge_is_quarantined_by_the_ingest_itself(make_corpus):
    """Defence in depth: a record built without validation (as a caller of the Python API may) with a
    date tantivy cannot hold is stored, refused by the index, moved to quarantine, and reported as
    that item's error; its batch-mates and every index stay consistent."""
    from datetime import datetime

    from engine.ingest.records import PageInput

    corpus = make_corpus()
    slipped = PageInput.model_construct(url="https://old.example/x", title=None, body_text="an old page",
                                        html=None, seen_at=datetime(1600, 1, 1), published=None, entities=[],
                                        scope=None, cluster_id=None)
    rep = ingest(corpus, [{"url": "https://ok.example/1", "body_text": "gannets"}, slipped])
    assert [o.status for o in rep.outcomes] == ["created", "error"]
    assert rep.outcomes[1].error.startswith("quarantined:") and "out of range" in rep.outcomes[1].error
    state = corpus.consistency()
    assert state["consistent"] and state["chunks"] == 1 and corpus.store.quarantined()["pages"] == 1
    assert ingest(corpus, [{"url": "https://ok.example/2", "body_text": "puffins"}]).count("created") == 1


def test_refusals_name_no_server_path_either(roster_client):
    """A refusal's text may come from a resolver that quotes a folder (a reranker not trained here):
    the body keeps the folder's name, never the server's path to it — over HTTP and MCP alike."""
    from docs.examples.over_mcp import call_tool

    r = roster_client.post("/v1/search", json={"query": "gannets", "rerank": True})
    assert r.status_code == 503 and r.json()["detail"]["type"] == "reranker_unavailable", r.text
    assert str(roster_client.data_dir) not in r.text and "refindery-local" in r.text
    res = call_tool(roster_client, "refind_search", {"query": "gannets", "rerank": True})
    assert res.isError and str(roster_client.data_dir) not in res.content[0].text
