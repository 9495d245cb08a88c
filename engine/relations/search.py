"""The relation search verb on the constraints path: constraints -> the closed set and its warrant.

Stages, each visible in the reply: expansion (each constraint through the workspace vocabulary),
enumeration (indexes/enumeration.py: set-based SQL), ranking (deterministic: optional groups satisfied,
distance from each gte/lte threshold, entity id), and the warrant: matches with their rows and
receipts, counts (with each constraint alone), the groups with their absence verdicts, the none /
not_recorded / undetermined listings, the gaps, and the completeness licence.
"""
from __future__ import annotations

import json
import secrets
import time
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from indexes.relations import RelationStore
from models.compiler import ChatCompletionsCompiler

from engine.core.errors import CompileUnavailable, SearchConstraintInvalid, SearchRequestInvalid
from engine.core.querylog import RELATION_SEARCH_ENDPOINT, LogEntry, QueryLog
from engine.relations.ideas import answer_idea
from engine.refind.search import SearchService
from engine.relations.constraints import Bound, bind, parse_constraints, parse_span
from indexes.enumeration import CAUSES, STATUS, Enumerator
from engine.relations.plan import Group, Plan, make_groups
from engine.relations.criteria import CODE as CRITERION_CODE
from engine.relations.criteria import CriterionReader, read_criteria
from engine.relations.brief import BriefCompile, compile_brief
from engine.relations.compile import read_compile_output
from engine.relations.compact import about_lines, compact_reply
from engine.relations.receipts import deliver_rows_apart
from engine.relations.workspaces import open_space
from engine.core.clock import utcnow

RANKING = "deterministic: optional-groups, threshold-distance, entity_id"
LIST_DEFAULT = 200
FULL_LIMIT, COMPACT_LIMIT, IDEA_LIMIT = 50, 25, 10
MATCHED_IDS_MAX = 200
STATUSES = ("none", "not_recorded", "undetermined")
CAUSE_REASON = {"undated": "undated_rows_unanswerable", "open_period": "open_period_rows_unanswerable",
                "corrected": "corrected_rows_unanswerable", "withheld": "withheld_rows_unanswerable",
                "unrecorded": "slot_unrecorded_rows_unanswerable"}


class RelationSearchRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    workspace_id: str = Field(min_length=1, max_length=100)
    constraints: list[Any] | None = Field(
        default=None, description="[{relation, slot, op, value, brief_span?, required?}] — or send `brief`.")
    brief: str | None = Field(default=None, max_length=4000,
                              description="The request in plain language (needs a compile model).")
    idea: str | None = Field(default=None, min_length=1, max_length=2000,
                             description="A question about an idea, answered over the parts of the documents.")
    criteria: list[Annotated[str, StringConstraints(min_length=3, max_length=500)]] | None = Field(
        default=None, max_length=5,
        description="Conditions no relation expresses, read from each candidate's own documents.")
    as_of: str | None = Field(default=None, pattern=r"^\d{4}-(0[1-9]|1[0-2])$",
                              description="YYYY-MM: the month the rows are tested at.")
    limit: int | None = Field(default=None, ge=0, le=500,
                              description="Matches on this page (default 50; 25 with detail compact); "
                                          "the counts stay whole.")
    offset: int = Field(default=0, ge=0, le=1_000_000_000, description="Matches to skip (paging).")
    list_limit: int | None = Field(default=None, ge=0, le=200,
                                   description="Bound on every list of non-matches (default 200).")
    entity_ids: list[str] | None = Field(default=None, max_length=500,
                                         description="Deliver only these entities (counts stay of the whole set).")
    detail: Literal["full", "compact"] = Field(
        default="full", description="full: the whole warrant; compact: the matches, why, who, counts of the rest")



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


def time_rule(rel, as_of: str | None) -> str:
    if as_of is None:
        return "no as_of: every current row counts, whatever its period"
    pf, pt = rel.period or ("period_from", "period_to")
    dated = f"dated rows: {pf} ≤ {as_of} and ({pt} open or {pt} > {as_of})"
    if rel.date_slot:
        d = rel.date_slot
        return (f"{dated}; undated rows: current, and the whole of {d} ≤ {as_of} "
                f"(a {d} whose span straddles {as_of}, such as a bare year, is unanswerable)")
    return f"{dated}; undated rows cannot be placed at {as_of}: the relation declares no date slot — unanswerable"


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
        brief, as_of_source = None, "request" if req.as_of else None
        if req.brief is not None:
            if not space.schema.relations:   # nothing to compile to: no model call
                brief = BriefCompile(read_compile_output(req.brief, space.schema, space.vocabulary, {}), None, {})
                body = self._nothing_compiled(request_id, req, space, brief, as_of_source)
                body["unbound_because"] = "workspace_declares_no_relation"
                return body
            if self.compiler is None:
                raise CompileUnavailable()
            brief = compile_brief(self.compiler, req.brief, space)
            if req.as_of is None and brief.compiled.as_of:   # a request's as_of wins over the brief's
                req, as_of_source = req.model_copy(update={"as_of": brief.compiled.as_of}), "compiled"
            if not brief.compiled.constraints:
                return self._nothing_compiled(request_id, req, space, brief, as_of_source)
            constraints = parse_constraints([k.as_constraint() for k in brief.compiled.constraints])
        else:
            constraints = parse_constraints(req.constraints)
        bound, gaps = bind(constraints, space.schema, space.vocabulary)
        kinds = sorted({b.rel.subject for b in bound})
        if len(kinds) > 1:
            raise SearchConstraintInvalid("the constraints name relations of different subject kinds",
                                          kinds=kinds)
        if not kinds:
            known = (space.schema.relation(c.relation) for c in constraints)
            kinds = sorted({r.subject for r in known if r is not None}) or space.subject_kinds()
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
                                 self.close, routes, [unbound_line(g, space.schema) for g in gaps])
        return body

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

    def _nothing_compiled(self, request_id: str, req: RelationSearchRequest, space, brief: BriefCompile,
                          as_of_source: str | None) -> dict:
        """A brief of which no constraint compiled: nothing ran, and the reply says so instead of
        answering a question nobody asked (no entity is placed in any set)."""
        kinds = space.subject_kinds()
        universe = self.rstore.universe(space.workspace_id, kinds, space.sight)
        compiled = brief.as_dict()
        narrowed = ["acl"] if self.scopes else []
        narrowed += [r for r, present in (("constraints_dropped", compiled["dropped"]),
                                          ("brief_uncompiled", compiled["uncompiled"])) if present]
        body = {"request_id": request_id, "workspace_id": space.workspace_id, "bound": False,
                "unbound_because": "nothing_compiled", "ranking": RANKING, "as_of": req.as_of,
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
        self.rstore.record_audit(request_id, utcnow(), "search", req.workspace_id, json.dumps(request),
                                 json.dumps(rows), json.dumps(spans), json.dumps(summary))
        if self.querylog is not None:
            self.querylog.record(LogEntry(
                query_id=request_id, endpoint=RELATION_SEARCH_ENDPOINT, workspace=req.workspace_id,
                query=req.brief if req.brief is not None else json.dumps(req.constraints),
                params={k: v for k, v in request.items() if k not in ("constraints", "brief")},
                models=[], timings={"total_ms": elapsed_ms}, total=body["counts"]["matched"],
                returned=len(body["matches"])))


class Warrant:
    """Reads the enumeration's temp table into the reply."""

    def __init__(self, rstore, en: Enumerator, req: RelationSearchRequest, constraints, bound: list[Bound],
                 gaps, groups: list[Group], brief: BriefCompile | None = None, as_of_source: str | None = None,
                 criteria: list[dict] | None = None, close: list[dict] | None = None, spent: dict | None = None,
                 acl: bool = False):
        self.brief, self.as_of_source, self.criteria = brief, as_of_source, criteria
        self.acl = acl   # the caller's key reads only some of the workspace's documents
        self.close, self.spent = close or [], spent
        self.rstore, self.en, self.req = rstore, en, req
        self.constraints, self.bound, self.gaps, self.groups = constraints, bound, gaps, groups
        self.list_limit = LIST_DEFAULT if req.list_limit is None else req.list_limit
        self.restrict = req.entity_ids
        self.numbers: dict[str, int] = {}   # entity id -> entity number, for the ids the lists hold
        self.page_numbers: dict[str, int] = {}   # entity id -> entity number, for the page's matches

    def lists(self, specs: dict[str, tuple]) -> dict[str, list[str]]:
        """Every bounded list of non-matches: up to list_limit ids each, by id (the enumeration's
        list specs); remembers each listed entity's number."""
        out = {}
        for key, pairs in self.en.lists(specs, self.list_limit, self.restrict).items():
            out[key] = [eid for eid, _ in pairs]
            self.numbers.update(pairs)
        return out

    def build(self, request_id: str) -> dict:
        req, groups = self.req, self.groups
        # the page first: its rows and receipts are read on another thread while this one counts
        page = self.page()
        self.page_numbers = {p["entity_id"]: p["ent_no"] for p in page}
        delivery = deliver_rows_apart(self.rstore, self.en, page, groups)
        agg = self.tally()

        counts = {"universe": agg["universe"], "matched": agg["matched"], "none": agg["none"],
                  "not_recorded": agg["not_recorded"], "undetermined": agg["undetermined"],
                  "bound": agg["matched"] + agg["none"], "per_constraint": self.per_constraint(agg)}
        matched_ids = self.en.matched_ids(MATCHED_IDS_MAX, self.restrict)
        specs: dict[str, tuple] = {f"all:{s}": ("status", s) for s in STATUSES}
        for g in groups:
            rel = g.relation.name
            specs.update({f"g{g.index}:{s}": ("unit", f"g{g.index}", s) for s in STATUSES})
            specs[f"abs{g.index}:none"] = ("absent", rel)
            specs[f"abs{g.index}:not_recorded"] = ("uncovered", rel)
        self.listed = self.lists(specs)
        entities = {"matched": matched_ids}
        for s in STATUSES:
            entities[s] = self.listed[f"all:{s}"]
        listings = {s: [{"group": g.index, "relation": g.relation.name, "required": g.required,
                         "entity_ids": self.listed[f"g{g.index}:{s}"], "total": agg[f"g{g.index}_{s}"]}
                        for g in groups] for s in STATUSES}
        groups_out = [self.group(g, agg) for g in groups]
        matches = delivery.result()
        truncated = len(matches) < counts["matched"]
        if self.criteria:
            for m in matches:   # a match holds every criterion stated: the sentence that says so
                m["criteria"] = [{"index": c["index"], **c["judgments"][m["entity_id"]].as_dict()}
                                 for c in self.criteria]
        provenance = {"declared": sum(1 for m in matches for r in m["rows"] if r["provenance_kind"] == "declared"),
                      "extracted": sum(1 for m in matches for r in m["rows"] if r["provenance_kind"] == "extracted")
                      + sum(len(m.get("criteria", [])) for m in matches)}
        body: dict[str, Any] = {
            "request_id": request_id,
            "workspace_id": req.workspace_id,
            "bound": not self.gaps,
            "ranking": RANKING,
            "as_of": req.as_of,
            "as_of_source": self.as_of_source,
            "constraints": [{"index": c.index, **c.as_sent()} for c in self.constraints],
            "expansion": [b.expansion for b in self.bound],
            "counts": counts,
            "entities": entities,
            "groups": groups_out,
            **listings,
            "matches": matches,
            "truncated": truncated,
            "limit": req.limit,
            "offset": req.offset,
        }
        if req.list_limit is not None:
            body["list_limit"] = req.list_limit
        if self.restrict is not None:
            body["entity_ids"] = self.restrict
        body["provenance"] = provenance
        compiled = self.brief.as_dict() if self.brief is not None else None
        body["gaps"] = {"unbound": [g.as_dict() for g in self.gaps],
                        "dropped": compiled["dropped"] if compiled else [],
                        "uncompiled": compiled["uncompiled"] if compiled else []}
        body["coverage"] = self.licence(agg, truncated)
        body["map_version"] = self.en.plan.space.map_version
        if compiled is not None:
            body["compiled"] = compiled
        if self.criteria:
            body["criteria"] = [self.criterion_block(c) for c in self.criteria]
            body["close"] = {"matches": self.close}
            if self.spent is not None:
                body["spent"] = self.spent
            unread = sum(1 for c in self.criteria for j in c["judgments"].values() if j.state == "not_read")
            if unread:
                body["reading"] = {"read_this_call": sum(c["read_now"] for c in self.criteria), "remaining": unread,
                                   "running": self.criteria[0].get("running", 0),
                                   "next": "call again with the same request at once: reads run only while a "
                                           "call is open (those running now finish behind it; nothing new starts)"}
        return body

    def criterion_block(self, c: dict) -> dict:
        """A criterion's own working: its facet, how many candidates it was read for, what the
        reader found per state, and the judgments (bounded by list_limit, by id)."""
        states: dict[str, int] = {s: 0 for s in CRITERION_CODE}
        for j in c["judgments"].values():
            states[j.state] += 1
        listed = sorted(c["judgments"])
        if self.restrict is not None:
            listed = [e for e in listed if e in self.restrict]
        facets = []
        for f, judged in zip(c["facets"], c["facet_judgments"]):
            counts = {s: 0 for s in CRITERION_CODE}
            for j in judged.values():
                counts[j.state] += 1
            facets.append({**f.as_dict(), "states": counts})
        to_read = states["not_read"]
        estimate = {"to_read": to_read, "model_calls": to_read if c["decomposed_by"] is not None else 0,
                    "cost_usd": None}
        if self.spent and self.spent.get("cost_usd") is not None and self.spent.get("reads"):
            estimate["cost_usd"] = round(self.spent["cost_usd"] / self.spent["reads"] * to_read, 6)
        return {"index": c["index"], "criterion": c["criterion"], "facets": facets, "estimate": estimate,
                "dropped": c.get("dropped", []),
                "decomposed_by": c["decomposed_by"], "judged_by": c["judged_by"],
                "candidates": c["candidates"], "read_this_call": c["read_now"], "states": states,
                "judgments": [c["judgments"][e].as_dict() for e in listed[:self.list_limit]]}

    def tally(self) -> dict[str, Any]:
        """Every count the reply carries, from one GROUP BY over the status columns (the distinct
        combinations are few; Python sums them): the partition, each group's and each lone
        constraint's, the absence split, the row counters, and the reasons an entity is
        undetermined or not recorded."""
        en, groups = self.en, self.groups
        flags = en.flag_sets
        dims, res = en.combinations()
        sums = list(en.counter_sql())
        combos = [(dict(zip(dims, row[:len(dims)])), row[len(dims)], row[len(dims) + 1:]) for row in res]
        agg: dict[str, Any] = {"universe": sum(n for _, n, _ in combos)}
        code = STATUS

        def count(test) -> int:
            return sum(n for d, n, _ in combos if test(d))

        def bit(d: dict, rel: str, flag: str) -> bool:
            if not flags[rel].has(flag):
                return False
            k, i = flags[rel].bit(flag)
            return bool((d[f"dm_{rel}_{k}"] >> i) & 1)

        for st in ("matched", *STATUSES):
            agg[st] = count(lambda d, st=st: d["status"] == code[st])
        for g in groups:
            n, rel = f"g{g.index}", g.relation.name
            agg[f"{n}_covered"] = count(lambda d: d[f"cov_{rel}"])
            for st in ("matched", *STATUSES):
                agg[f"{n}_{st}"] = count(lambda d, st=st: d[n] == code[st])
            agg[f"{n}_recorded"] = count(lambda d: d[f"live_{rel}"])
            agg[f"{n}_absent"] = count(lambda d: d[f"cov_{rel}"] and not d[f"live_{rel}"])
            und = lambda d: d[n] == code["undetermined"]  # noqa: E731
            for c in CAUSES:
                agg[f"{n}_why_{c}"] = any(d["status"] == code["undetermined"] and und(d) and bit(d, rel, f"{n}_c_{c}")
                                          for d, _, _ in combos)
            agg[f"{n}_why_nr"] = any(d["status"] == code["not_recorded"] and d[n] == code["not_recorded"]
                                     for d, _, _ in combos)
            for b in g.bound:
                if b.is_period:
                    continue
                z = f"{n}_z{b.index}"
                agg[f"{n}_unrec_{b.index}"] = any((und(d) or not g.required) and bit(d, rel, z) for d, _, _ in combos)
                if b.kind == "term":   # only a term's value can be one the vocabulary cannot place
                    agg[f"{n}_unpl_{b.index}"] = any(
                        d["status"] != code["matched"] and d[n] == code["none"] and bit(d, rel, f"{n}_u{b.index}")
                        for d, _, _ in combos)
        for b in self.bound:
            n = f"s{b.index}"
            for st in ("matched", *STATUSES):
                agg[f"{n}_{st}"] = count(lambda d, st=st: d[n] == code[st])
        totals = {c: sum(int(v[i] or 0) for _, _, v in combos) for i, c in enumerate(sums)}
        for g in groups:
            n = f"g{g.index}"
            agg[f"{n}_active"] = totals[f"{n}_active"]
            agg[f"{n}_inactive"] = totals.get(f"{n}_inactive", 0)
            agg[f"{n}_unplaceable"] = totals.get(f"{n}_unplaceable", 0)
            every = agg[f"{n}_active"] + agg[f"{n}_inactive"] + agg[f"{n}_unplaceable"]
            # a relation with a tenure whose every row states its start has no undated row
            agg[f"{n}_undated"] = totals.get(f"{n}_undated", 0 if g.relation.period else every)
        for b in self.bound:
            agg[f"s{b.index}_active"] = totals[f"s{b.index}_active"]
        return agg

    def per_constraint(self, agg: dict) -> list[dict]:
        by_index = {b.index: b for b in self.bound}
        gap_of = {g.index: g for g in self.gaps}
        out = []
        for c in self.constraints:
            entry: dict[str, Any] = {"index": c.index, "constraint": c.as_sent()}
            if c.index in by_index:
                n = f"s{c.index}"
                entry.update(status="bound", matched=agg[f"{n}_matched"], rows=agg[f"{n}_active"],
                             none=agg[f"{n}_none"], not_recorded=agg[f"{n}_not_recorded"],
                             undetermined=agg[f"{n}_undetermined"])
            else:
                entry.update(status="unbound", reason=gap_of[c.index].reason, matched=None, rows=None, none=None,
                             not_recorded=None, undetermined=None)
            out.append(entry)
        return out

    def group(self, g: Group, agg: dict) -> dict:
        n, rel = f"g{g.index}", g.relation
        unrecorded = [b.slot.name for b in g.bound if not b.is_period and agg.get(f"{n}_unrec_{b.index}")]
        return {
            "index": g.index, "relation": rel.name, "required": g.required, "constraints": g.constraints,
            "covered": agg[f"{n}_covered"], "matched": agg[f"{n}_matched"], "none": agg[f"{n}_none"],
            "not_recorded": agg[f"{n}_not_recorded"], "undetermined": agg[f"{n}_undetermined"],
            "active_rows": agg[f"{n}_active"], "inactive_rows": agg[f"{n}_inactive"],
            "undated_rows": agg[f"{n}_undated"], "unplaceable_rows": agg[f"{n}_unplaceable"],
            "unrecorded_slots": unrecorded,
            "time_test": {"as_of": self.req.as_of, "date_slot": rel.date_slot, "rule": time_rule(rel, self.req.as_of)},
            "absence": self.absence(g, agg),
        }

    def absence(self, g: Group, agg: dict) -> dict:
        """The relation's per-entity verdict: none (looked at, holds no row), not_recorded (never
        looked at), with the coverage rows that say who looked."""
        rel, n = g.relation.name, f"g{g.index}"
        none_ids = self.listed[f"abs{g.index}:none"]
        nr_ids = self.listed[f"abs{g.index}:not_recorded"]
        coverage: dict[str, list] = {}
        for eid, load_id, by, at in self.en.coverage(rel, [self.numbers[e] for e in none_ids]):
            coverage.setdefault(eid, []).append({"declared_by": by, "load_id": load_id, "declared_at": at.isoformat()})
        return {
            "split": {"none": agg[f"{n}_absent"], "not_recorded": agg["universe"] - agg[f"{n}_covered"],
                      "recorded": agg[f"{n}_recorded"]},
            "none": [{"entity_id": e, "kind": "none", "denominator": 0, "coverage": coverage.get(e, [])}
                     for e in none_ids],
            "not_recorded": [{"entity_id": e, "kind": "not_recorded", "denominator": None, "coverage": []}
                             for e in nr_ids],
        }

    def page(self) -> list[dict]:
        rows = self.en.page(self.req.limit, self.req.offset, self.restrict)
        return [{"entity_id": r[0], "rank": r[1], "ent_no": r[3], "name": r[4],
                 "rank_key": {"optional_groups_satisfied": r[2], "threshold_distance": list(r[5:]),
                              "entity_id": r[0]}} for r in rows]

    def licence(self, agg: dict, truncated: bool) -> dict:
        narrowed: list[str] = ["acl"] if self.acl else []
        if self.brief is not None:   # part of the brief did not compile: that part was not searched
            narrowed += ["constraints_dropped"] if self.brief.compiled.dropped else []
            narrowed += ["brief_uncompiled"] if self.brief.compiled.uncompiled else []
        required = [g for g in self.groups if g.required]
        narrowed += [f"constraint_unbound:{g.index}" for g in self.gaps if g.constraint.required]
        for b in self.bound:
            if b.c.required:
                narrowed += [x for x in b.narrow if x not in narrowed]
        for g in required:
            for b in g.bound:
                reason = f"vocabulary_unplaced:{b.slot.name}"
                if agg.get(f"g{g.index}_unpl_{b.index}") and reason not in narrowed:
                    narrowed.append(reason)
        if agg["universe"]:
            wholly = [g for g in required if agg[f"g{g.index}_covered"] == 0]
            if any(agg[f"g{g.index}_why_nr"] for g in required if g not in wholly):
                narrowed.append("entities_not_recorded")
            for g in wholly:
                reason = f"relation_not_recorded:{g.relation.name}"
                if reason not in narrowed:
                    narrowed.append(reason)
        for cause in ("undated", "open_period", "corrected", "withheld"):
            for g in required:
                reason = f"{CAUSE_REASON[cause]}:{g.relation.name}"
                if agg[f"g{g.index}_why_{cause}"] and reason not in narrowed:
                    narrowed.append(reason)
        for g in required:
            reason = f"unattributed_rows_withheld:{g.relation.name}"
            if reason not in narrowed and self._unattributed(g):
                narrowed.append(reason)
        for g in required:
            reason = f"{CAUSE_REASON['unrecorded']}:{g.relation.name}"
            if agg[f"g{g.index}_why_unrecorded"] and reason not in narrowed:
                narrowed.append(reason)
        for c in self.criteria or []:   # a criterion its documents did not prove for every candidate
            found = {j.state for j in c["judgments"].values()}
            narrowed += [f"{reason}:{c['index']}" for reason, states in (
                ("criterion_unproved", {"stated_not_verified", "not_stated"}),
                ("criterion_no_documents", {"no_documents"}), ("criterion_not_read", {"not_read"})) if found & states]
        if narrowed:
            return {"completeness_licensed": False, "withheld_because": "narrowed", "narrowed_by": narrowed}
        if truncated:
            return {"completeness_licensed": False, "withheld_because": "truncated"}
        return {"completeness_licensed": True}

    def _unattributed(self, g: Group) -> bool:
        """A row the loader could tie to no entity that does not fail the group: whoever it was
        about is in no list."""
        return self.en.unattributed_open(g.relation, g.bound)
