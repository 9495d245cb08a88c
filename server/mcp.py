"""The engine's faces as MCP tools (the official `mcp` SDK, 1.x: FastMCP).

Each tool calls the same Engine verb as its HTTP route, with the caller's grant, and its input
schema is built from the same pydantic model as the route's body. The arguments are read by that
model too (not by the SDK's own check, whose messages are Python's), so a refusal — a malformed
argument as much as a verb's — reaches the agent as a tool error whose text is the route's own HTTP
body as JSON — {status, path, detail}, with detail exactly as the route wrote it — after the SDK's
"Error executing tool <name>: " prefix. Match on detail.type.

Transports: in-process (docs/examples/over_mcp.py drives it through a real client session), stdio
(`refindery mcp`, for desktop agent clients) and streamable HTTP at /mcp on the API's own app
(`refindery serve`).
"""
from __future__ import annotations

import inspect
import json
from typing import Annotated, Any, Callable

import anyio
from fastapi import FastAPI
from mcp.server.fastmcp import Context, FastMCP
from mcp.server.fastmcp.tools import Tool
from mcp.server.fastmcp.utilities.func_metadata import FuncMetadata
from pydantic import BaseModel, Field, ValidationError

from engine.app import Engine
from engine.core.access import Grant
from engine.refind.compare import CompareRequest
from engine.core.errors import EngineError
from engine.evidence import service as evidence
from engine.relations.facts import CorrectionRequest, FactsRequest, RegionRequest
from engine.relations.search import RelationSearchRequest
from engine.relations.workspaces import installed_constraint_items
from engine.refind.search import SearchRequest
from engine.refind.similar import MEDIATIONS

from .auth import SCOPE_KEY
from .errors import internal_error

INSTRUCTIONS = (
    "Refindery finds again the pages someone saw (refind_search, get_page) and answers closed-set "
    "questions over typed relations with their warrant (limma_workspaces first: what may be asked; then "
    "limma_search, limma_facts; limma_region re-reads a "
    "receipt, limma_correct retires a wrong row), and gathers evidence for a question into a packet file (evidence_search, read_evidence_packet).")


class PageRef(BaseModel):
    page_id: str = Field(min_length=1, max_length=100, description="A page id from refind_search.")


class SimilarRequest(BaseModel):
    page_id: str = Field(min_length=1, max_length=100, description="A page id from refind_search.")
    mediation: str = Field(default="vector", pattern="^(" + "|".join(MEDIATIONS) + ")$",
                           description="vector: page-vector cosine; cluster: co-members of its cluster; "
                                       "entity: shared entities (IDF-weighted Jaccard).")
    k: int = Field(default=10, ge=1, le=200, description="Pages to return.")


class Refusal(Exception):
    """A refusal as the route would have written it: its text is the JSON the agent reads."""

    def __init__(self, status: int, path: str, detail: dict):
        super().__init__(json.dumps({"status": status, "path": path, "detail": detail}))


def _refusal(exc: Exception, path: str) -> Refusal:
    if isinstance(exc, EngineError):
        return Refusal(exc.status, path, exc.public_body())
    errors = [{"loc": list(e.get("loc", ())), "msg": e.get("msg"), "type": e.get("type")} for e in exc.errors()]
    return Refusal(422, path, {"type": "validation_error", "title": "the request is malformed", "errors": errors})


def request_scope(ctx: Context | None) -> dict:
    """The ASGI scope of the HTTP request that carried a tool call ({} over stdio or in process)."""
    try:
        request = ctx.request_context.request if ctx is not None else None
    except (ValueError, AttributeError, LookupError):
        request = None
    return request.scope if request is not None and hasattr(request, "scope") else {}


def request_grant(ctx: Context | None) -> Grant:
    """The grant of the HTTP request that carried a tool call (streamable HTTP at /mcp, where the key
    middleware put it); a call over stdio or in process carries none and is open, as the routes are
    while no key exists."""
    grant = request_scope(ctx).get(SCOPE_KEY)
    return grant if grant is not None else Grant(None)


def tool_function(model: type[BaseModel], call: Callable[[BaseModel, Grant], Any], path: str,
                  defaults: dict[str, Any] | None = None) -> Callable:
    """An async function whose keyword parameters are the model's fields (types, constraints and
    descriptions), so the SDK derives the tool's input schema from the route's own model. `call`
    gets the request and the caller's grant, and applies it as the route does."""
    params = []
    for name, f in model.model_fields.items():
        default = (defaults or {}).get(name, inspect.Parameter.empty if f.is_required()
                                       else f.get_default(call_default_factory=True))   # a factory's value too
        annotation = Annotated[(f.annotation, *f.metadata, Field(description=f.description))]
        params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation))
    params.append(inspect.Parameter("ctx", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Context))

    async def fn(ctx: Context | None = None, **kwargs):
        grant = request_grant(ctx)

        def run():
            try:
                return call(model(**{**(defaults or {}), **kwargs}), grant)
            except (EngineError, ValidationError) as exc:
                raise _refusal(exc, path) from exc
            except Exception as exc:  # never raw driver text (SQL, paths) to an agent: the route's 500 body
                raise Refusal(500, path, internal_error(request_scope(ctx), f"MCP tool {path}", exc)) from None
        return await anyio.to_thread.run_sync(run)

    fn.__signature__ = inspect.Signature(params)
    fn.__annotations__ = {p.name: p.annotation for p in params}
    return fn


class RouteArguments(FuncMetadata):
    """A tool's arguments handed to its function as sent (after the SDK's reading of list and object
    arguments an agent sent as JSON text), for the route's model to check: a refusal is then the
    route's 422, never the SDK's or Python's own message ("Exceeds the limit (4300 digits)…")."""

    async def call_fn_with_arg_validation(self, fn, fn_is_async, arguments_to_validate, arguments_to_pass_directly):
        try:
            arguments = self.pre_parse_json(arguments_to_validate)
        except ValueError:   # a string no JSON reader takes (an integer of thousands of digits): as sent
            arguments = dict(arguments_to_validate)
        direct = arguments_to_pass_directly or {}
        return await fn(**{k: v for k, v in arguments.items() if k not in direct}, **direct)


def route_tool(model: type[BaseModel], call: Callable[[BaseModel, Grant], Any], path: str, name: str,
               description: str, defaults: dict[str, Any] | None = None) -> Tool:
    tool = Tool.from_function(tool_function(model, call, path, defaults), name=name, description=description)
    return tool.model_copy(update={"fn_metadata": RouteArguments(**dict(tool.fn_metadata))})


def refind_reply(full: dict, explain: bool) -> dict:
    """The page list an agent reads: rank, id, url, title, last seen, score and the passages;
    the full search reply (timings, depth, every stage's scores) only when explain is asked."""
    if explain:
        return full
    return {"query_id": full["query_id"], "total": full["total"], "offset": full["offset"], "k": full["k"],
            "pages": [{"rank": p["rank"], "page_id": p["page_id"], "url": p["url"], "title": p["title"],
                       "last_seen": p["last_seen"], "score": p["score"], "pinned": p["pinned"],
                       "snippets": [{"text": s["text"], "section": " > ".join(s["section_path"])}
                                    for s in p["snippets"]]} for p in full["pages"]]}


class WorkspacesRef(BaseModel):
    workspace_id: str | None = Field(default=None, max_length=100,
                                     description="Only this workspace (default: every workspace the key may read).")


def list_workspaces(e: Engine, r: WorkspacesRef, g: Grant) -> dict:
    out = e.relation_workspaces(g)
    if r.workspace_id is not None:
        g.workspace(r.workspace_id, r.workspace_id)      # outside the grant: workspace_not_found, as elsewhere
        out["workspaces"] = [w for w in out["workspaces"] if w["workspace_id"] == r.workspace_id]
        if not out["workspaces"]:
            e.describe_relation_workspace(r.workspace_id, g)   # no such workspace: the route's 404
    return json.loads(json.dumps(out, default=str))


# The follow-up calls a compact limma_search reply names under `more`: tools and their arguments.
MCP_ROUTES = {"search": {"tool": "limma_search"}, "facts": {"tool": "limma_facts"},
              "region": {"tool": "limma_region"}}


def typed_constraints(tool: Tool) -> Tool:
    """limma_search with its `constraints` items typed: one variant per (relation, slot) of the
    packs installed, with the ops each slot answers and its terms (the request model reads `Any`, so
    a malformed constraint still gets the seed's search_constraint_invalid, not a schema error)."""
    params = json.loads(json.dumps(tool.parameters))
    prop = params["properties"]["constraints"]
    prop.pop("anyOf", None)
    prop.pop("type", None)
    prop["anyOf"] = [{"type": "array", "items": installed_constraint_items(), "minItems": 1, "maxItems": 64},
                     {"type": "null"}]
    prop["description"] = ("The conditions, all of which must hold: [{relation, slot, op, value, required?}]. "
                           "limma_workspaces lists each workspace's relations, slots, operators and values.")
    return tool.model_copy(update={"parameters": params})


class PacketRef(BaseModel):
    session_id: str = Field(pattern=evidence.SESSION, description="The session_id evidence_search returned.")
    topic: str | None = Field(default=None, max_length=120, description="The topic, if the search named one.")
    part: str = Field(default="packet", pattern="^(packet|appendix)$",
                      description="packet (the main file) or appendix (every source, when the packet split).")
    workspace: str | None = Field(default=None, max_length=200,
                                  description="The workspace the search ran in (default: the key's).")


def build_mcp(app: FastAPI, host: str = "127.0.0.1") -> FastMCP:
    """The MCP server over an app's engine (its corpus and page search). `host` is the host the
    HTTP transport is served on: the SDK's DNS-rebinding protection admits that host's names."""
    def engine() -> Engine:
        return app.state.engine

    # (tool, request model, the route it mirrors, the Engine verb over (request, caller), description,
    # defaults that differ from the route's). Each verb applies the caller's grant itself.
    tools = [
        ("limma_workspaces", WorkspacesRef, "/v1/public/workspaces",
         lambda r, g: list_workspaces(engine(), r, g), LIMMA_WORKSPACES, None),
        ("limma_search", RelationSearchRequest, "/v1/public/search",
         lambda r, g: engine().relation_search(r, g, routes=MCP_ROUTES), LIMMA_SEARCH, {"detail": "compact"}),
        ("limma_facts", FactsRequest, "/v1/public/facts", lambda r, g: engine().facts(r, g), LIMMA_FACTS, None),
        ("limma_correct", CorrectionRequest, "/v1/public/corrections", lambda r, g: engine().correct(r, g),
         LIMMA_CORRECT, None),
        ("limma_region", RegionRequest, "/v1/public/region", lambda r, g: engine().region(r, g), LIMMA_REGION, None),
        ("refind_search", SearchRequest, "/v1/search",
         lambda r, g: refind_reply(engine().search(r, g).model_dump(mode="json"), r.explain), REFIND_SEARCH, None),
        ("get_page", PageRef, "/v1/pages/{id}",
         lambda r, g: json.loads(json.dumps(engine().page(r.page_id, g), default=str)),
         "A page by id, with its whole text and its chunks (section paths and offsets).", None),
        ("similar_pages", SimilarRequest, "/v1/pages/{id}/similar",
         lambda r, g: {"page_id": r.page_id, "mediation": r.mediation,
                       "pages": engine().similar(r.page_id, r.mediation, r.k, g)},
         "Pages related to a page: by vector, by cluster, or by shared entities.", None),
        ("refind_compare", CompareRequest, "/v1/compare",
         lambda r, g: engine().compare(r, g).model_dump(mode="json"), REFIND_COMPARE, None),
        ("evidence_search", evidence.EvidenceRequest, "/v1/evidence",
         lambda r, g: engine().evidence(r, g).model_dump(mode="json"), EVIDENCE_SEARCH, None),
        ("read_evidence_packet", PacketRef, "/v1/evidence/packets/{session_id}",
         lambda r, g: {"session_id": r.session_id, "part": r.part,
                       "text": engine().read_packet(r.session_id, r.topic, r.part, r.workspace, g)},
         "The Markdown of an evidence packet (or its appendix) by session.", None),
    ]
    built = [route_tool(model, call, path, name, description, defaults)
             for name, model, path, call, description, defaults in tools]
    built = [typed_constraints(t) if t.name == "limma_search" else t for t in built]
    return FastMCP("refindery", instructions=INSTRUCTIONS, host=host, streamable_http_path="/mcp", tools=built)


LIMMA_WORKSPACES = (
    "Start here for relation search: the workspaces you may search, each with its relations, "
    "their slots, the type and operators of each slot, and for a term slot its allowed values "
    "with how many entities hold each — everything a limma_search constraint may name, and an "
    "example constraint per relation.")
LIMMA_SEARCH = (
    "Who exactly matches these conditions — and are these all of them? Send `constraints` "
    "[{relation, slot, op, value}] (limma_workspaces lists what they may name) or a plain-language "
    "`brief` (needs a compile model) for a workspace. The reply is "
    "the closed set with its warrant; detail defaults to \"compact\" here: `matched.total` is "
    "the whole set, page with `offset` = `matched.next_offset`; `complete` false means the "
    "set may not be whole, and `incomplete_because` says why; `more` names the calls that "
    "fetch rows and receipts.")
LIMMA_FACTS = (
    "One entity's rows of one relation, with their receipts and the absence verdict: "
    "`absence.kind` is recorded, none (looked at, holds no row) or not_recorded (never looked "
    "at — not a \"no\").")
LIMMA_CORRECT = (
    "Retire a wrong row (its `row_id` from limma_search's or limma_facts' rows) with a "
    "`reason`. The row stops matching at once; while its source still states it, its entity "
    "is undetermined (`corrected_rows_unanswerable`), never silently none. Needs a key that "
    "may write.")
LIMMA_REGION = (
    "Re-read a receipt: a row's `slot` as its source reads it now (the cell a database row "
    "was loaded from, or the document span an extracted row was read from), with "
    "`byte_verified` saying whether it still says what was delivered. Use it before "
    "relying on a matched row's value.")
REFIND_SEARCH = (
    "Find again a page you saw: send what you remember of it (words, a topic, its URL) as "
    "`query`. The reply lists `pages` in rank order, each with its url, title, when it was "
    "last seen and the matched passages (`snippets`); `total` is the size of the ranked set — "
    "page through it with `offset` (+ `k`). `explain: true` returns the full reply with every "
    "stage's scores.")
REFIND_COMPARE = (
    "The same search once per embedder (`models`), with how far the rankings agree "
    "(Jaccard@k, RBO, Kendall's tau over the pages both share).")
EVIDENCE_SEARCH = (
    "Gather evidence for a question: expands its terms through the workspace dictionary, splits "
    "comparative questions into sub-queries, searches in at most `max_rounds` rounds with early "
    "stop, and writes an evidence packet (Markdown, YAML front matter, one section per source "
    "with its excerpt and confidence). The reply is the packet's `path` and the counts, not the "
    "evidence: read it with read_evidence_packet. Reuse `session_id` to append to one packet.")
