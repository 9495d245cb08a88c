"""CUDA against CPU, in one prepared run: encode throughput, fp16's effect on ranking, rerank latency.

    .venv/bin/python bench/gpu.py [--collection ../shared/data/ir/med] [--docs 2000] [--queries 20]
    .venv/bin/python bench/gpu.py --stand-in cpu      # check the script itself on a host with no GPU

On a host where torch sees no CUDA device it says so and exits 0, measuring nothing (a CPU-only
torch, or CUDA_VISIBLE_DEVICES hiding the GPUs): install the CUDA build first (`make install
TORCH=cuda`, docs/operations.md "CUDA"). On a CUDA host, with the bundled all-MiniLM-L6-v2:

1. **Encode throughput** (documents/s): a collection's documents (up to --docs), CPU fp32 against
   CUDA fp32 and CUDA fp16 (what `models.device = "cuda"` runs: the engine halves the weights on a
   GPU), batch 64 on CPU and 64 / 256 on CUDA; median of three passes after a warm-up.
2. **fp16 parity**: the collection's documents and judged queries encoded in fp32 and in fp16 on
   CUDA (and fp32 on CPU, the reference), exact inner-product search over all documents, nDCG@10 of
   each (ir_measures) with a paired t-test fp16 vs fp32, the largest element-wise vector difference
   and the mean overlap of the two top-10s.
3. **Rerank latency**: a cross-encoder built from the same weights (a fresh one-logit head: latency
   depends on shapes only, as in bench/rerank.py), one query against 50 passages of the collection,
   max length 192, p50 / p95 ms over --queries queries, CPU fp32 against CUDA fp32 and fp16.

Writes bench/results/gpu.{json,md} (with `--stand-in cpu`: gpu-standin.{json,md}, so a check run
never overwrites a device's figures).
"""
from __future__ import annotations

import argparse
import os
import random
import sys
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import median, p50_p95, write  # noqa: E402

DEFAULT_COLLECTION = ROOT.parent / "shared" / "data" / "ir" / "med"


def minilm_path() -> Path:
    from engine.core.settings import load_settings
    from models.registry import ModelRegistry

    s = load_settings()
    return ModelRegistry(s.registry_path, s.models_cache_dir, data_dir=s.data_dir).resolve("all-minilm-l6-v2")


def encoder(path: Path, device: str, half: bool):
    from sentence_transformers import SentenceTransformer

    m = SentenceTransformer(str(path), device=device, local_files_only=True)
    m.max_seq_length = 256
    return m.half() if half else m


def sync(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def throughput(model, texts: list[str], device: str, batch: int, passes: int = 3) -> float:
    model.encode(texts[:batch], batch_size=batch)       # warm-up: kernels, allocator
    rates = []
    for _ in range(passes):
        sync(device)
        t = time.perf_counter()
        model.encode(texts, batch_size=batch)
        sync(device)
        rates.append(len(texts) / (time.perf_counter() - t))
    return round(median(rates), 1)


def ndcg_of(doc_vecs, q_vecs, doc_ids, qids, qrels) -> tuple[dict[str, float], dict[str, list[str]]]:
    import ir_measures
    import numpy as np

    scores = q_vecs.astype(np.float32) @ doc_vecs.astype(np.float32).T
    top = np.argsort(-scores, axis=1)[:, :100]
    run, tops = [], {}
    for i, q in enumerate(qids):
        tops[q] = [doc_ids[j] for j in top[i, :10]]
        run += [ir_measures.ScoredDoc(q, doc_ids[j], float(scores[i, j])) for j in top[i]]
    per = {q: 0.0 for q in qids}
    for m in ir_measures.iter_calc([ir_measures.nDCG @ 10], qrels, run):
        per[m.query_id] = float(m.value)
    return per, tops


def rerank_latency(path: Path, device: str, half: bool, queries: list[str], draws: list[list[str]]) -> dict:
    import torch
    from sentence_transformers import CrossEncoder

    torch.manual_seed(0)
    ce = CrossEncoder(str(path), num_labels=1, device=device, local_files_only=True, max_length=192)
    if half:
        ce.model.half()
    for q, ps in zip(queries[:2], draws[:2]):           # warm-up
        ce.predict([(q, p) for p in ps], batch_size=64)
    ms = []
    for q, ps in zip(queries, draws):
        sync(device)
        t = time.perf_counter()
        ce.predict([(q, p) for p in ps], batch_size=64)
        sync(device)
        ms.append((time.perf_counter() - t) * 1000)
    return p50_p95(ms)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--collection", default=str(DEFAULT_COLLECTION))
    ap.add_argument("--docs", type=int, default=2000, help="documents encoded for throughput")
    ap.add_argument("--queries", type=int, default=20, help="rerank queries (50 passages each)")
    ap.add_argument("--stand-in", choices=["cpu"], default=None,
                    help="run every part with the CPU standing in for the GPU, on a small sample: checks the "
                         "script, measures nothing about CUDA")
    args = ap.parse_args(argv)

    import numpy as np
    import torch
    from scipy.stats import ttest_rel

    from eval import collections
    from models.device import torch_build

    if args.stand_in is None and not torch.cuda.is_available():
        print(f"no CUDA device: torch sees none ({torch_build()}; CUDA_VISIBLE_DEVICES="
              f"{os.environ.get('CUDA_VISIBLE_DEVICES', '(unset)')}) — nothing measured. On a host with a GPU: "
              "`make install TORCH=cuda`, then `.venv/bin/python bench/gpu.py` (docs/operations.md, \"CUDA\").")
        return 0
    gpu = args.stand_in or "cuda"
    small = args.stand_in is not None
    coll = collections.load(args.collection)
    path = minilm_path()
    docs = coll.docs[: 200 if small else len(coll.docs)]
    doc_ids = [d["id"] for d in docs]
    texts = [(d["title"] + "\n" + d["text"]).strip() for d in docs]
    kept = set(doc_ids)
    qrels = [r for r in coll.qrels if r.doc_id in kept]
    qids = sorted({r.query_id for r in qrels if r.relevance > 0})[: 10 if small else None]
    qtexts = [coll.queries[q] for q in qids]
    name = torch.cuda.get_device_name(0) if gpu == "cuda" else "cpu (standing in)"
    print(f"device: {name}; {torch_build()}; collection {coll.name}: {len(docs)} documents, {len(qids)} "
          "judged queries", flush=True)

    # 1. Encode throughput
    sample = (texts * (1 + args.docs // max(1, len(texts))))[: 64 if small else args.docs]
    shown = "cuda" if gpu == "cuda" else "stand-in"      # the label of the device's rows
    setups = [("cpu fp32", "cpu", False), (f"{shown} fp32", gpu, False), (f"{shown} fp16", gpu, True)]
    enc = {label: encoder(path, device, half) for label, device, half in setups}
    tp = []
    for label, device, _ in setups:
        model = enc[label]
        for batch in ((64,) if device == "cpu" or small else (64, 256)):
            rate = throughput(model, sample, device, batch, passes=1 if small else 3)
            tp.append({"setup": label, "batch": batch, "docs_per_s": rate})
            print(f"encode {label:10s} batch {batch:3d}: {rate:9.1f} documents/s", flush=True)

    # 2. fp16 parity on the collection
    vecs = {}
    for label, model in enc.items():
        vecs[label] = (model.encode(texts, batch_size=64, normalize_embeddings=True, convert_to_numpy=True),
                       model.encode(qtexts, batch_size=64, normalize_embeddings=True, convert_to_numpy=True))
    per, tops = {}, {}
    for label, (d, q) in vecs.items():
        per[label], tops[label] = ndcg_of(d, q, doc_ids, qids, qrels)
    f32, f16 = f"{shown} fp32", f"{shown} fp16"
    a, b = [per[f16][q] for q in qids], [per[f32][q] for q in qids]
    p = None if a == b else round(float(ttest_rel(a, b).pvalue), 4)
    parity = {
        "ndcg@10": {k: round(float(np.mean(list(v.values()))), 4) for k, v in per.items()},
        "fp16_minus_fp32": round(float(np.mean(a) - np.mean(b)), 4), "paired_t_p": p,
        "max_abs_vector_diff": round(float(max(np.abs(vecs[f16][0].astype(np.float32) - vecs[f32][0]).max(),
                                               np.abs(vecs[f16][1].astype(np.float32) - vecs[f32][1]).max())), 5),
        "top10_overlap": round(float(np.mean([len(set(tops[f16][q]) & set(tops[f32][q])) / 10 for q in qids])), 4),
        "queries": len(qids), "documents": len(docs)}
    print(f"nDCG@10 {parity['ndcg@10']}; fp16 - fp32 {parity['fp16_minus_fp32']:+} (p {p}); "
          f"max |Δ| {parity['max_abs_vector_diff']}; top-10 overlap {parity['top10_overlap']}", flush=True)

    # 3. Rerank latency
    rng = random.Random(0)
    n = 8 if small else 50
    queries = [rng.choice(list(coll.queries.values())) for _ in range(4 if small else args.queries)]
    draws = [rng.sample(texts, min(n, len(texts))) for _ in queries]
    rr = []
    for label, device, half in setups:
        r = rerank_latency(path, device, half, queries, draws)
        rr.append({"setup": label, "passages": n, "max_length": 192, **r})
        print(f"rerank {label:10s}: p50 {r['p50']:8.1f} ms  p95 {r['p95']:8.1f} ms ({n} passages)", flush=True)

    result = {"when": datetime.now().isoformat(timespec="seconds"), "device": name, "torch": torch_build(),
              "cpus": os.cpu_count(), "collection": coll.name, "stand_in": args.stand_in,
              "throughput": tp, "parity": parity, "rerank": rr}
    lines = [f"# CUDA against CPU — {name}", "", f"{torch_build()}; {os.cpu_count()} CPUs; all-MiniLM-L6-v2; "
             f"collection {coll.name}." + (" **Stand-in run: the CPU plays the GPU; nothing here is a CUDA "
                                           "figure.**" if small else ""), "",
             "| encode | batch | documents/s |", "|---|---|---|"]
    lines += [f"| {r['setup']} | {r['batch']} | {r['docs_per_s']} |" for r in tp]
    lines += ["", f"fp16 parity ({parity['documents']} documents, {parity['queries']} judged queries, exact search):", "",
              "| encoding | nDCG@10 |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in parity["ndcg@10"].items()]
    lines += ["", f"fp16 − fp32: {parity['fp16_minus_fp32']:+} (paired t-test p {p}); largest element-wise vector "
                  f"difference {parity['max_abs_vector_diff']}; mean top-10 overlap {parity['top10_overlap']}.", "",
              "| rerank, max length 192 | passages | p50 ms | p95 ms |", "|---|---|---|---|"]
    lines += [f"| {r['setup']} | {r['passages']} | {r['p50']} | {r['p95']} |" for r in rr]
    write("gpu-standin" if small else "gpu", result, "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
