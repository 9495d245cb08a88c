"""`detail: "compact"`: the same search as the full warrant, projected for an agent that holds the
reply in its context — the matches, one line per condition on why each is in the set, who each is
(`about`), and counts of everything else. It is sized by the matches returned, never by the
candidates examined, and no key of it names a domain. What it leaves out is named under `more`
as calls that fetch it: each names the verb (`search`, `facts`, `region`) and the body to send; a
face that passes its `routes` (verb -> {method, path}) gets its own addresses there instead of the
verb (the HTTP and MCP faces pass the HTTP routes, so both replies read as the spec prints them).
"""
from __future__ import annotations

from collections import defaultdict
from datetime import date
from typing import Any

from indexes.relations import RelationStore

from engine.relations.constraints import SYMBOL, Bound
from engine.relations.packs import Relation, norm
from engine.relations.receipts import slot_value
from engine.relations.workspaces import Space

ABOUT_LINES = 3
ABOUT_WIDTH = 120
REASONS_SHOWN = 5
QUOTE_MAX = 160      # a why line's supporting quote, as the spec bounds it


def _line(text: str) -> str:
    return text if len(text) <= ABOUT_WIDTH else text[:ABOUT_WIDTH - 1] + "…"


def _recency(day: date | None) -> tuple[bool, date]:
    """A sort key: rows that state a date, latest last; rows that state none before them."""
    return (day is not None, day or date.min)


def _year(value: str | None) -> str | None:
    return str(value)[:4] if value else None


def row_line(rel: Relation, row: dict) -> str:
    """One row in its own values, in slot order: vocabulary labels, the date slot as "as of …",
    a tenure as (from–to) in years; a value the line already states is not repeated."""
    parts: list[str] = []
    for name in rel.value_slots:
        value = slot_value(rel, name, row)
        if value is None:
            continue
        text = f"{name.replace('_', ' ')} {value}" if name == rel.date_slot else str(value)
        said = {p for part in parts for p in part.split(", ")}
        if text not in said:   # "Vice President, Sales" already says Sales: the function is not repeated
            parts.append(text)
    text = ", ".join(parts)
    if rel.period and row.get(f"v_{rel.period[0]}"):
        start, end = _year(row.get(f"v_{rel.period[0]}")), _year(row.get(f"v_{rel.period[1]}"))
        text += f" ({start}–{end or 'now'})"
    return _line(text)


def about_lines(rstore: RelationStore, space: Space, numbers: dict[str, int]) -> dict[str, list[str]]:
    """Who each listed entity is: the row of each relation it holds most recently — a role it
    still holds first, then a standing fact per relation, then a role that ended — at most three
    lines, read in one query per relation for all of them."""
    if not numbers:
        return {}
    ids = ", ".join(str(int(n)) for n in numbers.values())
    current: dict[str, list] = defaultdict(list)
    facts: dict[str, list] = defaultdict(list)
    ended: dict[str, list] = defaultdict(list)
    for rel in space.schema.relations.values():
        table = space.shape(rel).name
        if not rstore.table_exists(table):
            continue
        for row in rstore.current_rows(table, space.workspace_id, f"retired IS NULL AND ent_no IN ({ids})",
                                       sight=space.sight):
            if rel.period:
                pf, pt = rel.period
                key = (_recency(row.get(f"lo_{pf}")), row["row_id"])
                if row.get(f"v_{pt}") is None:
                    current[row["entity_id"]].append((key, rel, row))
                else:
                    ended[row["entity_id"]].append(((_recency(row.get(f"hi_{pt}")),) + key, rel, row))
            else:
                day = row.get(f"lo_{rel.date_slot}") if rel.date_slot else None
                facts[row["entity_id"]].append(((_recency(day), row["row_id"]), rel, row))
    out: dict[str, list[str]] = {}
    for entity in numbers:
        lines = []
        if current[entity]:
            _, rel, row = max(current[entity], key=lambda t: t[0])
            lines.append(row_line(rel, row))
        by_relation: dict[str, tuple] = {}
        for key, rel, row in facts[entity]:
            if rel.name not in by_relation or key > by_relation[rel.name][0]:
                by_relation[rel.name] = (key, rel, row)
        for _, rel, row in sorted(by_relation.values(), key=lambda t: t[0], reverse=True):
            lines.append(row_line(rel, row))
        if ended[entity]:
            _, rel, row = max(ended[entity], key=lambda t: t[0])
            lines.append(row_line(rel, row))
        if lines:
            out[entity] = lines[:ABOUT_LINES]
    return out


def why(match: dict, bound: list[Bound], groups_of: dict[int, int]) -> list[dict]:
    """One line per condition a delivered row establishes."""
    lines = []
    for b in bound:
        group = groups_of[b.index]
        row = next((r for r in match["rows"] if group in r["satisfies_groups"]), None)
        if row is None:   # a preference this entity does not satisfy
            continue
        slot = b.slot.name
        if b.slot.computed:   # a length taken from the row's dates: the arithmetic is the warrant
            done = row.get("computed", {}).get(slot, {})
            shown = ", ".join(map(str, b.c.value)) if isinstance(b.c.value, list) else b.c.value
            lines.append({"condition": f"{b.rel.name}.{slot} {SYMBOL[b.c.op]} {shown}", "value": done.get("value"),
                          "from": "computed", "arithmetic": done.get("arithmetic")})
            continue
        if b.is_period:
            value = row.get("period", {}).get("from" if slot == b.rel.period[0] else "to")
            receipt = row.get("period", {}).get("receipts", {}).get(slot)
        else:
            value, receipt = row["slots"].get(slot), row["slot_receipts"].get(slot)
        shown = ", ".join(map(str, b.c.value)) if isinstance(b.c.value, list) else b.c.value
        line: dict[str, Any] = {"condition": f"{b.rel.name}.{slot} {SYMBOL[b.c.op]} {shown}", "value": value,
                                "from": "record"}
        if row.get("provenance_kind") == "extracted":
            line["from"] = "text"
            quote = (receipt or {}).get("quote")
            if quote and norm(quote) != norm(str(value)):   # the document's words say more than the value
                line["quote"] = quote if len(quote) <= QUOTE_MAX else quote[:QUOTE_MAX - 1] + "…"
        if receipt is not None and not receipt["byte_verified"]:
            line["check"] = (f"the source now reads {receipt.get('read_now')!r}" if "error" not in receipt
                             else "the source cannot be read now")
        lines.append(line)
    return lines


def reason_count(reason: str, full: dict, bound: list[Bound], scopes: int = 0) -> int:
    """The count the full reply holds for a reason the licence is withheld for: what a caller
    reading the full reply would count for it. `scopes`: how many document scopes the caller's
    key reads (what `acl` counts: the full reply names no document the key cannot read)."""
    counts = full["counts"]
    kind, _, name = reason.partition(":")
    groups = [g for g in full["groups"] if g["relation"] == name]
    if kind == "acl":
        return scopes
    if kind == "constraints_dropped":
        return len(full["gaps"]["dropped"])
    if kind == "brief_uncompiled":   # the sentences no kept constraint came from
        return len(full["gaps"]["uncompiled"])
    if kind == "constraint_unbound":   # the one constraint the reason names
        return 1
    if kind == "vocabulary_unknown_surface":   # the values the vocabulary does not know, matched as written
        return sum(len(b.literals) for b in bound if b.c.required and b.slot.name == name and reason in b.narrow)
    if kind.startswith("criterion_"):
        states = {"criterion_unproved": ("stated_not_verified", "not_stated"),
                  "criterion_no_documents": ("no_documents",), "criterion_not_read": ("not_read",)}[kind]
        block = next(c for c in full["criteria"] if str(c["index"]) == name)
        return sum(block["states"][s] for s in states)
    if kind == "entities_not_recorded":
        return counts["not_recorded"]
    if kind == "relation_not_recorded":
        return sum(g["not_recorded"] for g in groups if g["required"])
    if kind.endswith("_unanswerable") or kind == "unattributed_rows_withheld":
        return sum(g["undetermined"] for g in groups if g["required"]) if groups else counts["undetermined"]
    if kind == "vocabulary_unplaced":
        return counts["none"]
    raise ValueError(f"no count is defined for the reason {reason!r}")


def follow_up(verb: str, body: dict, routes: dict[str, dict] | None) -> dict:
    """A call that fetches more: the face's address for the verb when it gave one — an HTTP route
    ({method, path, body}) or an MCP tool ({tool, arguments}) — else the verb."""
    where = (routes or {}).get(verb)
    if where and "tool" in where:
        return {"tool": where["tool"], "arguments": body}
    return {**where, "body": body} if where else {"verb": verb, "body": body}


def compact_reply(full: dict, bound: list[Bound], groups: list, about: dict[str, list[str]],
                  request: dict, criteria: list[dict] | None = None, close: list[dict] | None = None,
                  routes: dict[str, dict] | None = None, unbound: list[str] | None = None,
                  scopes: int = 0) -> dict:
    """`unbound`: a plain line per constraint that names what the workspace does not have (the
    full reply's gaps), shown right after `complete`. `scopes`: how many document scopes the
    caller's key reads (0: every document)."""
    counts, coverage = full["counts"], full["coverage"]
    matches = full["matches"]
    groups_of = {b: g.index for g in groups for b in g.constraints}
    total = counts["matched"]
    offset = full["offset"]
    shown = [m["rank"] for m in matches]
    following = offset + len(matches)
    reply: dict[str, Any] = {
        "detail": "compact",
        "matched": {"total": total, "showing": [shown[0], shown[-1]] if shown else [],
                    "next_offset": following if following < total and matches else None},
        "complete": coverage["completeness_licensed"],
    }
    if unbound:
        reply["unbound"] = unbound
    if coverage.get("withheld_because") == "narrowed":
        reply["incomplete_because"] = [f"{r}: {reason_count(r, full, bound, scopes)}"
                                       for r in coverage["narrowed_by"][:REASONS_SHOWN]]
    elif coverage.get("withheld_because") == "truncated":
        reply["truncated"] = total - len(matches)
    entries = []
    for m in matches:
        lines = why(m, bound, groups_of)
        lines += [{"condition": c["criterion"], "value": c["judgments"][m["entity_id"]].quote, "from": "text"}
                  for c in criteria or []]
        entry = {"entity_id": m["entity_id"], "name": m["name"], "why": lines}
        if m["entity_id"] in about:
            entry["about"] = about[m["entity_id"]]
        entries.append(entry)
    reply["matches"] = entries
    close = [{**c, **({"about": about[c["entity_id"]]} if c["entity_id"] in about else {})} for c in close or []]
    no_documents = len({e for c in criteria or [] for e, j in c["judgments"].items() if j.state == "no_documents"})
    reply["others"] = {"ruled_out": counts["none"], "cannot_tell": counts["undetermined"] - len(close),
                       "not_read": counts["not_recorded"] - no_documents, "no_documents": no_documents}
    reply["close"] = {"matches": close}
    search = {k: v for k, v in request.items() if k not in ("detail", "limit", "offset", "list_limit", "entity_ids")}
    ws = full["workspace_id"]
    reply["more"] = {
        "entity": follow_up("search", {**search, "entity_ids": ["<entity_id>"], "detail": "full"}, routes),
        "full": follow_up("search", {**search, "detail": "full", "limit": full["limit"], "offset": offset}, routes),
        "rows": follow_up("facts", {"workspace_id": ws, "entity_id": "<entity_id>", "relation": "<relation>"}, routes),
        "receipt": follow_up("region", {"workspace_id": ws, "row_id": "<row_id>", "slot": "<slot>"}, routes),
    }
    if criteria:
        reply["candidates"] = criteria[0]["candidates"]
        if "spent" in full:
            reply["spent"] = full["spent"]
        if "reading" in full:
            reply["reading"] = full["reading"]
        reply["more"]["criterion"] = follow_up("search", {**search, "entity_ids": [], "detail": "full"}, routes)
    reply["map_version"] = full["map_version"]
    reply["request_id"] = full["request_id"]
    return reply
