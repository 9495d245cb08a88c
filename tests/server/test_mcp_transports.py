"""The MCP tools over their real transports: `refindery mcp` (stdio, a subprocess) and streamable
HTTP at /mcp of a running `refindery serve` — on a Unix socket, because the suite must pass under
`unshare -n`, where loopback TCP is unreachable."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys

import anyio
import httpx
import pytest
from conftest import ROOT, serving_on

SCREENED = {"workspace_id": "roster", "entity_id": "teodor_brask", "relation": "screening"}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    from server.cli import main

    data = tmp_path_factory.mktemp("mcp-transports") / "data"
    os.environ["REFINDERY_DATA_DIR"] = str(data)
    try:
        assert main(["relations", "demo"]) == 0
    finally:
        del os.environ["REFINDERY_DATA_DIR"]
    return data


def env_for(data) -> dict:
    from conftest import MODELS_CACHE

    env = {k: v for k, v in os.environ.items() if not k.startswith("REFINDERY_")}
    # the models cache the session's in-process pool uses: an ONNX export made once, not per data dir
    env.update(REFINDERY_DATA_DIR=str(data), REFINDERY_MODELS__DEVICE="cpu", REFINDERY_MODELS__CACHE_DIR=MODELS_CACHE)
    return env


@contextlib.contextmanager
def served(data, sock):
    """`refindery serve` on a Unix socket over `data`, stopped (SIGTERM, then kill) on the way out."""
    proc = subprocess.Popen([sys.executable, "-m", "server.cli", "serve", "--uds", str(sock)], cwd=ROOT,
                            env=env_for(data), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


async def exercise(session) -> tuple[set, dict, object]:
    await session.initialize()
    tools = {t.name for t in (await session.list_tools()).tools}
    facts = await session.call_tool("limma_facts", SCREENED)
    refused = await session.call_tool("limma_search", {"workspace_id": "roster", "brief": "VP Sales in DACH"})
    return tools, json.loads(facts.content[0].text), refused


def check(tools, facts, refused) -> None:
    assert {"limma_search", "limma_facts", "refind_search", "get_page"} <= tools
    assert facts["absence"]["kind"] == "none"
    assert refused.isError is True
    prefix, _, body = refused.content[0].text.partition(": ")
    assert prefix == "Error executing tool limma_search"
    assert json.loads(body) == {"status": 503, "path": "/v1/public/search", "detail": {
        "type": "compile_unavailable", "reason": "compile requires a model; pass constraints"}}


def test_over_stdio(data):
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(command=sys.executable, args=["-m", "server.cli", "mcp"], env=env_for(data),
                                   cwd=str(ROOT))

    async def run():
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                return await exercise(session)

    check(*anyio.run(run))


def test_over_streamable_http_on_the_api_app(data, tmp_path):
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    sock = tmp_path / "refindery.sock"
    with served(data, sock):
        serving_on(sock)

        async def run():
            over_the_socket = httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(uds=str(sock)), timeout=60)
            async with over_the_socket, streamable_http_client("http://localhost:8000/mcp",
                                                               http_client=over_the_socket) as (read, write, _):
                async with ClientSession(read, write) as session:
                    return await exercise(session)

        check(*anyio.run(run))


def test_over_streamable_http_a_keys_grant_holds_in_every_tool(pool, tmp_path):
    """A key bound to one workspace and one document scope, over /mcp: the tools answer within its
    grant exactly as the routes do (other scopes' pages and other workspaces are 404), and without a
    key the endpoint is refused."""
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    from engine.core.access import create_key
    from engine.core.corpus import open_corpus
    from engine.ingest.pipeline import Ingester
    from engine.relations.workspaces import WorkspaceCreate, create_workspace
    from engine.core.settings import load_settings

    data, sock = tmp_path / "data", tmp_path / "refindery.sock"
    corpus = open_corpus(load_settings(data_dir=str(data)), pool)
    pages = [("https://t.example/a", "Team A JSON notes", "Team A notes on the json module and pretty output.", "a"),
             ("https://t.example/b", "Team B JSON secrets", "Team B secret notes on the json module encoder.", "b")]
    Ingester(corpus, "team", progress=False).ingest(
        (i, "t", {"url": u, "title": t, "body_text": b, "scope": s}) for i, (u, t, b, s) in enumerate(pages))
    for ws in ("team", "other"):
        create_workspace(corpus.relations, WorkspaceCreate(workspace_id=ws))
    ids = {p["url"]: pid for pid, p in corpus.store.pages_by_id(corpus.store.filtered_pages("team")).items()}
    token = create_key(corpus.keys, ["team"], scopes=["a"])["token"]
    reader = create_key(corpus.keys, ["team"], read_only=True)["token"]
    corpus.close()
    with served(data, sock):
        serving_on(sock)
        bare = httpx.Client(transport=httpx.HTTPTransport(uds=str(sock)), base_url="http://localhost:8000")
        assert bare.post("/mcp", json={}).status_code == 401

        async def calls(key: str, *tool_calls: tuple[str, dict]) -> list:
            """One MCP session over /mcp with `key`; the tools' results in order."""
            keyed = httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(uds=str(sock)), timeout=60,
                                      headers={"Authorization": f"Bearer {key}"})
            async with keyed, streamable_http_client("http://localhost:8000/mcp", http_client=keyed) as (r, w, _):
                async with ClientSession(r, w) as session:
                    await session.initialize()
                    return [await session.call_tool(name, args) for name, args in tool_calls]

        found, hidden, similar, elsewhere, region, correct = anyio.run(
            calls, token,
            ("refind_search", {"query": "json module notes"}),
            ("get_page", {"page_id": ids["https://t.example/b"]}),
            ("similar_pages", {"page_id": ids["https://t.example/a"]}),
            ("limma_facts", {"workspace_id": "other", "entity_id": "x", "relation": "screening"}),
            ("limma_region", {"workspace_id": "other", "row_id": "r", "slot": "outcome"}),
            ("limma_correct", {"workspace_id": "other", "row_id": "r", "reason": "wrong"}))
        (written,) = anyio.run(calls, reader, ("limma_correct", {"workspace_id": "team", "row_id": "r",
                                                                 "reason": "wrong"}))
        assert [p["url"] for p in json.loads(found.content[0].text)["pages"]] == ["https://t.example/a"]
        for refused, kind in ((hidden, "page_not_found"), (elsewhere, "workspace_not_found"),
                              (region, "workspace_not_found"), (correct, "workspace_not_found"),
                              (written, "forbidden")):
            assert refused.isError is True
            assert json.loads(refused.content[0].text.partition(": ")[2])["detail"]["type"] == kind
        assert json.loads(similar.content[0].text)["pages"] == []


def test_an_agent_discovers_the_schema_through_the_tools_and_searches_with_it(data):
    """As an agent meets it, over stdio: list the tools, ask limma_workspaces what may be asked,
    build a limma_search call from that answer alone (checked against the tool's own input schema),
    follow `more` by the tool names it gives, and hear plainly about a relation that does not exist."""
    import jsonschema
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(command=sys.executable, args=["-m", "server.cli", "mcp"], env=env_for(data),
                                   cwd=str(ROOT))

    def reply(result) -> dict:
        assert result.isError is False, result.content[0].text
        return json.loads(result.content[0].text)

    async def run():
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            tools = {t.name: t for t in (await session.list_tools()).tools}
            listing = reply(await session.call_tool("limma_workspaces", {}))
            (ws,) = [w for w in listing["workspaces"] if w["workspace_id"] == "roster"]
            rel = next(r for r in ws["relations"] if r["relation"] == "held_role")
            # two conditions, from the listing alone: the value most entities hold on the first term
            # slot that has a group (with its members), and an ordered slot's middle rung and up
            geo = next(s for s in rel["slots"] if any("includes" in v for v in s.get("values", [])))
            group = max((v for v in geo["values"] if "includes" in v), key=lambda v: v["entities"])
            ranked = next(s for s in rel["slots"] if "order" in s and "gte" in s["operators"])
            rung = ranked["order"][len(ranked["order"]) // 2]
            call = {"workspace_id": ws["workspace_id"], "constraints": [
                {"relation": rel["relation"], "slot": geo["slot"], "op": "eq", "value": group["term"]},
                {"relation": rel["relation"], "slot": ranked["slot"], "op": "gte", "value": rung}]}
            jsonschema.validate(call, tools["limma_search"].inputSchema)
            one = reply(await session.call_tool("limma_search", {**call, "constraints": call["constraints"][:1]}))
            both = reply(await session.call_tool("limma_search", call))
            rows_call = both["more"]["rows"]
            args = json.loads(json.dumps(rows_call["arguments"]).replace("<entity_id>", both["matches"][0]["entity_id"])
                              .replace("<relation>", rel["relation"]))
            rows = reply(await session.call_tool(rows_call["tool"], args))
            wrong = reply(await session.call_tool("limma_search", {"workspace_id": "roster", "constraints": [
                {"relation": "role", "slot": "function", "op": "eq", "value": "Sales"}]}))
            return tools, ws, group, one, both, rows_call, rows, wrong

    tools, ws, group, one, both, rows_call, rows, wrong = anyio.run(run)
    assert "limma_workspaces" in tools["limma_search"].description
    items = tools["limma_search"].inputSchema["properties"]["constraints"]["anyOf"][0]["items"]["anyOf"]
    assert {(v["properties"]["relation"]["enum"][0], v["properties"]["slot"]["enum"][0]) for v in items} >= {
        ("held_role", "geography"), ("screening", "outcome")}
    with pytest.raises(jsonschema.ValidationError):   # the schema now says what a constraint is
        jsonschema.validate({"workspace_id": "roster", "constraints": [{"relation": "held_role", "slot": "geography",
                                                                        "op": "gte", "value": "DACH"}]},
                            tools["limma_search"].inputSchema)
    assert ws["entities"] == {"person": 5} and group["term"] == "DACH" and group["entities"] == 4
    assert one["matched"]["total"] == group["entities"]      # the listing's count is the search's
    assert 0 < both["matched"]["total"] <= one["matched"]["total"] and both["complete"] is True
    assert rows_call["tool"] == "limma_facts" and rows["absence"]["kind"] == "recorded"
    assert set(both["more"]["entity"]) == {"tool", "arguments"} and both["more"]["receipt"]["tool"] == "limma_region"
    keys = list(wrong)
    assert keys.index("unbound") == keys.index("complete") + 1 and wrong["complete"] is False
    (line,) = wrong["unbound"]
    assert "no relation 'role'" in line and "held_role" in line and "limma_workspaces" in line
