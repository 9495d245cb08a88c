"""The same corpus and queries on the embedded backend (tantivy + FAISS) and on Milvus, and Ray
batch embedding against in-process embedding (issue 24).

    .venv/bin/python bench/backends.py [--collections med cisi] [--sizes 10000 100000] [--queries 50]
                                       [--ray-texts 1500] [--milvus-uri URI] [--data-dir data-backends]

1. Quality: each development collection is ingested and embedded once (the embedded backend, in
   `<data-dir>/<name>`), then its store is copied to `<data-dir>/<name>-milvus` and opened with
   `index.backend = "milvus"`: start-up repair builds the Milvus collections from the store (the same
   vectors, so only the arms differ). nDCG@10 of BM25 only, dense only and hybrid (default
   settings, pins off), and per-stage p50/p95 of the whole pipeline, per backend.
2. Scale: bench/search.py's synthetic corpus (Zipf pseudo-words, random unit vectors) at each size,
   written to one store; the index build (start-up repair from the store) and per-stage p50/p95 of
   the same queries on each backend.
3. Ray: the same chunk texts embedded in process and on a local Ray (2 CPUs) with 1 and 2 actors,
   model loads included (each ingest batch under Ray is one Ray Data job), in chunks per second.

Milvus is a local server started here from milvus-lite 2.5 (its engine serving gRPC on loopback:
the client path a cluster uses) unless --milvus-uri names one. Writes bench/results/backends.{json,md}.
"""
from __future__ import annotations

import argparse
import os
import shutil
import socket
import tempfile
import time
import warnings
from pathlib import Path

import ir_measures
import numpy as np

from common import ROOT, ir_engine, p50_p95, write  # noqa: I001

from engine.app import Engine  # noqa: E402
from engine.core.corpus import STORE_FILE, open_corpus  # noqa: E402
from engine.core.settings import load_settings  # noqa: E402
from engine.refind.search import SearchRequest  # noqa: E402
from eval.run import MEASURES  # noqa: E402

STAGES = ["embed", "sparse", "dense", "fusion", "rollup", "hydrate", "total"]
K = 100


def milvus_server(tmp: Path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        from milvus_lite.server import Server
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = Server(str(tmp / "milvus.db"), address=f"127.0.0.1:{port}")
    if not server.init() or not server.start():
        raise SystemExit("milvus-lite's server did not start")
    return server, f"http://127.0.0.1:{port}"


def on_milvus(settings, uri: str, data_dir: Path):
    return load_settings(data_dir=str(data_dir), models=settings.models.model_dump(),
                         index={"backend": "milvus"}, milvus={"uri": uri, "timeout_s": 120})


def ndcg(coll, ranked: dict) -> float:
    run = [ir_measures.ScoredDoc(q, d, s) for q, hits in ranked.items() for d, s in hits]
    agg = ir_measures.calc_aggregate([MEASURES[0]], coll.qrels, run)
    return round(float(next(iter(agg.values()))), 4)


def run_queries(engine: Engine, queries: dict[str, str], workspace: str | None, **params):
    # The embedder (one per process) keeps a query cache: off and empty, so each backend's run
    # embeds every query itself rather than reading the vectors an earlier run left
    emb = engine.corpus.embedder()
    emb._cache_size = 0
    emb._cache.clear()
    ranked, stages = {}, {}
    for text in list(queries.values())[:3]:   # warm-up
        engine.search(SearchRequest(query=text[:2000], k=10, workspace=workspace, pin=False, **params), log=False)
    for qid, text in queries.items():
        res = engine.search(SearchRequest(query=text[:2000], k=K, workspace=workspace, pin=False, **params), log=False)
        ranked[qid] = [(h.url.rsplit("/", 1)[1], float(h.score)) for h in res.pages]
        for k, v in res.timings_ms.items():
            stages.setdefault(k, []).append(v)
    return ranked, {s: p50_p95(v) for s, v in stages.items() if s in STAGES}


def quality(args, uri: str) -> dict:
    out = {}
    for name in args.collections:
        engine, coll = ir_engine(Path(args.data_dir), name, [load_settings().models.active])
        settings = engine.settings
        engine.close()
        mdir = Path(args.data_dir) / f"{name}-milvus"
        shutil.rmtree(mdir, ignore_errors=True)
        mdir.mkdir(parents=True)
        shutil.copy(Path(args.data_dir) / name / STORE_FILE, mdir / STORE_FILE)
        row = {}
        for backend, s in (("embedded", settings), ("milvus", None)):
            t = time.perf_counter()
            engine = Engine(s or on_milvus(settings, uri, mdir))   # milvus: start-up repair builds the collections
            opened = round(time.perf_counter() - t, 1)
            try:
                r = {"open_s": opened}
                for arm, params in (("bm25", {"dense_weight": 0.0}), ("dense", {"sparse_weight": 0.0}), ("hybrid", {})):
                    ranked, stages = run_queries(engine, coll.queries, name, **params)
                    r[arm] = {"ndcg@10": ndcg(coll, ranked), "stages_ms": stages}
                row[backend] = r
            finally:
                engine.close()
        row["delta_ndcg@10"] = {arm: round(row["milvus"][arm]["ndcg@10"] - row["embedded"][arm]["ndcg@10"], 4)
                                for arm in ("bm25", "dense", "hybrid")}
        out[name] = row
        print(name, row["delta_ndcg@10"], flush=True)
    return out


def scale(args, uri: str) -> dict:
    from search import build, vocabulary, zipf_words   # bench/search.py's synthetic corpus

    rng = np.random.default_rng(7)
    vocab = vocabulary(rng)
    out = {}
    for n in args.sizes:
        with tempfile.TemporaryDirectory(dir=args.data_dir) as tmp:
            edir, mdir = Path(tmp) / "embedded", Path(tmp) / "milvus"
            corpus = open_corpus(load_settings(data_dir=str(edir), search={"query_cache_size": 0}))
            t_store, t_index = build(corpus, n, corpus.embedder().dim, rng, vocab)
            corpus.close()
            mdir.mkdir()
            shutil.copy(edir / STORE_FILE, mdir / STORE_FILE)
            queries = {str(i): " ".join(zipf_words(rng, vocab, 4)) for i in range(args.queries)}
            row = {"chunks": n, "store_write_s": round(t_store, 1)}
            for backend in ("embedded", "milvus"):
                if backend == "embedded":
                    s = load_settings(data_dir=str(edir), search={"query_cache_size": 0})
                    built = t_index
                else:
                    s = load_settings(data_dir=str(mdir), search={"query_cache_size": 0}, index={"backend": "milvus"},
                                      milvus={"uri": uri, "timeout_s": 300})
                t = time.perf_counter()
                engine = Engine(s)
                if backend == "milvus":
                    built = time.perf_counter() - t     # start-up repair: every chunk into Milvus
                try:
                    _, stages = run_queries(engine, queries, None)
                finally:
                    engine.close()
                row[backend] = {"index_build_s": round(built, 1), "chunks_indexed_per_s": round(n / built, 1),
                                "stages_ms": stages}
            out[str(n)] = row
            print(n, {b: row[b]["stages_ms"]["total"] for b in ("embedded", "milvus")}, flush=True)
    return out


def ray_rates(args) -> dict:
    from eval import collections
    from eval.ir import DEFAULT_IR_DIR
    from models.ray_embed import EmbedderSource, RayEmbedding

    s = load_settings()
    texts = []
    for name in args.collections:
        texts += [" ".join(x for x in (d.get("title"), d.get("text")) if x)[:1500]
                  for d in collections.load(DEFAULT_IR_DIR / name).docs]
    texts = texts[:args.ray_texts]
    model = s.models.active
    engine = Engine(load_settings(data_dir=str(Path(args.data_dir) / "ray-inproc")))
    try:
        emb = engine.corpus.embedder(model)
        emb.encode_documents(texts[:32])
        t = time.perf_counter()
        emb.encode_documents(texts)
        inproc = time.perf_counter() - t
    finally:
        engine.close()
    out = {"texts": len(texts), "in_process": {"seconds": round(inproc, 1), "chunks_per_s": round(len(texts) / inproc, 1)}}
    source = EmbedderSource(str(s.registry_path), str(s.models_cache_dir), str(s.data_dir), "cpu", s.models.batch_size)
    for actors in (1, 2):
        remote = RayEmbedding(None, source, actors=actors, batch_size=64, cpus_per_actor=1.0, local_cpus=2)
        try:
            t = time.perf_counter()
            remote.encode(model, texts)     # one ingest batch: actors start, load the model, embed
            first = time.perf_counter() - t
            t = time.perf_counter()
            remote.encode(model, texts)
            second = time.perf_counter() - t
        finally:
            remote.close()
        out[f"ray_{actors}_actor{'s' if actors > 1 else ''}"] = {
            "seconds_with_actor_start": round(first, 1), "chunks_per_s_with_actor_start": round(len(texts) / first, 1),
            "seconds_second_job": round(second, 1), "chunks_per_s_second_job": round(len(texts) / second, 1)}
        print(actors, out, flush=True)
    return out


def markdown(res: dict) -> str:
    lines = ["# Backends: embedded (tantivy + FAISS) vs Milvus; Ray embedding", "",
             f"Run {res['date']} on {res['machine']}; Milvus: {res['milvus']}.", "",
             "## Quality on the development collections (nDCG@10; the same stored vectors)", "",
             "| collection | arm | embedded | milvus | Δ | p50 total ms (embedded / milvus) |", "|---|---|---|---|---|---|"]
    for name, row in res.get("quality", {}).items():
        for arm in ("bm25", "dense", "hybrid"):
            e, m = row["embedded"][arm], row["milvus"][arm]
            lines.append(f"| {name} | {arm} | {e['ndcg@10']:.4f} | {m['ndcg@10']:.4f} | {row['delta_ndcg@10'][arm]:+.4f} "
                         f"| {e['stages_ms']['total']['p50']} / {m['stages_ms']['total']['p50']} |")
    if res.get("scale"):
        lines += ["", "## Scale (synthetic corpus; p50 / p95 ms per stage)", "",
                  "| chunks | backend | index build s | chunks/s indexed | " + " | ".join(STAGES) + " |",
                  "|---|---|---|---|" + "---|" * len(STAGES)]
        for n, row in res["scale"].items():
            for b in ("embedded", "milvus"):
                r = row[b]
                cells = [f"{r['stages_ms'][s]['p50']} / {r['stages_ms'][s]['p95']}" if s in r["stages_ms"] else "–"
                         for s in STAGES]
                lines.append(f"| {n} | {b} | {r['index_build_s']} | {r['chunks_indexed_per_s']} | " + " | ".join(cells) + " |")
    if res.get("ray"):
        r = res["ray"]
        lines += ["", f"## Ray batch embedding ({r['texts']} chunk texts, local Ray with 2 CPUs)", "",
                  "| how | chunks/s (one job, actors starting) | chunks/s (a second job) |", "|---|---|---|",
                  f"| in process | {r['in_process']['chunks_per_s']} | – |"]
        for k in ("ray_1_actor", "ray_2_actors"):
            if k in r:
                lines.append(f"| {k.replace('_', ' ')} | {r[k]['chunks_per_s_with_actor_start']} | "
                             f"{r[k]['chunks_per_s_second_job']} |")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--collections", nargs="+", default=["med", "cisi"])
    ap.add_argument("--sizes", type=int, nargs="*", default=[10_000, 100_000])
    ap.add_argument("--queries", type=int, default=50)
    ap.add_argument("--ray-texts", type=int, default=1500)
    ap.add_argument("--skip", nargs="*", default=[], choices=["quality", "scale", "ray"])
    ap.add_argument("--milvus-uri", default=None)
    ap.add_argument("--data-dir", default=str(ROOT / "data-backends"))
    args = ap.parse_args()
    Path(args.data_dir).mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    tmp = Path(tempfile.mkdtemp(prefix="milvus-bench"))
    server, uri = (None, args.milvus_uri) if args.milvus_uri else milvus_server(tmp)
    res = {"date": time.strftime("%Y-%m-%d"), "machine": f"{os.cpu_count()} CPU cores, no GPU",
           "milvus": "milvus-lite 2.5.1 server on loopback (index AUTOINDEX)" if server else uri}
    try:
        if "quality" not in args.skip:
            res["quality"] = quality(args, uri)
        if "scale" not in args.skip and args.sizes:
            res["scale"] = scale(args, uri)
        if "ray" not in args.skip:
            res["ray"] = ray_rates(args)
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    write("backends", res, markdown(res))


if __name__ == "__main__":
    main()
