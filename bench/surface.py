"""Every face's surface as one text, to diff two checkouts (issue 56: "replies unchanged"): the
OpenAPI schema, the MCP tools (names, descriptions, input schemas) and the `--help` of every CLI
command and subcommand.

    .venv/bin/python bench/surface.py [ROOT] > surface.txt      # ROOT: a checkout (default: this one)
    diff before.txt after.txt
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.chdir(ROOT)


def _helps(parser: argparse.ArgumentParser, path: str) -> list[str]:
    out = [f"### refindery {path}".rstrip(), parser.format_help()]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in sorted(action.choices.items()):
                out += _helps(sub, f"{path} {name}".strip())
    return out


def main() -> None:
    os.environ["COLUMNS"] = "120"
    from docs.examples import make_client
    from server.cli import build_parser
    from server.mcp import build_mcp

    client = make_client(Path(tempfile.mkdtemp(prefix="surface-")) / "data")
    print("## OpenAPI")
    print(json.dumps(client.app.openapi(), indent=1, sort_keys=True))
    print("## MCP tools")
    tools = asyncio.run(build_mcp(client.app).list_tools())
    for t in sorted(tools, key=lambda t: t.name):
        print(json.dumps({"name": t.name, "description": t.description, "input": t.inputSchema},
                         indent=1, sort_keys=True))
    client.corpus.close()
    print("## CLI")
    print("\n".join(_helps(build_parser(), "")))


if __name__ == "__main__":
    main()
