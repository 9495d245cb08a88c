"""The relation tables over replicas of one PostgreSQL store (indexes/relation_log.py): each replica
keeps them in a DuckDB file of its own, and every write to them — a workspace, a load, a document
load, a correction — is replayed by every other replica, in the store's generation order; what the
relation search records (audit events, criterion judgments and facets) is read from PostgreSQL by
all (indexes/relation_records.py). Before this, each replica's relation tables were its own: a
workspace made through one replica was unknown to the others."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading

import duckdb
import pytest
from conftest import ROOT
from relations_helpers import AMARA, c, export, load_body, role, screening, write

SALES = [c("held_role", "function", "eq", "Sales")]
PEOPLE = ["a", "b", "c", "d"]
ROLES = [role("a"), role("b", function="Finance"), role("c"), role("d", seniority="IC")]


def _client(pool, data_dir, url):
    from docs.examples import make_client

    return make_client(data_dir, pool, store={"url": url})


@pytest.fixture
def replicas(pool, tmp_path, postgres_url):
    """Two replicas' HTTP clients over one PostgreSQL store (each with a data dir of its own)."""
    made = [_client(pool, tmp_path / name, postgres_url) for name in ("a", "b")]
    yield made
    for cl in made:
        cl.corpus.close()


def _token(r) -> dict:
    return {"Refindery-Min-Generation": r.headers["refindery-generation"]}


def _search(cl, ws, constraints=SALES, headers=None, **kw) -> dict:
    r = cl.post("/v1/public/search", json={"workspace_id": ws, "constraints": constraints, **kw},
                headers=headers or {})
    assert r.status_code == 200, r.text
    return r.json()


def _answer(body: dict) -> tuple:
    """What a search answered, without what differs per request (its id, its timings)."""
    return (body["entities"], body["counts"], body["coverage"],
            [(m["entity_id"], [row["row_id"] for row in m["rows"]]) for m in body["matches"]])


def _tables(corpus) -> dict[str, list]:
    """Every relation table's rows in a replica's own file, sorted (rel_applied, its own, left out)."""
    cur = corpus.relations.cursor()
    names = [r[0] for r in cur.execute("SELECT table_name FROM information_schema.tables "
                                       "WHERE table_name <> 'rel_applied' ORDER BY 1").fetchall()]
    return {n: sorted(map(repr, cur.execute(f'SELECT * FROM "{n}"').fetchall())) for n in names}


def _new_workspace(cl) -> tuple[str, dict]:
    r = cl.post("/v1/public/workspaces", json={"packs": ["expert_network"]})
    assert r.status_code == 201, r.text
    return r.json()["workspace_id"], _token(r)


def test_a_load_through_one_replica_is_searched_through_another_with_its_token(replicas, tmp_path):
    a, b = replicas
    ws, token = _new_workspace(a)
    assert b.get(f"/v1/public/workspaces/{ws}", headers=token).status_code == 200
    src = export(tmp_path / "x.duckdb", PEOPLE, roles=ROLES, screenings=[screening("a")], screened=PEOPLE)
    r = a.post(f"/v1/public/workspaces/{ws}/loads", json=load_body(src))
    assert r.status_code == 201, r.text
    token = _token(r)
    # the writer's own reply already covers its write; the other replica waits for it
    assert int(r.headers["refindery-generation"]) == a.corpus.store.generation()
    got, want = _search(b, ws, headers=token), _search(a, ws)
    health = b.get("/healthz").json()["replica"]   # what b's relation tables have applied, said
    assert health["relations_applied"] >= int(token["Refindery-Min-Generation"])
    assert got["entities"]["matched"] == ["a", "c", "d"]
    assert _answer(got) == _answer(want)
    assert _tables(a.corpus) == _tables(b.corpus)   # row ids and entity numbers included
    # the audit event of a search through b is read through a (one table in PostgreSQL)
    r = a.get("/v1/audit/events", params={"request_id": got["request_id"]})
    assert r.status_code == 200 and r.json()["events"][0]["workspace_id"] == ws


def test_a_correction_through_the_other_replica_reaches_the_first(replicas, tmp_path):
    a, b = replicas
    ws, _ = _new_workspace(a)
    src = export(tmp_path / "x.duckdb", PEOPLE, roles=ROLES, screened=PEOPLE)
    token = _token(a.post(f"/v1/public/workspaces/{ws}/loads", json=load_body(src)))
    before = _search(a, ws)   # a caches the workspace's columns and verdicts now
    row_id = next(m["rows"][0]["row_id"] for m in before["matches"] if m["entity_id"] == "a")
    r = b.post("/v1/public/corrections", json={"workspace_id": ws, "row_id": row_id, "reason": "was Marketing"},
               headers=token)
    assert r.status_code == 200 and r.json()["retired"] is True
    after = _search(a, ws, headers=_token(r))   # what a cached of the workspace is forgotten on replay
    assert after["entities"]["matched"] == ["c", "d"] and after["entities"]["undetermined"] == ["a"]
    assert _answer(after) == _answer(_search(b, ws))


def test_a_document_load_replays_with_its_spans_and_receipts(replicas, tmp_path):
    a, b = replicas
    folder = write(tmp_path / "profiles", {"amara.md": AMARA})
    ws, _ = _new_workspace(b)
    r = b.post(f"/v1/public/workspaces/{ws}/loads", json={
        "source": str(folder), "documents": {"key_path": "id", "name_path": "name"}, "coverage": ["held_role"]})
    assert r.status_code == 201, r.text
    got = _search(a, ws, headers=_token(r))
    assert got["entities"]["matched"] == ["amara_okafor"]
    for row in got["matches"][0]["rows"]:   # the spans a replayed, read against the document itself
        assert row["receipt"]["byte_verified"] is True and row["receipt"]["document"] == "amara.md"
    assert _tables(a.corpus) == _tables(b.corpus)


def test_concurrent_loads_through_both_replicas_leave_the_same_tables_on_each(replicas, tmp_path):
    """Loads through both replicas at once, into one workspace and into one each: the writes are
    serialised on the store's generation, each replica replays the other's before writing its own,
    and both files end identical — the same superseded and current rows, the same entity numbers."""
    a, b = replicas
    shared, _ = _new_workspace(a)
    own = {id(cl): _new_workspace(cl)[0] for cl in (a, b)}
    errors: list[str] = []

    def loads(cl, name):
        for n in range(4):
            src = export(tmp_path / f"{name}-{n}.duckdb", PEOPLE, roles=ROLES[: 1 + n % 4], screened=PEOPLE)
            for ws in (shared, own[id(cl)]):
                r = cl.post(f"/v1/public/workspaces/{ws}/loads", json=load_body(src))
                if r.status_code != 201:
                    errors.append(r.text)

    threads = [threading.Thread(target=loads, args=(cl, name)) for cl, name in ((a, "a"), (b, "b"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    gen = a.corpus.store.generation()
    assert a.corpus.wait_applied(gen, 20) and b.corpus.wait_applied(gen, 20)
    assert _tables(a.corpus) == _tables(b.corpus)
    loads_ = a.corpus.relations.cursor().execute(
        "SELECT workspace_id, count(*) FROM rel_loads GROUP BY 1 ORDER BY 1").fetchall()
    assert sorted(n for _, n in loads_) == [4, 4, 8]
    for ws in (shared, *own.values()):
        assert _answer(_search(a, ws)) == _answer(_search(b, ws))


def test_a_replica_that_was_away_or_is_new_replays_every_relation_write(pool, tmp_path, postgres_url):
    a = _client(pool, tmp_path / "a", postgres_url)
    b = _client(pool, tmp_path / "b", postgres_url)
    try:
        ws, _ = _new_workspace(a)
        b.corpus.close()   # b is away while a loads and corrects
        src = export(tmp_path / "x.duckdb", PEOPLE, roles=ROLES, screened=PEOPLE)
        assert a.post(f"/v1/public/workspaces/{ws}/loads", json=load_body(src)).status_code == 201
        row_id = _search(a, ws)["matches"][0]["rows"][0]["row_id"]
        assert a.post("/v1/public/corrections", json={"workspace_id": ws, "row_id": row_id,
                                                      "reason": "x"}).status_code == 200
        b = _client(pool, tmp_path / "b", postgres_url)   # back: it replays what it missed
        c_ = _client(pool, tmp_path / "c", postgres_url)  # new: it replays everything
        try:
            want = _answer(_search(a, ws))
            for cl in (b, c_):
                assert _answer(_search(cl, ws)) == want
                assert _tables(cl.corpus) == _tables(a.corpus)
        finally:
            c_.corpus.close()
    finally:
        for cl in (a, b):
            cl.corpus.close()


def test_a_write_that_fails_leaves_nothing_in_the_log_nor_in_either_file(replicas, tmp_path):
    a, b = replicas
    b.corpus.replica.stop()   # b's follower stopped: b learns of a's writes only in a write of its own
    ws, _ = _new_workspace(a)
    gen = a.corpus.store.generation()
    r = a.post(f"/v1/public/workspaces/{ws}/loads", json={**load_body(tmp_path / "nowhere.duckdb")})
    assert r.status_code == 422
    # the same workspace id through b, which has not replayed a's workspace: refused as taken, inside
    # the write, once it has replayed a's (before, its own check found nothing and the insert failed)
    assert b.corpus.relations.workspace(ws) is None
    r = b.post("/v1/public/workspaces", json={"packs": ["expert_network"], "workspace_id": ws})
    assert r.status_code == 409 and r.json()["detail"]["type"] == "workspace_exists", r.text
    assert a.corpus.store.generation() == gen
    assert a.corpus.store.relation_ops(0) and all(g <= gen for g, *_ in a.corpus.store.relation_ops(0))
    assert _tables(a.corpus) == _tables(b.corpus)


def test_a_replica_killed_between_the_stores_commit_and_its_files_replays_the_write_when_it_opens(
        tmp_path, postgres_url):
    """SIGKILL after the store committed a load and before the replica's own file did: the load is in
    the log (its reply was never sent, but other replicas apply it), the file has none of it, and the
    replica replays it as it opens again — the same answer as a replica that never crashed."""
    from docs.examples.roster import LOAD, write_export

    src = write_export(tmp_path / "export.duckdb")
    spec = tmp_path / "load.json"
    spec.write_text(json.dumps({"source": str(src), **LOAD}))
    constraints = tmp_path / "c.json"
    constraints.write_text(json.dumps(SALES))
    env = {k: v for k, v in os.environ.items() if not k.startswith("REFINDERY_")}
    env.update(REFINDERY_STORE__URL=postgres_url, REFINDERY_MODELS__DEVICE="cpu")

    def cli(data, *args, crash=None):
        e = dict(env, REFINDERY_DATA_DIR=str(tmp_path / data), **({"REFINDERY_TEST_CRASH_AT": crash} if crash else {}))
        return subprocess.run([sys.executable, "-m", "server.cli", "relations", *args], cwd=ROOT, env=e,
                              capture_output=True, text=True, timeout=300)

    assert cli("a", "create", "crew").returncode == 0
    killed = cli("a", "load", "crew", "--spec", str(spec), crash="relations:stored")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    con = duckdb.connect(str(tmp_path / "a" / "relations.duckdb"))
    try:
        assert con.execute("SELECT count(*) FROM rel_loads").fetchone()[0] == 0
    finally:
        con.close()
    answers = []
    for data in ("a", "b"):   # the crashed replica, and one that never saw it
        out = cli(data, "search", "crew", "--constraints", str(constraints))
        assert out.returncode == 0, out.stderr
        answers.append(json.loads(out.stdout)["entities"])
    assert answers[0] == answers[1] and answers[0]["matched"] == ["halvard_quist", "isolde_marbrook", "yusuf_alderane"]


def test_the_recorded_parameters_round_trip_and_an_unknown_type_is_refused():
    import datetime as dt
    import decimal

    from indexes.relation_log import decode, encode

    values = [None, True, 3, 2.5, "x", ["a", None], dt.datetime(2026, 12, 6, 20, 1, 2, 345678),
              dt.date(2026, 1, 31), decimal.Decimal("1.10"), b"\x00\xff", [[1, "two"]]]
    assert decode(json.loads(json.dumps(encode(values)))) == values
    with pytest.raises(TypeError):
        encode({"a": 1})
    con = duckdb.connect()
    from indexes.relation_log import Recorder
    rec = Recorder(con)
    with pytest.raises(TypeError):
        rec.register("t", [1, 2])
