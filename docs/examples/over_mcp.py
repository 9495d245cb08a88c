"""`call_tool(client, name, args)`: one call through a real MCP client session to the real server
(the SDK's in-memory transport), over the same app the TestClient `client` drives. Returns the SDK's
CallToolResult (`.isError`, `.content[0].text`), as the seed's MCP example reads it."""
from __future__ import annotations

import anyio
from mcp.shared.memory import create_connected_server_and_client_session

from server.mcp import build_mcp


def call_tool(client, name: str, arguments: dict):
    server = build_mcp(client.app)

    async def call():
        async with create_connected_server_and_client_session(server) as session:
            return await session.call_tool(name, arguments)

    return anyio.run(call)
