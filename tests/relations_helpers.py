"""Helpers for the relation tests: write a small warehouse export, load it, search it.

Everything goes through the public HTTP API of a real app over a real DuckDB store; the exports
are real DuckDB (or SQLite / Parquet / CSV) files written with their own libraries.
"""
from __future__ import annotations

import itertools
from pathlib import Path

import duckdb

ROLE_COLS = ["role_id", "person_id", "seniority", "function", "geography", "company", "title", "industry",
             "started", "ended"]
SCREEN_COLS = ["screening_id", "person_id", "kind", "outcome", "screened_on"]
_n = itertools.count()


def role(person, seniority="VP", function="Sales", geography="Germany", started="2019-01", ended=None,
         company="Acme AG", title=None, industry=None, role_id=None):
    return {"role_id": role_id or f"r{next(_n)}", "person_id": person, "seniority": seniority,
            "function": function, "geography": geography, "company": company, "title": title,
            "industry": industry, "started": started, "ended": ended}


def screening(person, outcome="passed", kind="compliance", on="2023-05", screening_id=None):
    return {"screening_id": screening_id or f"s{next(_n)}", "person_id": person, "kind": kind,
            "outcome": outcome, "screened_on": on}


def write_duckdb(path: Path, tables: dict[str, tuple[list[str], list[dict]]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        path.unlink()
    con = duckdb.connect(str(path))
    try:
        for name, (cols, rows) in tables.items():
            con.execute(f"CREATE TABLE {name} (" + ", ".join(f'"{c}" VARCHAR' for c in cols) + ")")
            if rows:
                con.executemany(f"INSERT INTO {name} VALUES (" + ", ".join("?" for _ in cols) + ")",
                                [[None if r.get(c) is None else str(r[c]) for c in cols] for r in rows])
    finally:
        con.close()
    return path


def export(path: Path, people, roles=(), screenings=(), screened=None) -> Path:
    """A warehouse export: people, roles, screenings, and who the screening process looked at."""
    screened = sorted({s["person_id"] for s in screenings}) if screened is None else screened
    return write_duckdb(path, {
        "people": (["person_id", "display_name"], [{"person_id": p, "display_name": None} for p in people]),
        "roles": (ROLE_COLS, list(roles)),
        "screenings": (SCREEN_COLS, list(screenings)),
        "screened": (["person_id"], [{"person_id": p} for p in screened]),
    })


def load_body(source: Path, industry: bool = False, names: bool = False, screening_coverage: bool = True) -> dict:
    slots = {"seniority": "seniority", "function": "function", "geography": "geography", "company": "company",
             "title": "title", "period_from": "started", "period_to": "ended"}
    if industry:
        slots["industry"] = "industry"
    coverage = [{"relation": "held_role", "table": "people", "entity_column": "person_id"}]
    if screening_coverage:
        coverage.append({"relation": "screening", "table": "screened", "entity_column": "person_id"})
    entities = {"table": "people", "id_column": "person_id"}
    if names:
        entities["name_column"] = "display_name"
    return {"source": str(source),
            "relations": [
                {"relation": "held_role", "table": "roles", "entity_column": "person_id", "key_column": "role_id",
                 "slots": slots},
                {"relation": "screening", "table": "screenings", "entity_column": "person_id",
                 "key_column": "screening_id", "slots": {"kind": "kind", "outcome": "outcome", "as_of": "screened_on"}},
            ],
            "entities": entities, "coverage": coverage}


def new_workspace(client, packs=("expert_network",)) -> str:
    r = client.post("/v1/public/workspaces", json={"packs": list(packs)})
    assert r.status_code == 201, r.text
    return r.json()["workspace_id"]


def load(client, ws: str, body: dict) -> dict:
    r = client.post(f"/v1/public/workspaces/{ws}/loads", json=body)
    assert r.status_code == 201, r.text
    return r.json()


def loaded(client, tmp_path: Path, people, roles=(), screenings=(), screened=None, **body_kw) -> str:
    """A fresh workspace holding this export."""
    src = export(tmp_path / f"export-{next(_n)}.duckdb", people, roles, screenings, screened)
    ws = new_workspace(client)
    load(client, ws, load_body(src, **body_kw))
    return ws


def search(client, ws: str, constraints, **kw) -> dict:
    r = client.post("/v1/public/search", json={"workspace_id": ws, "constraints": constraints, **kw})
    assert r.status_code == 200, r.text
    return r.json()


def c(relation, slot, op, value, required=True):
    return {"relation": relation, "slot": slot, "op": op, "value": value, "required": required}


# Two profiles as documents (front matter and labelled lines), for document loads
AMARA = """---
id: amara_okafor
name: Amara Okafor
roles:
  - title: "VP Sales DACH"
    seniority: VP
    function: Sales
    geography: Deutschland
    company: Kestrel Pumps AG
    from: 2016-03
    to: 2018-09
  - title: Chief Revenue Officer
    seniority: CRO
    function: Sales
    geography: Austria
    company: Lumen Ridge
    from: 2019-02
---
# Amara Okafor

Amara has led commercial teams across the DACH region for a decade. Before that she spent five
years as Head of Sales at Nordwind Logistics in Sweden, from March 2010 to 2015.

## Screening
- **Kind:** compliance
- **Outcome:** passed
- **Date:** 2024-02

## Engagements
| Topic | Rate (USD/h) |
|---|---|
| pricing strategy | 450 |
| channel partnerships | 400 |
"""


BO = """---
id: bo_lindqvist
name: Bo Lindqvist
roles:
  - title: Director of Marketing
    seniority: Director
    function: Marketing
    geography: Sweden
    company: Fjord Foods
    from: 2017-01
---
Bo runs marketing for a consumer brand.

## Screening
Kind: compliance
Outcome: failed
Date: 2023-06
"""


def write(folder, files: dict[str, str]):
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text, encoding="utf-8")
    return folder
