"""Embedder backends on CPU: encode rate by backend and batch size, and what the ONNX int8 model
costs in retrieval quality on the development collections.

    .venv/bin/python bench/embedders.py [--data-dir data-ir] [--sample 384] [--repeats 3]

Speed: the same sample of real chunk texts (CISI, seeded) encoded by every configuration; the
repeats interleave the configurations so a change in machine speed hits all of them, and each
figure is the median over repeats. Configurations: torch (sentence-transformers) at batch 8-64,
ONNX Runtime fp32 (fused attention, no quantization) and int8 (fused, per-channel int8 weights).
Quality: every collection embedded with the int8 registry entry as well, then dense-only and
hybrid nDCG@10 / R@100 with each embedder (ir_measures), and the cosine between the two models'
vectors of the same chunks. Writes bench/results/embedders.{json,md,png}.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from common import ROOT, median, pyplot, save, write, ir_engine  # noqa: I001

from eval import run as evalrun  # noqa: E402
from models.onnx_embedder import OnnxSentenceEncoder, export, export_path  # noqa: E402

TORCH = "all-minilm-l6-v2"
INT8 = "all-minilm-l6-v2-int8"
COLLECTIONS = ("cisi", "med", "npl", "cacm")


def speed(engine, texts: list[str], repeats: int) -> dict:
    """The embedders' own encode calls, below the engine: what each backend does with the same texts."""
    corpus = engine.corpus
    torch_emb = corpus.embedder(TORCH)
    int8_emb = corpus.embedder(INT8)
    fp32_path = export_path(corpus.registry.cache_dir, torch_emb.path, "fp32")
    if not fp32_path.is_file():
        export(torch_emb.path, fp32_path, "fp32")
    fp32 = OnnxSentenceEncoder(torch_emb.path, fp32_path, torch_emb.max_seq_length)
    configs = {f"torch b{b}": (torch_emb.model, b) for b in (8, 16, 32, 64)}
    configs |= {f"onnx-fp32 b{b}": (fp32, b) for b in (8, 16)}
    configs |= {f"onnx-int8 b{b}": (int8_emb.model, b) for b in (4, 8, 16, 32)}
    for model, b in configs.values():  # warm-up: first calls allocate
        model.encode(texts[:16], batch_size=b, normalize_embeddings=True)
    rates: dict[str, list[float]] = {k: [] for k in configs}
    for r in range(repeats):
        for name, (model, b) in configs.items():
            t = time.perf_counter()
            model.encode(texts, batch_size=b, normalize_embeddings=True, convert_to_numpy=True,
                         show_progress_bar=False)
            rates[name].append(len(texts) / (time.perf_counter() - t))
        print(f"repeat {r + 1}: " + ", ".join(f"{k} {v[-1]:.1f}" for k, v in rates.items()), flush=True)
    ref = torch_emb.model.encode(texts, batch_size=16, normalize_embeddings=True)
    cos = (int8_emb.model.encode(texts, batch_size=8, normalize_embeddings=True) * ref).sum(axis=1)
    return {"texts": len(texts), "repeats": repeats,
            "chunks_per_s": {k: round(median(v), 2) for k, v in rates.items()},
            "all_runs": {k: [round(x, 2) for x in v] for k, v in rates.items()},
            "int8_vs_torch_cosine": {"min": round(float(cos.min()), 4), "median": round(float(np.median(cos)), 4)}}


def quality(engine, name: str, coll) -> dict:
    import ir_measures

    row = {}
    for variant in ("dense", "hybrid"):
        for m in (TORCH, INT8):
            scored = evalrun.run_variant(engine, coll, name, m, variant)
            agg = ir_measures.calc_aggregate(evalrun.MEASURES[:2], coll.qrels, scored)
            row[f"{variant}/{m}"] = {str(k): round(float(v), 4) for k, v in agg.items()}
    print(name, {k: v["nDCG@10"] for k, v in row.items()}, flush=True)
    return row


def markdown(res: dict) -> str:
    sp = res["speed"]
    base = sp["chunks_per_s"]["torch b64"]
    lines = [f"# Embedder backends on CPU ({res['cpus']} cores)", "",
             f"Encode rate of {sp['texts']} CISI chunk texts (up to 256 tokens), median of {sp['repeats']} "
             "interleaved repeats; ratio to torch at the old default batch 64, measured in the same run.", "",
             "| configuration | chunks/s | vs torch b64 |", "|---|---|---|"]
    for k, v in sp["chunks_per_s"].items():
        lines.append(f"| {k} | {v:.1f} | {v / base:.2f}x |")
    c = sp["int8_vs_torch_cosine"]
    lines += ["", f"Cosine of int8 to torch vectors of the same texts: median {c['median']}, min {c['min']}.", "",
              "Retrieval quality, nDCG@10 (R@100), torch vs ONNX int8 model, each with its own index:", "",
              "| collection | dense torch | dense int8 | Δ | hybrid torch | hybrid int8 | Δ |",
              "|---|---|---|---|---|---|---|"]
    for name, row in res["quality"].items():
        cells = []
        for v in ("dense", "hybrid"):
            a, b = row[f"{v}/{TORCH}"], row[f"{v}/{INT8}"]
            cells += [f"{a['nDCG@10']:.3f} ({a['R@100']:.3f})", f"{b['nDCG@10']:.3f} ({b['R@100']:.3f})",
                      f"{b['nDCG@10'] - a['nDCG@10']:+.3f}"]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    e = res["embed_int8"]
    if e.get("chunks_per_s"):
        lines += ["", f"Embedding every collection with the int8 entry ({e['chunks']} chunks) took "
                  f"{e['seconds']:.0f} s "
                  f"({e['chunks_per_s']:.1f} chunks/s, including the store and index writes)."]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data-dir", default=str(ROOT / "data-ir"))
    ap.add_argument("--sample", type=int, default=384)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    import os

    # one data dir per collection (as `make eval`): BM25's statistics are each collection's own
    n, total, embed_s, sp, qual = 0, 0, 0.0, None, {}
    for name in COLLECTIONS:
        engine, coll = ir_engine(args.data_dir, name, [TORCH, INT8])
        with engine:
            t = time.perf_counter()
            n += engine.embed_model(INT8)
            embed_s += time.perf_counter() - t
            total += engine.status()["counts"]["chunks"]
            if name == "cisi":
                sp = speed(engine, engine.corpus.store.sample_chunk_texts("cisi", args.sample), args.repeats)
            qual[name] = quality(engine, name, coll)
    res = {"cpus": os.cpu_count(), "speed": sp,
           "embed_int8": {"chunks": int(n or total), "seconds": round(embed_s, 1),
                          "chunks_per_s": round((n or total) / embed_s, 2) if n else None},
           "quality": qual}
    if not n:
        res["embed_int8"] = {"chunks": total, "seconds": 0.0, "chunks_per_s": 0.0, "note": "already embedded"}
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 3.2))
    names = list(res["speed"]["chunks_per_s"])
    vals = [res["speed"]["chunks_per_s"][k] for k in names]
    ax.bar(range(len(names)), vals, color=["#4c72b0" if k.startswith("torch") else "#dd8452" for k in names])
    ax.set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("chunks/s (median)")
    ax.set_title("Encode rate by backend and batch size (CPU)", fontsize=9)
    res["plot"] = save(fig, "embedders")
    write("embedders", res, markdown(res))


if __name__ == "__main__":
    main()
