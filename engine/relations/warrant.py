"""The warrant: the enumeration's temp table read into the reply — matches with their rows and
receipts, counts (with each constraint alone), the groups with their absence verdicts, the none /
not_recorded / undetermined listings, and the completeness licence."""
from __future__ import annotations

from typing import Any

from indexes.judging.enumeration import Enumerator
from indexes.judging.row_sql import CAUSES, STATUS

from engine.relations.brief import BriefCompile
from engine.relations.constraints import Bound
from engine.relations.criteria import CODE as CRITERION_CODE
from engine.relations.plan import Group
from engine.relations.receipts import deliver_rows_apart
from engine.relations.schema import RelationSearchRequest

RANKING = "deterministic: optional-groups, threshold-distance, entity_id"
LIST_DEFAULT = 200
MATCHED_IDS_MAX = 200
STATUSES = ("none", "not_recorded", "undetermined")
CAUSE_REASON = {"undated": "undated_rows_unanswerable", "open_period": "open_period_rows_unanswerable",
                "corrected": "corrected_rows_unanswerable", "withheld": "withheld_rows_unanswerable",
                "unrecorded": "slot_unrecorded_rows_unanswerable"}


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
        req = self.req
        # the page first: its rows and receipts are read on another thread while this one counts
        page = self.page()
        self.page_numbers = {p["entity_id"]: p["ent_no"] for p in page}
        delivery = deliver_rows_apart(self.rstore, self.en, page, self.groups)
        agg = self.tally()

        counts = {"universe": agg["universe"], "matched": agg["matched"], "none": agg["none"],
                  "not_recorded": agg["not_recorded"], "undetermined": agg["undetermined"],
                  "bound": agg["matched"] + agg["none"], "per_constraint": self.per_constraint(agg)}
        entities, listings = self._listed(agg)
        groups_out = [self.group(g, agg) for g in self.groups]
        matches = self._matches(delivery)
        truncated = len(matches) < counts["matched"]
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
        body["provenance"] = {
            "declared": sum(1 for m in matches for r in m["rows"] if r["provenance_kind"] == "declared"),
            "extracted": sum(1 for m in matches for r in m["rows"] if r["provenance_kind"] == "extracted")
            + sum(len(m.get("criteria", [])) for m in matches)}
        self._closing(body, agg, truncated)
        return body

    def _listed(self, agg: dict) -> tuple[dict, dict]:
        """The entity ids per overall status (the matched in ranking order) and, per status, each
        group's bounded list with its total: every list read in one pass (`lists`)."""
        matched_ids = self.en.matched_ids(MATCHED_IDS_MAX, self.restrict)
        specs: dict[str, tuple] = {f"all:{s}": ("status", s) for s in STATUSES}
        for g in self.groups:
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
                        for g in self.groups] for s in STATUSES}
        return entities, listings

    def _matches(self, delivery) -> list[dict]:
        """The page's matches with their rows and receipts (read apart), each holding the sentence that
        says it meets every criterion stated."""
        matches = delivery.result()
        if self.criteria:
            for m in matches:
                m["criteria"] = [{"index": c["index"], **c["judgments"][m["entity_id"]].as_dict()}
                                 for c in self.criteria]
        return matches

    def _closing(self, body: dict, agg: dict, truncated: bool) -> None:
        """What the reply ends with: the gaps, the coverage licence, the map version, what a brief
        compiled to, and — with criteria — their blocks, the close matches and the reading left."""
        compiled = self.brief.as_dict() if self.brief is not None else None
        body["gaps"] = {"unbound": [g.as_dict() for g in self.gaps],
                        "dropped": compiled["dropped"] if compiled else [],
                        "uncompiled": compiled["uncompiled"] if compiled else []}
        body["coverage"] = self.licence(agg, truncated)
        body["map_version"] = self.en.plan.space.map_version
        if compiled is not None:
            body["compiled"] = compiled
        if not self.criteria:
            return
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
        en = self.en
        dims, res = en.combinations()
        combos = [(dict(zip(dims, row[:len(dims)])), row[len(dims)], row[len(dims) + 1:]) for row in res]
        agg: dict[str, Any] = {"universe": sum(n for _, n, _ in combos)}
        code = STATUS

        def count(test) -> int:
            return sum(n for d, n, _ in combos if test(d))

        for st in ("matched", *STATUSES):
            agg[st] = count(lambda d, st=st: d["status"] == code[st])
        for g in self.groups:
            n, rel = f"g{g.index}", g.relation.name
            agg[f"{n}_covered"] = count(lambda d: d[f"cov_{rel}"])
            for st in ("matched", *STATUSES):
                agg[f"{n}_{st}"] = count(lambda d, st=st: d[n] == code[st])
            agg[f"{n}_recorded"] = count(lambda d: d[f"live_{rel}"])
            agg[f"{n}_absent"] = count(lambda d: d[f"cov_{rel}"] and not d[f"live_{rel}"])
            agg.update(_why(en.flag_sets[rel], g, [d for d, _, _ in combos]))
        for b in self.bound:
            n = f"s{b.index}"
            for st in ("matched", *STATUSES):
                agg[f"{n}_{st}"] = count(lambda d, st=st: d[n] == code[st])
        agg.update(_row_totals(self.groups, self.bound, combos, list(en.counter_sql())))
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


def _why(flags, g: Group, dims: list[dict]) -> dict[str, bool]:
    """Whether any entity of a group is undetermined for each cause, not recorded, missing a value of
    each constraint, or holding a value the vocabulary cannot place — read off the detail masks of
    the combinations (`flags`: the group's relation's)."""
    code = STATUS
    n, rel = f"g{g.index}", g.relation.name

    def bit(d: dict, flag: str) -> bool:
        if not flags.has(flag):
            return False
        k, i = flags.bit(flag)
        return bool((d[f"dm_{rel}_{k}"] >> i) & 1)

    und = lambda d: d[n] == code["undetermined"]  # noqa: E731
    out = {f"{n}_why_{c}": any(d["status"] == code["undetermined"] and und(d) and bit(d, f"{n}_c_{c}")
                               for d in dims) for c in CAUSES}
    out[f"{n}_why_nr"] = any(d["status"] == code["not_recorded"] and d[n] == code["not_recorded"] for d in dims)
    for b in g.bound:
        if b.is_period:
            continue
        out[f"{n}_unrec_{b.index}"] = any((und(d) or not g.required) and bit(d, f"{n}_z{b.index}") for d in dims)
        if b.kind == "term":   # only a term's value can be one the vocabulary cannot place
            out[f"{n}_unpl_{b.index}"] = any(
                d["status"] != code["matched"] and d[n] == code["none"] and bit(d, f"{n}_u{b.index}") for d in dims)
    return out

def _row_totals(groups: list[Group], bound: list[Bound], combos: list[tuple], sums: list[str]) -> dict[str, int]:
    """The row counters summed over every entity: per group its rows active, inactive, unplaceable
    and undated at as_of; per lone constraint its active rows."""
    totals = {c: sum(int(v[i] or 0) for _, _, v in combos) for i, c in enumerate(sums)}
    out: dict[str, int] = {}
    for g in groups:
        n = f"g{g.index}"
        out[f"{n}_active"] = totals[f"{n}_active"]
        out[f"{n}_inactive"] = totals.get(f"{n}_inactive", 0)
        out[f"{n}_unplaceable"] = totals.get(f"{n}_unplaceable", 0)
        every = out[f"{n}_active"] + out[f"{n}_inactive"] + out[f"{n}_unplaceable"]
        # a relation with a tenure whose every row states its start has no undated row
        out[f"{n}_undated"] = totals.get(f"{n}_undated", 0 if g.relation.period else every)
    for b in bound:
        out[f"s{b.index}_active"] = totals[f"s{b.index}_active"]
    return out
