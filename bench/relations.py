"""Relation search latency over 100k entities and 1M rows: a five-constraint search, and each
constraint alone (the numbers counts.per_constraint reports, as their own searches).

    .venv/bin/python bench/relations.py [--entities 100000] [--rows 1000000] [--repeats 30]

The roster is synthetic: held roles (70% of the rows) and screenings (30%) with seniority,
function, geography (incl. synonyms such as "Deutschland" and a few unknown surfaces), company,
title, tenure months and screening months, written to a DuckDB file and loaded through the
product's own SQL load (which is timed too). Coverage: every entity for held_role, 80% for
screening. Each search is the engine's RelationSearch.search (enumeration, counts, lists, the page
of 50 matches with rows and receipts re-read from the source, the audit event). Writes
bench/results/relations.json and relations.md.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.app import Engine  # noqa: E402
from engine.core.settings import load_settings  # noqa: E402
from engine.relations.constraints import bind, parse_constraints  # noqa: E402
from engine.relations.loads import LoadRequest  # noqa: E402
from engine.relations.plan import Plan, make_groups  # noqa: E402
from engine.relations.search import RelationSearchRequest  # noqa: E402
from engine.relations.workspaces import WorkspaceCreate, open_space  # noqa: E402

FIVE = [
    {"relation": "held_role", "slot": "seniority", "op": "gte", "value": "VP"},
    {"relation": "held_role", "slot": "function", "op": "eq", "value": "Sales"},
    {"relation": "held_role", "slot": "geography", "op": "eq", "value": "DACH"},
    {"relation": "screening", "slot": "kind", "op": "eq", "value": "compliance"},
    {"relation": "screening", "slot": "outcome", "op": "eq", "value": "passed"},
]
SENIORITY = ["IC", "Manager", "Director", "VP", "SVP", "C-level", "Vice President", "Principal"]
FUNCTION = ["Sales", "Marketing", "Operations", "Finance", "Engineering", "Product", "Legal", "Vertrieb"]
GEOGRAPHY = ["Germany", "Austria", "Switzerland", "Deutschland", "Sweden", "United States", "France",
             "United Kingdom", "Canada", "Benelux"]


def write_source(path: Path, n_entities: int, n_rows: int, seed: int = 7) -> None:
    rng = np.random.default_rng(seed)
    ids = np.array([f"p{i:06d}" for i in range(n_entities)])
    n_roles = int(n_rows * 0.7)
    n_screen = n_rows - n_roles
    start = rng.integers(2000 * 12, 2024 * 12, size=n_roles)
    length = rng.integers(6, 120, size=n_roles)
    open_ = rng.random(n_roles) < 0.3

    def month(m):
        return [f"{x // 12:04d}-{x % 12 + 1:02d}" for x in m]

    ended = np.array(month(start + length), dtype=object)
    ended[open_] = None
    roles = pa.table({
        "role_id": [f"r{i}" for i in range(n_roles)],
        "person_id": ids[rng.integers(0, n_entities, size=n_roles)],
        "seniority": np.array(SENIORITY)[rng.integers(0, len(SENIORITY), size=n_roles)],
        "function": np.array(FUNCTION)[rng.integers(0, len(FUNCTION), size=n_roles)],
        "geography": np.array(GEOGRAPHY)[rng.integers(0, len(GEOGRAPHY), size=n_roles)],
        "company": [f"Company {i % 5000}" for i in range(n_roles)],
        "title": [f"Title {i % 300}" for i in range(n_roles)],
        "started": month(start),
        "ended": pa.array(ended, pa.string()),
    })
    screened = ids[rng.random(n_entities) < 0.8]
    screenings = pa.table({
        "screening_id": [f"s{i}" for i in range(n_screen)],
        "person_id": screened[rng.integers(0, len(screened), size=n_screen)],
        "kind": np.array(["compliance", "conflicts", "background"])[rng.integers(0, 3, size=n_screen)],
        "outcome": np.array(["passed", "failed", "pending"])[rng.integers(0, 3, size=n_screen)],
        "screened_on": month(rng.integers(2015 * 12, 2025 * 12, size=n_screen)),
    })
    people = pa.table({"person_id": ids})
    screened_t = pa.table({"person_id": screened})
    if path.exists():
        path.unlink()
    con = duckdb.connect(str(path))
    for name, t in (("roles", roles), ("screenings", screenings), ("people", people), ("screened", screened_t)):
        con.register("t", t)
        con.execute(f"CREATE TABLE {name} AS SELECT * FROM t")
        con.unregister("t")
    con.close()


LOAD = {
    "relations": [
        {"relation": "held_role", "table": "roles", "entity_column": "person_id", "key_column": "role_id",
         "slots": {"seniority": "seniority", "function": "function", "geography": "geography",
                   "company": "company", "title": "title", "period_from": "started", "period_to": "ended"}},
        {"relation": "screening", "table": "screenings", "entity_column": "person_id", "key_column": "screening_id",
         "slots": {"kind": "kind", "outcome": "outcome", "as_of": "screened_on"}},
    ],
    "entities": {"table": "people", "id_column": "person_id"},
    "coverage": [
        {"relation": "held_role", "table": "people", "entity_column": "person_id"},
        {"relation": "screening", "table": "screened", "entity_column": "person_id"},
    ],
}


def pct(xs, q):
    return float(np.percentile(np.array(xs), q))


def timed(fn, repeats, before=None):
    """`before`, when given, runs ahead of every timed call, untimed (clearing the verdict cache)."""
    fn()  # warm
    out = []
    for _ in range(repeats):
        if before is not None:
            before()
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1000)
    return {"p50_ms": round(statistics.median(out), 1), "p95_ms": round(pct(out, 95), 1),
            "min_ms": round(min(out), 1), "n": repeats}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--entities", type=int, default=100_000)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-relations-"))
    source = tmp / "export.duckdb"
    t = time.perf_counter()
    write_source(source, args.entities, args.rows)
    gen_s = time.perf_counter() - t
    engine = Engine(load_settings(data_dir=str(tmp / "data")))
    ws = engine.create_relation_workspace(WorkspaceCreate(name="bench"))["workspace_id"]
    t = time.perf_counter()
    summary = engine.load(ws, LoadRequest(source=str(source), **LOAD), confined=False)
    load_s = time.perf_counter() - t
    print(f"generated in {gen_s:.1f}s, loaded {sum(r['rows'] for r in summary['relations'])} rows in {load_s:.1f}s")
    results = {}

    def search(constraints, **kw):
        return engine.relation_search(RelationSearchRequest(workspace_id=ws, constraints=constraints, **kw))

    body = search(FIVE)
    cache = engine.corpus.relations.verdicts
    # first: a plan never asked for at this workspace version (the cache emptied before each);
    # repeated: the same search again (its statuses from the cache); refined: the held_role
    # constraints asked for before, the screening ones new (held_role's verdicts from the cache).
    columns = engine.corpus.relations.columns

    def after_write():
        columns.settle()
        cache.clear()
        columns.clear()

    def search_and_read():
        search(FIVE)
        columns.settle()

    # after a write: nothing held yet — the search is judged in SQL while the relations' rows are read
    # into columns on a thread of their own; and that search together with the read
    results["five_constraints_after_write"] = timed(lambda: search(FIVE), max(5, args.repeats // 3), after_write)
    results["five_constraints_after_write_and_columns_read"] = timed(search_and_read, max(5, args.repeats // 3),
                                                                     after_write)
    columns.settle()

    def written():
        columns.settle()
        cache.clear()
        engine.corpus.relations.changed(ws)   # what a load or correction does to what is held
        columns.settle()                      # ... and the held relations' rows read again at once

    # a write, then a search once the held relations have been read again (about a second)
    results["five_constraints_after_write_once_read_again"] = timed(lambda: search(FIVE), max(5, args.repeats // 3),
                                                                    written)
    columns.settle()
    search(FIVE)
    search(FIVE, as_of="2020-01")
    results["five_constraints_first"] = timed(lambda: search(FIVE), args.repeats, cache.clear)
    results["five_constraints_first"]["matched"] = body["counts"]["matched"]
    results["five_constraints_as_of_first"] = timed(lambda: search(FIVE, as_of="2020-01"), args.repeats, cache.clear)
    results["five_constraints_repeated"] = timed(lambda: search(FIVE), args.repeats)
    results["five_constraints_as_of_repeated"] = timed(lambda: search(FIVE, as_of="2020-01"), args.repeats)
    outcomes = iter(["failed", "pending"] * args.repeats * 2)

    def refine():
        cache.clear()
        for _ in range(2):
            search(FIVE[:3])   # asked for twice: held_role's verdicts are cached

    def refined():
        search(FIVE[:4] + [{**FIVE[4], "value": next(outcomes)}])

    results["five_constraints_refined"] = timed(refined, args.repeats, refine)
    rstore = engine.corpus.relations   # below the engine: the enumeration's SQL alone, without the warrant
    space = open_space(rstore, ws)
    bound, _ = bind(parse_constraints(FIVE), space.schema, space.vocabulary)

    def enumerate_only():
        en = rstore.enumerator(Plan(space, make_groups(bound), bound, None, ["person"]))
        en.run()
        en.drop()

    results["five_constraints_enumeration_only_first"] = timed(enumerate_only, args.repeats, cache.clear)
    budget = columns.budget
    columns.budget = 0    # the same searches judged in SQL (`[relations] columns_mb = 0`)
    results["five_constraints_first_sql"] = timed(lambda: search(FIVE), args.repeats, cache.clear)
    results["five_constraints_as_of_first_sql"] = timed(lambda: search(FIVE, as_of="2020-01"), args.repeats,
                                                        cache.clear)
    columns.budget = budget
    for i, c in enumerate(FIVE):
        results[f"alone_{i}_{c['slot']}_first"] = timed(lambda c=c: search([c]), args.repeats, cache.clear)
    cores = os.cpu_count()
    report = {"date": datetime.now().isoformat(timespec="seconds"), "entities": args.entities,
              "rows": args.rows, "cores": cores, "load_s": round(load_s, 1), "results": results}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "relations.json").write_text(json.dumps(report, indent=2))
    lines = [f"# Relation search latency ({args.entities:,} entities, {args.rows:,} rows, {cores} cores)", "",
             f"Load of the export through the SQL load: {load_s:.1f} s. "
             f"Each figure: {args.repeats} searches after one warm-up. *after_write*: nothing held — the "
             "verdict cache and the relations' columns emptied before each search, which is judged in SQL "
             "while the rows are read into columns on a thread of their own (*_and_columns_read*: until that "
             "read ends); *after_write_once_read_again*: a write (the workspace's version moved), then the search once "
             "the relations held before it have been read again, which the write starts at once; *first*: the verdict "
             "cache emptied before each search (a plan never asked for at this "
             "workspace version; the columns held since the first search after the load); *repeated*: the "
             "same search again; *refined*: the held_role constraints asked for twice before, the screening "
             "outcome new each time; *_sql*: judged in SQL, the columns off (`[relations] columns_mb = 0`).",
             "",
             "| search | p50 ms | p95 ms | min ms |", "|---|---:|---:|---:|"]
    for name, r in results.items():
        lines.append(f"| {name} | {r['p50_ms']} | {r['p95_ms']} | {r['min_ms']} |")
    (out / "relations.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    engine.close()


if __name__ == "__main__":
    main()
