"""`refindery eval run`: variants x embedders on one collection, with metrics, paired significance
tests and a report (Markdown, JSON, PNG).

Variants: sparse (BM25 only), dense (embedder only), hybrid (RRF of both), rerank (hybrid then the
configured cross-encoder, by its score alone), rerank-rrf (the cross-encoder as a third RRF arm),
hybrid-linear and rerank-linear (the same with linear fusion of normalised scores). Metrics (ir_measures): nDCG@10, R@100, RR@10 (MRR@10), AP (MAP over the
top 100). Significance: a paired t-test (scipy) on per-query nDCG@10 for every pair of runs.
"""
from __future__ import annotations

import itertools
import json
from pathlib import Path

import ir_measures
from ir_measures import AP, R, RR, nDCG
from scipy.stats import ttest_rel

from engine.app import Engine
from engine.refind.search import SearchRequest

from .collections import Collection

MEASURES = [nDCG @ 10, R @ 100, RR @ 10, AP @ 100]
VARIANTS = {"sparse": {"dense_weight": 0.0, "sparse_weight": 1.0},
            "dense": {"dense_weight": 1.0, "sparse_weight": 0.0},
            "hybrid": {"dense_weight": 1.0, "sparse_weight": 1.0},
            "rerank": {"dense_weight": 1.0, "sparse_weight": 1.0, "rerank": True, "rerank_fusion": "replace"},
            "rerank-rrf": {"dense_weight": 1.0, "sparse_weight": 1.0, "rerank": True, "rerank_fusion": "rrf"},
            # the same two arms (and the reranker as a third) fused linearly over normalised scores
            "hybrid-linear": {"dense_weight": 1.0, "sparse_weight": 1.0, "fusion": "linear"},
            "rerank-linear": {"dense_weight": 1.0, "sparse_weight": 1.0, "fusion": "linear", "rerank": True,
                              "rerank_fusion": "rrf"}}


def doc_url(collection: str, doc_id: str) -> str:
    """The URL a collection's document is ingested under (its id ends it)."""
    return f"https://ir.example/{collection}/{doc_id}"


def ingest(engine: Engine, coll: Collection, workspace: str, progress: bool = False) -> dict:
    records = ((i, coll.name, {"url": doc_url(coll.name, d["id"]), "title": d["title"] or None,
                               "body_text": d["text"] or d["title"] or "(empty)", "seen_at": "2026-01-01T00:00:00Z"})
               for i, d in enumerate(coll.docs, start=1))
    return engine.ingest(records, workspace, progress=progress, total=len(coll.docs)).summary()


def prepare(engine: Engine, coll: Collection, workspace: str, models: list[str], progress: bool = False) -> dict:
    """Ingest the collection into `workspace` (idempotent), embed it with every model, sync the indexes."""
    summary = ingest(engine, coll, workspace, progress)
    for m in models:
        engine.embed_model(m)
    return summary


def run_variant(engine: Engine, coll: Collection, workspace: str, model: str, variant: str,
                k: int = 100) -> list[ir_measures.ScoredDoc]:
    out = []
    for qid, text in coll.queries.items():
        req = SearchRequest(query=text[:2000], k=k, workspace=workspace, pin=False, shortcuts=False, **VARIANTS[variant])
        for hit in engine.search(req, model=model, log=False).pages:
            out.append(ir_measures.ScoredDoc(qid, hit.url.rsplit("/", 1)[1], float(hit.score)))
    return out


def evaluate_run(engine: Engine, coll: Collection, models: list[str], variants: list[str],
                 workspace: str | None = None, progress: bool = False) -> dict:
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        raise ValueError(f"unknown variants {unknown}; use {', '.join(VARIANTS)}")
    workspace = workspace or coll.name
    summary = prepare(engine, coll, workspace, models, progress)
    runs: dict[str, list] = {}
    for variant in variants:
        for m in (models[:1] if variant == "sparse" else models):
            label = "sparse" if variant == "sparse" else f"{variant}/{m}"
            runs[label] = run_variant(engine, coll, workspace, m, variant)
    result = {"collection": coll.name, "format": coll.format, "docs": len(coll.docs), "queries": len(coll.queries),
              "ingest": summary, "models": models, "variants": variants, "metrics": {}, "per_query": {},
              "significance": []}
    for label, run in runs.items():
        agg = ir_measures.calc_aggregate(MEASURES, coll.qrels, run)
        result["metrics"][label] = {str(m): round(float(v), 4) for m, v in agg.items()}
        per = {qid: 0.0 for qid in coll.queries}
        for m in ir_measures.iter_calc([nDCG @ 10], coll.qrels, run):
            per[m.query_id] = float(m.value)
        result["per_query"][label] = per
    qids = sorted(coll.queries)
    for a, b in itertools.combinations(runs, 2):
        xa = [result["per_query"][a][q] for q in qids]
        xb = [result["per_query"][b][q] for q in qids]
        stat = ttest_rel(xa, xb) if any(x != y for x, y in zip(xa, xb)) else None
        result["significance"].append({"a": a, "b": b, "measure": "nDCG@10",
                                       "mean_diff": round(sum(xa) / len(xa) - sum(xb) / len(xb), 4),
                                       "p_value": None if stat is None else round(float(stat.pvalue), 5)})
    return result


def markdown(result: dict) -> str:
    cols = [str(m) for m in MEASURES]
    lines = [f"## {result['collection']} ({result['docs']} docs, {result['queries']} judged queries)", "",
             "| run | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
    for label, vals in result["metrics"].items():
        lines.append(f"| {label} | " + " | ".join(f"{vals[c]:.4f}" for c in cols) + " |")
    lines += ["", "Paired t-test on per-query nDCG@10:", "", "| a | b | mean diff | p |", "|---|---|---|---|"]
    for s in result["significance"]:
        p = "–" if s["p_value"] is None else (f"{s['p_value']:.4f}" + (" *" if s["p_value"] < 0.05 else ""))
        lines.append(f"| {s['a']} | {s['b']} | {s['mean_diff']:+.4f} | {p} |")
    return "\n".join(lines) + "\n"


def write_report(result: dict, out_dir: Path) -> dict[str, Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    stem = out_dir / f"eval_{result['collection']}"
    paths = {"json": stem.with_suffix(".json"), "md": stem.with_suffix(".md"), "png": stem.with_suffix(".png")}
    paths["json"].write_text(json.dumps(result, indent=2) + "\n")
    paths["md"].write_text(markdown(result))
    labels = list(result["metrics"])
    fig, ax = plt.subplots(figsize=(1.2 + 1.1 * len(labels), 3.2))
    vals = [result["metrics"][lbl]["nDCG@10"] for lbl in labels]
    ax.bar(range(len(labels)), vals, color="#4c72b0")
    ax.set_xticks(range(len(labels)), labels, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("nDCG@10")
    ax.set_ylim(0, 1)
    ax.set_title(f"{result['collection']}: nDCG@10 by run", fontsize=9)
    for i, v in enumerate(vals):
        ax.text(i, v + 0.01, f"{v:.3f}", ha="center", fontsize=7)
    fig.tight_layout()
    fig.savefig(paths["png"], dpi=110)
    plt.close(fig)
    return paths
