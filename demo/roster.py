"""The roster the seed's examples (and `make demo`'s relation workspace) run against: five people,
six held roles from a warehouse export, and three compliance screenings. Every name is invented.
`write_export` writes the warehouse export as a DuckDB file (tables people, roles, screenings,
screened); `LOAD` is the one SQL load that reads it. The export records no display names.
"""
from __future__ import annotations

from pathlib import Path

import duckdb

PEOPLE = ["halvard_quist", "isolde_marbrook", "odile_fenwright", "teodor_brask", "yusuf_alderane"]

# role_id, person, seniority, function, geography, company, title, started, ended
ROLES = [
    ("r-101", "halvard_quist", "VP", "Sales", "Germany", "Kestrel Pumps AG", "Vice President, Sales",
     "2016-03", "2018-09"),
    ("r-102", "halvard_quist", "Director", "Sales", "Austria", "Lumen Ridge", None, "2019-02", None),
    ("r-103", "isolde_marbrook", "SVP", "Sales", "Switzerland", "Alpenglas Holding", "SVP Sales EMEA",
     "2018-06", None),
    ("r-104", "odile_fenwright", "Director", "Marketing", "Germany", "Brightwater Foods",
     "Director of Marketing", "2017-01", None),
    ("r-105", "teodor_brask", "C-level", "Operations", "United States", "Corvid Freight",
     "Chief Operating Officer", "2015-05", None),
    ("r-106", "yusuf_alderane", "VP", "Sales", "Austria", "Tannhof Systems", "VP Sales", "2020-04", None),
]

# screening_id, person, kind, outcome, screened_on
SCREENINGS = [
    ("s-201", "halvard_quist", "compliance", "passed", "2024-02"),
    ("s-202", "isolde_marbrook", "compliance", "failed", "2023-06"),
    ("s-203", "odile_fenwright", "compliance", "passed", "2023-11"),
]

# Who the screening process looked at (Teodor was checked and has no screening; nobody ever
# looked at Yusuf's screenings).
SCREENED = ["halvard_quist", "isolde_marbrook", "odile_fenwright", "teodor_brask"]

LOAD = {
    "relations": [
        {"relation": "held_role", "table": "roles", "entity_column": "person_id", "key_column": "role_id",
         "slots": {"seniority": "seniority", "function": "function", "geography": "geography",
                   "company": "company", "title": "title", "period_from": "started", "period_to": "ended"}},
        {"relation": "screening", "table": "screenings", "entity_column": "person_id",
         "key_column": "screening_id",
         "slots": {"kind": "kind", "outcome": "outcome", "as_of": "screened_on"}},
    ],
    "entities": {"table": "people", "id_column": "person_id"},
    "coverage": [
        {"relation": "held_role", "table": "people", "entity_column": "person_id"},
        {"relation": "screening", "table": "screened", "entity_column": "person_id"},
    ],
}


def write_export(path: Path) -> Path:
    """The warehouse export as a DuckDB file (rewritten from scratch)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        path.unlink()
    con = duckdb.connect(str(path))
    try:
        con.execute("CREATE TABLE people (person_id VARCHAR)")
        con.executemany("INSERT INTO people VALUES (?)", [[p] for p in PEOPLE])
        con.execute("CREATE TABLE roles (role_id VARCHAR, person_id VARCHAR, seniority VARCHAR, function VARCHAR, "
                    "geography VARCHAR, company VARCHAR, title VARCHAR, started VARCHAR, ended VARCHAR)")
        con.executemany("INSERT INTO roles VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", [list(r) for r in ROLES])
        con.execute("CREATE TABLE screenings (screening_id VARCHAR, person_id VARCHAR, kind VARCHAR, "
                    "outcome VARCHAR, screened_on VARCHAR)")
        con.executemany("INSERT INTO screenings VALUES (?, ?, ?, ?, ?)", [list(s) for s in SCREENINGS])
        con.execute("CREATE TABLE screened (person_id VARCHAR)")
        con.executemany("INSERT INTO screened VALUES (?)", [[p] for p in SCREENED])
    finally:
        con.close()
    return path
