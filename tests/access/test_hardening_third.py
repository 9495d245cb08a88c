"""Issue 57's findings that a request can reach, one regression test each (numbered as in the issue;
#2-#5, the local ones, are in tests/server/test_local_trust.py with real processes and a second user).
Each failed on the code before the fix. Every request goes to a real server (the app served by uvicorn
on a Unix socket); real DuckDB, tantivy and FAISS; the bundled MiniLM."""
from __future__ import annotations

import contextlib

import pytest


def h(token):
    return {"Authorization": f"Bearer {token}"}


def page(url, body, **kw):
    return {"url": url, "body_text": body, "seen_at": "2026-06-01T10:00:00Z", **kw}


SALES_VP = [{"relation": "held_role", "slot": "function", "op": "eq", "value": "Sales"}]


@contextlib.contextmanager
def over_http(cl, folder):
    """`cl`'s app served by uvicorn on a Unix socket (a real server), and an httpx client over it."""
    import httpx
    from conftest import served_on_socket

    with served_on_socket(cl.app, folder / "s.sock"):
        transport = httpx.HTTPTransport(uds=str(folder / "s.sock"), limits=httpx.Limits(max_connections=1))
        with httpx.Client(transport=transport, base_url="http://localhost:8000", timeout=120) as http:
            yield http


def relation_answer(client, token, ws="rel2") -> dict:
    """What a key's relation search answers (counts, partition, rows, row scopes), without ids or times."""
    r = client.post("/v1/public/search", json={"workspace_id": ws, "constraints": SALES_VP}, headers=h(token))
    assert r.status_code == 200, r.text
    body = r.json()
    return {"counts": body["counts"], "matched": sorted(m["entity_id"] for m in body["matches"]),
            "not_recorded": body.get("not_recorded")}


def scoped_rows(corpus, ws="rel2") -> list[tuple]:
    """Every current held_role row read from documents: (entity, scope, source, title), sorted."""
    cur = corpus.relations.cursor()
    table = next(t for (t,) in cur.execute("SELECT table_name FROM duckdb_tables() WHERE table_name LIKE "
                                           "'rel_%held_role%'").fetchall())
    return sorted(cur.execute(f"SELECT entity_id, scope, source_key, v_title FROM {table} WHERE workspace_id = ? "
                              "AND current ORDER BY ALL", [ws]).fetchall())


# 1. A key scoped to s1 took over scope s2's relation documents ---------------------------------------

def test_1_a_scoped_key_loads_its_own_rows_and_never_relabels_another_scopes_documents(pool, tmp_path):
    from docs.examples import make_client
    from engine.core.access import create_key
    from relations_helpers import AMARA, BO, write

    cl = make_client(tmp_path / "data", pool=pool)
    keys, store = cl.corpus.keys, cl.corpus.store
    admin = create_key(keys, ["*"])["token"]
    s1 = create_key(keys, ["rel2"], scopes=["s1"])["token"]
    s2 = create_key(keys, ["rel2"], scopes=["s2"])["token"]
    write(tmp_path / "data" / "sources" / "rel2" / "docs_s2", {"amara.md": AMARA, "bo.md": BO})

    def body(source, scope):
        return {"source": source, "documents": {"key_path": "id", "name_path": "name", "scope": scope},
                "coverage": ["held_role"]}

    def pages():
        return sorted((p["url"], p["scope"]) for p in store.pages_by_id(store.filtered_pages("rel2")).values())

    try:
        with over_http(cl, tmp_path) as http:
            assert http.post("/v1/public/workspaces", json={"workspace_id": "rel2"}, headers=h(admin)).status_code == 201
            r = http.post("/v1/public/workspaces/rel2/loads", json=body("docs_s2", "s2"), headers=h(s2))
            assert r.status_code == 201, r.text
            theirs = relation_answer(http, s2)
            assert theirs["counts"]["matched"] == 1 and theirs["matched"] == ["amara_okafor"]
            s2_rows = [row for row in scoped_rows(cl.corpus) if row[1] == "s2"]
            assert s2_rows and {row[1] for row in scoped_rows(cl.corpus)} == {"s2"}
            s2_pages = pages()

            # the attack: the same folder (and the folder's parent), claimed for s1
            for source in ("docs_s2", "."):
                r = http.post("/v1/public/workspaces/rel2/loads", json=body(source, "s1"), headers=h(s1))
                assert r.status_code == 201, r.text
                assert r.json()["documents"]["removed"] == 0      # nothing of s2's was its to remove
                assert relation_answer(http, s2) == theirs          # s2's answer is exactly what it was
                assert [row for row in scoped_rows(cl.corpus) if row[1] == "s2"] == s2_rows   # not relabelled
            # s1 got rows of its own, read from the files it named, labelled s1
            assert relation_answer(http, s1)["matched"] == ["amara_okafor"]
            assert {row[1] for row in scoped_rows(cl.corpus)} == {"s1", "s2"}
            # s2's pages are untouched; s1's are its own copies
            assert set(s2_pages) <= set(pages()) and {scope for _, scope in pages()} == {"s1", "s2"}
            # s2 syncing its own folder again finds nothing changed and nothing gone
            r = http.post("/v1/public/workspaces/rel2/loads", json=body("docs_s2", "s2"), headers=h(s2))
            assert r.status_code == 201 and r.json()["documents"]["changed"] == 0, r.text
            assert r.json()["documents"]["removed"] == 0
            assert relation_answer(http, s2) == theirs
            # a key of every scope moving the folder to s3 replaces what it can see: both scopes' rows
            r = http.post("/v1/public/workspaces/rel2/loads", json=body("docs_s2", "s3"), headers=h(admin))
            assert r.status_code == 201, r.text
            assert relation_answer(http, s2)["counts"]["matched"] == 0
            folder = f"docs:{(tmp_path / 'data' / 'sources' / 'rel2' / 'docs_s2').resolve()}#"
            assert {row[1] for row in scoped_rows(cl.corpus) if row[2].startswith(folder)} == {"s3"}
    finally:
        cl.corpus.close()


# 6. Feedback crossed scopes and workspaces ----------------------------------------------------------

def test_6_feedback_only_on_a_query_and_a_page_the_caller_could_read(pool, tmp_path):
    from docs.examples import make_client
    from engine.core.access import create_key

    cl = make_client(tmp_path / "data", pool=pool)
    keys = cl.corpus.keys
    admin = create_key(keys, ["*"])["token"]
    hr = create_key(keys, ["acme:hr"])["token"]
    s1 = create_key(keys, ["default"], scopes=["s1"])["token"]
    s1_reader = create_key(keys, ["default"], scopes=["s1"], read_only=True)["token"]
    s2 = create_key(keys, ["default"], scopes=["s2"])["token"]
    star_s1 = create_key(keys, ["*"], scopes=["s1"])["token"]
    try:
        with over_http(cl, tmp_path) as http:
            r = http.post("/v1/pages", headers=h(admin), json={"pages": [
                page("https://s1.example.com/gannets", "Gannets dive for fish off the cliffs.", scope="s1"),
                page("https://s2.example.com/gannets", "The s2 team's gannet census.", scope="s2")]})
            assert r.json()["errors"] is False, r.text
            s1_page, s2_page = (it["page_id"] for it in r.json()["items"])
            r = http.post("/v1/pages", headers=h(hr), json={"workspace": "acme:hr", "pages": [
                page("https://hr.example/bands", "The salary bands of every grade.")]})
            hr_page = r.json()["items"][0]["page_id"]

            def query(token, **kw):
                r = http.post("/v1/search", json={"query": "gannets", **kw}, headers=h(token))
                assert r.status_code == 200, r.text
                return r.json()["query_id"]

            q_s2, q_s1, q_hr, q_admin = query(s2), query(s1), query(hr, workspace="acme:hr"), query(admin)

            def judge(token, q, p):
                return http.post("/v1/feedback", json={"query_id": q, "page_id": p, "kind": "found"}, headers=h(token))

            refused = [judge(s1, q_s2, s1_page), judge(s1_reader, q_s2, s1_page),   # another scope's query
                       judge(star_s1, q_hr, s1_page),                  # another workspace's (and unscoped) query
                       judge(s1, q_admin, s1_page),                    # a query run over every scope
                       judge(s1, q_s1, s2_page)]                       # its query, another scope's page
            assert [(r.status_code, r.json()["detail"]["type"]) for r in refused] == \
                [(404, "query_not_found")] * 4 + [(404, "page_not_found")]
            # a page of another workspace than the query's, even for a key that reads both
            r = judge(admin, q_hr, s1_page)
            assert (r.status_code, r.json()["detail"]["type"]) == (404, "page_not_found")
            # what the caller could read is judged, read-only keys included
            assert judge(s1_reader, q_s1, s1_page).status_code == 200
            assert judge(s2, q_s2, s2_page).status_code == 200
            assert judge(admin, q_hr, hr_page).status_code == 200
        cl.corpus.flush()
        stored = sorted((q, p) for q, p, _ in cl.corpus.querylog.tables.feedback())
        assert stored == sorted([(q_s1, s1_page), (q_s2, s2_page), (q_hr, hr_page)])
    finally:
        cl.corpus.close()


# 7 and 8. A dictionary upload and an MCP call that answered 500 ---------------------------------------

@pytest.fixture(scope="module")
def served(pool, tmp_path_factory):
    """The app over a fresh data dir, served by uvicorn on a Unix socket (real HTTP, keep-alive), and
    an httpx client over it that keeps one connection."""
    from docs.examples import make_client

    folder = tmp_path_factory.mktemp("served57")
    cl = make_client(folder / "data", pool=pool)
    r = cl.post("/v1/pages", json={"pages": [page("https://notes.example/json", "Pretty printing JSON with indent.")]})
    assert r.json()["errors"] is False
    with over_http(cl, folder) as http:
        yield http
    cl.corpus.close()


def refused_422(r, *types):
    assert r.status_code == 422, (r.status_code, r.text[:300])
    detail = r.json()["detail"]
    assert detail["type"] in types or {e["type"] for e in detail.get("errors", [])} & set(types), detail
    return detail


@pytest.mark.parametrize("text,reason", [
    ("a = " + "[" * 3000 + "]" * 3000, "levels deep"),
    ("x = 1" + "0" * 5000, "digits"),
    ("[[terms]]\nterm = 'x'\nrelated = [" + "[" * 80 + "]" * 80 + "]", "levels deep")])
def test_7_a_dictionary_too_deep_or_with_too_long_a_number_is_a_422_and_the_connection_lives(served, text, reason):
    r = served.put("/v1/evidence/dictionary", json={"format": "toml", "text": text})
    detail = refused_422(r, "dictionary_invalid")
    assert reason in detail["title"]
    assert served.get("/v1/evidence/dictionary").status_code == 200    # the same kept-alive connection
    good = served.put("/v1/evidence/dictionary", json={"format": "toml", "text": "[[terms]]\nterm = 'json'\n"
                                                                                  "aliases = ['javascript object notation']\n"})
    assert good.status_code == 200, good.text


def mcp_session(http) -> dict:
    headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
    r = http.post("/mcp", headers=headers, json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t57", "version": "0"}}})
    assert r.status_code == 200, r.text
    headers["mcp-session-id"] = r.headers["mcp-session-id"]
    assert http.post("/mcp", headers=headers, json={"jsonrpc": "2.0", "method": "notifications/initialized"}
                     ).status_code == 202
    return headers


def test_8_an_mcp_call_with_a_number_too_long_or_too_deep_is_a_422_and_the_session_goes_on(served):
    headers = mcp_session(served)
    call = '{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "refind_search", "arguments": '
    for args, kind in (('{"query": "json", "k": ' + "1" * 5000 + "}", "number_too_long"),
                       ('{"query": "json", "filters": ' + "[" * 3000 + "]" * 3000 + "}", "json_too_deep")):
        r = served.post("/mcp", headers=headers, content=call + args + "}}")
        refused_422(r, kind)
    ok = served.post("/mcp", headers=headers, content=call + '{"query": "pretty printing json", "k": 1}}}')
    assert ok.status_code == 200, ok.text
    assert "notes.example/json" in ok.text


# 10. Entity aliases had no length cap ----------------------------------------------------------------

def test_10_alias_length_and_count_per_entity_are_capped_and_named(served):
    big = ["a" * 100_000] * 2
    r = served.post("/v1/pages", json={"pages": [page("https://notes.example/big", "A page.",
                                                      entities=[{"canonical": "Bigco", "aliases": big}])]})
    item = r.json()["items"][0] if r.status_code == 200 else None
    assert (r.status_code == 422) or (item and item["status"] == "error"), r.text[:300]
    assert "300" in r.text[:2000]
    assert len(r.content) < 10_000                              # not echoed
    r = served.post("/v1/entities", json={"canonical": "Acme", "aliases": ["x" * 301]})
    refused_422(r, "string_too_long")
    r = served.post("/v1/entities", json={"canonical": "Acme", "aliases": [f"acme {i}" for i in range(100)]})
    assert r.status_code == 200, r.text
    r = served.post("/v1/entities", json={"canonical": "Acme", "aliases": ["acme the hundred and first"]})
    detail = refused_422(r, "too_many_aliases")
    assert detail["limit"] == 100 and detail["aliases"] == 101
    r = served.post("/v1/entities", json={"canonical": "Acme"})    # as it is: the refused one wrote nothing
    assert r.status_code == 200 and len(r.json()["aliases"]) == 100 and "acme the hundred and first" not in r.text
