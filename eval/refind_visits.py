"""How you visited, among near-equals (issue 72, item 3): the refind benchmark (eval/refind.py) with
recency's band on as measured there (half-life 30 d, band 0.07), and a page's visit count as one more
signal within a band — recency_visits_days: a page is ordered in its band as if last seen that many
days later per doubling of its visit count. The dev half decides: a value ships only if no kind loses
on dev against 0; the test half is reported.

The benchmark's visit counts are drawn independently of whether a query asks for the page
(eval/refind.py's history), so this measures what the signal costs where it carries no information
about the target; it cannot show a gain that a real history, where the pages one returns to are the
pages one refinds, might give. Bookmarks: the benchmark has none, so recency_bookmark_days is not
measured here (tests/refind/test_search.py holds what it does).

    python -m eval.refind_visits [--data-dir DIR]

writes eval/results/refind_visits.{json,md}."""
from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

from engine.app import Engine
from engine.core.settings import load_settings

from eval import refind

ROOT = Path(__file__).resolve().parent.parent
BAND = {"recency_half_life_days": 30.0, "recency_band": 0.07}
DAYS = (0, 1, 2, 4, 8, 16, 32, 64)
SETTINGS = {f"band 0.07, visits {d} d/doubling": {**BAND, "recency_visits_days": float(d)} for d in DAYS}


def decide(result: dict) -> dict:
    """Per value: the kinds it loses on dev (success@1 or MRR@10 below the value 0's); the value shipped:
    the best dev MRR@10 among those that lose no kind, else 0."""
    base = result["results"][next(iter(SETTINGS))]["dev"]
    verdict = {}
    for name, r in result["results"].items():
        lost = [k for k in refind.KINDS if r["dev"][k]["success@1"] < base[k]["success@1"]
                or r["dev"][k]["mrr@10"] < base[k]["mrr@10"]]
        verdict[name] = {"loses_on_dev": lost, "dev_mrr": r["dev"]["all"]["mrr@10"]}
    fine = [n for n, v in verdict.items() if not v["loses_on_dev"]]
    best = max(fine, key=lambda n: (verdict[n]["dev_mrr"], -SETTINGS[n]["recency_visits_days"]))
    return {"per_setting": verdict, "shipped": best}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", default="data-profiles/visits")
    args = ap.parse_args(argv)
    data = Path(args.data_dir).resolve()
    shutil.rmtree(data, ignore_errors=True)
    with Engine(load_settings(data_dir=str(data))) as engine:
        visits = refind.prepare(engine)
        result = refind.evaluate(engine, visits, SETTINGS)
        result["model"] = engine.settings.models.active
    result["decision"] = decide(result)
    text = refind.markdown(result)
    d = result["decision"]
    text = ("# How you visited, among near-equals\n\nFrom `python -m eval.refind_visits`: recency's band as "
            "measured on this benchmark (half-life 30 d, band 0.07) and recency_visits_days over the values below. "
            "The benchmark's visit counts are drawn independently of the queries' targets: this is the cost of the "
            "signal where it carries nothing about the target.\n\n" + text +
            "\n**Decision (dev half):** " + "; ".join(
                f"{n.split(', ')[1]}: " + (("loses " + ", ".join(v["loses_on_dev"])) if v["loses_on_dev"] else "loses no kind")
                for n, v in d["per_setting"].items()) + f". Shipped: `{d['shipped']}`.\n")
    out = ROOT / "eval" / "results"
    (out / "refind_visits.md").write_text(text)
    (out / "refind_visits.json").write_text(json.dumps(result, indent=1, default=str) + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
