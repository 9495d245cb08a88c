"""Delivering rows: the rows that satisfied a group for each listed match, each slot with its
structured receipt {db_table, db_column, row_key} re-read from the source cell on delivery and
marked byte_verified when the cell still reads what was loaded."""
from __future__ import annotations

import json
from collections import defaultdict

from indexes.relations import RelationStore
from indexes.sources import Source, SourceError

from indexes.enumeration import Enumerator

from engine.relations.plan import Group
from engine.core.packs import Relation


def slot_value(rel: Relation, slot: str, row: dict):
    """What a row states for a slot, in the vocabulary's own label where it has one."""
    kind = rel.slots[slot].type
    if kind == "term" and row.get(f"t_{slot}") is not None:
        return row[f"t_{slot}"]
    if kind == "number" and row.get(f"n_{slot}") is not None:
        n = row[f"n_{slot}"]
        return int(n) if float(n).is_integer() else n
    return row.get(f"v_{slot}")


class ReceiptReader:
    """Re-reads receipts in batches: one source opening and one query per (load, table)."""

    def __init__(self, rstore: RelationStore):
        self.rstore = rstore
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

    def attach(self, rel: Relation, rows: list[dict]) -> None:
        """Give every row its slot_receipts (and period receipts), re-reading the cells now."""
        by_source: dict[tuple[str, str], list[dict]] = defaultdict(list)
        for row in rows:
            by_source[(row["load_id"], row["db_table"])].append(row)
        for (load_id, table), group in by_source.items():
            m = self.mapping(load_id, rel.name, table) or {"slots": {}, "key_column": None}
            columns = list(dict.fromkeys(m["slots"].values()))
            now: dict[str, dict] = {}
            error = None
            spec = self.spec(load_id)
            try:
                with Source(spec["source"], spec["format"]) as src:
                    now = src.cells(table, m.get("key_column"), [r["row_key"] for r in group], columns)
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


def deliver_rows(rstore: RelationStore, en: Enumerator, page: list[dict], groups: list[Group]) -> list[dict]:
    if not page:
        return []
    numbers = [p["ent_no"] for p in page]
    plan = en.plan
    reader = ReceiptReader(rstore)
    delivered: dict[str, list[dict]] = defaultdict(list)
    for rel in plan.relations:
        rel_groups = [g for g in groups if g.relation.name == rel.name]
        if not rel_groups:
            continue
        rows = en.matching_rows(rel, rel_groups, numbers)
        matches = [g.index for g in rel_groups]
        reader.attach(rel, rows)
        for row in rows:
            satisfied = [i for i in matches if row[f"m{i}"]]
            slots = {s: slot_value(rel, s, row) for s in sorted(rel.value_slots) if row.get(f"v_{s}") is not None}
            out = {"row_id": row["row_id"], "relation": rel.name, "slots": slots}
            receipts = row["_receipts"]
            if rel.period:
                pf, pt = rel.period
                out["period"] = {"from": row.get(f"v_{pf}"), "to": row.get(f"v_{pt}"),
                                 "receipts": {k: receipts[k] for k in rel.period if k in receipts}}
            out.update(satisfies_groups=satisfied, provenance_kind="declared", receipt=None,
                       slot_receipts={k: v for k, v in receipts.items() if k in slots},
                       load_id=row["load_id"])
            delivered[row["entity_id"]].append(out)
    out = []
    for p in page:
        rows = sorted(delivered.get(p["entity_id"], []), key=lambda r: (min(r["satisfies_groups"]), r["row_id"]))
        out.append({"entity_id": p["entity_id"], "name": p["name"], "rank": p["rank"],
                    "rank_key": p["rank_key"], "rows": rows})
    return out
