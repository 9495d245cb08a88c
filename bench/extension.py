"""Issue 71: the cost of the extension's path. 200 pages read in Debian's Chromium with the extension
loaded (the dwell set to 0.3 s, ten tabs at a time), each captured and sent to a real `refindery
serve` on loopback with a pages-only key, while another client searches in a loop with a read-only key:
pages/s from the first page opened to the 200th stored, the server's time per POST /v1/pages (its
access log), and the search's p50/p95 meanwhile beside the same search with nothing arriving.

    .venv/bin/python bench/extension.py [--pages 200] [--out extension]

Writes bench/results/<out>.json and prints the table for bench/results/extension.md."""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "tests" / "extension")]
RESULTS = ROOT / "bench" / "results"
QUERIES = ["harbour pilot tide tables", "lighthouse keeper charts", "herring run nets quay", "council letter"]


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(q * len(xs)))], 1) if xs else float("nan")


def searching(base: str, key: str, stop: threading.Event, out: list[float]) -> None:
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=60) as c:
        n = 0
        while not stop.is_set():
            t = time.perf_counter()
            r = c.post("/v1/search", json={"query": QUERIES[n % len(QUERIES)], "k": 10, "shortcuts": False})
            assert r.status_code == 200, r.text
            out.append((time.perf_counter() - t) * 1000)
            n += 1
            time.sleep(0.02)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pages", type=int, default=200)
    ap.add_argument("--tabs", type=int, default=10)
    ap.add_argument("--out", default="extension")
    args = ap.parse_args()

    from conftest import MODELS_CACHE, chromium_path
    from harness import Browser, Refindery, Site, create_keys
    from playwright.sync_api import sync_playwright

    root = Path(tempfile.mkdtemp(prefix="refindery-bench-ext-"))
    keys = create_keys(root / "data", None)
    server = Refindery(root / "data", MODELS_CACHE)
    server.start()
    site = Site()
    urls = [site.add(f"/p/{i}", f"Harbour notes {i}",
                     [f"Page {i}: the harbour pilot wrote about the tide tables of week {i} in a long letter.",
                      f"Every spring the fishermen of quay {i} mend their nets before the herring run.",
                      "The council answered that the lighthouse keeper would publish new charts before autumn."] * 4)
            for i in range(args.pages)]
    admin = httpx.Client(base_url=server.base, headers={"Authorization": f"Bearer {keys['admin']}"}, timeout=60)
    # a corpus to search before anything arrives: the first 20 pages, posted directly
    first = [{"url": u + "?seed", "html": site.pages[f"/p/{i}"]} for i, u in enumerate(urls[:20])]
    admin.post("/v1/pages", json={"pages": first}).raise_for_status()
    result: dict = {"pages": args.pages, "tabs": args.tabs}
    try:
        base_lat: list[float] = []
        stop = threading.Event()
        t = threading.Thread(target=searching, args=(server.base, keys["search"], stop, base_lat))
        t.start()
        time.sleep(8)
        stop.set()
        t.join()
        with sync_playwright() as pw:
            b = Browser(pw, root / "profile", chromium_path())
            b.launch()
            b.settings(server=server.base, captureKey=keys["capture"], mode="skip", dwellSeconds=0.3,
                       retryMaxSeconds=2)
            for p in list(b.ctx.pages):
                if p.url.endswith("options.html"):
                    p.close()
            pages0 = admin.get("/v1/status").json()["counts"]["pages"]
            lat: list[float] = []
            stop = threading.Event()
            t = threading.Thread(target=searching, args=(server.base, keys["search"], stop, lat))
            t.start()
            t0 = time.perf_counter()
            for at in range(0, len(urls), args.tabs):
                tabs = [b.ctx.new_page() for _ in urls[at:at + args.tabs]]
                for tab, url in zip(tabs, urls[at:at + args.tabs]):
                    tab.goto(url)
                time.sleep(0.6)   # past the dwell time
                for tab in tabs:
                    tab.close()
            opened = time.perf_counter() - t0
            while admin.get("/v1/status").json()["counts"]["pages"] < pages0 + args.pages:
                assert time.perf_counter() - t0 < 600, "the pages did not all arrive"
                time.sleep(0.1)
            took = time.perf_counter() - t0
            stop.set()
            t.join()
            b.close()
        calls = admin.get("/v1/audit/access", params={"limit": 10000}).json()["calls"]
        posts = [c for c in calls if c["route"] == "/v1/pages" and c["key_id"] == keys["capture"].split("_")[1]]
        per_page = [c["duration_ms"] for c in posts]
        result.update({
            "seconds_to_all_stored": round(took, 2), "seconds_opening": round(opened, 2),
            "pages_per_s": round(args.pages / took, 2), "post_requests": len(posts),
            "post_ms_p50": pct(per_page, 0.5), "post_ms_p95": pct(per_page, 0.95),
            "search_baseline": {"n": len(base_lat), "p50_ms": pct(base_lat, 0.5), "p95_ms": pct(base_lat, 0.95)},
            "search_during": {"n": len(lat), "p50_ms": pct(lat, 0.5), "p95_ms": pct(lat, 0.95),
                              "max_ms": round(max(lat), 1) if lat else None},
        })
    finally:
        server.stop()
        site.close()
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{args.out}.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    print(f"\n| pages | pages/s | POST /v1/pages p50 / p95 ms (requests) | search p50 / p95 ms, nothing arriving |"
          f" search p50 / p95 ms, pages arriving |\n|---:|---:|---:|---:|---:|\n| {args.pages} | {result['pages_per_s']} | "
          f"{result['post_ms_p50']} / {result['post_ms_p95']} ({result['post_requests']}) | "
          f"{result['search_baseline']['p50_ms']} / {result['search_baseline']['p95_ms']} | "
          f"{result['search_during']['p50_ms']} / {result['search_during']['p95_ms']} |")


if __name__ == "__main__":
    main()
