"""Side by side with what a user would pick instead, on the same documents and queries, in one run:

- BM25: our tantivy arm vs bm25s (Snowball English stemmer via PyStemmer, English stop words) —
  nDCG@10 and per-query latency of the bare retrieval call and of our whole sparse-only search;
- hybrid: our whole pipeline (BM25 + dense + RRF + rollup + hydrate, default settings) vs txtai's
  hybrid Embeddings (its BM25 + the same all-MiniLM-L6-v2 through sentence-transformers + FAISS,
  its default score fusion) — nDCG@10 and p50 per query, each embedding the query itself, timed in
  blocks ours, txtai, txtai, ours so a slow stretch of the machine falls on both alike.

    .venv/bin/python bench/peers.py [--data-dir data-peers] [--collections cisi med npl cacm]

Each collection gets a data dir of its own (`<data-dir>/<name>`, ingested on first run), so our BM25
statistics cover that collection only, as the peers' do (one tantivy index shared by several
workspaces computes IDF over all of them). Both peers index each document as title + text (as we
do); URL pinning is off on our side (the collections' URLs are synthetic).
Needs `pip install -e '.[bench]'` (bm25s, PyStemmer, txtai),
which `make bench` does. Writes bench/results/peers.{json,md,png}.
"""
from __future__ import annotations

import argparse
import os
import time

import ir_measures
import numpy as np

from common import ROOT, p50_p95, pyplot, save, write, ir_engine  # noqa: I001

from engine.refind.search import SearchRequest  # noqa: E402
from eval.run import MEASURES  # noqa: E402
from indexes.sparse import SparseFilter  # noqa: E402

COLLECTIONS = ("cisi", "med", "npl", "cacm")
K = 100
FUSION_NORMALIZERS = ("minmax", "zscore", "l2", "dbsf")


def doc_text(d: dict) -> str:
    return " ".join(x for x in (d.get("title"), d.get("text")) if x) or "(empty)"


def measure(coll, ranked: dict[str, list[tuple[str, float]]], per_query: bool = False) -> dict:
    run = [ir_measures.ScoredDoc(q, d, s) for q, hits in ranked.items() for d, s in hits]
    agg = ir_measures.calc_aggregate(MEASURES[:2], coll.qrels, run)
    out = {str(k): round(float(v), 4) for k, v in agg.items()}
    if per_query:   # for the paired tests between runs of the same queries
        judged = {q.query_id for q in coll.qrels}
        per = {q: 0.0 for q in coll.queries if q in judged}
        for m in ir_measures.iter_calc([MEASURES[0]], coll.qrels, run):
            per[m.query_id] = float(m.value)
        out["per_query"] = per
    return out


def timed(fn, queries: dict[str, str], keep: bool = False):
    """(answers by query id, p50/p95 ms; with `keep`, also "all": every query's ms, in order)."""
    out, lat = {}, []
    for q in list(queries.values())[:3]:
        fn(q)  # warm-up
    for qid, text in queries.items():
        t = time.perf_counter()
        out[qid] = fn(text)
        lat.append((time.perf_counter() - t) * 1000)
    return out, p50_p95(lat) | ({"all": lat} if keep else {})


def ours(engine, coll, name: str) -> dict:
    def search(text, k=K, **weights):
        res = engine.search(SearchRequest(query=text[:2000], k=k, workspace=name, pin=False, **weights), log=False)
        return [(h.url.rsplit("/", 1)[1], float(h.score)) for h in res.pages]

    def bare_sparse(text):   # the bare tantivy call, below the engine: the baseline the pipeline is measured against
        return engine.corpus.sparse.search(text[:2000], K, SparseFilter(workspace=name))

    sparse, lat_sparse = timed(lambda t: search(t, dense_weight=0.0), coll.queries)
    dense, lat_dense = timed(lambda t: search(t, sparse_weight=0.0), coll.queries)
    hybrid, _ = timed(search, coll.queries)
    _, lat_bare = timed(bare_sparse, coll.queries)
    out = {"bm25": {"quality": measure(coll, sparse), "search_ms": lat_sparse, "bare_ms": lat_bare},
           "dense": {"quality": measure(coll, dense), "search_ms": lat_dense},
           "hybrid": {"quality": measure(coll, hybrid)}}
    for norm in FUSION_NORMALIZERS:   # the linear fusions beside the default RRF (issue 22)
        ranked, lat = timed(lambda t, n=norm: search(t, fusion="linear", normalizer=n), coll.queries)
        out[f"linear-{norm}"] = {"quality": measure(coll, ranked, per_query=True), "search_ms": lat}
    out["hybrid"]["quality"] = measure(coll, hybrid, per_query=True)
    out["bm25"]["quality"] = measure(coll, sparse, per_query=True)
    return out


def bm25s_peer(coll) -> dict:
    import bm25s
    import Stemmer

    stemmer = Stemmer.Stemmer("english")
    ids = [d["id"] for d in coll.docs]
    t = time.perf_counter()
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize([doc_text(d) for d in coll.docs], stopwords="en", stemmer=stemmer,
                                   show_progress=False), show_progress=False)
    build_s = time.perf_counter() - t

    def search(text):
        toks = bm25s.tokenize([text], stopwords="en", stemmer=stemmer, show_progress=False)
        docs, scores = retriever.retrieve(toks, k=min(K, len(ids)), show_progress=False, n_threads=1)
        return [(ids[int(i)], float(s)) for i, s in zip(docs[0], scores[0]) if s > 0]

    ranked, lat = timed(search, coll.queries)
    return {"quality": measure(coll, ranked, per_query=True), "bare_ms": lat, "build_s": round(build_s, 2)}


def txtai_peer(coll, model_path: str):
    """txtai's hybrid index over the collection: (its quality and build time, its search function)."""
    from txtai import Embeddings

    t = time.perf_counter()
    emb = Embeddings(path=model_path, method="sentence-transformers", content=False, hybrid=True)
    emb.index([(d["id"], doc_text(d), None) for d in coll.docs])
    build_s = time.perf_counter() - t

    def search(text, k=K):
        return [(str(i), float(s)) for i, s in emb.search(text[:2000], k)]

    ranked = {qid: search(text) for qid, text in coll.queries.items()}
    return {"quality": measure(coll, ranked, per_query=True), "build_s": round(build_s, 1)}, search, emb


def paired_latency(engine, name: str, peer_search, queries: dict[str, str], k: int) -> tuple[dict, dict]:
    """Per-query latency of our whole hybrid search and txtai's, timed in blocks ours, txtai, txtai, ours
    over all the queries, so a slow stretch of the machine (a noisy neighbour) falls on both alike while
    each library's thread pool stays warm within its block (alternating per query would have each
    start cold behind the other's spinning threads). Returns their p50/p95 over both blocks and, in
    ours, the median over queries of the ratio ours / txtai (each the mean of its two runs)."""
    def ours(text):
        return engine.search(SearchRequest(query=text[:2000], k=k, workspace=name, pin=False), log=False)

    def peer(text):
        return peer_search(text, k)

    lat = {ours: [], peer: []}
    for fn in (ours, peer, peer, ours):
        _, p = timed(fn, queries, keep=True)
        lat[fn].append(p.pop("all"))
    a, b = np.mean(lat[ours], axis=0), np.mean(lat[peer], axis=0)
    both_a, both_b = np.concatenate(lat[ours]), np.concatenate(lat[peer])
    return p50_p95(both_a) | {"ratio_p50": round(float(np.median(a / b)), 3)}, p50_p95(both_b)


def paired(a: dict, b: dict) -> tuple[float, str]:
    """Mean per-query nDCG@10 difference a - b and the paired t-test's p (as text)."""
    from scipy.stats import ttest_rel

    qs = sorted(set(a.get("per_query", {})) & set(b.get("per_query", {})))
    xa, xb = [a["per_query"][q] for q in qs], [b["per_query"][q] for q in qs]
    if not qs:
        return 0.0, "–"
    diff = sum(xa) / len(xa) - sum(xb) / len(xb)
    if all(x == y for x, y in zip(xa, xb)):
        return diff, "–"
    return diff, f"p {ttest_rel(xa, xb).pvalue:.2f}"


def markdown(res: dict) -> str:
    lines = [f"# Side by side with peers ({res['cpus']} cores; bm25s {res['versions']['bm25s']}, "
             f"txtai {res['versions']['txtai']}, tantivy {res['versions']['tantivy']})", "",
             "## BM25: nDCG@10 (R@100) · p50 ms per query", "",
             "| collection | tantivy arm (ours) | bm25s | ours, bare tantivy call | bm25s retrieve | "
             "ours, whole sparse search |", "|---|---|---|---|---|---|"]
    for name, r in res["collections"].items():
        o, b = r["ours"]["bm25"], r["bm25s"]
        lines.append(f"| {name} | {o['quality']['nDCG@10']:.3f} ({o['quality']['R@100']:.3f}) | "
                     f"{b['quality']['nDCG@10']:.3f} ({b['quality']['R@100']:.3f}) | {o['bare_ms']['p50']:.2f} | "
                     f"{b['bare_ms']['p50']:.2f} | {o['search_ms']['p50']:.2f} |")
    lines += ["", "## Hybrid: nDCG@10 (R@100) · p50 / p95 ms per query (query embedding included)", "",
              "k = 100: ours hydrates 100 pages (url, title, timestamps, two snippets each with highlights), "
              "txtai answers 100 ids and scores; k = 10: a results page.", "",
              "Timed in blocks ours, txtai, txtai, ours over all queries (p50 / p95 over both runs); ratio: "
              "the median over queries of ours / txtai.", "",
              "| collection | Refindery hybrid | txtai hybrid | Refindery ms, k = 100 | txtai ms, k = 100 | ratio | "
              "Refindery ms, k = 10 | txtai ms, k = 10 | ratio |", "|---|---|---|---|---|---|---|---|---|"]
    for name, r in res["collections"].items():
        o, t = r["ours"]["hybrid"], r["txtai"]
        k10 = (f"{o['search_ms_k10']['p50']:.1f} / {o['search_ms_k10']['p95']:.1f} | "
               f"{t['search_ms_k10']['p50']:.1f} / {t['search_ms_k10']['p95']:.1f} | "
               f"{o['search_ms_k10'].get('ratio_p50', float('nan')):.2f}")
        lines.append(f"| {name} | {o['quality']['nDCG@10']:.3f} ({o['quality']['R@100']:.3f}) | "
                     f"{t['quality']['nDCG@10']:.3f} ({t['quality']['R@100']:.3f}) | "
                     f"{o['search_ms']['p50']:.1f} / {o['search_ms']['p95']:.1f} | "
                     f"{t['search_ms']['p50']:.1f} / {t['search_ms']['p95']:.1f} | "
                     f"{o['search_ms'].get('ratio_p50', float('nan')):.2f} | {k10} |")
    lines += ["", "## Fusion: nDCG@10 of each arm alone, the default RRF and the linear fusions (equal weights)", "",
              "| collection | BM25 arm | dense arm | RRF (default) | linear minmax | linear zscore | linear l2 | "
              "linear dbsf | txtai | BM25 arm vs bm25s (p) |", "|---|---|---|---|---|---|---|---|---|---|"]
    for name, r in res["collections"].items():
        o = r["ours"]
        cells = [o[k]["quality"]["nDCG@10"] for k in ("bm25", "dense", "hybrid")]
        cells += [o[f"linear-{n}"]["quality"]["nDCG@10"] for n in FUSION_NORMALIZERS] + [r["txtai"]["quality"]["nDCG@10"]]
        d, p = paired(o["bm25"]["quality"], r["bm25s"]["quality"])
        lines.append(f"| {name} | " + " | ".join(f"{c:.3f}" for c in cells) + f" | {d:+.3f} ({p}) |")
    m = res["mean"]
    lines += ["", f"Mean over collections — BM25 nDCG@10: ours {m['ours_bm25']:.3f}, bm25s {m['bm25s']:.3f}; "
              f"hybrid nDCG@10: ours {m['ours_hybrid']:.3f}, txtai {m['txtai']:.3f}; hybrid p50 ms: ours "
              f"{m['ours_hybrid_ms']:.1f}, txtai {m['txtai_ms']:.1f}."]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data-dir", default=str(ROOT / "data-peers"))
    ap.add_argument("--collections", nargs="+", default=list(COLLECTIONS))
    args = ap.parse_args()
    from importlib.metadata import version

    res = {"cpus": os.cpu_count(), "versions": {p: version(p) for p in ("bm25s", "txtai", "tantivy")},
           "collections": {}}
    for name in args.collections:
        # every query embedded afresh, as txtai embeds it: the runs below repeat the same queries, and
        # the query-embedding cache would answer the hybrid run from the dense run's embeddings
        engine, coll = ir_engine(args.data_dir, name, [], search={"query_cache_size": 0})
        with engine:
            res["model"] = engine.settings.models.active
            row = {"docs": len(coll.docs), "queries": len(coll.queries), "ours": ours(engine, coll, name),
                   "bm25s": bm25s_peer(coll)}
            row["txtai"], peer_search, emb = txtai_peer(coll, str(engine.corpus.embedder().path))
            for k, key in ((K, "search_ms"), (10, "search_ms_k10")):
                row["ours"]["hybrid"][key], row["txtai"][key] = paired_latency(engine, name, peer_search, coll.queries, k)
            emb.close()
        res["collections"][name] = row
        print(name, {k: row[k]["quality"]["nDCG@10"] for k in ("bm25s", "txtai")},
              {k: v["quality"]["nDCG@10"] for k, v in row["ours"].items()}, flush=True)
    rows = res["collections"].values()
    res["mean"] = {
        "ours_bm25": float(np.mean([r["ours"]["bm25"]["quality"]["nDCG@10"] for r in rows])),
        "bm25s": float(np.mean([r["bm25s"]["quality"]["nDCG@10"] for r in rows])),
        "ours_hybrid": float(np.mean([r["ours"]["hybrid"]["quality"]["nDCG@10"] for r in rows])),
        "txtai": float(np.mean([r["txtai"]["quality"]["nDCG@10"] for r in rows])),
        "ours_hybrid_ms": float(np.median([r["ours"]["hybrid"]["search_ms"]["p50"] for r in rows])),
        "txtai_ms": float(np.median([r["txtai"]["search_ms"]["p50"] for r in rows]))}
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.2))
    names = list(res["collections"])
    x = np.arange(len(names))
    for ax, pairs, title in ((axes[0], (("ours", "bm25", "tantivy (ours)"), ("bm25s", None, "bm25s")), "BM25"),
                             (axes[1], (("ours", "hybrid", "Refindery"), ("txtai", None, "txtai")), "hybrid")):
        for j, (key, sub, label) in enumerate(pairs):
            vals = [(r[key][sub] if sub else r[key])["quality"]["nDCG@10"] for r in res["collections"].values()]
            ax.bar(x + (j - 0.5) * 0.38, vals, 0.38, label=label)
        ax.set_xticks(x, names)
        ax.set_ylabel("nDCG@10")
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=8)
    res["plot"] = save(fig, "peers")
    write("peers", res, markdown(res))


if __name__ == "__main__":
    main()
