"""Delivering rows: the rows that satisfied a group for each listed match, each slot with its
receipt re-read on delivery. A declared row (a SQL load) has a structured receipt per slot
{db_table, db_column, row_key}, byte_verified when the cell still reads what was loaded; an
extracted row (read from a document) has a span receipt per slot {document, char_start, char_end,
quote, content_hash}, byte_verified when the document still reads the quote at that span, and a
row receipt spanning them."""
from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from indexes.relations import RelationStore
from indexes.sources import Source, SourceError

from indexes.judging.enumeration import Enumerator

from engine.relations.plan import Group
from engine.relations.packs import Relation


def slot_value(rel: Relation, slot: str, row: dict):
    """What a row states for a slot, in the vocabulary's own label where it has one."""
    kind = rel.slots[slot].type
    if kind == "term" and row.get(f"t_{slot}") is not None:
        return row[f"t_{slot}"]
    if kind == "number" and row.get(f"n_{slot}") is not None:
        n = row[f"n_{slot}"]
        return int(n) if float(n).is_integer() else n
    return row.get(f"v_{slot}")


def provenance(row: dict) -> dict:
    """A row's provenance_kind and row receipt: declared (a structured load; receipts per cell) or
    extracted (read from a document; the span receipt)."""
    if row.get("db_table") is None and "_span" in row:
        return {"provenance_kind": "extracted", "receipt": row["_span"]}
    return {"provenance_kind": "declared", "receipt": None}


class ReceiptReader:
    """Re-reads receipts in batches: one source opening and one query per (load, table)."""

    def __init__(self, rstore: RelationStore, workspace_id: str):
        self.rstore = rstore
        self.workspace_id = workspace_id
        self._specs: dict[str, dict | None] = {}

    def spec(self, load_id: str) -> dict | None:
        if load_id not in self._specs:
            s = self.rstore.load_spec(load_id)
            if s is not None:
                s["spec"] = json.loads(s["spec"]) if isinstance(s["spec"], str) else s["spec"]
            self._specs[load_id] = s
        return self._specs[load_id]

    def mapping(self, load_id: str, relation: str, table: str) -> dict | None:
        s = self.spec(load_id)
        if s is None:
            return None
        for m in s["spec"].get("relations", []):
            if m["relation"] == relation and m["table"] == table:
                return m
        return None

    def attach_spans(self, rows: list[dict]) -> None:
        """Give each extracted row its span receipts, re-reading each document once."""
        spans = self.rstore.spans(self.workspace_id, [r["row_id"] for r in rows])
        texts: dict[str, tuple[str | None, str | None, str | None]] = {}
        for path in {s["path"] for s in spans if s["path"]}:
            try:
                raw = Path(path).read_bytes()
                texts[path] = (raw.decode("utf-8"), hashlib.sha256(raw).hexdigest(), None)
            except (OSError, UnicodeDecodeError) as exc:
                texts[path] = (None, None, f"document unreadable: {type(exc).__name__}")
        by_row: dict[str, list[dict]] = defaultdict(list)
        for s in spans:
            by_row[s["row_id"]].append(s)
        for row in rows:
            receipts = {}
            for s in by_row.get(row["row_id"], []):
                text, digest, error = texts.get(s["path"], (None, None, "document unknown"))
                now = None if text is None else text[s["char_start"]:s["char_end"]]
                r = {"document": s["document"], "url": s["url"], "page_id": s["page_id"],
                     "char_start": s["char_start"], "char_end": s["char_end"], "quote": s["quote"],
                     "content_hash": s["content_hash"], "reader": s["reader"], "load_id": row["load_id"],
                     "value": row.get(f"v_{s['slot']}"), "byte_verified": now == s["quote"],
                     "content_changed": digest != s["content_hash"]}
                if now != s["quote"]:
                    r["read_now"] = now
                    if error:
                        r["error"] = error
                receipts[s["slot"]] = r
            row["_receipts"] = receipts
            if receipts:
                first = min(receipts.values(), key=lambda r: r["char_start"])
                row["_span"] = {k: first[k] for k in ("document", "url", "page_id", "content_hash", "reader")} | {
                    "char_start": first["char_start"], "char_end": max(r["char_end"] for r in receipts.values()),
                    "byte_verified": all(r["byte_verified"] for r in receipts.values()),
                    "content_changed": any(r["content_changed"] for r in receipts.values())}
            else:
                row["_span"] = None

    def attach(self, rel: Relation, rows: list[dict]) -> None:
        """Give every row its slot_receipts (and period receipts), re-reading the cells (or the
        documents) now."""
        extracted = [r for r in rows if r["db_table"] is None]
        if extracted:
            self.attach_spans(extracted)
        by_source: dict[tuple[str, str], list[dict]] = defaultdict(list)
        for row in rows:
            if row["db_table"] is not None:
                by_source[(row["load_id"], row["db_table"])].append(row)
        for (load_id, table), group in by_source.items():
            m = self.mapping(load_id, rel.name, table) or {"slots": {}, "key_column": None}
            columns = list(dict.fromkeys(m["slots"].values()))
            now: dict[str, dict] = {}
            error = None
            spec = self.spec(load_id)
            try:
                with Source(spec["source"], spec["format"]) as src:
                    now = src.cells(table, m.get("key_column"), [r["row_key"] for r in group], columns,
                                    {r["row_key"]: r.get("src_row") for r in group})
            except SourceError as exc:  # a source moved or gone: nothing verifies
                error = f"source unreadable: {exc}"
            except Exception as exc:
                error = f"source unreadable: {type(exc).__name__}"
            for row in group:
                receipts = {}
                for slot, column in m["slots"].items():
                    loaded = row.get(f"v_{slot}")
                    if loaded is None:
                        continue
                    read_now = now.get(row["row_key"], {}).get(column) if error is None else None
                    receipt = {"db_table": table, "db_column": column,
                               "row_key": {m.get("key_column") or "__ordinal": row["row_key"]},
                               "load_id": load_id, "value": loaded, "byte_verified": read_now == loaded}
                    if read_now != loaded:
                        receipt["read_now"] = read_now
                        if error:
                            receipt["error"] = error
                    receipts[slot] = receipt
                row["_receipts"] = receipts


# Delivery reads the store and the sources (DuckDB, which lets go of the GIL) while the caller
# counts and lists, each relation's rows on a thread of their own: a few threads every search shares.
_WORKERS = ThreadPoolExecutor(max_workers=4, thread_name_prefix="refindery-receipts")


class Delivery:
    """The rows of a page's matches being read apart (`deliver_rows_apart`); `result()` waits."""

    def __init__(self, page: list[dict], parts: list[Future]):
        self.page, self.parts = page, parts

    def result(self) -> list[dict]:
        return _assemble(self.page, [p.result() for p in self.parts])


def deliver_rows_apart(rstore: RelationStore, en: Enumerator, page: list[dict], groups: list[Group]) -> Delivery:
    """Each match of the page with the rows that satisfied its groups, each slot with its receipt
    re-read now — each relation's rows and receipts read on a thread of its own, with a cursor of
    its own (made here, on the caller's thread — a DuckDB connection is not shared across threads —
    and closed when that relation's delivery ends). `result()` waits for them."""
    parts = []
    for rel, rel_groups, numbers in _work(en, page, groups):
        con = en.con.cursor()

        def deliver(rel=rel, rel_groups=rel_groups, numbers=numbers, con=con) -> list[tuple[str, dict]]:
            try:
                return _relation_rows(rstore, en, rel, rel_groups, numbers, con)
            finally:
                con.close()

        parts.append(_WORKERS.submit(deliver))
    return Delivery(page, parts)


def _work(en: Enumerator, page: list[dict], groups: list[Group]) -> list[tuple]:
    """(relation, its groups, the page's entity numbers) for every relation a group names."""
    if not page:
        return []
    numbers = [p["ent_no"] for p in page]
    out = []
    for rel in en.plan.relations:
        rel_groups = [g for g in groups if g.relation.name == rel.name]
        if rel_groups:
            out.append((rel, rel_groups, numbers))
    return out


def _relation_rows(rstore: RelationStore, en: Enumerator, rel: Relation, rel_groups: list[Group],
                   numbers: list[int], con=None) -> list[tuple[str, dict]]:
    """(entity id, delivered row) for these entities' rows of one relation that satisfy one of its
    groups, with their receipts re-read. `con`: the cursor the store's rows are read with (default
    the enumeration's)."""
    reader = ReceiptReader(rstore, en.plan.space.workspace_id)
    rows = en.matching_rows(rel, rel_groups, numbers, con)
    matches = [g.index for g in rel_groups]
    reader.attach(rel, rows)
    delivered = []
    for row in rows:
        satisfied = [i for i in matches if row[f"m{i}"]]
        slots = {s: slot_value(rel, s, row) for s in sorted(rel.value_slots) if row.get(f"v_{s}") is not None}
        out = {"row_id": row["row_id"], "relation": rel.name, "slots": slots}
        receipts = row["_receipts"]
        if rel.period:
            pf, pt = rel.period
            out["period"] = {"from": row.get(f"v_{pf}"), "to": row.get(f"v_{pt}"),
                             "receipts": {k: receipts[k] for k in rel.period if k in receipts}}
        length = rel.length_slot
        if length and row.get(f"v_{length}") is not None:   # computed from the period's dates
            out["computed"] = {length: {"value": round(row[f"n_{length}"], 1), "arithmetic": row[f"v_{length}"]}}
        out.update(satisfies_groups=satisfied, **provenance(row),
                   slot_receipts={k: v for k, v in receipts.items() if k in slots},
                   load_id=row["load_id"])
        delivered.append((row["entity_id"], out))
    return delivered


def _assemble(page: list[dict], parts: list[list[tuple[str, dict]]]) -> list[dict]:
    delivered: dict[str, list[dict]] = defaultdict(list)
    for part in parts:
        for entity_id, row in part:
            delivered[entity_id].append(row)
    out = []
    for p in page:
        rows = sorted(delivered.get(p["entity_id"], []), key=lambda r: (min(r["satisfies_groups"]), r["row_id"]))
        out.append({"entity_id": p["entity_id"], "name": p["name"], "rank": p["rank"],
                    "rank_key": p["rank_key"], "rows": rows})
    return out
