"""Quality on classic IR test collections (CISI, MED, NPL, CACM): each document is ingested as
a page, each query is searched sparse-only, dense-only and hybrid, and nDCG@10 / recall@100 are
computed with ir_measures against the collection's relevance judgments.

    refindery eval ir [--collections cisi med npl cacm] [--ir-dir DIR] [--data-dir DIR]

Writes eval/results/ir_quality.json and .md (the table the README quotes).
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import ir_measures
from ir_measures import R, nDCG

from engine.corpus import Corpus
from engine.ingest import Ingester
from engine.search import SearchRequest, SearchService

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_IR_DIR = ROOT.parent / "shared" / "data" / "ir"
COLLECTIONS = ("cisi", "med", "npl", "cacm")
MODES = {"sparse": {"dense_weight": 0.0, "sparse_weight": 1.0},
         "dense": {"dense_weight": 1.0, "sparse_weight": 0.0},
         "hybrid": {"dense_weight": 1.0, "sparse_weight": 1.0}}
MEASURES = [nDCG @ 10, R @ 100]
URL_PREFIX = "https://ir.example/"


@dataclass
class Collection:
    name: str
    docs: list[dict]
    queries: dict[str, str]
    qrels: list[ir_measures.Qrel]


def load_collection(ir_dir: Path, name: str) -> Collection:
    base = Path(ir_dir) / name
    docs = [json.loads(line) for line in (base / "docs.jsonl").open(encoding="utf-8")]
    queries = {}
    for line in (base / "queries.jsonl").open(encoding="utf-8"):
        q = json.loads(line)
        queries[str(q["id"])] = q["text"]
    qrels = []
    for line in (base / "qrels.tsv").open(encoding="utf-8"):
        qid, did, grade = line.split()
        qrels.append(ir_measures.Qrel(qid, did, int(grade)))
    judged = {q.query_id for q in qrels if q.relevance > 0}
    return Collection(name, docs, {k: v for k, v in queries.items() if k in judged}, qrels)


def doc_url(collection: str, doc_id: str) -> str:
    return f"{URL_PREFIX}{collection}/{doc_id}"


def ingest_collection(corpus: Corpus, coll: Collection, progress: bool = True) -> dict:
    """Each document becomes a page in a workspace named after the collection (idempotent)."""
    records = ((i, coll.name, {"url": doc_url(coll.name, str(d["id"])), "title": d.get("title") or None,
                               "body_text": d.get("text") or d.get("title") or "(empty)",
                               "seen_at": "2026-01-01T00:00:00Z"})
               for i, d in enumerate(coll.docs, start=1))
    report = Ingester(corpus, coll.name, progress=progress).ingest(records, total=len(coll.docs))
    return report.summary()


def run_queries(service: SearchService, coll: Collection, mode: str, k: int = 100) -> list[ir_measures.ScoredDoc]:
    run = []
    for qid, text in coll.queries.items():
        res = service.search(SearchRequest(query=text[:2000], k=k, workspace=coll.name, pin=False, **MODES[mode]))
        for hit in res.pages:
            run.append(ir_measures.ScoredDoc(qid, hit.url.rsplit("/", 1)[1], float(hit.score)))
    return run


def evaluate(corpus: Corpus, ir_dir: Path = DEFAULT_IR_DIR, collections=COLLECTIONS, progress: bool = True) -> dict:
    service = SearchService(corpus)
    out = {"model": corpus.settings.models.active, "collections": {}}
    for name in collections:
        coll = load_collection(ir_dir, name)
        t = time.perf_counter()
        ingest = ingest_collection(corpus, coll, progress)
        row = {"docs": len(coll.docs), "queries": len(coll.queries), "ingest": ingest,
               "ingest_seconds": round(time.perf_counter() - t, 1)}
        for mode in MODES:
            t = time.perf_counter()
            agg = ir_measures.calc_aggregate(MEASURES, coll.qrels, run_queries(service, coll, mode))
            row[mode] = {str(m): round(float(v), 4) for m, v in agg.items()}
            row[mode]["seconds"] = round(time.perf_counter() - t, 2)
        out["collections"][name] = row
        if progress:
            print(f"{name}: " + "  ".join(f"{m} nDCG@10={row[m]['nDCG@10']:.3f}" for m in MODES), flush=True)
    return out


def markdown(result: dict) -> str:
    lines = [f"nDCG@10 (recall@100 in brackets), embedder `{result['model']}`, RRF k=60, rollup max:", "",
             "| collection | docs | queries | sparse (BM25) | dense | hybrid (RRF) | hybrid vs best single arm |",
             "|---|---|---|---|---|---|---|"]
    for name, row in result["collections"].items():
        cells = {m: f"{row[m]['nDCG@10']:.3f} ({row[m]['R@100']:.3f})" for m in MODES}
        best = max(row["sparse"]["nDCG@10"], row["dense"]["nDCG@10"])
        delta = row["hybrid"]["nDCG@10"] - best
        lines.append(f"| {name} | {row['docs']} | {row['queries']} | {cells['sparse']} | {cells['dense']} | "
                     f"{cells['hybrid']} | {delta:+.3f} |")
    return "\n".join(lines) + "\n"


def write_results(result: dict, out_dir: Path = ROOT / "eval" / "results") -> tuple[Path, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    j = out_dir / "ir_quality.json"
    m = out_dir / "ir_quality.md"
    j.write_text(json.dumps(result, indent=2) + "\n")
    m.write_text(markdown(result))
    return j, m
