"""An agent meeting relation search with nothing but the MCP tools: a stdio session with
`refindery mcp` lists the tools, asks limma_workspaces what may be asked, builds a limma_search
call from that answer alone, and follows `more` by the tool it names. Prints the transcript.

    REFINDERY_DATA_DIR=data .venv/bin/python -m docs.examples.discover_over_mcp

(the data dir needs the roster: `refindery relations demo`, which `make demo` runs). It works the same
while `refindery serve` holds the data dir: `refindery mcp` then relays to the server.
"""
from __future__ import annotations

import json
import os
import sys

import anyio


def show(label: str, obj, width: int = 1200) -> None:
    text = obj if isinstance(obj, str) else json.dumps(obj, ensure_ascii=False)
    print(f"{label} {text[:width]}{' …' if len(text) > width else ''}\n")


async def main() -> None:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(command=sys.executable, args=["-m", "server.cli", "mcp"], env=dict(os.environ))
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        init = await session.initialize()
        show("<- initialize: instructions:", init.instructions)
        tools = {t.name: t for t in (await session.list_tools()).tools}
        show("<- tools/list:", sorted(tools))
        show("   limma_workspaces:", tools["limma_workspaces"].description)
        items = tools["limma_search"].inputSchema["properties"]["constraints"]["anyOf"][0]["items"]["anyOf"]
        show("   limma_search constraint variants (relation.slot: ops):",
             [f"{v['properties']['relation']['enum'][0]}.{v['properties']['slot']['enum'][0]}: "
              f"{'/'.join(v['properties']['op']['enum'])}" for v in items])

        print("-> tools/call limma_workspaces {}\n")
        listing = json.loads((await session.call_tool("limma_workspaces", {})).content[0].text)
        ws = next(w for w in listing["workspaces"] if w["workspace_id"] == "roster")
        for rel in ws["relations"]:
            show(f"<- {ws['workspace_id']}.{rel['relation']}:",
                 {"slots": [{k: s[k] for k in ("slot", "type", "operators") if k in s}
                            | ({"values": [f"{v['term']} ({v['entities']})" for v in s["values"] if v["entities"]]}
                               if "values" in s else {}) | ({"order": s["order"]} if "order" in s else {})
                            for s in rel["slots"]],
                  "example_constraint": rel.get("example_constraint")}, 2000)

        # Built from the listing alone: the group most people hold on held_role.geography, and the
        # ordered slot's middle rung and up; then screening.outcome's value held by the most.
        held = next(r for r in ws["relations"] if r["relation"] == "held_role")
        geo = next(s for s in held["slots"] if s["slot"] == "geography")
        group = max((v for v in geo["values"] if "includes" in v), key=lambda v: v["entities"])
        ranked = next(s for s in held["slots"] if "order" in s)
        screen = next(r for r in ws["relations"] if r["relation"] == "screening")
        outcome = next(s for s in screen["slots"] if s["slot"] == "outcome")
        passed = max(outcome["values"], key=lambda v: v["entities"])
        call = {"workspace_id": "roster", "constraints": [
            {"relation": "held_role", "slot": "geography", "op": "eq", "value": group["term"]},
            {"relation": "held_role", "slot": ranked["slot"], "op": "gte", "value": "VP"},
            {"relation": "screening", "slot": "outcome", "op": "eq", "value": passed["term"]}]}
        show("-> tools/call limma_search", call)
        reply = json.loads((await session.call_tool("limma_search", call)).content[0].text)
        show("<- limma_search (compact):", reply, 3000)

        rows = reply["more"]["rows"]
        args = json.loads(json.dumps(rows["arguments"]).replace("<entity_id>", reply["matches"][0]["entity_id"])
                          .replace("<relation>", "held_role"))
        show(f"-> tools/call {rows['tool']}", args)
        facts = json.loads((await session.call_tool(rows["tool"], args)).content[0].text)
        show(f"<- {rows['tool']}: absence", facts["absence"])

        wrong = {"workspace_id": "roster", "constraints": [{"relation": "role", "slot": "function", "op": "eq",
                                                             "value": "Sales"}]}
        show("-> tools/call limma_search (a relation that does not exist)", wrong)
        reply = json.loads((await session.call_tool("limma_search", wrong)).content[0].text)
        show("<- limma_search: first keys", {k: reply[k] for k in list(reply)[:4]}, 2000)


if __name__ == "__main__":
    anyio.run(main)
