"""What the metrics (issue 74, server/metrics.py) cost a search: p50 / p95 of POST /v1/search through the
whole app (TestClient: middleware, key check, route, engine), with [server] metrics on and off, on the
same warm corpus, while /metrics is scraped every `--scrape-every` searches on the "on" side.

    .venv/bin/python bench/metrics.py [--chunks 10000] [--queries 400] [--scrape-every 50]

The corpus is bench/search.py's synthetic one. Two apps share the corpus; only one counts. Each
query runs on both, in an order that alternates from one query to the next, so a slow stretch of the
machine falls on both alike. Writes bench/results/metrics.{json,md}.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from fastapi.testclient import TestClient  # noqa: E402
from search import build, vocabulary, zipf_words  # noqa: E402

from engine.app import Engine  # noqa: E402
from engine.core.access import create_key  # noqa: E402
from engine.core.corpus import open_corpus  # noqa: E402
from engine.core.settings import load_settings  # noqa: E402
from models.embedder import EmbedderPool  # noqa: E402
from models.registry import ModelRegistry  # noqa: E402
from server.app import create_app  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--chunks", type=int, default=10_000)
    ap.add_argument("--queries", type=int, default=400)
    ap.add_argument("--scrape-every", type=int, default=50)
    args = ap.parse_args()
    base = load_settings()
    registry = ModelRegistry(base.registry_path, base.models_cache_dir, data_dir=base.data_dir)
    pool = EmbedderPool(registry, base.models.device, query_cache_size=0)
    emb = pool.get(base.models.active)
    rng = np.random.default_rng(7)
    vocab = vocabulary(rng)
    with tempfile.TemporaryDirectory() as tmp:
        settings = load_settings(data_dir=tmp, search={"query_cache_size": 0}, log={"enabled": False},
                                 server={"rate_limit_per_minute": 0})
        corpus = open_corpus(settings, pool)
        build(corpus, args.chunks, emb.dim, rng, vocab)
        token = create_key(corpus.keys, ["*"])["token"]
        headers = {"Authorization": f"Bearer {token}"}
        off_engine = Engine(corpus=corpus)
        off_engine.settings = settings.model_copy(update={"server": settings.server.model_copy(update={"metrics": False})})
        apps = {"on": create_app(settings, engine=Engine(corpus=corpus)), "off": create_app(settings, engine=off_engine)}
        clients = {k: TestClient(a) for k, a in apps.items()}
        qrng = np.random.default_rng(2000)
        queries = [" ".join(zipf_words(qrng, vocab, 4)) for _ in range(args.queries + 10)]
        for q in queries[:10]:
            for c in clients.values():
                c.post("/v1/search", json={"query": q}, headers=headers).raise_for_status()
        times: dict[str, list[float]] = {"off": [], "on": []}
        scrape_ms = []
        for i, q in enumerate(queries[10:]):
            for name in (("off", "on") if i % 2 == 0 else ("on", "off")):
                t = time.perf_counter()
                clients[name].post("/v1/search", json={"query": q}, headers=headers).raise_for_status()
                times[name].append((time.perf_counter() - t) * 1000)
            if i % args.scrape_every == args.scrape_every - 1:
                t = time.perf_counter()
                clients["on"].get("/metrics", headers=headers).raise_for_status()
                scrape_ms.append((time.perf_counter() - t) * 1000)
        assert apps["off"].state.metrics is None and apps["on"].state.metrics is not None
        row = {k: {"p50": round(float(np.percentile(v, 50)), 3), "p95": round(float(np.percentile(v, 95)), 3)}
               for k, v in times.items()}
        row["ratio_p50"] = round(row["on"]["p50"] / row["off"]["p50"], 4)
        row["ratio_p95"] = round(row["on"]["p95"] / row["off"]["p95"], 4)
        row["scrape_ms_p50"] = round(float(np.median(scrape_ms)), 2) if scrape_ms else None
        corpus.close()
    out = {"model": base.models.active, "chunks": args.chunks, "queries": args.queries,
           "scrape_every": args.scrape_every, **row}
    print(out, flush=True)
    (ROOT / "bench" / "results" / "metrics.json").write_text(json.dumps(out, indent=1) + "\n")
    lines = ["# Metrics: what counting costs a search", "",
             f"From `.venv/bin/python bench/metrics.py`: POST /v1/search through the whole app (TestClient), "
             f"{args.queries} queries over bench/search.py's synthetic corpus of {args.chunks:,} chunks, each run on "
             f"an app with `[server] metrics` on and one with it off (same corpus, alternating order), /metrics scraped "
             f"every {args.scrape_every} searches on the counting side; ms.", "",
             "| off p50 | off p95 | on p50 | on p95 | p50 ratio | p95 ratio | a scrape, p50 ms |", "|---|---|---|---|---|---|---|",
             f"| {row['off']['p50']} | {row['off']['p95']} | {row['on']['p50']} | {row['on']['p95']} | {row['ratio_p50']} | "
             f"{row['ratio_p95']} | {row['scrape_ms_p50']} |"]
    (ROOT / "bench" / "results" / "metrics.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
