"""detail: "compact" — a projection of the full reply, sized by the matches it returns."""
from __future__ import annotations

import json

import duckdb
import pytest
from relations_helpers import c, export, load, load_body, loaded, new_workspace, role, screening, search


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    from docs.examples import make_client

    cl = make_client(tmp_path_factory.mktemp("relations-compact"))
    yield cl
    cl.corpus.close()


def compact(client, ws, constraints, **kw):
    return search(client, ws, constraints, detail="compact", **kw)


def test_compact_is_the_full_reply_projected(client, tmp_path):
    people = [f"p{i}" for i in range(30)]
    ws = loaded(client, tmp_path, people, roles=[role(p, "SVP" if p == "p7" else "VP") for p in people])
    full = search(client, ws, [c("held_role", "seniority", "gte", "VP")])
    reply = compact(client, ws, [c("held_role", "seniority", "gte", "VP")])
    assert reply["detail"] == "compact"
    assert reply["matched"] == {"total": 30, "showing": [1, 25], "next_offset": 25}   # limit 25 by default
    assert [m["entity_id"] for m in reply["matches"]] == [m["entity_id"] for m in full["matches"]][:25]
    assert reply["complete"] is False and reply["truncated"] == 5 and "incomplete_because" not in reply
    last = compact(client, ws, [c("held_role", "seniority", "gte", "VP")], offset=25)
    assert last["matched"] == {"total": 30, "showing": [26, 30], "next_offset": None}
    assert last["matches"][-1]["entity_id"] == "p7"   # one rung above the threshold: ranked last
    assert last["matches"][-1]["why"] == [{"condition": "held_role.seniority ≥ VP", "value": "SVP", "from": "record"}]
    assert reply["others"] == {"ruled_out": 0, "cannot_tell": 0, "not_read": 0, "no_documents": 0}
    text = json.dumps(reply)
    for word in ("person", "people", "expert", "candidate"):
        assert f'"{word}' not in text   # no key names a domain


def test_incomplete_because_carries_each_reason_with_its_count(client, tmp_path):
    ws = loaded(client, tmp_path, ["a", "b", "c"], roles=[role("a"), role("b"), role("c", started="2019")])
    reply = compact(client, ws, [c("held_role", "function", "eq", "Sales"),
                                 c("engagement", "topic", "eq", "pricing"),
                                 c("screening", "outcome", "eq", "passed", required=False)], as_of="2019-05")
    assert reply["incomplete_because"] == ["constraint_unbound:1: 1", "undated_rows_unanswerable:held_role: 1"]
    assert reply["others"]["cannot_tell"] == 1


def test_why_says_when_the_source_no_longer_reads_the_value(client, tmp_path):
    src = export(tmp_path / "x.duckdb", ["a"], roles=[role("a", role_id="k")])
    ws = new_workspace(client)
    load(client, ws, load_body(src))
    con = duckdb.connect(str(src))
    con.execute("UPDATE roles SET function = 'Finance' WHERE role_id = 'k'")
    con.close()
    (line,) = compact(client, ws, [c("held_role", "function", "eq", "Sales")])["matches"][0]["why"]
    assert line["value"] == "Sales" and line["check"] == "the source now reads 'Finance'"


def test_about_is_a_current_role_then_standing_facts_then_an_ended_role(client, tmp_path):
    ws = loaded(client, tmp_path, ["a"],
                roles=[role("a", "VP", geography="Deutschland", started="2012-01", ended="2015-06", company="Old AG"),
                       role("a", "IC", geography="France", started="2010-01", ended="2011-01", company="First SA"),
                       role("a", "Director", geography="Austria", started="2016-01", company="Now GmbH")],
                screenings=[screening("a", on="2022-01"), screening("a", outcome="failed", on="2023-04")])
    (match,) = compact(client, ws, [c("held_role", "function", "eq", "Sales")])["matches"]
    assert match["about"] == ["Austria, Director, Sales, Now GmbH (2016–now)",
                              "compliance, failed, as of 2023-04",
                              "Germany, VP, Sales, Old AG (2012–2015)"]   # the vocabulary's label, not "Deutschland"


def test_the_calls_under_more_work(client, tmp_path):
    ws = loaded(client, tmp_path, ["a", "b"], roles=[role("a"), role("b")])
    reply = compact(client, ws, [c("held_role", "function", "eq", "Sales")])
    more = reply["more"]
    assert sorted(more) == ["entity", "full", "receipt", "rows"]
    body = json.loads(json.dumps(more["entity"]["body"]).replace("<entity_id>", "b"))
    one = client.post(more["entity"]["path"], json=body).json()
    assert [m["entity_id"] for m in one["matches"]] == ["b"] and one["counts"]["matched"] == 2
    full = client.post(more["full"]["path"], json=more["full"]["body"]).json()
    assert full["counts"] == one["counts"]
    row = one["matches"][0]["rows"][0]
    facts = json.loads(json.dumps(more["rows"]["body"]).replace("<entity_id>", "b").replace("<relation>", "held_role"))
    assert client.post(more["rows"]["path"], json=facts).json()["absence"]["kind"] == "recorded"
    region = json.loads(json.dumps(more["receipt"]["body"]).replace("<row_id>", row["row_id"])
                        .replace("<slot>", "function"))
    assert client.post(more["receipt"]["path"], json=region).json()["byte_verified"] is True


def test_without_a_face_the_calls_under_more_name_verbs(client, tmp_path):
    """The engine names each follow-up by its verb; only a face (HTTP, MCP) turns it into an address."""
    from engine.app import Engine
    from engine.relations.search import RelationSearchRequest

    ws = loaded(client, tmp_path, ["a"], roles=[role("a")])
    req = RelationSearchRequest(workspace_id=ws, constraints=[c("held_role", "function", "eq", "Sales")],
                                detail="compact")
    more = Engine(corpus=client.corpus).relation_search(req)["more"]
    assert {k: v["verb"] for k, v in more.items()} == {"entity": "search", "full": "search", "rows": "facts",
                                                      "receipt": "region"}
    assert all("path" not in v for v in more.values())
    over_http = compact(client, ws, [c("held_role", "function", "eq", "Sales")])["more"]
    assert {k: v["body"] for k, v in over_http.items()} == {k: v["body"] for k, v in more.items()}
    assert over_http["rows"] == {"method": "POST", "path": "/v1/public/facts", "body": more["rows"]["body"]}


def test_unknown_values_are_counted_as_the_full_reply_lists_them(client, tmp_path):
    """Two values the vocabulary does not know, matched as written: the reason says 2, not 1."""
    ws = loaded(client, tmp_path, ["a", "b", "c"],
                roles=[role("a", geography="Benelux"), role("b", geography="Levant"), role("c")])
    constraint = [c("held_role", "geography", "in", ["benelux", "levant"])]
    full = search(client, ws, constraint)
    assert full["coverage"]["narrowed_by"] == ["vocabulary_unknown_surface:geography"]
    assert full["expansion"] == ["geography: benelux, levant is not a term of axis geography: matched as written"]
    reply = compact(client, ws, constraint)
    assert reply["incomplete_because"] == ["vocabulary_unknown_surface:geography: 2"]
    assert [m["entity_id"] for m in reply["matches"]] == full["entities"]["matched"] == ["a", "b"]


def test_every_reason_the_licence_names_has_its_count():
    """Each reason of the seed's table (and each cause the warrant names) is counted, none refused:
    a reason with no count would fail every compact reply that carries it."""
    from engine.relations.compact import reason_count
    from engine.relations.warrant import CAUSE_REASON

    full = {"counts": {"not_recorded": 4, "undetermined": 3, "none": 2},
            "groups": [{"relation": "held_role", "required": True, "not_recorded": 4, "undetermined": 3}],
            "gaps": {"dropped": [{}, {}], "uncompiled": ["a.", "b.", "c."], "unbound": [{"index": 1}]},
            "criteria": [{"index": 0, "states": {"stated": 1, "stated_not_verified": 2, "not_stated": 3,
                                                 "no_documents": 4, "not_read": 5}}]}
    expected = {"acl": 2, "constraints_dropped": 2, "brief_uncompiled": 3, "constraint_unbound:1": 1,
                "vocabulary_unknown_surface:geography": 0, "vocabulary_unplaced:geography": 2,
                "entities_not_recorded": 4, "relation_not_recorded:held_role": 4,
                "unattributed_rows_withheld:held_role": 3, "criterion_unproved:0": 5,
                "criterion_no_documents:0": 4, "criterion_not_read:0": 5}
    expected |= {f"{cause}:held_role": 3 for cause in CAUSE_REASON.values()}
    assert {r: reason_count(r, full, [], scopes=2) for r in expected} == expected
