"""Loads from SQL and the verbs around search: receipts re-read on delivery, corrections, facts,
region, the audit trail, other source formats, and a load killed halfway."""
from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys

import duckdb
import pytest
from conftest import ROOT
from relations_helpers import (c, export, load, load_body, loaded, new_workspace, role, screening,
                               search, write_duckdb)


@pytest.fixture(scope="module")
def client(tmp_path_factory, store_settings):
    """On each store: the data dir's DuckDB file, and PostgreSQL (the relation tables then in a DuckDB
    file of their own, written through the store's log: indexes/relation_log.py)."""
    from docs.examples import make_client

    cl = make_client(tmp_path_factory.mktemp("relations-loads"), **store_settings)
    yield cl
    cl.corpus.close()


SALES = [c("held_role", "function", "eq", "Sales")]


# Loads ------------------------------------------------------------------------------------------
def test_a_load_reports_what_it_wrote(client, tmp_path):
    src = export(tmp_path / "x.duckdb", ["a", "b"], roles=[role("a"), role("a", "IC"), role("b")],
                 screenings=[screening("a")], screened=["a", "b"])
    ws = new_workspace(client)
    out = load(client, ws, load_body(src))
    rels = {r["relation"]: r for r in out["relations"]}
    assert (rels["held_role"]["rows"], rels["held_role"]["entities"]) == (3, 2)
    assert rels["held_role"]["unmapped_slots"] == ["industry"]
    assert out["entities"]["listed"] == 2
    assert {c["relation"]: c["entities"] for c in out["coverage"]} == {"held_role": 2, "screening": 2}
    info = client.get(f"/v1/public/workspaces/{ws}").json()
    assert info["entities"] == {"person": 2} and [x["load_id"] for x in info["loads"]] == [out["load_id"]]


def _one(relation="held_role", table="roles", slots=None, **kw):
    return {"relations": [{"relation": relation, "table": table, "entity_column": "person_id",
                           "slots": slots or {"function": "function"}, **kw}]}


@pytest.mark.parametrize("patch, reason", [
    ({"source": "/nowhere/export.duckdb"}, "source_not_found"),
    (_one(table="nope"), "load_table_unknown"),
    (_one(slots={"function": "fn"}), "load_column_unknown"),
    (_one(slots={"hair": "function"}), "slot_unknown"),
    (_one(relation="board_seat", slots={"x": "function"}), "relation_unknown"),
    (_one(key_column="function"), "load_key_not_unique"),
])
def test_a_bad_load_is_422_and_writes_nothing(client, tmp_path, patch, reason):
    src = export(tmp_path / "x.duckdb", ["a", "b"], roles=[role("a"), role("b")])
    ws = new_workspace(client)
    body = {**load_body(src), **patch}
    r = client.post(f"/v1/public/workspaces/{ws}/loads", json=body)
    assert r.status_code == 422, r.text
    assert r.json()["detail"]["type"] == "load_invalid" and r.json()["detail"]["reason"] == reason
    info = client.get(f"/v1/public/workspaces/{ws}").json()
    assert info["loads"] == [] and info["entities"] == {}


def test_loads_into_an_unknown_workspace_or_with_an_unknown_pack_are_refused(client, tmp_path):
    assert client.post("/v1/public/workspaces/nope/loads", json={"source": "x"}).json()["detail"]["type"] \
        == "workspace_not_found"
    r = client.post("/v1/public/workspaces", json={"packs": ["no_such_pack"]})
    assert r.status_code == 422 and r.json()["detail"]["type"] == "pack_unknown"
    ws = new_workspace(client)
    r = client.post("/v1/public/workspaces", json={"workspace_id": ws})
    assert r.status_code == 409 and r.json()["detail"]["type"] == "workspace_exists"


def test_re_running_a_load_supersedes_instead_of_duplicating(client, tmp_path):
    src = export(tmp_path / "x.duckdb", ["a", "b"], roles=[role("a"), role("b", function="Marketing")])
    ws = new_workspace(client)
    load(client, ws, load_body(src))
    before = search(client, ws, SALES)
    again = load(client, ws, load_body(src))
    assert {r["relation"]: r["superseded"] for r in again["relations"]}["held_role"] == 2
    after = search(client, ws, SALES)
    assert after["counts"] == before["counts"] and after["groups"][0]["active_rows"] == 1
    # the export changes: b moves to Sales; the re-load reads the new state
    export(src, ["a", "b"], roles=[role("a"), role("b")])
    load(client, ws, load_body(src))
    assert search(client, ws, SALES)["entities"]["matched"] == ["a", "b"]


def test_display_names_come_from_the_load_never_from_ids(client, tmp_path):
    path = write_duckdb(tmp_path / "named.duckdb", {
        "people": (["person_id", "display_name"], [{"person_id": "a", "display_name": "Ada Quill"},
                                                    {"person_id": "b", "display_name": None}]),
        "roles": (["role_id", "person_id", "function"], [{"role_id": "1", "person_id": "a", "function": "Sales"},
                                                         {"role_id": "2", "person_id": "b", "function": "Sales"}])})
    ws = new_workspace(client)
    load(client, ws, {"source": str(path), "entities": {"table": "people", "id_column": "person_id",
                                                        "name_column": "display_name"},
                      "relations": [{"relation": "held_role", "table": "roles", "entity_column": "person_id",
                                     "key_column": "role_id", "slots": {"function": "function"}}]})
    body = search(client, ws, SALES)
    assert [(m["entity_id"], m["name"]) for m in body["matches"]] == [("a", "Ada Quill"), ("b", None)]


@pytest.mark.parametrize("fmt", ["sqlite", "parquet", "csv"])
def test_sqlite_parquet_and_csv_sources_answer_like_duckdb(client, tmp_path, fmt):
    roles = [role("a", role_id="r1"), role("b", function="Marketing", role_id="r2")]
    src = export(tmp_path / "x.duckdb", ["a", "b"], roles=roles)
    ws_duck = new_workspace(client)
    load(client, ws_duck, load_body(src))
    con = duckdb.connect(str(src), read_only=True)
    if fmt == "sqlite":
        out = tmp_path / "x.sqlite"
        lite = sqlite3.connect(out)
        for t in ("people", "roles", "screenings", "screened"):
            cur = con.execute(f"SELECT * FROM {t}")
            cols = [d[0] for d in cur.description]
            lite.execute(f"CREATE TABLE {t} ({', '.join(cols)})")
            lite.executemany(f"INSERT INTO {t} VALUES ({', '.join('?' for _ in cols)})", cur.fetchall())
        lite.commit()
        lite.close()
    else:
        out = tmp_path / f"x-{fmt}"
        out.mkdir()
        for t in ("people", "roles", "screenings", "screened"):
            opts = "(FORMAT parquet)" if fmt == "parquet" else "(HEADER)"
            con.execute(f"COPY {t} TO '{out / f'{t}.{fmt}'}' {opts}")
    con.close()
    ws = new_workspace(client)
    body = load_body(out)
    load(client, ws, body)
    got, want = search(client, ws, SALES), search(client, ws_duck, SALES)
    assert got["counts"] == want["counts"] and got["entities"] == want["entities"]
    receipt = got["matches"][0]["rows"][0]["slot_receipts"]["function"]
    assert receipt["byte_verified"] is True and receipt["row_key"] == {"role_id": "r1"}


# Receipts -----------------------------------------------------------------------------------------
def test_receipts_are_re_read_on_delivery(client, tmp_path):
    src = export(tmp_path / "x.duckdb", ["a"], roles=[role("a", role_id="k1")])
    ws = new_workspace(client)
    load(client, ws, load_body(src))
    rec = search(client, ws, SALES)["matches"][0]["rows"][0]["slot_receipts"]["function"]
    assert {k: rec[k] for k in ("db_table", "db_column", "row_key", "value", "byte_verified")} == \
        {"db_table": "roles", "db_column": "function", "row_key": {"role_id": "k1"}, "value": "Sales",
         "byte_verified": True}
    con = duckdb.connect(str(src))
    con.execute("UPDATE roles SET function = 'Marketing' WHERE role_id = 'k1'")
    con.close()
    rec = search(client, ws, SALES)["matches"][0]["rows"][0]["slot_receipts"]["function"]
    assert rec["byte_verified"] is False and rec["read_now"] == "Marketing"   # the store still says Sales
    src.unlink()
    rec = search(client, ws, SALES)["matches"][0]["rows"][0]["slot_receipts"]["function"]
    assert rec["byte_verified"] is False and "source unreadable" in rec["error"]


def test_a_receipt_is_sought_where_its_row_was_and_found_by_key_once_the_source_moves_it(client, tmp_path):
    # each row's receipt is read at the row's place in the source first (no scan), but taken from
    # there only while the key there is still the row's: here the export is rewritten with its rows
    # swapped (k1 changed), then with k1 gone — what sits at k1's old place is k2's row, which says Sales
    src = export(tmp_path / "x.duckdb", ["a", "b"], roles=[role("a", role_id="k1"), role("b", role_id="k2")])
    ws = new_workspace(client)
    load(client, ws, load_body(src))

    def receipts() -> dict[str, dict]:
        return {m["entity_id"]: m["rows"][0]["slot_receipts"]["function"] for m in search(client, ws, SALES)["matches"]}

    assert {e: r["byte_verified"] for e, r in receipts().items()} == {"a": True, "b": True}
    export(src, ["a", "b"], roles=[role("b", role_id="k2"), role("a", function="Marketing", role_id="k1")])
    got = receipts()
    assert (got["a"]["byte_verified"], got["a"]["read_now"]) == (False, "Marketing")
    assert got["b"]["byte_verified"] is True and "read_now" not in got["b"]
    export(src, ["a", "b"], roles=[role("b", role_id="k2")])
    got = receipts()
    assert (got["a"]["byte_verified"], got["a"]["read_now"]) == (False, None)
    assert got["b"]["byte_verified"] is True


def test_rows_loaded_before_source_ordinals_were_kept_are_verified_by_key(tmp_path):
    from docs.examples import make_client

    src = export(tmp_path / "x.duckdb", ["a", "b"], roles=[role("a"), role("b")])
    cl = make_client(tmp_path / "data")
    try:
        ws = new_workspace(cl)
        load(cl, ws, load_body(src))
        with cl.corpus.relations.transaction() as con:   # the shape of a data dir from before ordinals
            tables = [r[0] for r in con.execute("SELECT table_name FROM information_schema.columns "
                                                "WHERE column_name = 'src_row'").fetchall()]
            roles = next(t for t in tables if t.endswith("__held_role"))
            for table in tables:
                con.execute(f"ALTER TABLE {table} DROP COLUMN src_row")
    finally:
        cl.corpus.close()
    cl = make_client(tmp_path / "data")
    try:
        body = search(cl, ws, SALES)
        assert [m["rows"][0]["slot_receipts"]["function"]["byte_verified"] for m in body["matches"]] == [True, True]
        con = cl.corpus.relations.cursor()
        assert con.execute(f"SELECT count(*), count(src_row) FROM {roles}").fetchone() == (2, 0)
        load(cl, ws, load_body(src))     # a re-load keeps them
        assert con.execute(f"SELECT count(src_row) FROM {roles} WHERE current").fetchone() == (2,)
    finally:
        cl.corpus.close()


def test_region_re_reads_one_receipt(client, tmp_path):
    ws = loaded(client, tmp_path, ["a"], roles=[role("a")])
    row_id = search(client, ws, SALES)["matches"][0]["rows"][0]["row_id"]
    r = client.post("/v1/public/region", json={"workspace_id": ws, "row_id": row_id, "slot": "function"})
    assert r.status_code == 200
    assert (r.json()["value_loaded"], r.json()["value_now"], r.json()["byte_verified"]) == ("Sales", "Sales", True)
    r = client.post("/v1/public/region", json={"workspace_id": ws, "row_id": "nope", "slot": "function"})
    assert r.status_code == 404 and r.json()["detail"]["type"] == "row_not_found"


# Corrections ---------------------------------------------------------------------------------------
def test_a_corrected_row_the_source_still_states_makes_its_entity_undetermined(client, tmp_path):
    src = export(tmp_path / "x.duckdb", ["a", "b"], roles=[role("a"), role("b")])
    ws = new_workspace(client)
    load(client, ws, load_body(src))
    body = search(client, ws, SALES)
    row_id = next(m["rows"][0]["row_id"] for m in body["matches"] if m["entity_id"] == "a")
    r = client.post("/v1/public/corrections", json={"workspace_id": ws, "row_id": row_id,
                                                    "reason": "a was in Marketing, not Sales"})
    assert r.status_code == 200 and r.json()["retired"] is True
    body = search(client, ws, SALES)
    assert body["entities"]["matched"] == ["b"]
    assert body["entities"]["undetermined"] == ["a"]
    assert body["coverage"]["narrowed_by"] == ["corrected_rows_unanswerable:held_role"]
    # a re-load of the unchanged source keeps the row retired
    load(client, ws, load_body(src))
    assert search(client, ws, SALES)["entities"]["undetermined"] == ["a"]
    # once the source itself is fixed, the row is gone and a is simply none
    export(src, ["a", "b"], roles=[role("a", function="Marketing", role_id="fixed"), role("b")])
    load(client, ws, load_body(src))
    body = search(client, ws, SALES)
    assert body["entities"]["none"] == ["a"] and body["coverage"] == {"completeness_licensed": True}


def test_correcting_an_unknown_row_is_404(client):
    ws = new_workspace(client)
    r = client.post("/v1/public/corrections", json={"workspace_id": ws, "row_id": "nope", "reason": "x"})
    assert r.status_code == 404 and r.json()["detail"]["type"] == "row_not_found"


# Facts ----------------------------------------------------------------------------------------------
def test_facts_carry_the_absence_verdict(client, tmp_path):
    ws = loaded(client, tmp_path, ["a", "b", "c"], roles=[role("a")], screenings=[screening("a")],
                screened=["a", "b"])

    def facts(entity, relation="screening"):
        r = client.post("/v1/public/facts", json={"workspace_id": ws, "entity_id": entity, "relation": relation})
        assert r.status_code == 200, r.text
        return r.json()

    a, b, cc = facts("a"), facts("b"), facts("c")
    assert (a["absence"]["kind"], a["absence"]["denominator"], len(a["rows"])) == ("recorded", 1, 1)
    assert (b["absence"]["kind"], b["absence"]["denominator"]) == ("none", 0)
    assert [x["declared_by"] for x in b["absence"]["coverage"]] == ["source"]
    assert (cc["absence"]["kind"], cc["absence"]["denominator"], cc["absence"]["coverage"]) == \
        ("not_recorded", None, [])
    role_facts = facts("a", "held_role")
    assert role_facts["relations"]["slot_unrecorded"] == ["industry", "title"]
    assert role_facts["coverage"]["narrowed_by"] == ["slot_unrecorded_rows"]
    r = client.post("/v1/public/facts", json={"workspace_id": ws, "entity_id": "zz", "relation": "screening"})
    assert r.status_code == 404 and r.json()["detail"]["type"] == "entity_not_found"
    r = client.post("/v1/public/facts", json={"workspace_id": ws, "entity_id": "a", "relation": "board_seat"})
    assert r.status_code == 422 and r.json()["detail"]["type"] == "relation_unknown"


# Audit ----------------------------------------------------------------------------------------------
def test_the_audit_event_records_the_rows_an_answer_rested_on(client, tmp_path):
    ws = loaded(client, tmp_path, ["a", "b"], roles=[role("a"), role("b")])
    body = search(client, ws, SALES, limit=1)
    r = client.get("/v1/audit/events", params={"request_id": body["request_id"]})
    assert r.status_code == 200
    event = r.json()["events"][0]
    assert event["verb"] == "search" and event["workspace_id"] == ws
    assert event["rows"] == [row["row_id"] for m in body["matches"] for row in m["rows"]]
    assert event["summary"]["matched"] == 2 and event["request"]["limit"] == 1
    r = client.get("/v1/audit/events", params={"request_id": "rq_nope"})
    assert r.status_code == 404 and r.json()["detail"]["type"] == "audit_event_not_found"


def test_searches_are_in_the_query_log(client, tmp_path):
    ws = loaded(client, tmp_path, ["a"], roles=[role("a")])
    body = search(client, ws, SALES)
    log = client.corpus.querylog
    log.flush()
    row = client.corpus.store.sql().row(
        "SELECT endpoint, workspace, total, returned FROM log_queries WHERE query_id = ?", [body["request_id"]])
    assert row == ("/v1/public/search", ws, 1, 1)


# A load killed halfway ----------------------------------------------------------------------------------
def test_a_load_killed_inside_its_transaction_leaves_nothing_and_re_runs(tmp_path):
    from docs.examples.roster import LOAD, write_export

    data = tmp_path / "data"
    src = write_export(tmp_path / "export.duckdb")
    spec = tmp_path / "load.json"
    spec.write_text(json.dumps({"source": str(src), **LOAD}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("REFINDERY_")}
    env["REFINDERY_DATA_DIR"] = str(data)

    def cli(*args, crash=None):
        e = dict(env, **({"REFINDERY_TEST_CRASH_AT": crash} if crash else {}))
        return subprocess.run([sys.executable, "-m", "server.cli", "relations", *args], cwd=ROOT, env=e,
                              capture_output=True, text=True, timeout=300)

    assert cli("create", "crew").returncode == 0
    killed = cli("load", "crew", "--spec", str(spec), crash="load:screening")   # after held_role's rows
    assert killed.returncode == -signal.SIGKILL
    con = duckdb.connect(str(data / "refindery.duckdb"))
    try:
        assert con.execute("SELECT count(*) FROM rel_expert_network__held_role").fetchone()[0] == 0
        assert con.execute("SELECT count(*) FROM rel_entities WHERE workspace_id = 'crew'").fetchone()[0] == 0
        assert con.execute("SELECT count(*) FROM rel_loads").fetchone()[0] == 0
    finally:
        con.close()
    assert cli("load", "crew", "--spec", str(spec)).returncode == 0
    constraints = tmp_path / "c.json"
    constraints.write_text(json.dumps([c("held_role", "function", "eq", "Sales")]))
    out = cli("search", "crew", "--constraints", str(constraints))
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["entities"]["matched"] == ["halvard_quist", "isolde_marbrook", "yusuf_alderane"]


def test_the_relations_demo_loads_the_roster_and_re_runs(tmp_path, monkeypatch, capsys):
    from server.cli import main

    monkeypatch.setenv("REFINDERY_DATA_DIR", str(tmp_path / "data"))
    for _ in range(2):   # a second run supersedes the first load instead of duplicating it
        assert main(["relations", "demo"]) == 0
        assert json.loads(capsys.readouterr().out)["rows"] == {"held_role": 6, "screening": 3}
    constraints = tmp_path / "c.json"
    constraints.write_text(json.dumps([c("screening", "outcome", "eq", "passed")]))
    assert main(["relations", "search", "roster", "--constraints", str(constraints)]) == 0
    body = json.loads(capsys.readouterr().out)
    assert body["entities"]["matched"] == ["halvard_quist", "odile_fenwright"]
    assert body["groups"][0]["active_rows"] == 2
    assert main(["relations", "search", "nope", "--constraints", str(constraints)]) == 2
    assert json.loads(capsys.readouterr().out)["detail"]["type"] == "workspace_not_found"
