"""Criteria read by a model, against a FAKE OpenAI-compatible server (tests/fake_llm.py): the
criterion decomposed into typed facets by one forced call (a facet from nowhere dropped), each
candidate's documents judged for every facet by one call (a quote that does not re-slice to the
documents is no evidence), `spent` on the call that made model calls and absent on the repeat,
close.matches by the spec's rule, and a read that outlives its call finishing behind it
(`reading`, criterion_not_read) and picked up by the next call. Real app, real DuckDB, real
tantivy/FAISS (the profiles are a document load)."""
from __future__ import annotations

import json
import threading
import time

import pytest
from fake_llm import compiler_settings, serving

CRITERION = "twenty years marketing baby formula in European markets"


def at(words: str) -> list[int]:
    i = CRITERION.index(words)
    return [i, i + len(words)]


DECOMPOSED = {"facets": [
    {"facet": "marketing baby formula", "types": "substance", "quote": "marketing baby formula",
     "span": at("marketing baby formula")},
    {"facet": "in European markets", "types": "place", "quote": "European markets", "span": at("European markets")},
    {"facet": "for twenty years", "types": "length", "quote": "twenty years", "span": [3, 9]},   # relocated
    {"facet": "fluent in German", "types": "substance", "quote": "German", "span": [0, 6]},      # from nowhere
]}

PROFILES = {
    "ana": "Ana spent twenty years marketing baby formula in European markets, mostly in France.",
    "ben": "Ben marketed infant formula brands in Germany and Austria for six years.",
    "cleo": "Cleo sold industrial pumps across European markets.",
    "dov": "Dov ran logistics for a bakery chain.",
    "eve": "Eve launched a follow-on milk brand in Italy. SLOW-MARKER",
}


def judged(content: str) -> dict:
    """The fake model's judgments, by whose documents it was sent."""
    s, snv, no = "stated", "stated_not_verified", "not_stated"
    if "Ana spent" in content:
        q = "Ana spent twenty years marketing baby formula in European markets, mostly in France."
        return {"facets": [{"index": i, "state": s, "quote": q} for i in range(3)]}
    if "Ben marketed" in content:   # substance and place stated, the length not: one condition open
        q = "Ben marketed infant formula brands in Germany and Austria for six years."
        return {"facets": [{"index": 0, "state": s, "quote": q}, {"index": 1, "state": s, "quote": q},
                           {"index": 2, "state": no}]}
    if "Cleo sold" in content:      # shares only a place: cannot_tell, never a close match
        return {"facets": [{"index": 0, "state": no}, {"index": 1, "state": s, "quote": "across European markets"},
                           {"index": 2, "state": no}]}
    if "Dov ran" in content:        # claims a quote its documents do not hold: no evidence
        return {"facets": [{"index": 0, "state": s, "quote": "Dov marketed baby formula for decades"},
                           {"index": 1, "state": snv, "quote": "a bakery chain"}, {"index": 2, "state": no}]}
    RELEASE.wait(60)                # Eve's read outlives the call: it answers when the test says so
    return {"facets": [{"index": 0, "state": snv, "quote": "Eve launched a follow-on milk brand in Italy."},
                       {"index": 1, "state": s, "quote": "in Italy"}, {"index": 2, "state": no}]}


RELEASE = threading.Event()


def answer(body: dict) -> dict:
    tool = body["tools"][0]["function"]["name"]
    return DECOMPOSED if tool == "decompose_criterion" else judged(body["messages"][-1]["content"])


@pytest.fixture(scope="module")
def fake(tmp_path_factory):
    with serving(tmp_path_factory.mktemp("fake-llm") / "chat.sock", answer) as server:
        yield server


@pytest.fixture(scope="module")
def client(tmp_path_factory, pool, fake):
    from docs.examples import make_client

    settings = compiler_settings(fake) | {"price_usd_per_mtok": [1.0, 2.0]}
    cl = make_client(tmp_path_factory.mktemp("criteria-model") / "data", pool=pool, compiler=settings,
                     criteria={"model_wait_s": 5.0})
    yield cl
    cl.corpus.close()


@pytest.fixture(scope="module")
def ws(client, tmp_path_factory):
    folder = tmp_path_factory.mktemp("profiles")
    for pid, prose in PROFILES.items():
        (folder / f"{pid}.md").write_text(
            f"---\nid: {pid}\nname: {pid.title()}\nroles:\n  - function: Marketing\n    company: Co {pid}\n---\n"
            f"{prose}\n", encoding="utf-8")
    assert client.post("/v1/public/workspaces", json={"workspace_id": "crit-model"}).status_code == 201
    r = client.post("/v1/public/workspaces/crit-model/loads", json={
        "source": str(folder), "documents": {"key_path": "id", "name_path": "name"}, "coverage": ["held_role"]})
    assert r.status_code == 201, r.text
    return "crit-model"


QUERY = {"constraints": [{"relation": "held_role", "slot": "function", "op": "eq", "value": "Marketing"}],
         "criteria": [CRITERION]}


def test_a_criterion_is_decomposed_judged_per_facet_and_read_behind_the_call(client, fake, ws):
    from engine.relations.criteria_model import _INFLIGHT

    n = len(fake.requests)
    body = client.post("/v1/public/search", json={"workspace_id": ws, **QUERY}).json()
    sent = [r["body"]["tools"][0]["function"]["name"] for r in fake.requests[n:]]
    assert sent.count("decompose_criterion") == 1 and sent.count("judge_facets") == 5

    block = body["criteria"][0]
    assert [(f["facet"], f["types"], f["substance"]) for f in block["facets"]] == [
        ("marketing baby formula", None, True), ("in European markets", "place", False),
        ("for twenty years", "length", False)]
    assert block["decomposed_by"]["dropped"] == [{"facet": "fluent in German", "reason": "quote_not_in_criterion"}]
    assert block["judged_by"] == ["model:fake-compiler-1"]
    assert [d["entity_id"] for d in block["dropped"]] == ["dov"] and \
        block["dropped"][0]["reason"] == "quote_not_in_documents"

    assert body["entities"]["matched"] == ["ana"]
    ana = body["matches"][0]["criteria"][0]
    assert ana["state"] == "stated" and ana["quote"].startswith("Ana spent twenty years")
    page = client.get(f"/v1/pages/{ana['page_id']}").json()["body_text"]
    assert page[ana["location"]["char_start"]:ana["location"]["char_end"]] == ana["quote"]   # it re-slices
    # Ben: exactly one condition open (the length), a condition of substance established -> close
    assert [(c["entity_id"], c["facet"], c["because"]) for c in body["close"]["matches"]] == [
        ("ben", "for twenty years", "not_stated")]
    # Eve's read was still running when the call returned: not read, and the licence says so
    assert body["reading"]["running"] == 1 and body["reading"]["remaining"] == 1
    assert "criterion_not_read:0" in body["coverage"]["narrowed_by"]
    assert block["estimate"]["to_read"] == 1 and block["estimate"]["model_calls"] == 1
    # spent: the decomposition and five reads started; tokens of the five calls finished in the call
    assert body["spent"]["calls"] == 6 and body["spent"]["reads"] == 5
    assert body["spent"]["cost_usd"] == pytest.approx((5 * 900 * 1.0 + 5 * 120 * 2.0) / 1e6)

    assert _INFLIGHT                     # still running after the call returned
    RELEASE.set()                        # the model answers; the read finishes behind the call
    deadline = time.time() + 30
    while _INFLIGHT and time.time() < deadline:
        time.sleep(0.2)
    assert not _INFLIGHT
    n = len(fake.requests)
    again = client.post("/v1/public/search", json={"workspace_id": ws, **QUERY}).json()
    assert len(fake.requests) == n                       # stored decomposition and judgments: no call
    assert "spent" not in again and "reading" not in again
    eve = next(j for j in again["criteria"][0]["judgments"] if j["entity_id"] == "eve")
    assert eve["state"] == "not_stated"          # her length facet is not stated (her substance only suggested)
    assert again["criteria"][0]["facets"][0]["states"]["stated_not_verified"] == 1
    assert "criterion_not_read:0" not in again["coverage"]["narrowed_by"]

    # the compact reply says the same: a facet's quote in `why`, the open one under close
    compact = client.post("/v1/public/search", json={"workspace_id": ws, "detail": "compact", **QUERY}).json()
    assert [m["entity_id"] for m in compact["matches"]] == ["ana"]
    assert json.dumps(compact).count("Ana spent twenty years") >= 1


def test_a_failing_model_is_502_and_stores_nothing(client, fake, ws):
    fake.status = 503
    try:
        r = client.post("/v1/public/search", json={"workspace_id": ws, **QUERY, "criteria": ["ten years in retail"]})
    finally:
        fake.status = 200
    assert r.status_code == 502 and r.json()["detail"]["type"] == "compile_failed"
    from engine.relations.criteria_model import _INFLIGHT
    assert not _INFLIGHT
    assert client.corpus.relations.records.criterion_facets("ten years in retail", "fake-compiler-1") is None
