"""The CLI's verbs through the server that owns the data dir (server/owner.py).

Each verb builds the same request as when it opens the data dir itself, validated by the same engine
model, sends it over the owner's socket with the Python client (`refindery-client`), reads the reply
into the same engine model and prints it the same way. A verb that needs the data dir to itself
(it rebuilds indexes, or reads files only the CLI's own process may name) says so in one line.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any, Callable

from .owner import Owner

# Verbs that cannot run beside a server, and what to do instead.
NEEDS_THE_DATA_DIR = {
    "reindex": "it rebuilds every index with the writer",
    "log": "it deletes from the query log with the writer",
    "relations load": "it reads files any local path names",
    "relations sync": "it re-reads a load's files from their local paths",
    "relations demo": "it writes and loads an export under the data dir",
    "relations demo-profiles": "it copies and loads documents under the data dir",
    "keys open": "it reopens the server's key table",
    "reranker": "it trains on and writes into the data dir",
}


def refusal(verb: str, owner: Owner) -> str:
    why = NEEDS_THE_DATA_DIR.get(verb, "it opens the data dir itself")
    return (f"error: `refindery {verb}` cannot run while a server holds the data dir ({owner.describe()}): {why}. "
            "Stop the server, run it, then start the server again.")


def _print(obj) -> None:
    print(json.dumps(obj, indent=2, default=str))


def _call(owner: Owner, method: str, path: str, body: Any = None, params: dict | None = None) -> Any:
    with owner.client() as client:
        return client.request(method, path, json=body, params=params)


def profile_of(owner: Owner) -> str:
    """The profile the server runs (its /healthz)."""
    return _call(owner, "GET", "/healthz")["profile"]


def search(args, owner: Owner, req, show: Callable) -> int:
    from engine.refind.search import SearchResponse

    body = _call(owner, "POST", "/v1/search", req.model_dump(mode="json", exclude_unset=True))
    return show(args, SearchResponse.model_validate(body))


def evidence(args, owner: Owner, req, show: Callable) -> int:
    from engine.evidence.search import EvidenceResponse

    body = _call(owner, "POST", "/v1/evidence", req.model_dump(mode="json", exclude_unset=True))
    return show(args, EvidenceResponse.model_validate({**body, "file": str(Path(owner.data_dir) / body["path"])}))


def status(args, owner: Owner) -> int:
    out = _call(owner, "GET", "/v1/status")
    out["data_dir"] = owner.data_dir   # the route names only the folder; this caller is on its machine
    _print({**out, "served_by": {"pid": owner.pid, "http": owner.http, "socket": owner.socket,
                                 "started": owner.started}})
    return 0


def keys(args, owner: Owner) -> int:
    if args.action == "create":
        _print(_call(owner, "POST", "/v1/keys", {"workspaces": args.workspace, "scopes": args.scope,
                                                 "read_only": args.read_only, "name": args.name}))
    elif args.action == "list":
        _print(_call(owner, "GET", "/v1/keys"))
    else:
        _print(_call(owner, "DELETE", f"/v1/keys/{args.key_id}"))
    return 0


def ingest(args, owner: Owner, batch_bytes: int) -> int:
    """`refindery ingest` beside a server: the records posted to POST /v1/pages in batches (at most
    1,000 records, and bodies well under the server's limit), one summary for all of them."""
    from engine.ingest.records import RecordError, read_source

    totals = {"records": 0, "created": 0, "updated": 0, "revisited": 0, "unchanged": 0, "errors": 0,
              "chunks_embedded": 0, "seconds": 0.0, "generation": None}
    errors: list[str] = []
    t0 = time.perf_counter()
    batch: list[tuple[str, dict]] = []
    size = 0

    def post() -> None:
        nonlocal batch, size
        if not batch:
            return
        body = {"pages": [rec for _, rec in batch]} | ({"workspace": args.workspace} if args.workspace else {})
        reply = _call(owner, "POST", "/v1/pages", body)
        for item in reply["items"]:
            if item.get("error"):
                errors.append(f"{batch[item['index']][0]}: skipped: {item['error']}")
        s = reply["summary"]
        for k in ("records", "created", "updated", "revisited", "unchanged", "errors", "chunks_embedded"):
            totals[k] += s.get(k) or 0
        totals["generation"] = s.get("generation", totals["generation"])
        if not args.no_progress:
            rate = totals["chunks_embedded"] / max(time.perf_counter() - t0, 1e-9)
            print(f"ingest: {totals['records']} records sent to the server, {totals['chunks_embedded']} chunks "
                  f"embedded ({rate:.1f}/s)", file=sys.stderr, flush=True)
        batch, size = [], 0

    for _, source, rec in read_source(args.path, args.base_url):
        if isinstance(rec, RecordError):
            errors.append(f"{rec.source}:{rec.line}: skipped: {rec.error}")
            totals["errors"] += 1
            continue
        n = len(json.dumps(rec, default=str))
        if batch and (len(batch) >= 1000 or size + n > batch_bytes):
            post()
        batch.append((source, rec))
        size += n
    post()
    for line in errors:
        print(line, file=sys.stderr)
    totals["seconds"] = round(time.perf_counter() - t0, 3)
    totals["chunks_per_second"] = round(totals["chunks_embedded"] / totals["seconds"], 1) if totals["seconds"] else None
    _print(totals | {"through": owner.describe()})
    return 1 if totals["errors"] and not totals["records"] else 0


def compare(args, owner: Owner, show: Callable) -> int:
    from engine.refind.compare import CompareRequest, CompareResponse

    req = CompareRequest(query=args.query, models=args.models.split(","), k=args.k)
    return show(args, CompareResponse.model_validate(
        _call(owner, "POST", "/v1/compare", req.model_dump(mode="json", exclude_unset=True))))


def dictionary(args, owner: Owner, source: tuple[str, str] | None) -> int:
    """`source`: (format, text) of the file to set (None: show)."""
    params = {"workspace": args.workspace} if args.workspace else None
    if source is not None:
        _print(_call(owner, "PUT", "/v1/evidence/dictionary", {"format": source[0], "text": source[1]}, params))
    else:
        _print(_call(owner, "GET", "/v1/evidence/dictionary", params=params))
    return 0


def maps(args, owner: Owner, show: Callable) -> int:
    return show(args, _call(owner, "GET", "/v1/evidence/maps",
                            params={"workspace": args.workspace} if args.workspace else None))


def models(args, owner: Owner, poll_s: float = 1.0) -> int:
    if args.action in ("switch", "drop") and not args.name:
        print(f"error: refindery models {args.action} NAME: name the embedder", file=sys.stderr)
        return 2
    if args.action == "status":
        _print(_call(owner, "GET", "/v1/models/switch"))
        return 0
    if args.action == "drop":
        _print(_call(owner, "DELETE", f"/v1/models/{args.name}"))
        return 0
    if args.action == "switch":
        return switch(args, owner, poll_s)
    if not args.embed:
        _print(_call(owner, "GET", "/v1/models"))
        return 0
    return embed(args, owner)


def switch(args, owner: Owner, poll_s: float = 1.0) -> int:
    """`models switch NAME` beside a server: the server builds NAME's index in its background (it keeps
    serving with the active embedder) and swaps; this follows its progress until it has."""
    from engine.core.progress import Progress

    state = _call(owner, "POST", f"/v1/models/{args.name}/switch")
    if state.get("cancelled"):
        _print(state)
        return 0
    bar = Progress(f"switch to {args.name} (in the server)", None, "chunks")
    while state["switching_to"] == args.name:
        time.sleep(poll_s)
        state = _call(owner, "GET", "/v1/models/switch")
        emb = state.get("embedding") or {}
        if emb.get("state") in ("failed", "stopped"):
            break
        bar.total = emb.get("total") or bar.total
        bar.update(max(0, emb.get("done", 0) - bar.done))
    bar.close()
    if state["active"] != args.name:
        print(f"error: the switch to {args.name} did not finish: {state}", file=sys.stderr)
        return 2
    _print(state | {"through": owner.describe()})
    return 0


def embed(args, owner: Owner, poll_s: float = 1.0) -> int:
    """`models --embed NAME` beside a server: the server embeds in its background (it keeps
    serving); this follows its progress until it is done."""
    from engine.core.progress import Progress

    state = _call(owner, "POST", f"/v1/models/{args.embed}/embed")
    bar = Progress(f"embed {args.embed} (in the server)", state.get("total"), "chunks")
    while state["state"] == "embedding":
        time.sleep(poll_s)
        row = next(m for m in _call(owner, "GET", "/v1/models")["models"] if m["name"] == args.embed)
        state = row.get("embedding") or {"state": "ready", "done": row["chunks_embedded"]}
        bar.total = state.get("total") or bar.total
        bar.update(state.get("done", 0) - bar.done)
    bar.close()
    if state["state"] != "ready":
        print(f"error: embedding {args.embed} {state['state']}: {state.get('error', '')}", file=sys.stderr)
        return 2
    _print({"model": args.embed, "embedded": state.get("done", 0), "through": owner.describe()})
    return 0


def forget(args, owner: Owner) -> int:
    from .cli.pages import forget_request

    body = forget_request(args)
    if not any(k in body for k in ("url", "domain", "since", "until")):
        print("error: say what to forget: a URL, --domain D, --last 1h, or --since/--until", file=sys.stderr)
        return 2
    _print(_call(owner, "POST", "/v1/forget", body))
    return 0


def clusters(args, owner: Owner) -> int:
    params = {"workspace": args.workspace} if args.workspace else {}
    if args.action == "refit":
        live = _call(owner, "GET", "/v1/clusters", params=params or None)
        if args.if_missing and live["clusters"]:
            _print({"workspace": live["workspace"], "skipped": True, "clusters": len(live["clusters"])})
        else:
            _print(_call(owner, "POST", "/v1/clusters/refit", None, (params | ({"k": args.k} if args.k else {})) or None))
    else:
        _print(_call(owner, "GET", "/v1/clusters", params=params | {"include_tombstoned": True})["clusters"])
    return 0


def relations(args, owner: Owner, req=None) -> int:
    """create, or search (`req`: the request the command line made)."""
    if args.action == "create":
        body = {"workspace_id": args.workspace, "name": args.name, "packs": args.packs or ["expert_network"]}
        _print(_call(owner, "POST", "/v1/public/workspaces", {k: v for k, v in body.items() if v is not None}))
    else:
        _print(_call(owner, "POST", "/v1/public/search", req.model_dump(mode="json", exclude_unset=True)))
    return 0


def mcp_stdio(owner: Owner) -> int:
    """`refindery mcp` beside a server: a relay between this process's stdio and the server's own
    MCP endpoint (/mcp, over the socket) — the same tools, the same sessions, nothing opened here."""
    import anyio

    anyio.run(_relay, owner)
    return 0


async def _relay(owner: Owner) -> None:
    import anyio
    import httpx
    from mcp.client.streamable_http import streamable_http_client
    from mcp.server.stdio import stdio_server

    http = httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(uds=owner.socket),
                             timeout=httpx.Timeout(30.0, read=600.0))

    async def pump(source, sink, side: str) -> None:
        async with sink:
            async for item in source:
                if isinstance(item, Exception):   # a message that could not be read: say so, go on
                    print(f"refindery mcp: {side}: {item}", file=sys.stderr, flush=True)
                    continue
                await sink.send(item)

    async with http, stdio_server() as (from_agent, to_agent), \
            streamable_http_client(f"{owner.base_url}/mcp", http_client=http) as (from_server, to_server, _):
        async with anyio.create_task_group() as tg:
            tg.start_soon(pump, from_server, to_agent, "from the server")
            await pump(from_agent, to_server, "from the client")   # ends when the agent closes stdin
            tg.cancel_scope.cancel()


def feedback(args, owner: Owner) -> int:
    """`feedback add | list | clear` beside a server."""
    if args.action == "add":
        if not (args.query_id and args.page_id):
            print("error: feedback add needs a QUERY_ID and a PAGE_ID", file=sys.stderr)
            return 2
        _print(_call(owner, "POST", "/v1/feedback", {"query_id": args.query_id, "page_id": args.page_id,
                                                       "kind": args.kind}))
        return 0
    params = {k: v for k, v in (("workspace", args.workspace), ("query_id", args.clear_query),
                                ("page_id", args.clear_page)) if v is not None}
    if args.action == "list":
        _print(_call(owner, "GET", "/v1/feedback", params={"workspace": args.workspace} if args.workspace else None))
    else:
        _print(_call(owner, "DELETE", "/v1/feedback", params=params or None))
    return 0
