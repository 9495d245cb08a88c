"""The engine's faces as MCP tools (the official `mcp` SDK, 1.x: FastMCP).

Each tool calls the same engine function as its HTTP route, and its input schema is built from the
same pydantic model as the route's body. A refusal reaches the agent as a tool error whose text is
the route's own HTTP body as JSON — {status, path, detail}, with detail exactly as the route wrote
it — after the SDK's "Error executing tool <name>: " prefix. Match on detail.type.

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
from pydantic import BaseModel, Field, ValidationError

from engine.app import Engine
from engine.core.access import Grant
from engine.refind.compare import CompareRequest
from engine.core.errors import EngineError
from engine.evidence import service as evidence
from engine.relations.facts import CorrectionRequest, FactsRequest, RegionRequest
from engine.relations.search import RelationSearchRequest
from engine.refind.search import SearchRequest
from engine.refind.similar import MEDIATIONS

from .auth import SCOPE_KEY
from .errors import internal_error
from .http.relations import ROUTES as RELATION_ROUTES

INSTRUCTIONS = (
    "Refindery finds again the pages someone saw (refind_search, get_page) and answers closed-set "
    "questions over typed relations with their warrant (limma_search, limma_facts; limma_region re-reads a "
    "receipt, limma_correct retires a wrong row), and gathers evidence for a question into a packet file (evidence_search, read_evidence_packet).")


class PageRef(BaseModel):
    page_id: str = Field(min_length=1, max_length=100, description="A page id from refind_search.")


class SimilarRequest(BaseModel):
    page_id: str = Field(min_length=1, max_length=100, description="A page id from refind_search.")
    mediation: str = Field(default="vector", pattern="^(" + "|".join(MEDIATIONS) + ")$",
                           description="vector: page-vector cosine; cluster: co-members of its cluster; "
                                       "entity: shared entities (IDF-weighted Jaccard).")
    k: int = Field(default=10, ge=1, le=200, description="Pages to return.")


class PacketRef(BaseModel):
    session_id: str = Field(pattern=evidence.SESSION, description="The session_id evidence_search returned.")
    topic: str | None = Field(default=None, max_length=120, description="The topic, if the search named one.")
    part: str = Field(default="packet", pattern="^(packet|appendix)$",
                      description="packet (the main file) or appendix (every source, when the packet split).")


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
                return call(model(**kwargs), grant)
            except (EngineError, ValidationError) as exc:
                raise _refusal(exc, path) from exc
            except Exception as exc:  # never raw driver text (SQL, paths) to an agent: the route's 500 body
                raise Refusal(500, path, internal_error(request_scope(ctx), f"MCP tool {path}", exc)) from None
        return await anyio.to_thread.run_sync(run)

    fn.__signature__ = inspect.Signature(params)
    fn.__annotations__ = {p.name: p.annotation for p in params}
    return fn


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


def build_mcp(app: FastAPI, host: str = "127.0.0.1") -> FastMCP:
    """The MCP server over an app's engine (its corpus and page search). `host` is the host the
    HTTP transport is served on: the SDK's DNS-rebinding protection admits that host's names."""
    server = FastMCP("refindery", instructions=INSTRUCTIONS, host=host, streamable_http_path="/mcp")

    def engine() -> Engine:
        return app.state.engine

    def default() -> str:
        return engine().default_workspace

    def limma_search(req: RelationSearchRequest, g: Grant) -> dict:
        g.workspace(req.workspace_id, req.workspace_id)
        return engine().relation_search(req, scopes=g.document_scopes, routes=RELATION_ROUTES)

    def limma_facts(req: FactsRequest, g: Grant) -> dict:
        g.workspace(req.workspace_id, req.workspace_id)
        return engine().facts(req, scopes=g.document_scopes)

    def limma_correct(req: CorrectionRequest, g: Grant) -> dict:
        g.require_write()  # the route's order: a read-only key is refused before the workspace is looked at
        g.workspace(req.workspace_id, req.workspace_id)
        return engine().correct(req, scopes=g.document_scopes)

    def limma_region(req: RegionRequest, g: Grant) -> dict:
        g.workspace(req.workspace_id, req.workspace_id)
        return engine().region(req, scopes=g.document_scopes)

    def get_page(ref: PageRef, g: Grant) -> dict:
        engine().readable_page(g, ref.page_id)
        return json.loads(json.dumps(engine().page(ref.page_id), default=str))

    server.add_tool(tool_function(RelationSearchRequest, limma_search, "/v1/public/search", {"detail": "compact"}),
                    name="limma_search", description=(
                        "Who exactly matches these conditions — and are these all of them? Send `constraints` "
                        "[{relation, slot, op, value}] (or a plain-language `brief`) for a workspace. The reply is "
                        "the closed set with its warrant; detail defaults to \"compact\" here: `matched.total` is "
                        "the whole set, page with `offset` = `matched.next_offset`; `complete` false means the "
                        "set may not be whole, and `incomplete_because` says why; `more` names the calls that "
                        "fetch rows and receipts."))
    server.add_tool(tool_function(FactsRequest, limma_facts, "/v1/public/facts"),
                    name="limma_facts", description=(
                        "One entity's rows of one relation, with their receipts and the absence verdict: "
                        "`absence.kind` is recorded, none (looked at, holds no row) or not_recorded (never looked "
                        "at — not a \"no\")."))
    server.add_tool(tool_function(CorrectionRequest, limma_correct, "/v1/public/corrections"),
                    name="limma_correct", description=(
                        "Retire a wrong row (its `row_id` from limma_search's or limma_facts' rows) with a "
                        "`reason`. The row stops matching at once; while its source still states it, its entity "
                        "is undetermined (`corrected_rows_unanswerable`), never silently none. Needs a key that "
                        "may write."))
    server.add_tool(tool_function(RegionRequest, limma_region, "/v1/public/region"),
                    name="limma_region", description=(
                        "Re-read a receipt: a row's `slot` as its source reads it now (the cell a database row "
                        "was loaded from, or the document span an extracted row was read from), with "
                        "`byte_verified` saying whether it still says what was delivered. Use it before "
                        "relying on a matched row's value."))

    def refind_search(req: SearchRequest, g: Grant) -> dict:
        req.workspace = g.scoped(req.workspace, default())
        return refind_reply(engine().search(req, scopes=g.document_scopes).model_dump(mode="json"), req.explain)

    def similar(r: "SimilarRequest", g: Grant) -> dict:
        engine().readable_page(g, r.page_id)
        return {"page_id": r.page_id, "mediation": r.mediation,
                "pages": engine().similar(r.page_id, r.mediation, r.k, scopes=g.document_scopes)}

    def refind_compare(r: CompareRequest, g: Grant) -> dict:
        r.workspace = g.scoped(r.workspace, default())
        return engine().compare(r, scopes=g.document_scopes).model_dump(mode="json")

    def evidence_search(r, g: Grant) -> dict:
        r.workspace = g.scoped(r.workspace, default())
        return engine().evidence(r, scopes=g.document_scopes).model_dump(mode="json")

    server.add_tool(tool_function(SearchRequest, refind_search, "/v1/search"),
                    name="refind_search", description=(
                        "Find again a page you saw: send what you remember of it (words, a topic, its URL) as "
                        "`query`. The reply lists `pages` in rank order, each with its url, title, when it was "
                        "last seen and the matched passages (`snippets`); `total` is the size of the ranked set — "
                        "page through it with `offset` (+ `k`). `explain: true` returns the full reply with every "
                        "stage's scores."))
    server.add_tool(tool_function(PageRef, get_page, "/v1/pages/{id}"), name="get_page",
                    description="A page by id, with its whole text and its chunks (section paths and offsets).")
    server.add_tool(tool_function(SimilarRequest, similar, "/v1/pages/{id}/similar"),
        name="similar_pages", description="Pages related to a page: by vector, by cluster, or by shared entities.")
    server.add_tool(tool_function(CompareRequest, refind_compare, "/v1/compare"),
                    name="refind_compare", description=(
                        "The same search once per embedder (`models`), with how far the rankings agree "
                        "(Jaccard@k, RBO, Kendall's tau over the pages both share)."))
    server.add_tool(tool_function(evidence.EvidenceRequest, evidence_search, "/v1/evidence"),
                    name="evidence_search", description=(
                        "Gather evidence for a question: expands its terms through the workspace dictionary, splits "
                        "comparative questions into sub-queries, searches in at most `max_rounds` rounds with early "
                        "stop, and writes an evidence packet (Markdown, YAML front matter, one section per source "
                        "with its excerpt and confidence). The reply is the packet's `path` and the counts, not the "
                        "evidence: read it with read_evidence_packet. Reuse `session_id` to append to one packet."))
    def read_evidence_packet(r: PacketRef, g: Grant) -> dict:
        return {"session_id": r.session_id, "part": r.part,
                "text": engine().read_packet(r.session_id, r.topic, r.part, may_read=g.may_read,
                                             scopes=g.document_scopes)}

    server.add_tool(tool_function(PacketRef, read_evidence_packet, "/v1/evidence/packets/{session_id}"),
        name="read_evidence_packet", description="The Markdown of an evidence packet (or its appendix) by session.")
    return server
