"""Issue 72: an import of a large history. A Chromium `History` of N URLs (default 50,000) with 1-3
visits each is made through the schema of the real browser's file (tests/ingest/history/chromium-History:
its tables kept, its rows replaced), then `refindery import history --no-fetch` reads and writes it into
a fresh data dir in a child process: the time until every title and URL is searchable (the command's
end: its pages are written and indexed), the child's peak memory (ru_maxrss), and a search after.

    .venv/bin/python bench/history_import.py [--urls 50000] [--out history-import]

Writes bench/results/<out>.json and prints the table for bench/results/history-import.md."""
from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
FIXTURE = ROOT / "tests" / "ingest" / "history" / "chromium-History"
WORDS = ("harbour pilot tide table lighthouse keeper chart herring net quay council letter ferry gull colony "
         "rope splice buoy colour night estuary curlew reed heron kestrel wren bramble mill marsh creek osprey "
         "avocet python sqlite postgres index release notes changelog tutorial reference guide api json").split()


def make_history(path: Path, n: int, seed: int = 7) -> int:
    rng = random.Random(seed)
    shutil.copy(FIXTURE, path)
    visits = 0
    base = 13_400_000_000_000_000   # microseconds since 1601 (Chromium's clock): 2025
    with sqlite3.connect(path) as db:
        db.execute("DELETE FROM visits")
        db.execute("DELETE FROM urls")
        for i in range(1, n + 1):
            title = " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 7))).capitalize()
            host = f"site{rng.randint(1, n // 20)}.example"
            count = rng.randint(1, 3)
            db.execute("INSERT INTO urls (id, url, title, visit_count, typed_count, last_visit_time, hidden) "
                       "VALUES (?, ?, ?, ?, 0, 0, 0)", [i, f"https://{host}/page/{i}", title, count])
            for _ in range(count):
                visits += 1
                db.execute("INSERT INTO visits (url, visit_time, from_visit, transition, segment_id, visit_duration) "
                           "VALUES (?, ?, 0, 805306368, 0, 0)", [i, base + rng.randint(0, 300 * 86400 * 10**6)])
    return visits


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--urls", type=int, default=50_000)
    ap.add_argument("--out", default="history-import")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-history-") as tmp:
        history = Path(tmp) / "History"
        t = time.perf_counter()
        visits = make_history(history, args.urls)
        made_s = time.perf_counter() - t
        env = {k: v for k, v in os.environ.items() if not k.startswith("REFINDERY_")}
        env.update(REFINDERY_DATA_DIR=str(Path(tmp) / "data"), REFINDERY_MODELS__DEVICE="cpu")
        cli = [sys.executable, "-m", "server.cli"]
        t = time.perf_counter()
        proc = subprocess.run(cli + ["import", "history", str(history), "--no-fetch", "--no-progress"], cwd=ROOT,
                              env=env, capture_output=True, text=True)
        import_s = time.perf_counter() - t
        assert proc.returncode == 0, proc.stderr[-3000:]
        peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        out = json.loads(proc.stdout)
        t = time.perf_counter()
        found = subprocess.run(cli + ["search", "lighthouse keeper chart", "-k", "3"], cwd=ROOT, env=env,
                               capture_output=True, text=True)
        search_s = time.perf_counter() - t
        assert found.returncode == 0, found.stderr[-2000:]
    row = {"urls": args.urls, "visits": visits, "make_history_s": round(made_s, 1),
           "titles_searchable_s": round(import_s, 1), "urls_per_s": round(args.urls / import_s, 1),
           "peak_rss_mb": round(peak_mb), "search_cli_s": round(search_s, 1),
           "written": out["written"], "status_counts": out["status"]["counts"], "cores": os.cpu_count()}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{args.out}.json").write_text(json.dumps(row, indent=2) + "\n")
    print(json.dumps(row, indent=2))


if __name__ == "__main__":
    main()
