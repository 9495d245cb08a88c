"""The MCP tools through a real client session (the SDK's in-memory transport) over a real app."""
from __future__ import annotations

import json

import pytest

from docs.examples.over_mcp import call_tool


@pytest.fixture(scope="module")
def client(tmp_path_factory, pool):
    from docs.examples import make_client
    from docs.examples.roster import roster

    cl = make_client(tmp_path_factory.mktemp("mcp"), pool)
    cl.ws = roster(cl).workspace_id
    cl.post("/v1/pages", json={"workspace": cl.ws, "pages": [
        {"url": "https://notes.example/pumps", "title": "Pump notes",
         "body_text": "Centrifugal pumps move water through the mains."}]})
    yield cl
    cl.corpus.close()


def result(res) -> dict:
    assert res.isError is False, res.content[0].text
    return json.loads(res.content[0].text)


def test_the_tools_are_listed_with_the_routes_schemas(client):
    import anyio
    from mcp.shared.memory import create_connected_server_and_client_session

    from engine.relations.search import RelationSearchRequest
    from server.mcp import build_mcp

    async def listing():
        async with create_connected_server_and_client_session(build_mcp(client.app)) as session:
            return (await session.list_tools()).tools

    tools = {t.name: t for t in anyio.run(listing)}
    assert set(tools) == {"limma_workspaces", "limma_search", "limma_facts", "limma_correct", "limma_region", "refind_search", "refind_compare", "get_page",
                          "similar_pages", "evidence_search", "read_evidence_packet"}
    assert all(len(t.description) > 40 for t in tools.values())
    schema = tools["limma_search"].inputSchema
    assert set(schema["properties"]) == set(RelationSearchRequest.model_fields)
    assert schema["required"] == ["workspace_id"]
    assert schema["properties"]["detail"]["default"] == "compact"
    assert schema["properties"]["limit"]["anyOf"][0]["maximum"] == 500


def test_limma_search_defaults_to_the_compact_reply(client):
    passed = [{"relation": "screening", "slot": "outcome", "op": "eq", "value": "passed"}]
    reply = result(call_tool(client, "limma_search", {"workspace_id": client.ws, "constraints": passed}))
    assert reply["detail"] == "compact" and reply["matched"]["total"] == 2
    http = client.post("/v1/public/search", json={"workspace_id": client.ws, "constraints": passed,
                                                  "detail": "compact"}).json()
    same = {k: v for k, v in reply.items() if k not in ("request_id", "more")}
    assert same == {k: v for k, v in http.items() if k not in ("request_id", "more")}
    # `more` names the same calls: over HTTP by route and body, over MCP by tool and arguments
    tools = {"/v1/public/search": "limma_search", "/v1/public/facts": "limma_facts", "/v1/public/region": "limma_region"}
    assert reply["more"] == {k: {"tool": tools[v["path"]], "arguments": v["body"]} for k, v in http["more"].items()}
    full = result(call_tool(client, "limma_search", {"workspace_id": client.ws, "constraints": passed,
                                                     "detail": "full"}))
    assert full["counts"]["matched"] == 2


def test_limma_facts_refind_search_and_get_page(client):
    facts = result(call_tool(client, "limma_facts", {"workspace_id": client.ws, "entity_id": "teodor_brask",
                                                     "relation": "screening"}))
    assert facts["absence"]["kind"] == "none"
    found = result(call_tool(client, "refind_search", {"query": "centrifugal pumps", "workspace": client.ws}))
    assert found["pages"][0]["url"] == "https://notes.example/pumps"
    assert set(found["pages"][0]) == {"rank", "page_id", "url", "title", "last_seen", "score", "pinned", "snippets"}
    explained = result(call_tool(client, "refind_search", {"query": "centrifugal pumps", "workspace": client.ws,
                                                           "explain": True}))
    assert "timings_ms" in explained and explained["pages"][0]["explain"] is not None
    page = result(call_tool(client, "get_page", {"page_id": found["pages"][0]["page_id"]}))
    assert page["body_text"].startswith("Centrifugal pumps")


def test_limma_region_and_limma_correct_through_a_client_session(client):
    """The spec's advice to agents, as tools: re-read a receipt through region, retire a wrong row
    with limma_correct. A workspace of its own: the correction must not touch the other tests' one."""
    from docs.examples.roster import roster

    ws = roster(client).workspace_id
    passed = [{"relation": "screening", "slot": "outcome", "op": "eq", "value": "passed"}]
    full = result(call_tool(client, "limma_search", {"workspace_id": ws, "constraints": passed, "detail": "full"}))
    match = full["matches"][0]
    row_id = match["rows"][0]["row_id"]
    region = result(call_tool(client, "limma_region", {"workspace_id": ws, "row_id": row_id, "slot": "outcome"}))
    assert (region["value_loaded"], region["value_now"], region["byte_verified"]) == ("passed", "passed", True)
    assert region == client.post("/v1/public/region", json={"workspace_id": ws, "row_id": row_id,
                                                            "slot": "outcome"}).json()
    res = call_tool(client, "limma_region", {"workspace_id": ws, "row_id": row_id, "slot": "no_such_slot"})
    assert res.isError is True and json.loads(res.content[0].text.partition(": ")[2])["status"] == 422

    fixed = result(call_tool(client, "limma_correct", {"workspace_id": ws, "row_id": row_id,
                                                       "reason": "the screening was re-run and failed"}))
    assert fixed["retired"] is True and fixed["already"] is False and fixed["entity_id"] == match["entity_id"]
    after = result(call_tool(client, "limma_search", {"workspace_id": ws, "constraints": passed, "detail": "full"}))
    assert match["entity_id"] not in after["entities"]["matched"]
    assert match["entity_id"] in after["entities"]["undetermined"]   # the source still states the row
    assert "corrected_rows_unanswerable:screening" in after["coverage"]["narrowed_by"]
    again = result(call_tool(client, "limma_correct", {"workspace_id": ws, "row_id": row_id, "reason": "again"}))
    assert again["already"] is True and again["correction_id"] == fixed["correction_id"]
    res = call_tool(client, "limma_correct", {"workspace_id": "nowhere", "row_id": row_id, "reason": "x"})
    assert res.isError is True and json.loads(res.content[0].text.partition(": ")[2])["status"] == 404


def test_similar_pages_and_compare_refusals(client):
    found = result(call_tool(client, "refind_search", {"query": "centrifugal pumps", "workspace": client.ws}))
    similar = result(call_tool(client, "similar_pages", {"page_id": found["pages"][0]["page_id"]}))
    assert similar["mediation"] == "vector" and isinstance(similar["pages"], list)
    res = call_tool(client, "refind_compare", {"query": "pumps", "models": ["all-minilm-l6-v2", "no-such-model"]})
    refusal = json.loads(res.content[0].text.partition(": ")[2])
    assert res.isError is True and refusal["path"] == "/v1/compare" and refusal["status"] == 422
    assert refusal["detail"]["type"] == "model_unknown"   # as docs/search.md promises, and as the route answers


def test_a_refusal_is_a_tool_error_carrying_the_routes_body(client):
    res = call_tool(client, "limma_facts", {"workspace_id": client.ws, "entity_id": "nobody", "relation": "screening"})
    prefix, _, body = res.content[0].text.partition(": ")
    assert res.isError is True and prefix == "Error executing tool limma_facts"
    refusal = json.loads(body)
    assert (refusal["status"], refusal["path"], refusal["detail"]["type"]) == \
        (404, "/v1/public/facts", "entity_not_found")
    res = call_tool(client, "limma_search", {"workspace_id": client.ws, "constraints": []})
    assert json.loads(res.content[0].text.partition(": ")[2])["detail"]["title"] == "`constraints` is empty"


def test_arguments_that_fail_validation_are_tool_errors_not_a_crash(client):
    import anyio
    from mcp.shared.memory import create_connected_server_and_client_session

    from server.mcp import build_mcp

    async def session_calls():
        async with create_connected_server_and_client_session(build_mcp(client.app)) as session:
            bad = await session.call_tool("limma_search", {"workspace_id": client.ws, "limit": 10_000})
            missing = await session.call_tool("get_page", {})
            good = await session.call_tool("limma_facts", {"workspace_id": client.ws, "entity_id": "yusuf_alderane",
                                                           "relation": "screening"})
            return bad, missing, good

    bad, missing, good = anyio.run(session_calls)
    assert bad.isError is True and "limit" in bad.content[0].text
    assert missing.isError is True and "page_id" in missing.content[0].text
    assert result(good)["absence"]["kind"] == "not_recorded"   # the same session still answers
