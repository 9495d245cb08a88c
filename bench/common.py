"""What every bench script shares: the results folder, JSON + Markdown writing, medians and
percentiles, matplotlib set up for files, and the development collections prepared once."""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def write(name: str, result: dict, md: str) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(result, indent=2) + "\n")
    (RESULTS / f"{name}.md").write_text(md)
    print(md, flush=True)


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(fig, name: str) -> str:
    RESULTS.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(RESULTS / f"{name}.png", dpi=110)
    pyplot().close(fig)
    return f"{name}.png"


def median(values) -> float:
    return float(statistics.median(values))


def pct(values, q) -> float:
    return float(np.percentile(values, q))


def p50_p95(values) -> dict:
    return {"p50": round(pct(values, 50), 3), "p95": round(pct(values, 95), 3)}


def ir_corpus(data_dir: Path, names, models: list[str]):
    """The development collections in one data dir (a workspace each, as `make eval` makes them),
    ingested and embedded with `models` where they are not yet; returns (corpus, collections)."""
    from engine.core.corpus import open_corpus
    from engine.core.settings import load_settings
    from eval import collections, run
    from eval.ir import DEFAULT_IR_DIR

    base = load_settings()
    settings = load_settings(data_dir=str(data_dir), models={"active": base.models.active,
                                                              "also_embed": [m for m in models
                                                                             if m != base.models.active]})
    corpus = open_corpus(settings)
    colls = {}
    for name in names:
        coll = collections.load(DEFAULT_IR_DIR / name)
        run.prepare(corpus, coll, name, models, progress=False)
        colls[name] = coll
    return corpus, colls
