"""Issue 70, row 1: requests with no key that ask for a generation from the future, against a replica
(a real `refindery serve` over a real PostgreSQL, loopback only, bounded), while a keyed client
searches: how the keyless requests are answered and how long they take, and the keyed searches' and
/healthz's latency meanwhile, beside the same client with nobody else sending (the baseline).

    .venv/bin/python bench/stall.py [--code DIR] [--out NAME] [--keyless 100]
    .venv/bin/python bench/stall.py --compare stall-before stall-after   # the table in hardening.md

`--code DIR` serves another checkout's code (a worktree of the commit before the fix: the "before"
column) with this environment: `python -m server.cli` run in DIR imports DIR's packages first.
Writes bench/results/<out>.json.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
sys.path.insert(0, str(ROOT))

FUTURE = "999999999999"
WINDOW_S = 8.0


def call(url: str, path: str, body: dict | None = None, headers: dict | None = None,
         timeout: float = 60.0) -> tuple[int, float, dict]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url + path, data=data, method="POST" if body is not None else "GET",
                                 headers={"content-type": "application/json", **(headers or {})})
    t = time.perf_counter()
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            out = json.loads(r.read() or b"{}")
            status = r.status
    except urllib.error.HTTPError as exc:
        status, out = exc.code, json.loads(exc.read() or b"{}")
    except OSError as exc:
        status, out = 0, {"error": str(exc)}
    return status, (time.perf_counter() - t) * 1000, out


def p(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return round(s[min(len(s) - 1, int(q * len(s)))], 1)


def searches(url: str, key: str, stop: threading.Event, out: list[float], health: list[float],
             failed: list[int]) -> None:
    queries = ["gannets dive", "json indent", "git rebase", "postgres index", "list comprehension"]
    n = 0
    while not stop.is_set():
        status, ms, _ = call(url, "/v1/search", {"query": queries[n % len(queries)], "k": 5},
                             {"Authorization": f"Bearer {key}"})
        out.append(ms)
        if status != 200:
            failed.append(status)
        if n % 5 == 0:
            health.append(call(url, "/healthz")[1])
        n += 1


def run(code: Path, keyless: int) -> dict:
    from deploy.cluster import Cluster, free_port, wait_until, get_json

    folder = Path(tempfile.mkdtemp(prefix="rf-stall-"))
    cluster = Cluster(folder / "c", replicas=0)
    cluster.folder.mkdir(parents=True)
    store_url = cluster.start_postgres()
    data = folder / "replica"
    env = {k: v for k, v in os.environ.items() if not k.startswith("REFINDERY_")}
    env.update(REFINDERY_DATA_DIR=str(data), REFINDERY_STORE__URL=store_url, REFINDERY_MODELS__DEVICE="cpu",
               REFINDERY_MODELS__CPU_THREADS="1",
               REFINDERY_SERVER__RATE_LIMIT_PER_MINUTE="0")   # the keyed client's latency, not its limit
    cli = [sys.executable, "-m", "server.cli"]
    pages = [{"url": f"https://bench.example/{i}", "title": f"note {i}",
              "body_text": f"Gannets dive; json indent; git rebase; postgres index; note {i}."} for i in range(50)]
    ingest = subprocess.run([*cli, "ingest", "-", "--no-progress"], cwd=code, env=env, capture_output=True,
                            text=True, input="\n".join(json.dumps(x) for x in pages) + "\n", timeout=600)
    assert ingest.returncode == 0, ingest.stderr
    made = subprocess.run([*cli, "keys", "create", "--workspace", "*"], cwd=code, env=env, capture_output=True,
                          text=True, timeout=300)
    assert made.returncode == 0, made.stderr
    key = json.loads(made.stdout)["token"]
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen([*cli, "serve", "--host", "127.0.0.1", "--port", str(port)], cwd=code, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_until(lambda: get_json(f"{url}/healthz", 2.0), 300, "the replica")
        for _ in range(20):   # warm: the model, the caches
            call(url, "/v1/search", {"query": "gannets dive", "k": 5}, {"Authorization": f"Bearer {key}"})
        phases = {}
        for phase in ("baseline", "keyless"):
            stop, lat, health, failed = threading.Event(), [], [], []
            t = threading.Thread(target=searches, args=(url, key, stop, lat, health, failed))
            t.start()
            answered: list[tuple[int, float]] = []
            t0 = time.perf_counter()
            if phase == "keyless":   # `keyless` senders, each sending again 0.1 s after each reply, for WINDOW_S
                end = time.monotonic() + WINDOW_S

                def sender(_):
                    got = []
                    while time.monotonic() < end and len(got) < 1000:
                        got.append(call(url, "/v1/search", {"query": "x"}, {"Refindery-Min-Generation": FUTURE})[:2])
                        time.sleep(0.1)
                    return got

                with ThreadPoolExecutor(keyless) as pool:
                    answered = [a for got in pool.map(sender, range(keyless)) for a in got]
            else:
                time.sleep(WINDOW_S)
            wall = time.perf_counter() - t0
            stop.set()
            t.join()
            codes: dict[str, int] = {}
            for status, _ in answered:
                codes[str(status)] = codes.get(str(status), 0) + 1
            phases[phase] = {
                "seconds": round(wall, 2), "keyed_searches": len(lat), "keyed_not_200": len(failed),
                "keyed_p50_ms": p(lat, 0.5), "keyed_p95_ms": p(lat, 0.95), "keyed_max_ms": p(lat, 1.0),
                "healthz_p95_ms": p(health, 0.95), "healthz_max_ms": p(health, 1.0),
                "keyless_sent": len(answered), "keyless_statuses": codes, "keyless_p50_ms": p([ms for _, ms in answered], 0.5),
                "keyless_max_ms": p([ms for _, ms in answered], 1.0)}
        return {"code": str(code), "keyless": keyless, "phases": phases}
    finally:
        server.terminate()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
        cluster.stop_postgres()


def compare(before: dict, after: dict) -> str:
    rows = ["| | before: baseline | before: 100 keyless | after: baseline | after: 100 keyless |",
            "|---|---:|---:|---:|---:|"]
    fields = [("keyed search p50 ms", "keyed_p50_ms"), ("keyed search p95 ms", "keyed_p95_ms"),
              ("keyed search max ms", "keyed_max_ms"), ("keyed searches sent", "keyed_searches"),
              ("keyed searches not 200", "keyed_not_200"),
              ("/healthz p95 ms", "healthz_p95_ms"), ("/healthz max ms", "healthz_max_ms"),
              ("keyless requests sent", "keyless_sent"), ("keyless replies", "keyless_statuses"), ("keyless max ms", "keyless_max_ms"),
              ("phase seconds", "seconds")]
    for label, f in fields:
        cells = [before["phases"]["baseline"][f], before["phases"]["keyless"][f],
                 after["phases"]["baseline"][f], after["phases"]["keyless"][f]]
        rows.append(f"| {label} | " + " | ".join(
            ", ".join(f"{k}: {v}" for k, v in c.items()) or "-" if isinstance(c, dict) else str(c) for c in cells) + " |")
    return "\n".join(rows) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--code", default=str(ROOT))
    ap.add_argument("--out", default="stall-after")
    ap.add_argument("--keyless", type=int, default=100)
    ap.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"))
    a = ap.parse_args()
    if a.compare:
        b, f = (json.loads((RESULTS / f"{n}.json").read_text()) for n in a.compare)
        print(compare(b, f))
        return 0
    out = run(Path(a.code).resolve(), a.keyless)
    (RESULTS / f"{a.out}.json").write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
