"""The summary of a `make bench` run: bench/results/README.md, one section per benchmark (its
Markdown table as written, its plot when it has one), headed by the machine, date and commit.

    .venv/bin/python bench/report.py
"""
from __future__ import annotations

import json
import os
import platform
import subprocess
from datetime import datetime, timezone

from common import RESULTS, ROOT

SECTIONS = [
    ("ingest", "Ingest vs bare encode", "bench/ingest.py"),
    ("embedders", "Embedder backends (torch, ONNX Runtime) and the int8 quality cost", "bench/embedders.py"),
    ("search", "Search latency per stage by corpus size", "bench/search.py"),
    ("dense", "Dense index choice: flat vs HNSW vs IVF", "bench/dense.py"),
    ("peers", "Side by side with bm25s and txtai", "bench/peers.py"),
    ("rerank", "Reranker latency", "bench/rerank.py"),
    ("relations", "Relation search", "bench/relations.py"),
    ("evidence", "Evidence search", "bench/evidence.py"),
    ("load", "Concurrent load", "bench/load.py"),
    ("throughput", "Throughput under concurrent clients, beside txtai", "bench/load.py --throughput"),
    ("catch_up", "The quality profile's catch-up: searching while it embeds", "bench/catch_up.py"),
    ("switch", "A live switch of the embedder at 10k chunks", "bench/switch.py"),
    ("backends", "Index backends (embedded vs Milvus) and Ray embedding", "bench/backends.py"),
    ("store", "The corpus store on DuckDB and on PostgreSQL, and writers of one PostgreSQL store", "bench/store.py"),
]


def cpu_model() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def ingest_md(res: dict) -> str:
    return (f"{res['pages']} demo pages, {res['chunks']} chunks, batch {res['batch_size']}, device {res['device']}, "
            f"median of {res['repeats']}: whole ingest {res['median_ingest_chunks_per_s']} chunks/s, bare "
            f"`model.encode` {res['median_encode_chunks_per_s']} chunks/s — ratio **{res['ratio']}** "
            f"(target ≥ {res['target_ratio']}).\n")


def main() -> None:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    lines = ["# Benchmark results", "",
             f"Written by `make bench` ({datetime.now(timezone.utc):%Y-%m-%d}, commit {commit or 'unknown'}) on "
             f"{os.cpu_count()} CPUs ({cpu_model()}), Python {platform.python_version()}. Every figure is a "
             "median over repeated runs; ratios are taken within one run. Each section's JSON has the raw runs.", ""]
    for name, title, script in SECTIONS:
        md, js = RESULTS / f"{name}.md", RESULTS / f"{name}.json"
        lines += [f"## {title}", "", f"`{script}` → [{name}.json]({name}.json)", ""]
        if md.exists():
            body = md.read_text().strip()
            # A section's own top heading would duplicate ours.
            body = "\n".join(ln for ln in body.splitlines() if not ln.startswith("# "))
            lines += [body.strip(), ""]
        elif js.exists() and name == "ingest":
            lines += [ingest_md(json.loads(js.read_text())), ""]
        else:
            lines += ["_not run yet_", ""]
        if (RESULTS / f"{name}.png").exists():
            lines += [f"![{title}]({name}.png)", ""]
    (RESULTS / "README.md").write_text("\n".join(lines))
    print(f"wrote {RESULTS / 'README.md'}")


if __name__ == "__main__":
    main()
