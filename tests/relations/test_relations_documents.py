"""Document loads: relation rows read from documents (front matter, labelled lines, tables, and a
model through a FAKE OpenAI-compatible server, tests/fake_llm.py), each extracted row with span
receipts that delivery and region re-read; re-loading a folder is a sync that supersedes exactly
the rows of the documents that changed. Real app, real DuckDB, real tantivy/FAISS (the documents
become pages), real documents written here."""
from __future__ import annotations

import shutil

import pytest
from fake_llm import compiler_settings, serving
from relations_helpers import AMARA, BO, write

CAI = """---
id: cai_brandt
name: Cai Brandt
roles:
  - title: VP Sales
    seniority: VP
    function: Sales
    geography: Schweiz
    company: Alpenglas Holding
    from: 2020-04
---
Cai sells glass.
"""

SALES_PASSED = [{"relation": "held_role", "slot": "function", "op": "eq", "value": "Sales"},
                {"relation": "screening", "slot": "outcome", "op": "eq", "value": "passed"}]
LOAD = {"documents": {"key_path": "id", "name_path": "name"}, "coverage": ["screening"]}


@pytest.fixture(scope="module")
def fake(tmp_path_factory):
    with serving(tmp_path_factory.mktemp("fake-llm") / "chat.sock") as server:
        yield server


@pytest.fixture(scope="module")
def client(tmp_path_factory, pool, fake, store_settings):
    from docs.examples import make_client

    cl = make_client(tmp_path_factory.mktemp("documents") / "data", pool=pool, compiler=compiler_settings(fake),
                     **store_settings)
    yield cl
    cl.corpus.close()


def workspace(client, name: str) -> str:
    r = client.post("/v1/public/workspaces", json={"workspace_id": name})
    assert r.status_code == 201, r.text
    return name


def load(client, ws: str, folder, **body):
    return client.post(f"/v1/public/workspaces/{ws}/loads", json={"source": str(folder), **LOAD, **body})


def test_extracted_rows_carry_span_receipts_that_re_read_the_document(client, tmp_path):
    ws = workspace(client, "docs-receipts")
    folder = write(tmp_path / "profiles", {"amara.md": AMARA, "team/bo.md": BO})
    r = load(client, ws, folder)
    assert r.status_code == 201, r.text
    out = r.json()
    assert out["format"] == "documents" and out["documents"]["read"] == 2
    rows = {x["relation"]: x["rows"] for x in out["relations"]}
    assert rows == {"held_role": 3, "screening": 2, "engagement": 2}
    # "CRO" is a surface the pack's vocabulary holds for C-level: read, not dropped
    assert out["dropped"] == [] and out["entities"]["named"] == 2

    body = client.post("/v1/public/search", json={"workspace_id": ws, "constraints": SALES_PASSED}).json()
    assert body["entities"]["matched"] == ["amara_okafor"] and body["entities"]["none"] == ["bo_lindqvist"]
    match = body["matches"][0]
    assert match["name"] == "Amara Okafor"                       # from name_path, not the id
    assert body["provenance"] == {"declared": 0, "extracted": len(match["rows"])}
    for row in match["rows"]:
        assert row["provenance_kind"] == "extracted" and row["receipt"]["byte_verified"] is True
        assert row["receipt"]["document"] == "amara.md"
        for slot, rec in row["slot_receipts"].items():
            assert AMARA[rec["char_start"]:rec["char_end"]] == rec["quote"]
            assert rec["byte_verified"] is True
    screening = next(r for r in match["rows"] if r["relation"] == "screening")
    assert screening["slot_receipts"]["outcome"]["reader"] == "rule:labelled"
    # the audit event records the spans the answer rested on
    event = client.get("/v1/audit/events", params={"request_id": body["request_id"]}).json()["events"][0]
    assert {(s["row_id"], s["slot"]) for s in event["spans"]} >= {(screening["row_id"], "outcome")}
    assert all(s["byte_verified"] for s in event["spans"])

    # the document is a page of the workspace's page search, linked to its entity
    page_id = screening["receipt"]["page_id"]
    page = client.get(f"/v1/pages/{page_id}").json()
    assert "commercial teams across the DACH region" in page["body_text"]

    role = next(r for r in match["rows"] if r["relation"] == "held_role" and r["slots"]["company"] == "Lumen Ridge")
    region = client.post("/v1/public/region", json={"workspace_id": ws, "row_id": role["row_id"],
                                                    "slot": "company"}).json()
    assert region["byte_verified"] is True and region["receipt"]["quote"] == "Lumen Ridge"

    # the document changes: the receipt no longer verifies, and the compact why says so
    (folder / "amara.md").write_text(AMARA.replace("Lumen Ridge", "Lumen Rigde"), encoding="utf-8")
    region = client.post("/v1/public/region", json={"workspace_id": ws, "row_id": role["row_id"],
                                                    "slot": "company"}).json()
    assert region["byte_verified"] is False and region["receipt"]["read_now"] == "Lumen Rigde"
    assert region["receipt"]["content_changed"] is True
    compact = client.post("/v1/public/search", json={
        "workspace_id": ws, "detail": "compact",
        "constraints": [{"relation": "held_role", "slot": "company", "op": "eq", "value": "Lumen Ridge"}]}).json()
    why = compact["matches"][0]["why"][0]
    assert why["from"] == "text" and "Lumen Rigde" in why["check"]
    # a surface the vocabulary places says more than the value: the why line quotes it
    compact = client.post("/v1/public/search", json={
        "workspace_id": ws, "detail": "compact",
        "constraints": [{"relation": "held_role", "slot": "geography", "op": "eq", "value": "Germany"}]}).json()
    assert compact["matches"][0]["why"][0] == {"condition": "held_role.geography = Germany", "value": "Germany",
                                               "from": "text", "quote": "Deutschland"}


def test_a_re_load_syncs_exactly_the_changed_documents_and_corrections_survive(client, tmp_path):
    ws = workspace(client, "docs-sync")
    folder = write(tmp_path / "profiles", {"amara.md": AMARA, "bo.md": BO, "cai.md": CAI})
    first = load(client, ws, folder).json()
    version = client.get(f"/v1/public/workspaces/{ws}").json()["map_version"]

    again = load(client, ws, folder).json()                      # nothing changed: nothing re-read
    assert again["documents"] == {"read": 3, "changed": 0, "unchanged": 3, "removed": 0, "unattributed": 0}
    assert again["relations"] == []
    assert client.get(f"/v1/public/workspaces/{ws}").json()["map_version"] == version

    facts = client.post("/v1/public/facts", json={"workspace_id": ws, "entity_id": "bo_lindqvist",
                                                  "relation": "screening"}).json()
    retired = facts["rows"][0]["row_id"]
    r = client.post("/v1/public/corrections", json={"workspace_id": ws, "row_id": retired,
                                                    "reason": "another Bo's screening"})
    assert r.status_code == 200

    # Bo's profile changes elsewhere, Cai's is removed, Amara's is untouched; a name is re-spelled
    (folder / "bo.md").write_text(BO.replace("consumer brand", "consumer food brand")
                                  .replace("name: Bo Lindqvist", "name: Bo Lindquist"), encoding="utf-8")
    (folder / "cai.md").unlink()
    sync = client.post(f"/v1/public/workspaces/{ws}/loads/{first['load_id']}/sync")
    assert sync.status_code == 201, sync.text
    out = sync.json()
    assert out["synced_from"] == first["load_id"]
    assert out["documents"] == {"read": 2, "changed": 1, "unchanged": 1, "removed": 1, "unattributed": 0}
    per = {x["relation"]: x for x in out["relations"]}
    assert per["held_role"]["superseded"] == 2 and per["held_role"]["rows"] == 1        # Bo's and Cai's
    assert per["screening"]["retired_by_corrections"] == 1                             # the correction survived
    assert client.get(f"/v1/public/workspaces/{ws}").json()["map_version"] == version + 1

    facts = client.post("/v1/public/facts", json={"workspace_id": ws, "entity_id": "bo_lindqvist",
                                                  "relation": "screening"}).json()
    assert facts["name"] == "Bo Lindquist"
    assert facts["rows"][0]["retired"]["reason"] == "another Bo's screening"
    # Amara's rows are the same rows as before (not superseded, same ids)
    body = client.post("/v1/public/search", json={"workspace_id": ws, "constraints": SALES_PASSED}).json()
    assert body["entities"]["matched"] == ["amara_okafor"]
    assert all(row["load_id"] == first["load_id"] for row in body["matches"][0]["rows"])
    # Cai's page went with his document
    found = client.post("/v1/search", json={"query": "Cai sells glass", "workspace": ws, "k": 5}).json()
    urls = [p["url"] for p in found["pages"]]
    assert urls and not any(u.endswith("/cai.md") for u in urls)


def test_unattributed_and_unreadable_records_withhold_the_licence_until_a_re_sync_fixes_them(client, tmp_path):
    """A connected export (a folder of JSON records): a record tied to no entity and a record the
    loader cannot read each withhold the licence with their reason; a re-sync that states them
    readably lifts both, and a correction survives it."""
    ws = workspace(client, "docs-export")
    records = {
        "r1.json": '{"person": {"id": "dana_moss", "name": "Dana Moss"},\n'
                   ' "roles": [{"title": "VP Sales", "seniority": "VP", "function": "Sales", "region": "Austria",\n'
                   '            "since": "2019-05"}]}\n',
        "r2.json": '{"person": {"name": "Nobody Known"},\n'
                   ' "roles": [{"title": "VP Sales", "seniority": "VP", "function": "Sales", "region": "Germany"}]}\n',
        "r3.json": '{"person": {"id": "eli_park", "name": "Eli Park"},\n'
                   ' "roles": [{"title": "VP Sales", "seniority": "VP", "function": "Sales", "region": "Germany",\n'
                   '            "since": "last spring"}]}\n',
    }
    folder = write(tmp_path / "crm", records)
    body = {"source": str(folder), "documents": {"key_path": "person.id", "name_path": "person.name"},
            "readers": [{"relation": "held_role", "from": "fields", "path": "roles",
                         "slots": {"title": "title", "seniority": "seniority", "function": "function",
                                   "geography": "region", "period_from": "since"}}],
            "coverage": ["held_role"]}
    first = client.post(f"/v1/public/workspaces/{ws}/loads", json=body)
    assert first.status_code == 201, first.text
    out = first.json()
    assert out["documents"]["unattributed"] == 1
    assert out["relations"][0]["unattributed"] == 1 and out["relations"][0]["withheld"] == 1
    query = {"workspace_id": ws, "constraints": [
        {"relation": "held_role", "slot": "seniority", "op": "gte", "value": "VP"},
        {"relation": "held_role", "slot": "geography", "op": "eq", "value": "DACH"}]}
    reply = client.post("/v1/public/search", json=query).json()
    assert reply["entities"]["matched"] == ["dana_moss"] and reply["entities"]["undetermined"] == ["eli_park"]
    assert set(reply["coverage"]["narrowed_by"]) == {"withheld_rows_unanswerable:held_role",
                                                     "unattributed_rows_withheld:held_role"}
    dana_role = reply["matches"][0]["rows"][0]
    assert dana_role["slot_receipts"]["geography"]["quote"] == "Austria"
    assert client.post("/v1/public/corrections", json={"workspace_id": ws, "row_id": dana_role["row_id"],
                                                       "reason": "left in 2023"}).status_code == 200

    (folder / "r2.json").write_text(records["r2.json"].replace('{"name"', '{"id": "finn_ro", "name"'))
    (folder / "r3.json").write_text(records["r3.json"].replace("last spring", "2023-04"))
    sync = client.post(f"/v1/public/workspaces/{ws}/loads/{out['load_id']}/sync").json()
    assert sync["documents"]["changed"] == 2 and sync["documents"]["unattributed"] == 0
    reply = client.post("/v1/public/search", json=query).json()
    assert reply["entities"]["matched"] == ["eli_park", "finn_ro"]
    # the retired row is still stated by its record: Dana is undetermined, and that is the one reason left
    assert reply["entities"]["undetermined"] == ["dana_moss"]
    assert reply["coverage"]["narrowed_by"] == ["corrected_rows_unanswerable:held_role"]


def test_the_model_reader_keeps_only_values_that_re_slice_to_a_quote(client, fake, tmp_path):
    ws = workspace(client, "docs-model")
    text = AMARA
    at = text.index("Head of Sales")
    said = {"rows": [
        # kept: the span is mis-counted, but the quote occurs once as whole words -> relocated
        {"relation": "held_role", "slots": {
            "seniority": {"value": "Director", "quote": "Head of Sales", "span": [0, 13]},
            "company": {"value": "Nordwind Logistics", "quote": "Nordwind Logistics",
                        "span": [text.index("Nordwind"), text.index("Nordwind") + 18]},
            "geography": {"value": "Sweden", "quote": "Sweden", "span": [text.index("Sweden"),
                                                                       text.index("Sweden") + 6]},
            "period_from": {"value": "2010-03", "quote": "March 2010",
                            "span": [text.index("March 2010"), text.index("March 2010") + 10]}}},
        # dropped: the value is not what the quote says
        {"relation": "held_role", "slots": {
            "seniority": {"value": "SVP", "quote": "Head of Sales", "span": [at, at + 13]}}},
        # dropped: the quote is nowhere in the document
        {"relation": "screening", "slots": {
            "outcome": {"value": "passed", "quote": "cleared every check", "span": [5, 24]}}},
    ]}
    fake.arguments = lambda body: said if "Amara" in body["messages"][-1]["content"] else {"rows": []}
    folder = write(tmp_path / "profiles", {"amara.md": text, "bo.md": BO})
    n = len(fake.requests)
    r = load(client, ws, folder, readers=[], model_reader=["held_role", "screening"])
    assert r.status_code == 201, r.text
    out = r.json()
    assert len(fake.requests) == n + 2                                   # one forced call per document
    sent = fake.requests[-1]["body"]
    assert sent["tool_choice"]["function"]["name"] == "read_relation_rows"
    assert out["model_reader"]["calls"] == 2 and out["model_reader"]["prompt_tokens"] == 1800
    assert sorted(d["reason"] for d in out["dropped"]) == ["quote_not_in_document:outcome",
                                                           "value_not_in_quote:seniority"]
    assert {x["relation"]: x["rows"] for x in out["relations"]} == {"held_role": 1}
    facts = client.post("/v1/public/facts", json={"workspace_id": ws, "entity_id": "amara_okafor",
                                                  "relation": "held_role"}).json()
    row = facts["rows"][0]
    assert row["slots"]["seniority"] == "Director" and row["period"]["from"] == "2010-03"
    rec = row["slot_receipts"]["seniority"]
    assert (rec["char_start"], rec["quote"], rec["reader"]) == (at, "Head of Sales", "model")
    assert row["provenance_kind"] == "extracted" and row["receipt"]["byte_verified"] is True

    # a re-load reads (and calls the model for) only what changed: nothing
    again = load(client, ws, folder, readers=[], model_reader=["held_role", "screening"]).json()
    assert len(fake.requests) == n + 2 and again["documents"]["changed"] == 0


def test_bad_document_loads_are_refused_whole_and_change_nothing(client, tmp_path):
    ws = workspace(client, "docs-bad")
    good = write(tmp_path / "good", {"amara.md": AMARA})
    assert load(client, ws, good).status_code == 201
    before = client.get(f"/v1/public/workspaces/{ws}").json()

    broken = write(tmp_path / "broken", {"amara.md": AMARA, "bad.md": "---\nid: [unclosed\n---\ntext\n"})
    cases = [
        (load(client, ws, broken), 422, "front_matter_invalid"),
        (load(client, ws, good, readers=[{"relation": "board_seat", "from": "labelled", "slots": {"x": "X"}}]),
         422, "relation_unknown"),
        (load(client, ws, good, readers=[{"relation": "screening", "from": "labelled", "slots": {"colour": "C"}}]),
         422, "slot_unknown"),
        (load(client, ws, tmp_path / "missing"), 422, "source_unreadable"),
        (load(client, ws, write(tmp_path / "empty", {"notes.csv": "a,b\n"})), 422, "source_empty"),
        (load(client, ws, good, readers=[], model_reader=False, documents={"key_path": "id"}), 422, "load_empty"),
    ]
    for r, status, reason in cases:
        assert r.status_code == status, r.text
        assert r.json()["detail"]["type"] == "load_invalid" and r.json()["detail"]["reason"] == reason
    r = client.post(f"/v1/public/workspaces/{ws}/loads", json={"source": str(good), "documents": {}})
    assert r.status_code == 422 and r.json()["detail"]["type"] == "validation_error"
    r = client.post(f"/v1/public/workspaces/{ws}/loads/ld_nope/sync")
    assert r.status_code == 404 and r.json()["detail"]["type"] == "load_not_found"
    after = client.get(f"/v1/public/workspaces/{ws}").json()
    assert after["loads"] == before["loads"] and after["map_version"] == before["map_version"]


def test_model_reader_without_a_compile_model_is_503(pool, tmp_path):
    from docs.examples import make_client

    cl = make_client(tmp_path / "data", pool=pool)
    try:
        workspace(cl, "no-model")
        r = load(cl, "no-model", write(tmp_path / "p", {"amara.md": AMARA}), model_reader=True)
        assert r.status_code == 503, r.text
        assert r.json()["detail"]["type"] == "model_reader_unavailable"
    finally:
        cl.corpus.close()


def test_the_demo_profiles_load_through_the_packs_readers(client, tmp_path):
    from demo.profiles import FOLDER, LOAD as DEMO

    ws = workspace(client, "docs-demo")
    folder = tmp_path / "profiles"
    shutil.copytree(FOLDER, folder)
    out = client.post(f"/v1/public/workspaces/{ws}/loads", json={"source": str(folder), **DEMO}).json()
    assert out["documents"]["read"] == 30 and out["dropped"] == []
    rows = {x["relation"]: x["rows"] for x in out["relations"]}
    assert rows["held_role"] >= 30 and rows["screening"] == 24 and rows["engagement"] >= 10
    body = client.post("/v1/public/search", json={"workspace_id": ws, "detail": "full", "constraints": [
        {"relation": "held_role", "slot": "geography", "op": "eq", "value": "DACH"}]}).json()
    assert body["counts"]["matched"] >= 3
    for m in body["matches"]:
        assert m["name"] and m["name"] != m["entity_id"]
        for row in m["rows"]:
            assert row["receipt"]["byte_verified"] is True


def test_a_kill_mid_document_load_leaves_the_store_consistent_and_re_runnable(tmp_path):
    """SIGKILL inside the rows' transaction (after the documents became pages and one relation's
    rows were written): no row, document record or load is left; the re-run completes it, and the
    pages are not duplicated."""
    import json
    import os
    import signal
    import subprocess
    import sys
    from pathlib import Path

    import duckdb

    root = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if not k.startswith("REFINDERY_")}
    env["REFINDERY_DATA_DIR"] = str(tmp_path / "data")

    def cli(crash=None):
        e = dict(env, **({"REFINDERY_TEST_CRASH_AT": crash} if crash else {}))
        return subprocess.run([sys.executable, "-m", "server.cli", "relations", "demo-profiles"], cwd=root, env=e,
                              capture_output=True, text=True, timeout=600)

    killed = cli(crash="documents:screening")
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    con = duckdb.connect(str(tmp_path / "data" / "refindery.duckdb"))
    try:
        for table in ("rel_expert_network__held_role", "rel_documents", "rel_spans", "rel_loads"):
            assert con.execute(f"SELECT count(*) FROM {table}").fetchone()[0] == 0, table
        pages = con.execute("SELECT count(*) FROM pages WHERE workspace_id = 'profiles'").fetchone()[0]
    finally:
        con.close()
    done = cli()
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["rows"]["screening"] == 24
    con = duckdb.connect(str(tmp_path / "data" / "refindery.duckdb"))
    try:
        assert con.execute("SELECT count(*) FROM pages WHERE workspace_id = 'profiles'").fetchone()[0] == pages == 30
        assert con.execute("SELECT count(*) FROM rel_documents WHERE current").fetchone()[0] == 30
    finally:
        con.close()


def test_document_scopes_hide_other_scopes_rows_entities_and_names_and_map_version_moves_per_scope(pool, tmp_path):
    """Documents of a scope are read only by keys of that scope: their rows, the entities only
    they name, and the names they carry do not exist for other keys (search, facts, region,
    corrections, the workspace's counts), and the map version a key sees moves only for names in
    documents it may read."""
    from docs.examples import make_client
    from engine.core.access import create_key

    cl = make_client(tmp_path / "data", pool=pool)
    try:
        workspace(cl, "scoped")
        keys = cl.corpus.keys
        admin, hr, public = (create_key(keys, ["*"])["token"], create_key(keys, ["scoped"], scopes=["hr"])["token"],
                             create_key(keys, ["scoped"], scopes=["public"])["token"])

        def h(token):
            return {"Authorization": f"Bearer {token}"}

        def scoped(text, scope):
            return text.replace("---\n", f"---\nscope: {scope}\n", 1)

        dana_open = ("---\nid: dana_moss\nroles:\n  - title: VP Sales\n    seniority: VP\n    function: Sales\n"
                     "    geography: Austria\n    company: Tarn Systems\n    from: 2019-05\n---\nDana sells.\n")
        dana_hr = "---\nscope: hr\nid: dana_moss\nname: Dana Moss\n---\nDana's HR file: on leave.\n"
        folder = write(tmp_path / "data" / "sources" / "scoped" / "profiles", {
            "amara.md": scoped(AMARA, "public"), "bo.md": scoped(BO, "hr"), "cai.md": scoped(CAI, "public"),
            "dana-a.md": dana_open, "dana-b.md": dana_hr})
        body = {"source": "profiles", "documents": {"key_path": "id", "name_path": "name", "scope_path": "scope"},
                "coverage": ["screening"]}
        # a scoped key loads only documents of its scopes, and no SQL export
        refused = cl.post("/v1/public/workspaces/scoped/loads", json=body, headers=h(public))
        assert refused.status_code == 403 and refused.json()["detail"]["type"] == "forbidden"
        sql = cl.post("/v1/public/workspaces/scoped/loads", headers=h(hr), json={
            "source": "x.csv", "relations": [{"relation": "screening", "table": "x", "entity_column": "id",
                                              "slots": {"outcome": "outcome"}}]})
        assert sql.status_code == 403 and sql.json()["detail"]["type"] == "forbidden", sql.text
        assert cl.get("/v1/public/workspaces/scoped", headers=h(admin)).json()["loads"] == []

        first = cl.post("/v1/public/workspaces/scoped/loads", json=body, headers=h(admin))
        assert first.status_code == 201, first.text
        assert first.json()["documents"]["scopes"] == {"hr": 2, "public": 2}

        def search(token, constraints):
            r = cl.post("/v1/public/search", json={"workspace_id": "scoped", "constraints": constraints},
                        headers=h(token))
            assert r.status_code == 200, r.text
            return r.json()

        sales = [{"relation": "held_role", "slot": "function", "op": "eq", "value": "Sales"}]
        every, pub, hrs = (search(k, sales) for k in (admin, public, hr))
        assert every["counts"]["universe"] == 4 and pub["counts"]["universe"] == 3 and hrs["counts"]["universe"] == 2
        names = {k: {m["entity_id"]: m["name"] for m in r["matches"]} for k, r in (("admin", every), ("public", pub),
                                                                                   ("hr", hrs))}
        assert names["admin"] == {"amara_okafor": "Amara Okafor", "cai_brandt": "Cai Brandt", "dana_moss": "Dana Moss"}
        # Dana is known to every key (an unscoped document names her) but her name is in an HR file
        assert names["public"] == {"amara_okafor": "Amara Okafor", "cai_brandt": "Cai Brandt", "dana_moss": None}
        assert names["hr"] == {"dana_moss": "Dana Moss"}
        assert "bo_lindqvist" in every["entities"]["none"]
        assert not any("bo_lindqvist" in ids for ids in pub["entities"].values())
        assert pub["coverage"]["narrowed_by"][0] == "acl"

        failed = [{"relation": "screening", "slot": "outcome", "op": "eq", "value": "failed"}]
        assert search(hr, failed)["entities"]["matched"] == ["bo_lindqvist"]
        assert search(public, failed)["entities"]["matched"] == []
        # Amara's screening is in a public document: HR does not read it
        passed = [{"relation": "screening", "slot": "outcome", "op": "eq", "value": "passed"}]
        assert search(public, passed)["entities"]["matched"] == ["amara_okafor"]
        assert search(hr, passed)["entities"]["matched"] == []

        facts = {"workspace_id": "scoped", "entity_id": "bo_lindqvist", "relation": "screening"}
        hidden = cl.post("/v1/public/facts", json=facts, headers=h(public))
        assert hidden.status_code == 404 and hidden.json()["detail"]["type"] == "entity_not_found"
        seen = cl.post("/v1/public/facts", json=facts, headers=h(hr)).json()
        assert seen["name"] == "Bo Lindqvist" and len(seen["rows"]) == 1
        row_id = seen["rows"][0]["row_id"]
        for path, extra in (("/v1/public/region", {"slot": "outcome"}), ("/v1/public/corrections", {"reason": "x"})):
            r = cl.post(path, json={"workspace_id": "scoped", "row_id": row_id, **extra}, headers=h(public))
            assert r.status_code == 404 and r.json()["detail"]["type"] == "row_not_found", r.text
        assert cl.post("/v1/public/region", json={"workspace_id": "scoped", "row_id": row_id, "slot": "outcome"},
                       headers=h(hr)).json()["byte_verified"] is True
        # the pages are scoped as their documents are
        found = cl.post("/v1/search", json={"query": "Bo runs marketing for a consumer brand", "workspace": "scoped"},
                        headers=h(public)).json()
        assert not any(p["url"].endswith("/bo.md") for p in found["pages"])

        def versions():
            return [cl.get("/v1/public/workspaces/scoped", headers=h(k)).json()["map_version"]
                    for k in (admin, hr, public)]

        v0 = versions()
        counts = [cl.get("/v1/public/workspaces/scoped", headers=h(k)).json()["entities"] for k in (admin, hr, public)]
        assert [sum(c.values()) for c in counts] == [4, 2, 3]
        (folder / "bo.md").write_text(scoped(BO, "hr").replace("name: Bo Lindqvist", "name: Bo Lindquist"))
        cl.post("/v1/public/workspaces/scoped/loads", json=body, headers=h(admin)).raise_for_status()
        v1 = versions()
        assert v1 == [v0[0] + 1, v0[1] + 1, v0[2]]          # an HR name: the public key's map did not move
        (folder / "amara.md").write_text(scoped(AMARA, "public").replace("name: Amara Okafor", "name: Amara Okafor-Ruiz"))
        cl.post("/v1/public/workspaces/scoped/loads", json=body, headers=h(admin)).raise_for_status()
        assert versions() == [v1[0] + 1, v1[1], v1[2] + 1]
        # an HR key may re-load the HR documents of a folder that holds only them
        hr_only = write(tmp_path / "data" / "sources" / "scoped" / "hr-files", {"bo.md": scoped(BO, "hr")})
        r = cl.post("/v1/public/workspaces/scoped/loads", headers=h(hr),
                    json={**body, "source": hr_only.name})
        assert r.status_code == 201, r.text
    finally:
        cl.corpus.close()


def test_a_data_dir_from_before_document_scopes_opens_and_every_key_reads_its_rows(pool, tmp_path):
    from docs.examples import make_client
    from engine.core.access import create_key

    cl = make_client(tmp_path / "data", pool=pool)
    try:
        workspace(cl, "old")
        assert load(cl, "old", write(tmp_path / "p", {"amara.md": AMARA})).status_code == 201
        with cl.corpus.relations.transaction() as con:   # the shape of a data dir from before scopes
            con.execute("DROP TABLE rel_map_versions")
            for table in [r[0] for r in con.execute("SELECT table_name FROM information_schema.columns "
                                                    "WHERE column_name = 'scope'").fetchall()
                          if r[0].startswith("rel_")]:
                con.execute(f"ALTER TABLE {table} DROP COLUMN scope")
            con.execute("ALTER TABLE rel_entities DROP COLUMN scopes")
            con.execute("ALTER TABLE rel_entities DROP COLUMN name_scope")
    finally:
        cl.corpus.close()
    cl = make_client(tmp_path / "data", pool=pool)
    try:
        token = create_key(cl.corpus.keys, ["old"], scopes=["team"])["token"]
        r = cl.post("/v1/public/search", json={"workspace_id": "old", "constraints": SALES_PASSED},
                    headers={"Authorization": f"Bearer {token}"})
        assert r.status_code == 200, r.text
        assert r.json()["entities"]["matched"] == ["amara_okafor"] and r.json()["matches"][0]["name"] == "Amara Okafor"
    finally:
        cl.corpus.close()
