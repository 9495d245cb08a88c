"""Dense index choice: exact flat vs HNSW vs IVF, by corpus size — recall@10 against exact search,
single-query latency at our depth (top 100), build time and memory.

    .venv/bin/python bench/dense.py [--sizes 10000 100000 1000000] [--queries 200] [--data-dir data-ir]

Vectors: the real chunk vectors of the development collections (all-MiniLM-L6-v2, from the
data dir `make eval` fills) plus synthetic ones drawn from a Gaussian fitted to them (their mean and
covariance, then normalised), so the corpus keeps the anisotropy of real embeddings at any size;
isotropic random vectors would be a needlessly hard case for graph indexes. Queries: the
collections' real query embeddings. Each index is built through indexes.dense.DenseIndex (the
class the engine uses) with the settings of configs/default.toml. Writes
bench/results/dense.{json,md,png}.
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time

import faiss
import numpy as np

from common import ROOT, p50_p95, pyplot, save, write  # noqa: I001

from engine.core.settings import load_settings  # noqa: E402
from indexes.dense import DenseIndex  # noqa: E402

TOP_N = 100  # the dense arm's depth (search.dense_top_n)


def real_vectors(data_dir: str, model: str):
    import duckdb

    path = os.path.join(data_dir, "refindery.duckdb")
    con = duckdb.connect(path, read_only=True)
    try:
        rows = con.execute("SELECT vector FROM embeddings WHERE model = ?", [model]).fetchall()
    finally:
        con.close()
    return np.asarray([r[0] for r in rows], dtype=np.float32)


def query_vectors(model: str, n: int) -> np.ndarray:
    from eval import collections
    from eval.ir import DEFAULT_IR_DIR
    from models.embedder import EmbedderPool
    from models.registry import ModelRegistry

    s = load_settings()
    emb = EmbedderPool(ModelRegistry(s.registry_path, s.models_cache_dir, data_dir=s.data_dir), "cpu").get(model)
    texts = []
    for name in ("cisi", "med", "npl", "cacm"):
        texts += list(collections.load(DEFAULT_IR_DIR / name).queries.values())
    rng = np.random.default_rng(3)
    texts = [texts[i][:1000] for i in rng.permutation(len(texts))[:n]]
    return emb.encode_documents(texts)


def corpus_vectors(real: np.ndarray, n: int, rng) -> np.ndarray:
    if n <= len(real):
        return real[rng.permutation(len(real))[:n]]
    mean = real.mean(axis=0)
    cov = np.cov(real, rowvar=False)
    w, v = np.linalg.eigh(cov)
    root = v * np.sqrt(np.clip(w, 0, None))
    extra = np.empty((n - len(real), real.shape[1]), dtype=np.float32)
    for s in range(0, len(extra), 100_000):
        z = rng.standard_normal((min(100_000, len(extra) - s), real.shape[1])).astype(np.float32)
        x = mean + z @ root.T.astype(np.float32)
        extra[s:s + len(x)] = x / np.linalg.norm(x, axis=1, keepdims=True)
    return np.vstack([real, extra])


def timed_search(search, queries) -> tuple[list[float], list[list[int]]]:
    lat, got = [], []
    for q in queries[:5]:
        search(q)
    for q in queries:
        t = time.perf_counter()
        res = search(q)
        lat.append((time.perf_counter() - t) * 1000)
        got.append(res)
    return lat, got


def recall_at_10(got, truth) -> float:
    return float(np.mean([len(set(g[:10]) & set(t[:10])) / 10 for g, t in zip(got, truth)]))


def bench_size(n: int, real: np.ndarray, queries: np.ndarray, ix, rng, tmp: str) -> dict:
    vecs = corpus_vectors(real, n, rng)
    ids = np.arange(1, n + 1, dtype=np.int64)
    row = {"vectors": n, "indexes": {}}
    truth = None
    kinds = [("flat", None)] + [("hnsw", e) for e in (64, ix.hnsw_ef_search, 256)]
    built: dict[str, DenseIndex] = {}
    for kind in ("flat", "hnsw"):
        t = time.perf_counter()
        d = DenseIndex(os.path.join(tmp, f"{kind}-{n}.faiss"), vecs.shape[1], kind, ix.hnsw_m,
                       ix.hnsw_ef_construction, ix.hnsw_ef_search)
        for s in range(0, n, 50_000):
            d.add(ids[s:s + 50_000], vecs[s:s + 50_000])
        build_s = time.perf_counter() - t
        d.save(1)
        built[kind] = d
        row["indexes"][kind] = {"build_s": round(build_s, 2),
                                "file_mb": round(os.path.getsize(d.path) / 2**20, 1)}
        print(f"{n:,} {kind}: built in {build_s:.1f} s", flush=True)
    for kind, ef in kinds:
        d = built[kind]
        label = kind if ef is None else f"hnsw ef{ef}"
        if ef is not None:
            d.ef_search = ef
            faiss.downcast_index(d.index.index).hnsw.efSearch = ef
        lat, got = timed_search(lambda q: [i for i, _ in d.search(q, TOP_N)], queries)
        if truth is None:
            truth = got
        entry = row["indexes"].setdefault(label, {})
        entry |= {"latency_ms": p50_p95(lat), "recall@10": round(recall_at_10(got, truth), 4),
                  "recall@100": round(float(np.mean([len(set(g) & set(t)) / len(t) for g, t in zip(got, truth)])), 4)}
        print(f"{n:,} {label}: {entry}", flush=True)
    # IVF (not an engine option): the other classic choice, for the record.
    nlist = int(4 * np.sqrt(n))
    t = time.perf_counter()
    quant = faiss.IndexFlatIP(vecs.shape[1])
    ivf = faiss.IndexIVFFlat(quant, vecs.shape[1], nlist, faiss.METRIC_INNER_PRODUCT)
    ivf.train(vecs[rng.permutation(n)[:min(n, 64 * nlist)]])
    ivf.add(vecs)
    build_s = time.perf_counter() - t
    for nprobe in (8, 32):
        ivf.nprobe = nprobe
        lat, got = timed_search(lambda q: [int(i) + 1 for i in ivf.search(q.reshape(1, -1), TOP_N)[1][0]], queries)
        row["indexes"][f"ivf nprobe{nprobe}"] = {
            "nlist": nlist, "build_s": round(build_s, 2), "latency_ms": p50_p95(lat),
            "recall@10": round(recall_at_10(got, truth), 4),
            "recall@100": round(float(np.mean([len(set(g) & set(t)) / len(t) for g, t in zip(got, truth)])), 4)}
        print(f"{n:,} ivf nprobe{nprobe}: {row['indexes'][f'ivf nprobe{nprobe}']}", flush=True)
    for d in built.values():
        os.remove(d.path)
    return row


def markdown(res: dict) -> str:
    sizes = res["sizes"]
    labels = list(dict.fromkeys(k for r in sizes for k in r["indexes"] if "latency_ms" in r["indexes"][k]))
    lines = [f"# Dense index choice ({res['cpus']} cores, dim {res['dim']}, top {TOP_N}, {res['queries']} "
             "real queries)", "",
             "p50 / p95 ms per query · recall@10 against exact search:", "",
             "| index | " + " | ".join(f"{r['vectors']:,} vectors" for r in sizes) + " |",
             "|---|" + "---|" * len(sizes)]
    for lbl in labels:
        cells = []
        for r in sizes:
            e = r["indexes"].get(lbl)
            cells.append("-" if not e else f"{e['latency_ms']['p50']:.2f} / {e['latency_ms']['p95']:.2f} · "
                                          f"{e['recall@10']:.3f}")
        lines.append(f"| {lbl} | " + " | ".join(cells) + " |")
    lines += ["", "| build (s) / file (MB) | " + " | ".join(f"{r['vectors']:,}" for r in sizes) + " |",
              "|---|" + "---|" * len(sizes)]
    for kind in ("flat", "hnsw"):
        lines.append(f"| {kind} | " + " | ".join(
            f"{r['indexes'][kind]['build_s']:.1f} / {r['indexes'][kind]['file_mb']:.0f}" for r in sizes) + " |")
    lines += ["", res.get("conclusion", "")]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--data-dir", default=str(ROOT / "data-ir"))
    args = ap.parse_args()
    s = load_settings()
    model = s.models.active
    real = real_vectors(args.data_dir, model)
    if not len(real):
        raise SystemExit(f"no {model} vectors in {args.data_dir}: run `make eval` (or bench/embedders.py) first")
    queries = query_vectors(model, args.queries)
    rng = np.random.default_rng(11)
    res = {"cpus": os.cpu_count(), "dim": int(real.shape[1]), "queries": len(queries), "real_vectors": len(real),
           "faiss": faiss.__version__, "hnsw": {"m": s.index.hnsw_m, "ef_construction": s.index.hnsw_ef_construction,
                                                 "ef_search": s.index.hnsw_ef_search}, "sizes": []}
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.sizes:
            res["sizes"].append(bench_size(n, real, queries, s.index, rng, tmp))
            write("dense", res, markdown(res))  # each size as it finishes: a long run leaves its figures
    ef = f"hnsw ef{s.index.hnsw_ef_search}"
    flat = [(r["vectors"], r["indexes"]["flat"]["latency_ms"]["p50"]) for r in res["sizes"]]
    hnsw = [(r["vectors"], r["indexes"][ef]["latency_ms"]["p50"], r["indexes"][ef]["recall@10"]) for r in res["sizes"]]
    res["conclusion"] = (
        "Flat p50 grows linearly with size (" + ", ".join(f"{n:,}: {ms:.1f} ms" for n, ms in flat) + "); HNSW at "
        f"efSearch {s.index.hnsw_ef_search} stays near-flat (" + ", ".join(f"{n:,}: {ms:.1f} ms, recall@10 {r:.3f}"
                                                                        for n, ms, r in hnsw) + "). "
        f"The default (`index.dense_kind = \"auto\"`) switches to HNSW at `index.hnsw_above` = {s.index.hnsw_above:,} "
        "vectors: about where exact search alone costs as much as embedding the query (~20 ms on one core), while "
        "HNSW answers in about a millisecond at recall@10 >= 0.99. Below it, exact search is cheap and HNSW's "
        "build time and approximation buy nothing a user would notice. IVF needs training and loses recall as "
        "the corpus grows at a fixed nprobe; it is not an engine option.")
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.4))
    for lbl, color in (("flat", "#4c72b0"), (ef, "#dd8452")):
        ax.plot([r["vectors"] for r in res["sizes"]], [r["indexes"][lbl]["latency_ms"]["p50"] for r in res["sizes"]],
                marker="o", label=lbl, color=color)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("vectors")
    ax.set_ylabel("p50 ms per query (top 100)")
    ax.legend(fontsize=8)
    ax.set_title("Dense search latency by index and size", fontsize=9)
    res["plot"] = save(fig, "dense")
    write("dense", res, markdown(res))


if __name__ == "__main__":
    main()
