"""The development-collection table: every collection of ../shared/data/ir (CISI, MED, NPL, CACM)
ingested as pages (one workspace per collection) and searched sparse-only, dense-only and hybrid
with the active embedder; nDCG@10 and recall@100 from ir_measures.

    refindery eval ir [--collections cisi med npl cacm] [--ir-dir DIR] [--data-dir DIR]

Writes eval/results/ir_quality.json and .md (the table docs/compare-and-eval.md quotes). `refindery eval run`
does the same for one collection with more metrics, several embedders and significance tests.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

from engine.app import Engine

from . import collections, run

ROOT = Path(__file__).resolve().parent.parent
# The development collections live in the project's shared folder beside the checkout
# (`../shared/data/ir`); REFINDERY_IR_DIR points elsewhere.
DEFAULT_IR_DIR = Path(os.environ.get("REFINDERY_IR_DIR") or ROOT.parent / "shared" / "data" / "ir")
COLLECTIONS = ("cisi", "med", "npl", "cacm")
MODES = ("sparse", "dense", "hybrid")


def evaluate(engine: Engine, ir_dir: Path = DEFAULT_IR_DIR, names=COLLECTIONS, progress: bool = True) -> dict:
    model = engine.settings.models.active
    out = {"model": model, "collections": {}}
    for name in names:
        t = time.perf_counter()
        coll = collections.load(Path(ir_dir) / name)
        res = run.evaluate_run(engine, coll, [model], list(MODES), workspace=name, progress=progress)
        row = {"docs": res["docs"], "queries": res["queries"], "ingest": res["ingest"],
               "seconds": round(time.perf_counter() - t, 1)}
        for mode in MODES:
            vals = res["metrics"]["sparse" if mode == "sparse" else f"{mode}/{model}"]
            row[mode] = {"nDCG@10": vals["nDCG@10"], "R@100": vals["R@100"]}
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
        lines.append(f"| {name} | {row['docs']} | {row['queries']} | {cells['sparse']} | {cells['dense']} | "
                     f"{cells['hybrid']} | {row['hybrid']['nDCG@10'] - best:+.3f} |")
    return "\n".join(lines) + "\n"


def write_results(result: dict, out_dir: Path = ROOT / "eval" / "results") -> tuple[Path, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    j, m = out_dir / "ir_quality.json", out_dir / "ir_quality.md"
    j.write_text(json.dumps(result, indent=2) + "\n")
    m.write_text(markdown(result))
    return j, m
