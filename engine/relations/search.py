"""The relation search verb on the constraints path: constraints -> the closed set and its warrant.

Stages, each visible in the reply: expansion (each constraint through the workspace vocabulary),
enumeration (indexes/judging/: set-based SQL, or NumPy over rows held in memory), ranking
(deterministic: optional groups satisfied, distance from each gte/lte threshold, entity id), and the
warrant: matches with their rows and receipts, counts (with each constraint alone), the groups with
their absence verdicts, the none / not_recorded / undetermined listings, the gaps, and the
completeness licence.
"""
from __future__ import annotations

import json
import secrets
import time

from indexes.relations import RelationStore
from models.compiler import ChatCompletionsCompiler

from engine.core.errors import CompileUnavailable, SearchConstraintInvalid, SearchRequestInvalid
from engine.core.querylog import RELATION_SEARCH_ENDPOINT, LogEntry, QueryLog
from engine.relations.ideas import answer_idea
from engine.refind.search import SearchService
from engine.relations.constraints import bind, parse_constraints, parse_span
from indexes.judging.enumeration import Enumerator
from engine.relations.plan import Plan, make_groups
from engine.relations.criteria import CODE as CRITERION_CODE
from engine.relations.criteria import CriterionReader, read_criteria
from engine.relations.brief import BriefCompile, compile_brief
from engine.relations.compile import read_compile_output
from engine.relations.compact import about_lines, compact_reply
from engine.relations.workspaces import open_space
from engine.core.clock import utcnow
# the request lives in engine/relations/schema.py, the warrant in warrant.py; the faces import them from here
from engine.relations.schema import RelationSearchRequest  # noqa: F401
from engine.relations.warrant import RANKING, Warrant

FULL_LIMIT, COMPACT_LIMIT, IDEA_LIMIT = 50, 25, 10




def unbound_line(gap, schema) -> str:
    """A constraint that did not run, said plainly, with what the workspace has instead."""
    c = gap.constraint
    kind = gap.reason.split(":", 1)[0]
    head = f"constraints[{gap.index}] did not run: "
    tail = " Every entity is judged without it" + (", and the set is not complete." if c.required else ".")
    if kind == "relation_unknown":
        return (f"{head}this workspace has no relation {c.relation!r}; it has "
                f"{', '.join(sorted(schema.relations))} (limma_workspaces, GET /v1/public/workspaces: their "
                f"slots and values).{tail}")
    rel = schema.relation(c.relation)
    if kind == "slot_unknown":
        return f"{head}{c.relation} has no slot {c.slot!r}; its slots are {', '.join(rel.slots)}.{tail}"
    return f"{head}{c.relation}.{c.slot} has no vocabulary, so {c.value!r} cannot be bound to its terms.{tail}"



class RelationSearch:
    def __init__(self, rstore: RelationStore, querylog: QueryLog | None = None,
                 compiler: ChatCompletionsCompiler | None = None, pages: SearchService | None = None,
                 reader: CriterionReader | None = None, scopes: tuple[str, ...] | None = None):
        """`scopes`: the document scopes of the caller's key (None: every document). Documents are
        then read only within them (criteria, ideas), and the licence is withheld with `acl`."""
        self.rstore = rstore
        self.scopes = tuple(scopes) if scopes else None
        self.querylog = querylog
        self.compiler = compiler
        self.pages = pages     # the page search pipeline, which ideas are answered with
        self.reader = reader   # reads criteria from each candidate's own documents
        self.close: list[dict] = []
        self.spent: dict | None = None
        self.close_numbers: dict[str, int] = {}

    def search(self, req: RelationSearchRequest, routes: dict[str, dict] | None = None) -> dict:
        """`routes`: the face's addresses of the follow-up verbs a compact reply names (compact.py)."""
        t0 = time.perf_counter()
        request_id = f"rq_{secrets.token_hex(8)}"
        space = open_space(self.rstore, req.workspace_id, self.scopes)
        if req.idea is not None:
            if req.brief is not None or req.constraints is not None:
                raise SearchRequestInvalid("send `idea` on its own: an idea is answered over the parts of "
                                           "documents, not over relations")
            if self.pages is None:
                raise SearchRequestInvalid("ideas need the page search pipeline, which this caller has not got")
            return answer_idea(self.pages, req.workspace_id, req.idea, req.limit or IDEA_LIMIT,
                               space.map_version, request_id, scopes=self.scopes)
        if (req.brief is None) == (req.constraints is None):
            raise SearchRequestInvalid("send exactly one of `brief` and `constraints`")
        default_limit = COMPACT_LIMIT if req.detail == "compact" else FULL_LIMIT
        req = req.model_copy(update={"limit": req.limit if req.limit is not None else default_limit})
        req, brief, as_of_source, constraints, why_empty = self._constraints_of(req, space)
        if constraints is None:
            body = self._nothing_compiled(request_id, req, space, brief, as_of_source, *why_empty)
            return self._projected(body, req, routes)
        bound, gaps = bind(constraints, space.schema, space.vocabulary)
        kinds = self._kinds(bound, constraints, space)
        groups = make_groups(bound)
        span = parse_span(req.as_of) if req.as_of else None
        plan = Plan(space, groups, bound, span, kinds)
        en = self.rstore.enumerator(plan)
        try:
            en.run()
            criteria = self._read_criteria(en, req) if req.criteria else None
            warrant = Warrant(self.rstore, en, req, constraints, bound, gaps, groups, brief, as_of_source,
                              criteria, self.close, self.spent, acl=self.scopes is not None)
            body = warrant.build(request_id)
        finally:
            en.drop()
        elapsed = round((time.perf_counter() - t0) * 1000, 2)
        self._record(request_id, req, body, elapsed)
        if req.detail == "compact":
            about = about_lines(self.rstore, space, {**warrant.page_numbers, **self.close_numbers})
            return compact_reply(body, bound, groups, about, req.model_dump(exclude_none=True), criteria,
                                 self.close, routes, [unbound_line(g, space.schema) for g in gaps],
                                 scopes=len(self.scopes or ()))
        return body

    def _constraints_of(self, req: RelationSearchRequest, space) -> tuple:
        """The constraints a request sends, or those its brief compiles to (one model call): (the
        request — with the brief's as_of when it names none —, the compile, where as_of came from, the
        constraints, and — when they are None, nothing having compiled — why, for `_nothing_compiled`)."""
        as_of_source = "request" if req.as_of else None
        if req.brief is None:
            return req, None, as_of_source, parse_constraints(req.constraints), ()
        if not space.schema.relations:   # nothing to compile to: no model call
            brief = BriefCompile(read_compile_output(req.brief, space.schema, space.vocabulary, {}), None, {})
            return req, brief, as_of_source, None, ("workspace_declares_no_relation",)
        if self.compiler is None:
            raise CompileUnavailable()
        brief = compile_brief(self.compiler, req.brief, space)
        if req.as_of is None and brief.compiled.as_of:   # a request's as_of wins over the brief's
            req, as_of_source = req.model_copy(update={"as_of": brief.compiled.as_of}), "compiled"
        if not brief.compiled.constraints:
            return req, brief, as_of_source, None, ()
        return req, brief, as_of_source, parse_constraints([k.as_constraint() for k in brief.compiled.constraints]), ()

    @staticmethod
    def _kinds(bound: list, constraints: list, space) -> list[str]:
        """The one subject kind the bound constraints name (a search over several is refused), or —
        none bound — the kinds of the relations named, else every kind the workspace holds."""
        kinds = sorted({b.rel.subject for b in bound})
        if len(kinds) > 1:
            raise SearchConstraintInvalid("the constraints name relations of different subject kinds",
                                          kinds=kinds)
        if not kinds:
            known = (space.schema.relation(c.relation) for c in constraints)
            kinds = sorted({r.subject for r in known if r is not None}) or space.subject_kinds()
        return kinds

    def _read_criteria(self, en: Enumerator, req: RelationSearchRequest) -> list[dict]:
        """Read each criterion for the candidates the ordinary conditions leave (the matched), and
        move each candidate the documents do not prove: no documents or not read yet -> not
        recorded; stated but not verified, or not stated -> undetermined. Never none: a document
        that does not say something is not a record that it is false."""
        if self.reader is None:
            raise SearchRequestInvalid("criteria are read from documents, which this caller cannot search")
        candidates = en.matched()
        ids = [e for e, _, _ in candidates]
        numbers = {e: n for e, n, _ in candidates}
        names = {e: name for e, _, name in candidates}
        out, close = read_criteria(self.reader, req.workspace_id, req.criteria, ids)
        if getattr(self.reader, "spent", {}).get("calls"):   # a model read for this call: what it spent
            self.spent = self.reader.priced()
        for block in out:
            block["running"] = getattr(self.reader, "running", 0)
        self.close = [{"entity_id": c["entity_id"], "name": names[c["entity_id"]],
                       **{k: v for k, v in c.items() if k != "entity_id"}} for c in close]
        self.close_numbers = {c["entity_id"]: numbers[c["entity_id"]] for c in self.close}
        for block in out:
            en.set_codes(f"crit{block['index']}", {numbers[e]: CRITERION_CODE[j.state]
                                                   for e, j in block["judgments"].items()})
        if ids:
            en.demote_matched([f"crit{i}" for i in range(len(req.criteria))], CRITERION_CODE["no_documents"],
                              (CRITERION_CODE["stated_not_verified"], CRITERION_CODE["not_stated"]))
        return out

    def _projected(self, body: dict, req: RelationSearchRequest, routes: dict[str, dict] | None) -> dict:
        """A reply that ran nothing, in the detail asked for: compact projects it like any other
        (nothing matched, and why the licence is withheld, with the counts the full reply holds)."""
        if req.detail != "compact":
            return body
        reply = compact_reply(body, [], [], {}, req.model_dump(exclude_none=True), routes=routes,
                              scopes=len(self.scopes or ()))
        return {**reply, "unbound_because": body["unbound_because"]}

    def _nothing_compiled(self, request_id: str, req: RelationSearchRequest, space, brief: BriefCompile,
                          as_of_source: str | None, because: str = "nothing_compiled") -> dict:
        """A brief of which no constraint compiled: nothing ran, and the reply says so instead of
        answering a question nobody asked (no entity is placed in any set)."""
        kinds = space.subject_kinds()
        universe = self.rstore.universe(space.workspace_id, kinds, space.sight)
        compiled = brief.as_dict()
        narrowed = ["acl"] if self.scopes else []
        narrowed += [r for r, present in (("constraints_dropped", compiled["dropped"]),
                                          ("brief_uncompiled", compiled["uncompiled"])) if present]
        body = {"request_id": request_id, "workspace_id": space.workspace_id, "bound": False,
                "unbound_because": because, "ranking": RANKING, "as_of": req.as_of,
                "as_of_source": as_of_source, "constraints": [], "expansion": [],
                "counts": {"universe": universe, "matched": 0, "none": 0, "not_recorded": 0, "undetermined": 0,
                           "bound": 0, "per_constraint": []},
                "entities": {"matched": [], "none": [], "not_recorded": [], "undetermined": []}, "groups": [],
                "none": [], "not_recorded": [], "undetermined": [], "matches": [], "truncated": False,
                "limit": req.limit, "offset": req.offset, "provenance": {"declared": 0, "extracted": 0},
                "gaps": {"unbound": [], "dropped": compiled["dropped"], "uncompiled": compiled["uncompiled"]},
                "coverage": {"completeness_licensed": False, "withheld_because": "narrowed",
                             "narrowed_by": narrowed if len(narrowed) > bool(self.scopes) else
                             narrowed + ["brief_uncompiled"]},
                "map_version": space.map_version, "compiled": compiled}
        self._record(request_id, req, body, 0.0)
        return body

    def _record(self, request_id: str, req: RelationSearchRequest, body: dict, elapsed_ms: float) -> None:
        rows = [row["row_id"] for m in body["matches"] for row in m["rows"]]
        # the document spans the delivered extracted rows rest on, as re-read for this answer
        spans = [{"row_id": row["row_id"], "slot": slot, **{k: r[k] for k in (
                     "document", "url", "page_id", "char_start", "char_end", "quote", "content_hash",
                     "byte_verified")}}
                 for m in body["matches"] for row in m["rows"] if row.get("provenance_kind") == "extracted"
                 for slot, r in sorted({**row.get("slot_receipts", {}),
                                        **row.get("period", {}).get("receipts", {})}.items())]
        summary = {k: v for k, v in body["counts"].items() if k != "per_constraint"}
        summary["coverage"] = body["coverage"]
        # the documents the answer could rest on: a key scoped narrower may not see this event
        summary["document_scopes"] = list(self.scopes) if self.scopes is not None else None
        request = req.model_dump(exclude_none=True)
        self.rstore.records.record_audit(request_id, utcnow(), "search", req.workspace_id, json.dumps(request),
                                 json.dumps(rows), json.dumps(spans), json.dumps(summary))
        if self.querylog is not None:
            self.querylog.record(LogEntry(
                query_id=request_id, endpoint=RELATION_SEARCH_ENDPOINT, workspace=req.workspace_id,
                query=req.brief if req.brief is not None else json.dumps(req.constraints),
                params={k: v for k, v in request.items() if k not in ("constraints", "brief")},
                models=[], timings={"total_ms": elapsed_ms}, total=body["counts"]["matched"],
                returned=len(body["matches"]), scopes=summary["document_scopes"]))
