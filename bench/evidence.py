"""Evidence search latency: one call of the whole verb (dictionary, maps, decomposition, rounds,
packet) over the bundled demo corpus with demo/dictionary.md, for a fixed set of questions.

    .venv/bin/python bench/evidence.py [--repeats 3]

Reports, per question kind (simple, dictionary-bridged, comparative), the median wall time of a
call and its rounds, and the median time per round; the first call of a fresh corpus also draws the
maps, and is reported apart. Writes bench/results/evidence.json and evidence.md.
"""
from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.app import Engine  # noqa: E402
from engine.core.settings import load_settings  # noqa: E402
from engine.evidence.search import EvidenceRequest  # noqa: E402

QUESTIONS = {
    "simple": ["how do I read a file line by line", "create a table from a query result",
               "synchronized queue between threads", "sequence manipulation functions",
               "how does sqlite store dates"],
    "dictionary": ["Postgres object identifier types", "regex groups in python", "all or nothing updates in sqlite3",
                   "pretty print nested data", "date maths in Postgres"],
    "comparative": ["compare Postgres and SQLite transactions", "sqlite vs postgresql date functions",
                    "what is the difference between fcntl and ioctl", "queue vs asyncio queue",
                    "how do ALTER SEQUENCE and CREATE SEQUENCE differ"],
}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    data = Path(tempfile.mkdtemp(prefix="bench-evidence-")) / "data"
    engine = Engine(load_settings(data_dir=str(data)))
    with gzip.open(ROOT / "demo" / "pages.jsonl.gz", "rt", encoding="utf-8") as fh:
        records = [json.loads(line) for line in fh]
    engine.ingest(((i, "demo", r) for i, r in enumerate(records, start=1)), progress=False)
    engine.set_dictionary(None, "markdown", (ROOT / "demo" / "dictionary.md").read_text())
    engine.load_model()   # as a server does at start (the query runtime's export is not the maps' cost)
    t = time.perf_counter()
    engine.evidence(EvidenceRequest(query="warm-up: json encoder", session_id="warmup"))
    first_ms = (time.perf_counter() - t) * 1000
    result = {"pages": len({r["url"] for r in records}), "repeats": args.repeats, "first_call_ms": round(first_ms, 1),
              "kinds": {}}
    for kind, qs in QUESTIONS.items():
        calls, rounds = [], []
        for rep in range(args.repeats):
            for i, q in enumerate(qs):
                t = time.perf_counter()
                r = engine.evidence(EvidenceRequest(query=q, session_id=f"{kind}-{rep}-{i}"))
                calls.append((time.perf_counter() - t) * 1000)
                rounds.append(r.navigation["search_rounds"])
        result["kinds"][kind] = {
            "calls": len(calls), "median_ms": round(statistics.median(calls), 1),
            "p90_ms": round(sorted(calls)[int(0.9 * (len(calls) - 1))], 1),
            "median_rounds": statistics.median(rounds),
            "median_ms_per_round": round(statistics.median(c / max(n, 1) for c, n in zip(calls, rounds)), 1)}
    engine.close()
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "evidence.json").write_text(json.dumps(result, indent=2) + "\n")
    lines = [f"## Evidence search latency (demo corpus, {result['pages']} pages, {args.repeats} repeats)", "",
             f"First call of a fresh corpus (draws the maps): {result['first_call_ms']} ms", "",
             "| questions | calls | median ms | p90 ms | median rounds | median ms / round |",
             "|---|---|---|---|---|---|"]
    for kind, r in result["kinds"].items():
        lines.append(f"| {kind} | {r['calls']} | {r['median_ms']} | {r['p90_ms']} | {r['median_rounds']} | "
                     f"{r['median_ms_per_round']} |")
    (out / "evidence.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
