"""The MCP tools over their real transports: `refindery mcp` (stdio, a subprocess) and streamable
HTTP at /mcp of a running `refindery serve` — on a Unix socket, because the suite must pass under
`unshare -n`, where loopback TCP is unreachable."""
from __future__ import annotations

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
    env = {k: v for k, v in os.environ.items() if not k.startswith("REFINDERY_")}
    env.update(REFINDERY_DATA_DIR=str(data), REFINDERY_MODELS__DEVICE="cpu")
    return env


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
    proc = subprocess.Popen([sys.executable, "-m", "server.cli", "serve", "--uds", str(sock)], cwd=ROOT,
                            env=env_for(data), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        serving_on(sock)

        async def run():
            over_the_socket = httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(uds=str(sock)), timeout=60)
            async with over_the_socket, streamable_http_client("http://localhost:8000/mcp",
                                                               http_client=over_the_socket) as (read, write, _):
                async with ClientSession(read, write) as session:
                    return await exercise(session)

        check(*anyio.run(run))
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
