"""Two more levers for the refind targets (issue 54), measured and not shipped — kept so the figures
can be reproduced and the next attempt starts past them.

1. **A third arm.** A quality data dir holds both embedders' vectors for every chunk (its write path
   encodes the fast one), so BM25 + all-mpnet-base-v2-int8 + all-MiniLM-L6-v2 costs one more query
   encoding. The fast embedder's dense hits are RRF-fused as a third arm at weight w (0 is the shipped
   search), recency off and on, on the refind benchmark's halves. A study-only variant of the
   search service (a context manager that adds the arm), not a setting: it did not win on dev.
2. **A shortcut that needs less likeness.** The shipped rule takes a choice whose query is nearly
   the same (cosine >= 0.9, or every term shared), so in eval/refind_shortcuts.py's "in other words"
   scenario (the page chosen for a second phrasing sharing at most 0.3 of the query's terms) nothing
   is learnt. Tried here: a choice lifts its page to first when its query's cosine with the search's is
   at least s *and* the page already ranks within the top K for the search (shortcuts off) — a looser
   likeness, bounded by the page's own relevance. Simulated over each query's top 10 with shortcuts
   off (the lift is what the engine's shortcut does: the chosen page first); own / others / across as
   in eval/refind_shortcuts.py; the cosine by the search's embedder and by the quality one.

    python -m eval.refind_levers [--data-root data-profiles]

reads the data dirs `make eval` leaves (`<root>/quality`, `<root>/shortcuts`), writes
eval/results/refind_levers.{json,md}. In `make eval-studies`.
"""
from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import threading
from pathlib import Path

import numpy as np

from engine.app import Engine
from engine.core.settings import load_settings
from engine.refind import search as search_module
from engine.refind.search import SearchRequest, SearchService

from eval import refind
from eval.refind_rephrasings import REPHRASED
from eval.refind_shortcuts import target_page

ROOT = Path(__file__).resolve().parent.parent
RECENCY = {"recency off": {"recency_half_life_days": 0.0}, "recency on": {"recency_half_life_days": 30.0}}
THIRD_WEIGHTS = (0.0, 0.25, 0.5, 1.0)
SIMS = (0.2, 0.25, 0.3, 0.35, 0.4, 0.5)
TOP_K = (2, 3, 5, 10)


@contextlib.contextmanager
def third_arm(model: str, weight: float):
    """Within the block, every search also runs `model`'s dense arm and RRF-fuses it at `weight`."""
    local = threading.local()
    arms, rrf = SearchService.arms, search_module.rrf_arrays

    def with_third(self, query, active, p, r, sparse=None, coverage=None):
        out = arms(self, query, active, p, r, sparse, coverage)
        local.hits = self._dense_of(query, model, p, r)[0] if weight > 0 else None
        return out

    def fused(lists, weights, k):
        hits = getattr(local, "hits", None)
        if hits:
            lists, weights = lists | {"dense:third": hits}, weights | {"dense:third": weight}
        return rrf(lists, weights, k)

    SearchService.arms, search_module.rrf_arrays = with_third, fused
    try:
        yield
    finally:
        SearchService.arms, search_module.rrf_arrays = arms, rrf


def study_third_arm(data_dir: Path) -> dict:
    out = {}
    with Engine(load_settings(profile="quality", data_dir=str(data_dir))) as engine:
        fast = engine.settings.fast_model
        visits = refind.history()
        for w in THIRD_WEIGHTS:
            with third_arm(fast, w):
                r = refind.evaluate(engine, visits, RECENCY)
            out[str(w)] = {name: {h: {k: r["results"][name][h][k]["success@1"] for k in (*refind.KINDS, "all")}
                                  for h in refind.HALVES} for name in RECENCY}
        out["models"] = [engine.settings.models.active, fast]
    return out


def study_shortcut_rule(data_dir: Path) -> dict:
    """Every query's top 10 (shortcuts off), and the cosine of every query with every second phrasing."""
    with Engine(load_settings(data_dir=str(data_dir))) as engine:
        visits = refind.history()
        cases = [c | {"page": target_page(engine, "https://" + c["target"])} for c in refind.cases(visits)]
        tops = {name: [[h.page_id for h in engine.search(
            SearchRequest(query=c["query"], k=10, workspace=refind.WORKSPACE, shortcuts=False, **o), log=False,
            now=refind.NOW).pages] for c in cases] for name, o in RECENCY.items()}
        sims = {}
        for m in (engine.settings.models.active, load_settings(profile="quality").models.active):
            emb = engine.corpus.embedder(m)
            q = emb.encode_queries([c["query"] for c in cases])
            p = emb.encode_queries([REPHRASED[c["query"]] for c in cases])
            q /= np.linalg.norm(q, axis=1, keepdims=True)
            p /= np.linalg.norm(p, axis=1, keepdims=True)
            sims[m] = q @ p.T
    out = {}
    for m, sim in sims.items():
        for rec in RECENCY:
            out[f"{m}, {rec}"] = {h: _rule_grid(cases, tops[rec], sim, h) for h in refind.HALVES}
    return out


def _rule_grid(cases: list[dict], tops: list[list[str]], sim: np.ndarray, half: str) -> dict:
    mine = [i for i, c in enumerate(cases) if c["half"] == half]
    other = [i for i, c in enumerate(cases) if c["half"] != half]
    chosen = {cases[i]["page"] for i in mine}
    alone = [j for j in mine if sum(cases[i]["page"] == cases[j]["page"] for i in mine) == 1]
    across = [j for j in other if cases[j]["page"] not in chosen]

    def first(j: int, s: float, k: int, skip: int | None) -> str | None:
        best = None
        for i in mine:
            rank = tops[j].index(cases[i]["page"]) + 1 if cases[i]["page"] in tops[j] else None
            if i != skip and sim[j, i] >= s and rank is not None and rank <= k and (best is None or sim[j, i] > best[0]):
                best = (sim[j, i], cases[i]["page"])
        return best[1] if best else (tops[j][0] if tops[j] else None)

    def count(s: float, k: int) -> list[int]:
        return [sum(first(j, s, k, None) == cases[j]["page"] for j in mine),
                sum(first(j, s, k, j) == cases[j]["page"] for j in alone),
                sum(first(j, s, k, None) == cases[j]["page"] for j in across)]

    grid = {f"sim {s}, top {k}": count(s, k) for s, k in itertools.product(SIMS, TOP_K)}
    return {"off": count(2.0, 0), "of": [len(mine), len(alone), len(across)], "grid": grid}


def choose(rule: dict) -> str | None:
    """The dev half's choice: the most own successes with others and across no worse than off."""
    dev = rule["dev"]
    safe = [n for n, (own, oth, acr) in dev["grid"].items() if oth >= dev["off"][1] and acr >= dev["off"][2]]
    return max(safe, key=lambda n: (dev["grid"][n][0], n)) if safe else None


def markdown(res: dict) -> str:
    t = res["third_arm"]
    lines = ["# Refind levers measured and not shipped", "",
             "From `python -m eval.refind_levers` (also `make eval-studies`) over the data dirs `make eval` leaves. "
             "success@1; the dev half decides, the test half is only reported.", "",
             f"## 1. A third arm: BM25 + `{t['models'][0]}` + `{t['models'][1]}`", "",
             "The quality profile's search with the fast embedder's dense hits RRF-fused as a third arm at weight w "
             "(w 0: the shipped search).", "",
             "| w | recency | dev vague | dev recent | dev all | test vague | test recent | test all |",
             "|---|---|---|---|---|---|---|---|"]
    for w in THIRD_WEIGHTS:
        for rec in RECENCY:
            d, e = t[str(w)][rec]["dev"], t[str(w)][rec]["test"]
            lines.append(f"| {w} | {rec} | {d['vague']:.2f} | {d['recent']:.2f} | {d['all']:.2f} | {e['vague']:.2f} | "
                         f"{e['recent']:.2f} | {e['all']:.2f} |")
    lines += ["", "## 2. A shortcut that needs less likeness: cosine ≥ s and the chosen page within the top K", "",
              "The \"in other words\" scenario of eval/refind_shortcuts.md (each query's second phrasing searched and "
              "its page chosen, then the original query), simulated over each query's top 10 with shortcuts off: "
              "own / others / across successes at 1 (as there: others — each query with every choice but its own; "
              "across — the other half's queries).", ""]
    for name, rule in res["shortcut_rule"].items():
        pick = choose(rule)
        d, e = rule["dev"], rule["test"]
        lines += [f"### cosine by `{name.split(', ')[0]}`, {name.split(', ')[1]}", "",
                  f"Shortcuts off: dev {d['off'][0]} / {d['off'][1]} / {d['off'][2]} of {d['of'][0]} / {d['of'][1]} / "
                  f"{d['of'][2]}; test {e['off'][0]} / {e['off'][1]} / {e['off'][2]} of {e['of'][0]} / {e['of'][1]} / "
                  f"{e['of'][2]}.", "",
                  "| s \\ K | " + " | ".join(f"dev, top {k}" for k in TOP_K) + " | " +
                  " | ".join(f"test, top {k}" for k in TOP_K) + " |", "|---|" + "---|" * (2 * len(TOP_K))]
        for s in SIMS:
            cells = [d["grid"][f"sim {s}, top {k}"] for k in TOP_K] + [e["grid"][f"sim {s}, top {k}"] for k in TOP_K]
            lines.append(f"| {s} | " + " | ".join(f"{a} / {b} / {c}" for a, b, c in cells) + " |")
        if pick:
            lines += ["", f"Dev's choice (most own, others and across no worse than off): `{pick}` — dev "
                      f"{' / '.join(map(str, d['grid'][pick]))}, test {' / '.join(map(str, e['grid'][pick]))}.", ""]
        else:
            lines += ["", "No setting keeps dev's others and across at their level without shortcuts.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-root", default="data-profiles")
    args = ap.parse_args(argv)
    root = Path(args.data_root).resolve()
    res = {"third_arm": study_third_arm(root / "quality"), "shortcut_rule": study_shortcut_rule(root / "shortcuts")}
    text = markdown(res)
    out = ROOT / "eval" / "results"
    (out / "refind_levers.md").write_text(text)
    (out / "refind_levers.json").write_text(json.dumps(res, indent=1) + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
