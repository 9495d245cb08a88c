"""Ingest throughput next to bare model.encode over the same chunk texts, in the same run.

    .venv/bin/python bench/ingest.py [--input demo/pages.jsonl.gz] [--pages 120] [--repeats 3]

Each repeat ingests the pages into a fresh data dir (chunking, embedding, DuckDB transaction,
tantivy commit, FAISS add and save), then encodes the very chunk texts that ingest produced with
the same SentenceTransformer, batch size and normalisation. Repeats alternate the two so drift in
machine speed hits both; we report medians and the ratio of medians (target >= 0.85 on CPU).
Writes bench/results/ingest.json.
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
from models.embedder import EmbedderPool  # noqa: E402
from models.registry import ModelRegistry  # noqa: E402


def load_records(path: Path, pages: int) -> list[dict]:
    seen, out = set(), []
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        for rec in (json.loads(line) for line in fh):
            if rec["url"] in seen:
                continue
            seen.add(rec["url"])
            out.append(rec)
            if len(out) >= pages:
                break
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--input", default=str(ROOT / "demo" / "pages.jsonl.gz"))
    ap.add_argument("--pages", type=int, default=120)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    records = load_records(Path(args.input), args.pages)
    base = load_settings()
    registry = ModelRegistry(base.registry_path, base.models_cache_dir, data_dir=base.data_dir)
    pool = EmbedderPool(registry, base.models.device, base.models.batch_size)
    emb = pool.get(base.models.active)
    emb.encode_documents(["warm up the model"] * 8)

    ingest_rates, encode_rates, n_chunks = [], [], 0
    for r in range(args.repeats):
        with tempfile.TemporaryDirectory() as tmp:
            settings = load_settings(data_dir=tmp)
            with Engine(settings, pool=pool) as engine:
                t0 = time.perf_counter()
                report = engine.ingest(((i, "bench", rec) for i, rec in enumerate(records, start=1)), progress=False)
                t_ingest = time.perf_counter() - t0
                # every chunk's text, for the bare encode below
                texts = engine.corpus.store.sample_chunk_texts(engine.default_workspace, 10 ** 9)
        n_chunks = len(texts)
        assert n_chunks == report.chunks_embedded, (n_chunks, report.chunks_embedded)
        t0 = time.perf_counter()
        emb.model.encode(texts, batch_size=base.models.batch_size, normalize_embeddings=True,
                         convert_to_numpy=True, show_progress_bar=False)
        t_encode = time.perf_counter() - t0
        ingest_rates.append(n_chunks / t_ingest)
        encode_rates.append(n_chunks / t_encode)
        print(f"repeat {r + 1}: ingest {n_chunks / t_ingest:.1f} chunks/s, "
              f"bare encode {n_chunks / t_encode:.1f} chunks/s", flush=True)

    med_i, med_e = statistics.median(ingest_rates), statistics.median(encode_rates)
    result = {
        "pages": len(records), "chunks": n_chunks, "repeats": args.repeats,
        "model": base.models.active, "device": emb.device, "batch_size": base.models.batch_size,
        "ingest_chunks_per_s": ingest_rates, "encode_chunks_per_s": encode_rates,
        "median_ingest_chunks_per_s": round(med_i, 2), "median_encode_chunks_per_s": round(med_e, 2),
        "ratio": round(med_i / med_e, 3), "target_ratio": 0.85,
    }
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "ingest.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"\n{len(records)} pages, {n_chunks} chunks, {args.repeats} repeats, device {emb.device}")
    print(f"median full ingest : {med_i:8.1f} chunks/s")
    print(f"median bare encode : {med_e:8.1f} chunks/s")
    print(f"ratio              : {med_i / med_e:8.3f}   (target >= 0.85)")


if __name__ == "__main__":
    main()
