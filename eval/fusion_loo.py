"""Fusion against its better arm, leave one collection out (issue 42): does the fusion ever fall below
the better of its two arms, and would arm weights chosen on the other collections keep it above?
Run by `make eval-studies` beside the learned-ranking study, over the data dirs `make eval` built.

For every test collection and every configuration — each arm alone, RRF and linear (minmax) fusion
with the BM25 arm's weight in {0.25, 0.5, 1, 2, 4} (dense 1) — every judged query runs through the
real pipeline (pins off) for its nDCG@10. Then, per held-out collection, the fusion configuration
with the best mean over the other collections is chosen and scored on the held-out one, beside the
default (RRF, equal weights) and the better single arm there.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import ir_measures
import numpy as np
from ir_measures import nDCG

from engine.app import Engine
from engine.core.settings import load_settings
from engine.refind.search import SearchRequest

from eval import collections, studies

ROOT = Path(__file__).resolve().parent.parent
NAMES = ("cisi", "med", "npl", "cacm")
ARMS = {"BM25 arm": {"dense_weight": 0.0, "sparse_weight": 1.0}, "dense arm": {"dense_weight": 1.0, "sparse_weight": 0.0}}
FUSIONS = {f"{f} w_bm25={w:g}": {"fusion": f, "dense_weight": 1.0, "sparse_weight": w}
           for f in ("rrf", "linear") for w in (0.25, 0.5, 1.0, 2.0, 4.0)}
DEFAULT = "rrf w_bm25=1"


def per_query(engine: Engine, coll, overrides: dict) -> dict[str, float]:
    run = []
    for qid, text in coll.queries.items():
        req = SearchRequest(query=text[:2000], k=10, workspace=coll.name, pin=False, **overrides)
        for hit in engine.search(req, log=False).pages:
            run.append(ir_measures.ScoredDoc(qid, hit.url.rsplit("/", 1)[1], float(hit.score)))
    out = {qid: 0.0 for qid in coll.queries}
    for m in ir_measures.iter_calc([nDCG @ 10], coll.qrels, run):
        out[m.query_id] = float(m.value)
    return out


def study(scores: dict[str, dict[str, dict[str, float]]]) -> dict:
    """`scores[collection][configuration][query]`: nDCG@10. Per held-out collection: the chosen fusion,
    its nDCG@10, the default's, each arm's, and the fusion against the better arm."""
    mean = {c: {k: float(np.mean(list(v.values()))) for k, v in by.items()} for c, by in scores.items()}
    out = {}
    for held in scores:
        others = [c for c in scores if c != held]
        chosen = max(FUSIONS, key=lambda k: (np.mean([mean[c][k] for c in others]), k == DEFAULT))
        better = max(ARMS, key=lambda a: mean[held][a])
        out[held] = {"chosen": chosen, "chosen_nDCG@10": round(mean[held][chosen], 4),
                     "default_nDCG@10": round(mean[held][DEFAULT], 4), "better_arm": better,
                     "better_arm_nDCG@10": round(mean[held][better], 4),
                     "chosen_vs_better_arm": round(mean[held][chosen] - mean[held][better], 4),
                     "default_vs_better_arm": round(mean[held][DEFAULT] - mean[held][better], 4),
                     "all": {k: round(v, 4) for k, v in mean[held].items()}}
    return out


def markdown(result: dict) -> str:
    lines = ["Fusion against its better arm, leave one collection out (eval/fusion_loo.py): nDCG@10; the fusion "
             "configuration (RRF or linear minmax, BM25 weight 0.25–4 with dense 1) chosen by its mean over the "
             "other three collections.", "",
             "| held out | better arm | default RRF (vs better arm) | chosen on the others | chosen (vs better arm) |",
             "|---|---|---|---|---|"]
    for held, r in result.items():
        lines.append(f"| {held} | {r['better_arm']} {r['better_arm_nDCG@10']:.3f} | {r['default_nDCG@10']:.3f} "
                     f"({r['default_vs_better_arm']:+.3f}) | {r['chosen']} | {r['chosen_nDCG@10']:.3f} "
                     f"({r['chosen_vs_better_arm']:+.3f}) |")
    worst_d = min(r["default_vs_better_arm"] for r in result.values())
    worst_c = min(r["chosen_vs_better_arm"] for r in result.values())
    lines += ["", f"Worst case against the better arm: default {worst_d:+.3f}, chosen leave-one-out {worst_c:+.3f}."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ir-data", required=True, help="the data dirs `refindery eval ir` built, one per collection")
    ap.add_argument("--ir-dir", default=str(ROOT.parent / "shared" / "data" / "ir"))
    ap.add_argument("--out", default=str(studies.RESULTS))
    args = ap.parse_args(argv)
    settings = load_settings()
    scores: dict = {}
    for name in NAMES:
        coll = collections.load(Path(args.ir_dir) / name)
        with Engine(settings.model_copy(update={"data_dir": Path(args.ir_data) / name})) as engine:
            scores[name] = {k: per_query(engine, coll, o) for k, o in {**ARMS, **FUSIONS}.items()}
    result = study(scores)
    return studies.write(args.out, "fusion_loo", result, markdown(result))


if __name__ == "__main__":
    raise SystemExit(main())
