"""Issue 72: a server's searches while it fetches an import's texts. A real `refindery serve` on
loopback (imports from private addresses allowed, no rate limit; `[imports]` otherwise as shipped but for
host_interval_s 0.2) takes a history of N URLs spread over 10 hosts (127.0.0.2 ... 127.0.0.11, one local
server answering each page after 50 ms, as a distant site would) through POST /v1/imports, and
fetches their texts in its background; a client searches in a loop meanwhile. Search p50/p95 with
nothing imported, then during the fetch; the fetch's pages/s.

    .venv/bin/python bench/history_fetch.py [--urls 400] [--out history-fetch]

Writes bench/results/<out>.json and prints the table for bench/results/history-import.md."""
from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "tests" / "extension")]
RESULTS = ROOT / "bench" / "results"
WORDS = ("harbour pilot tide table lighthouse keeper chart herring net quay council letter ferry gull colony rope "
         "splice buoy colour night estuary curlew reed heron kestrel wren bramble mill marsh creek osprey").split()
QUERIES = ["harbour pilot tide tables", "lighthouse keeper charts", "herring run nets quay", "council letter"]


def site(port_holder: list[int]) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):   # noqa: N802
            rng = random.Random(self.path)
            text = " ".join(rng.choice(WORDS) for _ in range(400))
            body = f"<html><head><title>{self.path}</title></head><body><article><p>{text}</p></article></body></html>"
            time.sleep(0.05)
            data = body.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    srv = ThreadingHTTPServer(("", 0), Handler)
    srv.daemon_threads = True
    port_holder.append(srv.server_address[1])
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(q * len(xs)))], 1) if xs else float("nan")


def searches(c: httpx.Client, until) -> list[float]:
    out, n = [], 0
    while not until():
        t = time.perf_counter()
        r = c.post("/v1/search", json={"query": QUERIES[n % len(QUERIES)], "k": 10, "shortcuts": False})
        assert r.status_code == 200, r.text
        out.append((time.perf_counter() - t) * 1000)
        n += 1
    return out


def main() -> None:
    from conftest import MODELS_CACHE
    from harness import Refindery, create_keys

    ap = argparse.ArgumentParser()
    ap.add_argument("--urls", type=int, default=400)
    ap.add_argument("--idle-s", type=float, default=20)
    ap.add_argument("--out", default="history-fetch")
    args = ap.parse_args()
    port: list[int] = []
    srv = site(port)
    entries = [{"url": f"http://127.0.0.{2 + i % 10}:{port[0]}/page/{i}", "title": f"Page {i}",
                "visits": ["2026-11-01T10:00:00Z"]} for i in range(args.urls)]
    with tempfile.TemporaryDirectory(prefix="bench-fetch-") as tmp:
        data = Path(tmp) / "data"
        keys = create_keys(data, None)
        server = Refindery(data, MODELS_CACHE, env={"REFINDERY_IMPORTS__ALLOW_PRIVATE": "true",
                                                    "REFINDERY_IMPORTS__HOST_INTERVAL_S": "0.2",
                                                    "REFINDERY_SERVER__RATE_LIMIT_PER_MINUTE": "0"})
        server.start()
        try:
            with httpx.Client(base_url=server.base, headers={"Authorization": f"Bearer {keys['admin']}"},
                              timeout=120) as c:
                c.post("/v1/pages", json={"pages": [{"url": f"https://seed.example/{q}", "body_text": q}
                                                    for q in QUERIES]}).raise_for_status()
                t_end = time.monotonic() + args.idle_s
                idle = searches(c, lambda: time.monotonic() > t_end)
                t0 = time.perf_counter()
                r = c.post("/v1/imports", json={"kind": "history", "source": "bench", "entries": entries})
                assert r.status_code == 202, r.text
                import_id, written_s = r.json()["import_id"], time.perf_counter() - t0
                state = {"done": False, "n": 0}

                def done() -> bool:
                    state["n"] += 1
                    if state["n"] % 20 == 0:
                        state["done"] = c.get(f"/v1/imports/{import_id}").json()["done"]
                    return state["done"]
                during = searches(c, done)
                fetch_s = time.perf_counter() - t0
                status = c.get(f"/v1/imports/{import_id}").json()
        finally:
            server.stop()
            srv.shutdown()
    row = {"urls": args.urls, "hosts": 10, "written_s": round(written_s, 2), "import_done_s": round(fetch_s, 1),
           "fetched_per_s": round(status["counts"]["fetched"] / fetch_s, 1), "counts": status["counts"],
           "search_idle": {"n": len(idle), "p50_ms": pct(idle, 0.5), "p95_ms": pct(idle, 0.95)},
           "search_during_fetch": {"n": len(during), "p50_ms": pct(during, 0.5), "p95_ms": pct(during, 0.95)}}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{args.out}.json").write_text(json.dumps(row, indent=2) + "\n")
    print(json.dumps(row, indent=2))


if __name__ == "__main__":
    main()
