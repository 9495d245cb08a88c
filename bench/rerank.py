"""Rerank latency per query: one query against 50 real chunks of the demo corpus, per backend.

    .venv/bin/python bench/rerank.py [--queries 20] [--chunks 50] [--device cpu]

Cross-encoders are built from the bundled all-MiniLM-L6-v2 (a fresh head: latency does not depend
on the weights' values, only on shapes): all 6 layers and the first 2 (`refindery reranker train
--layers 2`), each run by torch and, exported, by onnxruntime in fp32 and int8. Chunks are cut from
the demo pages by the product's chunker (256-token windows), so most are full length; each
query's 50 are a fixed random draw. Reports p50 / p95 milliseconds per query (50 pairs scored,
max length 192 tokens unless noted) and writes bench/results/rerank.json and rerank.md.

The reranker the repository ships (`--shipped`, a registry name; skipped when the registry does not
declare it) is timed as well, as the product loads it, at 128 and 192 tokens and at 50 and 30 chunks.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.ingest.chunking import chunk_text  # noqa: E402
from engine.core.settings import load_settings  # noqa: E402
from models.registry import ModelRegistry, ModelSpec  # noqa: E402
from models.reranker import Reranker  # noqa: E402
from models.reranker_train import export_onnx, truncate_layers  # noqa: E402


def demo_chunks(tokenizer, limit_pages: int = 120) -> tuple[list[str], list[str]]:
    chunks, titles = [], []
    with gzip.open(ROOT / "demo" / "pages.jsonl.gz", "rt", encoding="utf-8") as fh:
        for i, line in enumerate(fh):
            if i >= limit_pages:
                break
            rec = json.loads(line)
            if rec.get("title"):
                titles.append(rec["title"])
            chunks += [c.text for c in chunk_text(rec.get("body_text") or "", tokenizer, 256, 32)]
    return chunks, titles


def build_models(base: Path, work: Path) -> dict[str, Path]:
    import torch
    from sentence_transformers import CrossEncoder

    out = {}
    for layers in (6, 2):
        torch.manual_seed(0)
        ce = CrossEncoder(str(base), num_labels=1, local_files_only=True, device="cpu")
        if layers < 6:
            truncate_layers(ce.model, layers)
        d = work / f"ce-l{layers}"
        ce.save(str(d))
        export_onnx(d, 192)
        out[f"L{layers}"] = d
    return out


def time_backend(rr: Reranker, queries: list[str], draws: list[list[str]], warmup: int = 2) -> dict:
    for q, ch in zip(queries[:warmup], draws[:warmup]):
        rr.score(q, ch)
    ms = []
    for q, ch in zip(queries, draws):
        t = time.perf_counter()
        rr.score(q, ch)
        ms.append((time.perf_counter() - t) * 1000)
    ms.sort()
    return {"p50_ms": round(statistics.median(ms), 1), "p95_ms": round(ms[min(len(ms) - 1, int(0.95 * len(ms)))], 1),
            "queries": len(ms)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--queries", type=int, default=20)
    ap.add_argument("--chunks", type=int, default=50)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--shipped", default="refindery-squad-l2", help="registry name of the shipped reranker")
    args = ap.parse_args(argv)
    import torch
    from transformers import AutoTokenizer

    s = load_settings()
    registry = ModelRegistry(s.registry_path, s.models_cache_dir, data_dir=s.data_dir)
    base = registry.resolve("all-minilm-l6-v2")
    tok = AutoTokenizer.from_pretrained(str(base), local_files_only=True)
    chunks, titles = demo_chunks(tok)
    rng = random.Random(0)
    queries = [rng.choice(titles) for _ in range(args.queries)]
    draws = [rng.sample(chunks, args.chunks) for _ in range(args.queries)]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        models = build_models(base, Path(tmp))
        plans = [("L6", "torch", None, 192), ("L6", "torch", None, 256), ("L6", "onnx", "onnx/model.onnx", 192),
                 ("L6", "onnx", "onnx/model_qint8.onnx", 192), ("L6", "onnx", "onnx/model_qint8.onnx", 128),
                 ("L2", "torch", None, 192), ("L2", "onnx", "onnx/model_qint8.onnx", 192),
                 ("L2", "onnx", "onnx/model_qint8.onnx", 128)]
        for layers, backend, file, max_len in plans:
            extra = {"backend": backend} | ({"onnx_file": file} if file else {})
            spec = ModelSpec(f"{layers}-{backend}", "reranker", "path", max_seq_length=max_len, extra=extra)
            rr = Reranker(spec, models[layers], args.device if backend == "torch" else "cpu", batch_size=32)
            r = time_backend(rr, queries, draws)
            label = f"{layers} {backend}" + ("" if not file else (" int8" if "qint8" in file else " fp32"))
            rows.append({"model": label, "max_length": max_len, "device": rr.device, **r})
            print(f"{label:18s} max_len {max_len}: p50 {r['p50_ms']:7.1f} ms  p95 {r['p95_ms']:7.1f} ms", flush=True)
    if args.shipped and args.shipped in registry.names("reranker"):
        spec, path = registry.spec(args.shipped), registry.resolve(args.shipped)
        for max_len in (128, 192):
            for n in (args.chunks, 30):
                s2 = ModelSpec(spec.name, "reranker", spec.source, max_seq_length=max_len, extra=spec.extra)
                rr = Reranker(s2, path, args.device, batch_size=32)
                r = time_backend(rr, queries, [d[:n] for d in draws])
                label = f"{args.shipped} (shipped, {spec.extra.get('backend', 'torch')})"
                rows.append({"model": label, "max_length": max_len, "chunks": n, "device": rr.device, **r})
                print(f"{label} max_len {max_len}, {n} chunks: p50 {r['p50_ms']:7.1f} ms  p95 {r['p95_ms']:7.1f} ms",
                      flush=True)
    result = {"when": datetime.now().isoformat(timespec="seconds"), "cpus": os.cpu_count(),
              "torch_threads": torch.get_num_threads(), "chunks_per_query": args.chunks, "rows": rows}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "rerank.json").write_text(json.dumps(result, indent=2) + "\n")
    lines = [f"Rerank latency per query, {args.chunks} demo chunks (256-token windows) per query, "
             f"{args.queries} queries, {result['cpus']} CPUs, torch threads {result['torch_threads']}:", "",
             "| model | max length | chunks | device | p50 ms | p95 ms |", "|---|---|---|---|---|---|"]
    lines += [f"| {r['model']} | {r['max_length']} | {r.get('chunks', args.chunks)} | {r['device']} | {r['p50_ms']} | "
              f"{r['p95_ms']} |" for r in rows]
    (out / "rerank.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
