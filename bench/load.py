"""Load test (loopback only, bounded): a real `refindery serve` on a Unix socket, several client
processes searching and one ingesting for a fixed time; then a consistency check.

    .venv/bin/python bench/load.py [--seconds 30] [--searchers 3] [--ingest-batch 4]

Throughput beside txtai (`--throughput`): `refindery serve` over one development collection and
txtai's hybrid search over the same documents behind the same HTTP shape (bench/txtai_server.py),
each in turn alone on the machine; a closed loop of C concurrent clients (one asyncio process,
C = 1, 2, 4, 8) sends the collection's queries for a fixed time per level. Reports searches/s and
p50/p95 per level, and the most searches/s at which p95 stays within 100 ms. Writes
bench/results/throughput.{json,md}.

    .venv/bin/python bench/load.py --throughput [--collection med] [--seconds 15] [--levels 1 2 4 8]

Reports per kind: requests, throughput, p50/p95/p99 latency (ms) and errors (target: zero); then
whether every acknowledged page is searchable (found by its URL) and the store and indexes agree.
Writes bench/results/load.json and load.md.
"""
from __future__ import annotations

import argparse
import gzip
import json
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
QUERIES = ["how do I pretty-print JSON", "create a table from a query", "sqlite date functions",
           "queue between threads",
           "postgres sequence", "read a file line by line", "email encoders", "alter aggregate", "object identifier"]


def client(sock: str):
    import httpx

    return httpx.Client(transport=httpx.HTTPTransport(uds=sock), base_url="http://refindery", timeout=120)


def wait_healthy(sock: str, tries: int = 600):
    """A client of the server on `sock`, once /healthz answers 200 (at most `tries` attempts)."""
    c = client(sock)
    for _ in range(tries):
        try:
            if c.get("/healthz").status_code == 200:
                break
        except Exception:
            time.sleep(0.2)
    return c


def searcher(sock: str, seconds: float, out: mp.Queue, seed: int) -> None:
    c, lat, errors, n = client(sock), [], 0, seed
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t = time.perf_counter()
        try:
            ok = c.post("/v1/search", json={"query": QUERIES[n % len(QUERIES)], "k": 10}).status_code == 200
        except Exception:
            ok = False
        lat.append((time.perf_counter() - t) * 1000)
        errors += not ok
        n += 1
    out.put(("search", lat, errors, []))


def ingester(sock: str, seconds: float, out: mp.Queue, records: list[dict], batch: int) -> None:
    c, lat, errors, acked = client(sock), [], 0, []
    end = time.monotonic() + seconds
    i = 0
    while time.monotonic() < end and i < len(records):
        t = time.perf_counter()
        try:
            r = c.post("/v1/pages", json={"pages": records[i:i + batch]})
            ok = r.status_code == 200 and not r.json()["errors"]
            if r.status_code == 200:
                acked += [(it["page_id"], it["url"]) for it in r.json()["items"] if it["page_id"]]
        except Exception:
            ok = False
        lat.append((time.perf_counter() - t) * 1000)
        errors += not ok
        i += batch
    out.put(("ingest", lat, errors, acked))


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(p * (len(xs) - 1) + 0.5))], 1) if xs else 0.0


async def _closed_loop(sock: str, bodies: list[dict], concurrency: int, seconds: float) -> tuple[list[float], int]:
    """`concurrency` clients, each sending the next body as soon as its last answer came."""
    import asyncio

    import httpx

    lat: list[float] = []
    errors = 0
    end = time.monotonic() + seconds
    async with httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(uds=sock), base_url="http://bench",
                                 timeout=120) as c:
        async def worker(i: int):
            nonlocal errors
            n = i
            while time.monotonic() < end:
                t = time.perf_counter()
                r = await c.post("/v1/search", json=bodies[n % len(bodies)])
                lat.append((time.perf_counter() - t) * 1000)
                errors += r.status_code != 200
                n += concurrency

        await asyncio.gather(*(worker(i) for i in range(concurrency)))
    return lat, errors


def throughput(args) -> int:
    """Searches/s under concurrent clients, ours beside txtai's, on the same machine and documents."""
    import asyncio

    sys.path.insert(0, str(ROOT / "bench"))
    from common import ir_engine, write

    name = args.collection
    data_root = ROOT / "data-peers"
    engine, coll = ir_engine(data_root, name, [])   # ingested on first use, as peers.py does
    engine.close()
    queries = [q[:2000] for q in coll.queries.values()]
    tmp = Path(tempfile.mkdtemp(prefix="bench-throughput-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("REFINDERY_")} | {
        "REFINDERY_DATA_DIR": str(data_root / name), "REFINDERY_MODELS__DEVICE": "cpu",
        # every query is embedded, as txtai embeds every query (the queries repeat in the loop)
        "REFINDERY_SEARCH__QUERY_CACHE_SIZE": "0"}
    ours_cmd = [sys.executable, "-m", "server.cli", "serve", "--uds", str(tmp / "ours.sock")]
    txtai_cmd = [sys.executable, str(ROOT / "bench" / "txtai_server.py"), "--collection", name,
                 "--uds", str(tmp / "txtai.sock")]
    ours_bodies = [{"query": q, "k": 10, "workspace": name, "pin": False} for q in queries]
    txtai_bodies = [{"query": q, "k": 10} for q in queries]
    one = {"OMP_NUM_THREADS": "1"}   # torch's intra-op threads, read by both at start
    servers = {   # label: (command, socket, bodies, extra environment)
        "refindery": (ours_cmd, tmp / "ours.sock", ours_bodies, {}),
        "refindery, 1 torch thread": (ours_cmd, tmp / "ours.sock", ours_bodies, {"REFINDERY_MODELS__CPU_THREADS": "1"}),
        "txtai": (txtai_cmd, tmp / "txtai.sock", txtai_bodies, {}),
        "txtai, 1 torch thread": (txtai_cmd, tmp / "txtai.sock", txtai_bodies, one),
    }
    report = {"collection": name, "docs": len(coll.docs), "queries": len(queries), "seconds": args.seconds,
              "cpus": os.cpu_count(), "levels": args.levels, "servers": {}}
    for label, (cmd, sock, bodies, extra) in servers.items():
        sock.unlink(missing_ok=True)
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env | extra, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            c = wait_healthy(str(sock), tries=3000)   # txtai indexes the collection at start
            for b in bodies[:10]:   # warm-up
                c.post("/v1/search", json=b)
            rows = {}
            for level in args.levels:
                t0 = time.monotonic()
                lat, errors = asyncio.run(_closed_loop(str(sock), bodies, level, args.seconds))
                wall = time.monotonic() - t0
                rows[str(level)] = {"requests": len(lat), "per_s": round(len(lat) / wall, 2), "errors": errors,
                                    "p50_ms": pct(lat, 0.5), "p95_ms": pct(lat, 0.95)}
                print(label, level, rows[str(level)], flush=True)
            ok = [r["per_s"] for r in rows.values() if r["p95_ms"] <= 100 and r["errors"] == 0]
            report["servers"][label] = {"levels": rows, "per_s_at_p95_100ms": max(ok) if ok else 0.0}
        finally:
            proc.kill()
            proc.wait()
    labels = list(servers)
    lines = [f"## Throughput beside txtai ({name}: {len(coll.docs)} documents, {len(queries)} queries; "
             f"{report['cpus']} CPUs, Unix socket, one client process; {args.seconds:.0f} s per level)", "",
             "searches/s · p50 / p95 ms", "",
             "| concurrent clients | " + " | ".join(labels) + " |", "|---|" + "---|" * len(labels)]
    for level in args.levels:
        cells = [report["servers"][lb]["levels"][str(level)] for lb in labels]
        lines.append(f"| {level} | " + " | ".join(f"{c['per_s']} · {c['p50_ms']} / {c['p95_ms']}" for c in cells) + " |")
    lines += ["", "Most searches/s with p95 ≤ 100 ms: " + "; ".join(
        f"{lb} {report['servers'][lb]['per_s_at_p95_100ms']}" for lb in labels) + ". Ours answers k = 10 pages "
        "hydrated (url, title, timestamps, snippets with highlights); txtai's route answers ids and scores. Both embed "
        "every query (our query-embedding cache is off here: the loop repeats the collection's queries). "
        "1 torch thread: `[models] cpu_threads = 1` for ours (torch and the ONNX Runtime query session), OMP_NUM_THREADS=1 for txtai."]
    write("throughput", report, "\n".join(lines) + "\n")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--searchers", type=int, default=3)
    ap.add_argument("--ingest-batch", type=int, default=4)
    ap.add_argument("--throughput", action="store_true", help="searches/s under concurrent clients, beside txtai")
    ap.add_argument("--collection", default="med", help="--throughput: the development collection")
    ap.add_argument("--levels", type=int, nargs="+", default=[1, 2, 4, 8], help="--throughput: concurrent clients")
    args = ap.parse_args()
    if args.throughput:
        return throughput(args)
    tmp = Path(tempfile.mkdtemp(prefix="bench-load-"))
    data, sock = tmp / "data", str(tmp / "refindery.sock")
    with gzip.open(ROOT / "demo" / "pages.jsonl.gz", "rt", encoding="utf-8") as fh:
        records = [json.loads(line) for line in fh]
    seen, unique = set(), []
    for r in records:
        if r["url"] not in seen:
            seen.add(r["url"])
            unique.append(r)
    base, rest = unique[:100], unique[100:]
    env = {k: v for k, v in os.environ.items() if not k.startswith("REFINDERY_")} | {
        "REFINDERY_DATA_DIR": str(data), "REFINDERY_MODELS__DEVICE": "cpu"}
    subprocess.run([sys.executable, "-m", "server.cli", "ingest", "-", "--no-progress"], cwd=ROOT, env=env, check=True,
                   input="".join(json.dumps(r) + "\n" for r in base), text=True, stdout=subprocess.DEVNULL)
    server = subprocess.Popen([sys.executable, "-m", "server.cli", "serve", "--uds", sock], cwd=ROOT, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        c = wait_healthy(sock)
        c.post("/v1/search", json={"query": "warm up"})
        out: mp.Queue = mp.Queue()
        procs = [mp.Process(target=searcher, args=(sock, args.seconds, out, i)) for i in range(args.searchers)]
        procs.append(mp.Process(target=ingester, args=(sock, args.seconds, out, rest, args.ingest_batch)))
        t0 = time.monotonic()
        for p in procs:
            p.start()
        results = [out.get(timeout=args.seconds + 600) for _ in procs]
        for p in procs:
            p.join()
        wall = time.monotonic() - t0
        report = {"seconds": args.seconds, "searchers": args.searchers, "cpus": os.cpu_count(), "kinds": {}}
        acked = []
        for kind in ("search", "ingest"):
            lat = [x for k, ls, _, _ in results if k == kind for x in ls]
            errors = sum(e for k, _, e, _ in results if k == kind)
            acked += [a for k, _, _, a in results if k == kind for a in a]
            report["kinds"][kind] = {"requests": len(lat), "per_s": round(len(lat) / wall, 2), "errors": errors,
                                     "p50_ms": pct(lat, 0.5), "p95_ms": pct(lat, 0.95), "p99_ms": pct(lat, 0.99),
                                     "mean_ms": round(statistics.fmean(lat), 1) if lat else 0.0}
        report["kinds"]["ingest"]["pages_acknowledged"] = len(acked)
        def found(pid: str, url: str) -> bool:
            hits = c.post("/v1/search", json={"query": url, "k": 3}).json()["pages"]
            return any(h["page_id"] == pid for h in hits)

        missing = [pid for pid, url in acked if not found(pid, url)]
        status = c.get("/v1/status").json()
        report["consistency"] = {"acknowledged_pages_not_found": len(missing),
                                 "store_and_indexes_agree": status["generations"]["consistent"],
                                 "pages": status["counts"]["pages"], "expected_pages": len(base) + len(acked)}
    finally:
        server.kill()
        server.wait()
    outdir = ROOT / "bench" / "results"
    outdir.mkdir(parents=True, exist_ok=True)
    (outdir / "load.json").write_text(json.dumps(report, indent=2) + "\n")
    lines = [f"## Load ({args.searchers} search processes + 1 ingest process, {args.seconds:.0f} s, "
             f"{report['cpus']} CPUs, Unix socket)", "",
             "| kind | requests | per s | p50 ms | p95 ms | p99 ms | errors |", "|---|---|---|---|---|---|---|"]
    for kind, r in report["kinds"].items():
        lines.append(f"| {kind} | {r['requests']} | {r['per_s']} | {r['p50_ms']} | {r['p95_ms']} | {r['p99_ms']} | "
                     f"{r['errors']} |")
    k = report["consistency"]
    lines += ["", f"Pages acknowledged during the run: {report['kinds']['ingest']['pages_acknowledged']}; not found "
              f"by their URL afterwards: {k['acknowledged_pages_not_found']}; store and indexes agree: "
              f"{k['store_and_indexes_agree']}; pages {k['pages']} (expected {k['expected_pages']})."]
    (outdir / "load.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    ok = all(r["errors"] == 0 for r in report["kinds"].values()) and not missing and k["store_and_indexes_agree"] \
        and k["pages"] == k["expected_pages"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
