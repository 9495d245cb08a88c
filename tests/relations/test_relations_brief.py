"""The brief path against a FAKE OpenAI-compatible chat completions server (tests/fake_llm.py): real
HTTP over a Unix socket, a canned tool call."""
from __future__ import annotations

import pytest
from fake_llm import compiler_settings, serving
from relations_helpers import loaded, role, screening

BRIEF = "Find VP-level Sales leaders in DACH. They must have passed a compliance screening. Fluent in German."


def at(words: str) -> list[int]:
    start = BRIEF.index(words)
    return [start, start + len(words)]


CANNED = {"constraints": [
    {"relation": "held_role", "slot": "seniority", "op": "gte", "value": "VP", "quote": "VP-level",
     "brief_span": at("VP-level"), "required": True},
    {"relation": "held_role", "slot": "geography", "op": "eq", "value": "DACH", "quote": "DACH",
     "brief_span": [0, 4], "required": True},                                   # mis-counted: relocated
    {"relation": "screening", "slot": "outcome", "op": "eq", "value": "passed", "quote": "passed",
     "brief_span": at("passed"), "required": True},
    {"relation": "screening", "slot": "kind", "op": "eq", "value": "compliance", "quote": "a compliance check",
     "brief_span": [0, 5], "required": True},                                   # not in the brief: dropped
], "as_of": "2024-06"}


@pytest.fixture(scope="module")
def fake(tmp_path_factory):
    with serving(tmp_path_factory.mktemp("fake-llm") / "chat.sock", CANNED) as server:
        yield server


@pytest.fixture(scope="module")
def client(tmp_path_factory, fake):
    from docs.examples import make_client

    cl = make_client(tmp_path_factory.mktemp("brief"), compiler=compiler_settings(fake))
    yield cl
    cl.corpus.close()


@pytest.fixture
def ws(client, tmp_path):
    return loaded(client, tmp_path, ["a", "b", "c"],
                  roles=[role("a", "VP", geography="Austria"), role("b", "SVP", geography="Germany"),
                         role("c", "IC")],
                  screenings=[screening("a", on="2024-01"), screening("b", on="2024-09")], screened=["a", "b", "c"])


def test_a_brief_is_compiled_by_one_forced_tool_call_then_checked(client, fake, ws):
    fake.status, fake.arguments = 200, CANNED
    n = len(fake.requests)
    body = client.post("/v1/public/search", json={"workspace_id": ws, "brief": BRIEF}).json()
    assert len(fake.requests) == n + 1
    sent = fake.requests[-1]
    assert sent["path"] == "/v1/chat/completions" and sent["auth"] == "Bearer sk-test"
    assert sent["body"]["tool_choice"]["function"]["name"] == "compile_search_brief"
    assert sent["body"]["messages"][-1]["content"] == BRIEF
    compiled = body["compiled"]
    assert [(k["slot"], k["brief_span"]) for k in compiled["constraints"]] == \
        [("seniority", at("VP-level")), ("geography", at("DACH")), ("outcome", at("passed"))]
    assert compiled["constraints"][1]["span_relocated_from"] == [0, 4]
    assert [d["reason"] for d in compiled["dropped"]] == ["quote_not_in_brief"]
    assert compiled["uncompiled"] == [{"span": at("Fluent in German."), "text": "Fluent in German."}]
    assert (compiled["model"], compiled["usage"]["prompt_tokens"]) == ("fake-compiler-1", 900)
    assert body["gaps"]["dropped"] == compiled["dropped"] and body["gaps"]["uncompiled"] == compiled["uncompiled"]
    assert body["coverage"]["narrowed_by"][:2] == ["constraints_dropped", "brief_uncompiled"]
    # the brief pinned June 2024: b's screening (September) had not happened yet
    assert (body["as_of"], body["as_of_source"]) == ("2024-06", "compiled")
    assert body["entities"]["matched"] == ["a"]
    # compiled.constraints is the shape the constraints field takes: sending it back runs the same search
    again = client.post("/v1/public/search", json={"workspace_id": ws, "constraints": compiled["constraints"],
                                                   "as_of": "2024-06"}).json()
    assert again["entities"] == body["entities"]


def test_a_requests_as_of_wins_over_the_briefs(client, fake, ws):
    fake.status, fake.arguments = 200, CANNED
    body = client.post("/v1/public/search", json={"workspace_id": ws, "brief": BRIEF, "as_of": "2024-12"}).json()
    assert (body["as_of"], body["as_of_source"]) == ("2024-12", "request")
    assert body["entities"]["matched"] == ["a", "b"]


def test_a_brief_of_which_nothing_compiles_runs_nothing(client, fake, ws):
    fake.status, fake.arguments = 200, {"constraints": [
        {"relation": "held_role", "slot": "function", "op": "eq", "value": "Sales", "quote": "Sales people",
         "brief_span": [0, 3], "required": True}]}
    body = client.post("/v1/public/search", json={"workspace_id": ws, "brief": BRIEF}).json()
    assert body["bound"] is False and body["unbound_because"] == "nothing_compiled"
    assert body["entities"]["matched"] == [] and body["counts"]["universe"] == 3
    assert body["coverage"]["narrowed_by"] == ["constraints_dropped", "brief_uncompiled"]


def test_a_failing_endpoint_is_502_compile_failed(client, fake, ws):
    fake.status = 503
    r = client.post("/v1/public/search", json={"workspace_id": ws, "brief": BRIEF})
    fake.status = 200
    assert r.status_code == 502 and r.json()["detail"]["type"] == "compile_failed"


def test_the_compact_reply_serves_a_brief_too(client, fake, ws):
    fake.status, fake.arguments = 200, CANNED
    reply = client.post("/v1/public/search", json={"workspace_id": ws, "brief": BRIEF, "detail": "compact"}).json()
    assert [m["entity_id"] for m in reply["matches"]] == ["a"]
    assert reply["incomplete_because"][:2] == ["constraints_dropped: 1", "brief_uncompiled: 1"]


def test_compact_counts_every_dropped_constraint_and_uncompiled_sentence(client, fake, ws):
    """Two constraints dropped and two sentences no kept constraint came from: the compact reply
    carries the counts the full reply holds (its gaps), not one of each."""
    fake.status, fake.arguments = 200, {"constraints": [
        CANNED["constraints"][0],
        {**CANNED["constraints"][3]},                                        # quote not in the brief
        {"relation": "held_role", "slot": "shoe_size", "op": "eq", "value": "9", "quote": "DACH",
         "brief_span": at("DACH"), "required": True}]}                       # a slot the tool did not offer
    full = client.post("/v1/public/search", json={"workspace_id": ws, "brief": BRIEF}).json()
    assert len(full["gaps"]["dropped"]) == 2 and len(full["gaps"]["uncompiled"]) == 2
    reply = client.post("/v1/public/search", json={"workspace_id": ws, "brief": BRIEF, "detail": "compact"}).json()
    assert reply["incomplete_because"][:2] == ["constraints_dropped: 2", "brief_uncompiled: 2"]


def test_a_brief_of_which_nothing_compiles_answers_compact_when_asked(client, fake, ws):
    fake.status, fake.arguments = 200, {"constraints": [CANNED["constraints"][3]]}
    reply = client.post("/v1/public/search", json={"workspace_id": ws, "brief": BRIEF, "detail": "compact"}).json()
    assert reply["detail"] == "compact" and reply["unbound_because"] == "nothing_compiled"
    assert reply["matched"] == {"total": 0, "showing": [], "next_offset": None} and reply["matches"] == []
    assert reply["incomplete_because"] == ["constraints_dropped: 1", "brief_uncompiled: 3"]
    assert "entities" not in reply and "gaps" not in reply   # a projection, not the full reply
