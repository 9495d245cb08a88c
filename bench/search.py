"""Search latency per stage at 10k, 100k and 1M chunks, and the pipeline's overhead over bare calls.

    .venv/bin/python bench/search.py [--sizes 10000 100000 1000000] [--queries 200]

The corpus is synthetic (Zipf-distributed pseudo-words, 10 chunks a page, random unit vectors
written straight into the store), which is fine for scale: the cost of each stage depends on
sizes, not on meaning. The query is embedded by the real model. For every query we time the full
Engine.search (its own per-stage timings) and, separately and right after it, the bare calls it
makes: tantivy and FAISS with the same depth, and the query's encoding (no query cache anywhere,
so every encoding is computed); the overhead ratio is p50(total) / (p50(bare embed) + p50(bare
sparse) + p50(bare dense)). The dense index is whatever the default settings pick at that size ("auto":
flat, or HNSW from index.hnsw_above vectors). After the warm-up the heap is frozen as the server
freezes it once started (`[server] gc_freeze`). Memory: the process RSS added by building and
searching the corpus (psutil), and the data dir's size on disk. Rerank is not in this table: its
cost depends on the number of candidates and their length, not on corpus size (bench/rerank.md).
Writes bench/results/search.{json,md,png}.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import numpy as np
import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.core import heap  # noqa: E402
from engine.core.corpus import open_corpus  # noqa: E402
from engine.ingest.pipeline import chunk_id_for  # noqa: E402
from engine.app import Engine  # noqa: E402
from engine.refind.search import SearchRequest  # noqa: E402
from engine.core.settings import load_settings  # noqa: E402
from engine.core.urls import page_id_for  # noqa: E402
from indexes.dense import set_search_threads  # noqa: E402
from indexes.store import ChunkRow, PageRow, PageWrite  # noqa: E402
from models.embedder import EmbedderPool  # noqa: E402
from models.registry import ModelRegistry  # noqa: E402

CHUNKS_PER_PAGE = 10
WORDS_PER_CHUNK = 60


def vocabulary(rng, n=5000):
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    return ["".join(rng.choice(letters, size=rng.integers(3, 9))) for _ in range(n)]


def zipf_words(rng, vocab, n):
    ranks = np.minimum(rng.zipf(1.2, size=n), len(vocab)) - 1
    return [vocab[r] for r in ranks]


def build(corpus, n_chunks, dim, rng, vocab):
    store = corpus.store
    n_pages = n_chunks // CHUNKS_PER_PAGE
    t0 = time.perf_counter()
    batch: list[PageWrite] = []
    for p in range(n_pages):
        url = f"https://synthetic.example/{p}"
        pid = page_id_for("default", url.split("://", 1)[1])
        chunks, vecs = [], {}
        for o in range(CHUNKS_PER_PAGE):
            text = " ".join(zipf_words(rng, vocab, WORDS_PER_CHUNK))
            cid = chunk_id_for(pid, text, 0)
            chunks.append(ChunkRow(cid, pid, o, text, 0, len(text), [], WORDS_PER_CHUNK))
            v = rng.standard_normal(dim).astype(np.float32)
            vecs[cid] = v / np.linalg.norm(v)
        seen = datetime(2026, 1, 1)
        batch.append(PageWrite(PageRow(pid, "default", url, url.split("://", 1)[1], "synthetic.example",
                                       f"Page {p}", "", f"h{p}", seen, seen), chunks,
                               {corpus.settings.models.active: vecs}))
        if len(batch) == 1000:
            store.apply(batch, [])
            batch = []
    if batch:
        store.apply(batch, [])
    t_store = time.perf_counter() - t0
    t0 = time.perf_counter()
    corpus.sync()
    corpus.maintain_dense(corpus.settings.models.active)  # what an ingest does after a batch ("auto" kind)
    corpus.flush()
    return t_store, time.perf_counter() - t0


def pct(values, q):
    return float(np.percentile(values, q))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--data-root", type=Path, default=None,
                    help="keep each size's corpus in DATA_ROOT/<size> and reuse it on the next run (a 1M corpus "
                         "takes ~45 min to build on 2 cores); default: a temporary folder per size")
    args = ap.parse_args()
    base = load_settings()
    registry = ModelRegistry(base.registry_path, base.models_cache_dir, data_dir=base.data_dir)
    pool = EmbedderPool(registry, base.models.device, query_cache_size=0)   # every encoding computed
    emb = pool.get(base.models.active)
    rng = np.random.default_rng(7)
    vocab = vocabulary(rng)
    results = {"model": base.models.active, "device": emb.device, "queries": args.queries, "sizes": {}}
    proc = psutil.Process()
    for n in args.sizes:
        with contextlib.ExitStack() as stack:
            if args.data_root is None:
                tmp = stack.enter_context(tempfile.TemporaryDirectory())
            else:
                tmp = args.data_root / str(n)
                tmp.mkdir(parents=True, exist_ok=True)
            built = Path(tmp) / "built.json"
            rss0 = proc.memory_info().rss
            corpus = open_corpus(load_settings(data_dir=tmp, search={"query_cache_size": 0}), pool)
            if built.exists():   # reused: the build figures are the ones measured when it was built
                t_store, t_index = (json.loads(built.read_text())[k] for k in ("store_write_s", "index_build_s"))
            else:
                t_store, t_index = build(corpus, n, emb.dim, rng, vocab)
                if args.data_root is not None:
                    built.write_text(json.dumps({"store_write_s": t_store, "index_build_s": t_index}))
            kind = corpus.dense(base.models.active).kind
            engine = Engine(corpus=corpus)   # the pipeline as every face runs it
            qrng = np.random.default_rng(1000 + n)   # the same queries whether the corpus was built or reused
            queries = [" ".join(zipf_words(qrng, vocab, 4)) for _ in range(args.queries + 5)]
            set_search_threads(base.index.search_threads)   # the bare FAISS call as the search's arm makes it
            for q in queries[:5]:  # warm-up
                engine.search(SearchRequest(query=q))
            if base.server.gc_freeze:   # as `refindery serve` does once started (engine/core/heap.py)
                heap.freeze()
            stages: dict[str, list[float]] = {}
            bare_embed, bare_sparse, bare_dense = [], [], []
            for q in queries[5:]:
                res = engine.search(SearchRequest(query=q, pin=False))
                for k, v in res.timings_ms.items():
                    stages.setdefault(k, []).append(v)
                t = time.perf_counter()
                corpus.sparse.search(q, base.search.sparse_top_n)
                bare_sparse.append((time.perf_counter() - t) * 1000)
                t = time.perf_counter()
                vec = emb.encode_query(q)
                bare_embed.append((time.perf_counter() - t) * 1000)
                t = time.perf_counter()
                corpus.dense(base.models.active).search(vec, base.search.dense_top_n)
                bare_dense.append((time.perf_counter() - t) * 1000)
            sparse_parts = sparse_breakdown(corpus.sparse, queries[5:], base.search.sparse_top_n)
            # The query log's cost on the request path: the same queries with the log off, then on.
            log_cost = {}
            for enabled in (False, True):
                corpus.querylog.enabled = enabled
                totals = []
                for q in queries[5:]:
                    totals.append(engine.search(SearchRequest(query=q, pin=False)).timings_ms["total"])
                log_cost["on" if enabled else "off"] = round(pct(totals, 50), 3)
            rss_mb = (proc.memory_info().rss - rss0) / 2**20
            if args.data_root is not None:   # RSS of building and searching, as measured when it was built
                kept = json.loads(built.read_text())
                rss_mb = kept.setdefault("rss_added_mb", rss_mb)
                built.write_text(json.dumps(kept))
            disk_mb = sum(f.stat().st_size for f in Path(tmp).rglob("*") if f.is_file()) / 2**20
            corpus.close()
        row = {"chunks": n, "dense_kind": kind, "store_write_s": round(t_store, 2), "index_build_s": round(t_index, 2),
               "sparse_breakdown_ms": sparse_parts,
               "p50_total_ms_log_off_on": log_cost,
               "rss_added_mb": round(rss_mb, 1), "disk_mb": round(disk_mb, 1),
               "stages_ms": {k: {"p50": round(pct(v, 50), 3), "p95": round(pct(v, 95), 3)} for k, v in stages.items()},
               "bare_embed_ms": {"p50": round(pct(bare_embed, 50), 3), "p95": round(pct(bare_embed, 95), 3)},
               "bare_sparse_ms": {"p50": round(pct(bare_sparse, 50), 3), "p95": round(pct(bare_sparse, 95), 3)},
               "bare_dense_ms": {"p50": round(pct(bare_dense, 50), 3), "p95": round(pct(bare_dense, 95), 3)}}
        bare = row["bare_embed_ms"]["p50"] + row["bare_sparse_ms"]["p50"] + row["bare_dense_ms"]["p50"]
        row["overhead_ratio"] = round(row["stages_ms"]["total"]["p50"] / bare, 3)
        results["sizes"][str(n)] = row
        print(json.dumps(row, indent=2), flush=True)
    results["growth"] = growth(results)
    results["plot"] = plot(results)
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "search.json").write_text(json.dumps(results, indent=2) + "\n")
    (out / "search.md").write_text(markdown(results))
    print(markdown(results))


def sparse_breakdown(sparse, queries: list[str], top_n: int) -> dict[str, float]:
    """Where tantivy's time goes, p50 ms per query: the arm as the pipeline runs it; the same with a
    workspace filter clause (what it ran with before, one workspace or not); counting every hit;
    reading each hit's id from the stored document instead of the fast field; a shallower top 10;
    building the query alone. Needs tantivy's own index (the embedded backend)."""
    from indexes.sparse import SparseFilter

    searcher = sparse.index.searcher()

    def stored_ids(q):
        return [searcher.doc(a)["chunk_id"][0] for _, a in searcher.search(sparse.query(q), top_n, count=False).hits]

    cases = {
        "arm": lambda q: sparse.search(q, top_n),
        "arm + workspace filter clause": lambda q: sparse.search(q, top_n, SparseFilter(workspace="default")),
        "count every hit": lambda q: searcher.search(sparse.query(q), top_n, count=True).hits,
        "ids from stored documents": stored_ids,
        "top 10 instead of top N": lambda q: sparse.search(q, 10),
        "query building only": lambda q: sparse.query(q),
    }
    out = {}
    for name, fn in cases.items():
        lat = []
        for q in queries:
            t = time.perf_counter()
            fn(q)
            lat.append((time.perf_counter() - t) * 1000)
        out[name] = round(pct(lat, 50), 3)
    return out


STAGES = ["embed", "sparse", "dense", "fusion", "rollup", "decay", "hydrate", "total"]


def growth(results) -> dict:
    """How each cost grows: the exponent b of cost ~ size^b between the smallest and largest size
    (1 = linear, 0 = flat), for every stage's p50, the build times and memory."""
    rows = sorted(results["sizes"].values(), key=lambda r: r["chunks"])
    if len(rows) < 2:
        return {}
    a, b = rows[0], rows[-1]
    span = np.log(b["chunks"] / a["chunks"])

    def exp(x, y):
        return round(float(np.log(max(y, 1e-6) / max(x, 1e-6)) / span), 2)

    out = {s: exp(a["stages_ms"][s]["p50"], b["stages_ms"][s]["p50"]) for s in STAGES if s in a["stages_ms"]}
    out |= {"store_write_s": exp(a["store_write_s"], b["store_write_s"]),
            "index_build_s": exp(a["index_build_s"], b["index_build_s"]),
            "rss_added_mb": exp(a["rss_added_mb"], b["rss_added_mb"]), "disk_mb": exp(a["disk_mb"], b["disk_mb"])}
    return out


def plot(results) -> str:
    sys.path.insert(0, str(ROOT / "bench"))
    from common import pyplot, save

    plt = pyplot()
    rows = sorted(results["sizes"].values(), key=lambda r: r["chunks"])
    fig, ax = plt.subplots(figsize=(6.5, 3.6))
    for s in STAGES:
        if all(s in r["stages_ms"] for r in rows):
            ax.plot([r["chunks"] for r in rows], [max(r["stages_ms"][s]["p50"], 0.01) for r in rows], marker="o",
                    label=s, linewidth=2.2 if s == "total" else 1.2)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("chunks")
    ax.set_ylabel("p50 ms")
    ax.set_title("Search latency per stage by corpus size", fontsize=9)
    ax.legend(fontsize=7, ncol=2)
    return save(fig, "search")


def markdown(results):
    sizes = list(results["sizes"].values())
    stages = STAGES
    g = results.get("growth", {})
    lines = ["| stage (ms, p50 / p95) | " + " | ".join(f"{r['chunks']:,} chunks ({r.get('dense_kind', 'flat')})"
                                                     for r in sizes) + " | growth exponent |",
             "|---|" + "---|" * len(sizes) + "---|"]
    for s in stages:
        lines.append(f"| {s} | " + " | ".join(
            f"{r['stages_ms'][s]['p50']:.2f} / {r['stages_ms'][s]['p95']:.2f}" if s in r["stages_ms"] else "-"
            for r in sizes) + f" | {g.get(s, '-')} |")
    lines.append("| bare query encoding | " + " | ".join(
        f"{r['bare_embed_ms']['p50']:.2f} / {r['bare_embed_ms']['p95']:.2f}" for r in sizes) + " |")
    lines.append("| bare tantivy search | " + " | ".join(
        f"{r['bare_sparse_ms']['p50']:.2f} / {r['bare_sparse_ms']['p95']:.2f}" for r in sizes) + " |")
    lines.append("| bare FAISS search | " + " | ".join(
        f"{r['bare_dense_ms']['p50']:.2f} / {r['bare_dense_ms']['p95']:.2f}" for r in sizes) + " |")
    lines.append("| **overhead ratio** (total / (bare encoding + bare sparse + bare dense)) | " + " | ".join(
        f"**{r['overhead_ratio']:.2f}**" for r in sizes) + " |")
    lines.append("| p50 total, query log off / on (same queries, repeated) | " + " | ".join(
        f"{r['p50_total_ms_log_off_on']['off']:.2f} / {r['p50_total_ms_log_off_on']['on']:.2f}" for r in sizes) + " |")
    for key, label, fmt in (("store_write_s", "store write (s)", "{:.1f}"),
                            ("index_build_s", "index build (s)", "{:.1f}"),
                            ("rss_added_mb", "RSS added (MB)", "{:.0f}"),
                            ("disk_mb", "data dir on disk (MB)", "{:.0f}")):
        lines.append(f"| {label} | " + " | ".join(fmt.format(r[key]) for r in sizes) + f" | {g.get(key, '-')} |")
    lines += ["", "Growth exponent b: cost ~ size^b between the smallest and the largest size (1 linear, 0 flat).", "",
              "Where the sparse arm's time goes (p50 ms; `sparse_breakdown`):", "",
              "| tantivy call | " + " | ".join(f"{r['chunks']:,} chunks" for r in sizes) + " |",
              "|---|" + "---|" * len(sizes)]
    for case in sizes[0].get("sparse_breakdown_ms", {}):
        lines.append(f"| {case} | " + " | ".join(f"{r['sparse_breakdown_ms'][case]:.2f}" for r in sizes) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
