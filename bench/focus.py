"""What focus (issue 73, engine/refind/focus.py) costs a search: p50 / p95 of the whole Engine.search
at 10k and 100k chunks with focus off and as shipped, on the same warm engine.

    .venv/bin/python bench/focus.py [--sizes 10000 100000] [--queries 300] [--data-root DIR]

The corpus is bench/search.py's synthetic one (Zipf pseudo-words, 10 chunks a page, random unit
vectors; the query embedded by the real model, no query cache). Each query runs both ways, in an
order that alternates from one query to the next (off, on; on, off; ...) so that a slow stretch of
the machine falls on both alike; p50 / p95 over all queries, and the ratio of each. The first search
on each corpus (its view's chunk counts made, and the process's first-search costs) is timed apart as
`first_ms`. Writes bench/results/focus.{json,md}.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from search import build, vocabulary, zipf_words  # noqa: E402

from engine.app import Engine  # noqa: E402
from engine.core.corpus import open_corpus  # noqa: E402
from engine.core.settings import load_settings  # noqa: E402
from engine.refind.search import SearchRequest  # noqa: E402
from models.embedder import EmbedderPool  # noqa: E402
from models.registry import ModelRegistry  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--data-root", type=Path, default=None)
    args = ap.parse_args()
    base = load_settings()
    shipped = {"focus": base.search.focus, "focus_form": base.search.focus_form, "focus_slack": base.search.focus_slack}
    off = {"focus": 0.0}
    registry = ModelRegistry(base.registry_path, base.models_cache_dir, data_dir=base.data_dir)
    pool = EmbedderPool(registry, base.models.device, query_cache_size=0)
    emb = pool.get(base.models.active)
    rng = np.random.default_rng(7)
    vocab = vocabulary(rng)
    out = {"model": base.models.active, "queries": args.queries, "shipped": shipped, "sizes": {}}
    for n in args.sizes:
        with contextlib.ExitStack() as stack:
            if args.data_root is None:
                tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
            else:
                tmp = args.data_root / str(n)
                tmp.mkdir(parents=True, exist_ok=True)
            corpus = open_corpus(load_settings(data_dir=tmp, search={"query_cache_size": 0}), pool)
            if not (tmp / "built.json").exists():
                build(corpus, n, emb.dim, rng, vocab)
                (tmp / "built.json").write_text("{}")
            engine = Engine(corpus=corpus)
            qrng = np.random.default_rng(2000 + n)
            queries = [" ".join(zipf_words(qrng, vocab, 4)) for _ in range(args.queries + 5)]
            t = time.perf_counter()
            engine.search(SearchRequest(query=queries[0], **shipped), log=False)   # counts the pages' chunks
            first_ms = (time.perf_counter() - t) * 1000
            for q in queries[1:5]:
                for o in (off, shipped):
                    engine.search(SearchRequest(query=q, **o), log=False)
            times = {"off": [], "on": []}
            for i, q in enumerate(queries[5:]):
                order = (("off", off), ("on", shipped)) if i % 2 == 0 else (("on", shipped), ("off", off))
                for name, o in order:
                    t = time.perf_counter()
                    engine.search(SearchRequest(query=q, **o), log=False)
                    times[name].append((time.perf_counter() - t) * 1000)
            row = {k: {"p50": round(float(np.percentile(v, 50)), 2), "p95": round(float(np.percentile(v, 95)), 2)}
                   for k, v in times.items()}
            row["ratio_p50"] = round(row["on"]["p50"] / row["off"]["p50"], 3)
            row["ratio_p95"] = round(row["on"]["p95"] / row["off"]["p95"], 3)
            row["first_ms"] = round(first_ms, 1)
            out["sizes"][str(n)] = row
            print(n, row, flush=True)
            engine.close()
    (ROOT / "bench" / "results" / "focus.json").write_text(json.dumps(out, indent=1) + "\n")
    lines = ["# Focus: what it costs a search", "",
             f"From `.venv/bin/python bench/focus.py`: bench/search.py's synthetic corpus, {args.queries} queries, "
             f"each run with focus off and as shipped ({', '.join(f'{k} {v}' for k, v in shipped.items())}) in "
             "alternating order on one warm engine; the whole Engine.search, ms.", "",
             "| chunks | off p50 | off p95 | on p50 | on p95 | p50 ratio | p95 ratio | first search of the process, ms (warm-up included) |",
             "|---|---|---|---|---|---|---|---|"]
    for n, r in out["sizes"].items():
        lines.append(f"| {int(n):,} | {r['off']['p50']} | {r['off']['p95']} | {r['on']['p50']} | {r['on']['p95']} | "
                     f"{r['ratio_p50']} | {r['ratio_p95']} | {r['first_ms']} |")
    (ROOT / "bench" / "results" / "focus.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
