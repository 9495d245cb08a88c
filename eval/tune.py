"""`refindery tune`: choose the fusion settings from judged queries, by k-fold cross-validation.

Judgments come from a test collection's qrels (the collection is ingested into its workspace, as
`eval run` does) or from the query log's feedback (`found` / `click` relevant, `irrelevant` not).
Every configuration of the grid (fusion method and normaliser, the arms' weights, rrf_k, the arms'
depths, the rollup; and, when a reranker is configured and present, rerank on and off and how its
verdict enters the ranking — `rerank_fusion` rrf at three weights, or replace — over the current
fusion settings) runs every judged query once through the real pipeline, giving one nDCG@10 per
(configuration, query). Then, per fold, the configuration with the best mean over the other folds'
queries is chosen and scored on the fold's own queries, beside the current settings on the same
queries: the held-out gain, per fold and over all held-out queries with a paired t-test. No figure
reported is on the queries its configuration was chosen on. Finally the configuration best over all
judged queries is written as a `[search]` config file (`REFINDERY_CONFIG=<file>` makes a server use it)
— only when choosing beat the current settings held out; otherwise the file keeps them and says why.

With a reranker in the grid, the reply also says whether it helps on these queries: on the same
folds, the rerank configuration best on the other folds against the same fusion settings without
rerank, scored on the fold's own queries, with a paired t-test over all held-out queries (`rerank`).
"""
from __future__ import annotations

import itertools
import json
import random
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import ir_measures
from ir_measures import nDCG
from scipy.stats import ttest_rel

from engine.app import Engine
from engine.refind.search import SearchRequest

MEASURE = nDCG @ 10
MARK = "# written by `refindery tune`"


def rerank_grid(quick: bool = False, rerank_now: bool = False) -> list[dict]:
    """The rerank configurations over the current fusion settings: as one more arm (`rrf`) at three
    weights, and replacing the fused order (`replace`); rerank off when the current settings rerank."""
    on = [{"rerank": True, "rerank_fusion": "rrf", "rerank_weight": 1.0},
          {"rerank": True, "rerank_fusion": "replace"}]
    if not quick:
        on[1:1] = [{"rerank": True, "rerank_fusion": "rrf", "rerank_weight": w} for w in (0.5, 2.0)]
    return on + ([{"rerank": False}] if rerank_now else [])


def grid(quick: bool = False, reranker: bool = False, rerank_now: bool = False) -> list[dict]:
    """The configurations tried, the current settings ({}) first. `quick`: a small grid (tests).
    `reranker`: one is configured and present, so rerank on/off and its fusion are in the grid."""
    extra = rerank_grid(quick, rerank_now) if reranker else []
    if quick:
        return [{}, {"fusion": "rrf", "rrf_k": 10}, {"fusion": "linear", "normalizer": "minmax"},
                {"fusion": "linear", "normalizer": "zscore", "sparse_weight": 0.5}] + extra
    out: list[dict] = [{}]
    for rollup, depth in itertools.product(("max", "sum"), (100, 300)):
        base = {"rollup": rollup, "dense_top_n": depth, "sparse_top_n": depth}
        for rrf_k, w in itertools.product((10, 30, 60, 100), (0.5, 1.0, 2.0)):
            out.append({**base, "fusion": "rrf", "rrf_k": rrf_k, "dense_weight": 1.0, "sparse_weight": w})
        for norm, w in itertools.product(("minmax", "zscore", "l2", "dbsf"), (0.25, 0.5, 1.0, 2.0)):
            out.append({**base, "fusion": "linear", "normalizer": norm, "dense_weight": 1.0, "sparse_weight": w})
    return out + extra


@dataclass
class Judged:
    """Judged queries: per query id its text and the request fields it was asked with, the qrels, and
    how a returned page is named in them."""
    queries: dict[str, tuple[str, dict]]
    qrels: list[ir_measures.Qrel]
    doc_id: str   # "url_tail" (a test collection's document id ends its URL) or "page_id"
    source: str


def from_collection(engine: Engine, coll_dir: Path, workspace: str | None = None, progress: bool = False) -> Judged:
    from eval import collections, run

    coll = collections.load(coll_dir)
    ws = workspace or coll.name
    run.prepare(engine, coll, ws, [engine.settings.models.active], progress)
    queries = {q: (text[:2000], {"workspace": ws}) for q, text in coll.queries.items()}
    return Judged(queries, list(coll.qrels), "url_tail", f"collection {coll.name}")


def from_log(engine: Engine, since: datetime, workspace: str | None = None) -> Judged:
    """The logged searches that got feedback, asked again as they were asked (workspace, filters)."""
    log = engine.logged_searches(since)
    judged = {}
    for q, page, kind in log["feedback"]:
        judged.setdefault(q, []).append(ir_measures.Qrel(q, page, 0 if kind == "irrelevant" else 1))
    queries: dict[str, tuple[str, dict]] = {}
    for qid, params, _model in log["searches"]:
        if qid not in judged:
            continue
        p = json.loads(params) if isinstance(params, str) else dict(params)
        if workspace is not None and p.get("workspace", engine.default_workspace) != workspace:
            continue
        keep = {k: p[k] for k in ("workspace", "filters") if p.get(k) is not None}
        queries[qid] = (p["query"], keep)
    qrels = [r for q in queries for r in judged[q]]
    return Judged(queries, qrels, "page_id", "query log feedback")


def score(engine: Engine, judged: Judged, configs: list[dict], k: int = 100) -> list[dict[str, float]]:
    """Per configuration, each judged query's nDCG@10 (a query with no relevant page judged is left out)."""
    relevant = {r.query_id for r in judged.qrels if r.relevance > 0}
    qids = [q for q in judged.queries if q in relevant]
    out = []
    for cfg in configs:
        run = []
        for qid in qids:
            text, fields = judged.queries[qid]
            res = engine.search(SearchRequest(query=text, k=k, pin=False, shortcuts=False, **fields, **cfg), log=False)
            for h in res.pages:
                doc = h.url.rsplit("/", 1)[1] if judged.doc_id == "url_tail" else h.page_id
                run.append(ir_measures.ScoredDoc(qid, doc, float(h.score)))
        per = {q: 0.0 for q in qids}
        for m in ir_measures.iter_calc([MEASURE], judged.qrels, run):
            if m.query_id in per:
                per[m.query_id] = float(m.value)
        out.append(per)
    return out


def _mean(per: dict[str, float], qids: list[str]) -> float:
    return sum(per[q] for q in qids) / len(qids) if qids else 0.0


def best(scores: list[dict[str, float]], qids: list[str]) -> int:
    """The configuration with the highest mean over `qids` (the first, so the current settings, on a tie)."""
    means = [_mean(s, qids) for s in scores]
    return max(range(len(means)), key=lambda i: (means[i], -i))


def _folds(qids: list[str], folds: int, seed: int) -> list[list[str]]:
    if len(qids) < folds:
        raise ValueError(f"{len(qids)} judged queries cannot make {folds} folds")
    order = qids[:]
    random.Random(seed).shuffle(order)
    return [order[i::folds] for i in range(folds)]


def _paired(a: list[float], b: list[float]) -> float | None:
    """The paired t-test's p of a against b (None when they are the same on every query)."""
    diffs = {round(x - y, 12) for x, y in zip(a, b)}
    if diffs == {0.0}:
        return None                        # the same scores: nothing to test
    if len(diffs) == 1:
        return 0.0                         # the same gain on every query
    return round(float(ttest_rel(a, b).pvalue), 5)


def cross_validate(scores: list[dict[str, float]], folds: int = 5, seed: int = 13) -> dict:
    """k-fold selection: per fold, the configuration best on the other folds, scored on this one."""
    qids = sorted(scores[0])
    parts = _folds(qids, folds, seed)
    rows, tuned_q, default_q = [], {}, {}
    for i, test in enumerate(parts):
        train = [q for j, p in enumerate(parts) if j != i for q in p]
        c = best(scores, train)
        rows.append({"fold": i + 1, "queries": len(test), "chosen": c, "train": round(_mean(scores[c], train), 4),
                     "default": round(_mean(scores[0], test), 4), "tuned": round(_mean(scores[c], test), 4)})
        rows[-1]["gain"] = round(rows[-1]["tuned"] - rows[-1]["default"], 4)
        tuned_q.update({q: scores[c][q] for q in test})
        default_q.update({q: scores[0][q] for q in test})
    a, b = [tuned_q[q] for q in qids], [default_q[q] for q in qids]
    return {"folds": rows, "queries": len(qids),
            "held_out": {"default": round(sum(b) / len(b), 4), "tuned": round(sum(a) / len(a), 4),
                         "gain": round((sum(a) - sum(b)) / len(a), 4), "p_value": _paired(a, b)}}


RERANK_KEYS = {"rerank", "rerank_fusion", "rerank_weight"}   # what the rerank configurations set, and no more


def reranks(cfg: dict, rerank_now: bool) -> bool:
    return bool(cfg.get("rerank", rerank_now))


def rerank_verdict(scores: list[dict[str, float]], configs: list[dict], rerank_now: bool = False,
                   folds: int = 5, seed: int = 13) -> dict | None:
    """Whether reranking helps on these queries, held out: per fold, the rerank configuration best
    on the other folds (the grid's rerank configurations sit over the current fusion settings)
    against the same settings without rerank — the current settings, or `{"rerank": False}` when
    they rerank — both scored on the fold's own queries; then over every held-out query, with a
    paired t-test. None when the grid has not both."""
    on = [i for i, c in enumerate(configs) if set(c) <= RERANK_KEYS and reranks(c, rerank_now)]
    off = [i for i, c in enumerate(configs) if set(c) <= RERANK_KEYS and not reranks(c, rerank_now)]
    if not on or not off:
        return None
    b = off[0]
    qids = sorted(scores[0])
    parts = _folds(qids, folds, seed)
    with_q, chosen = {}, []
    for i, test in enumerate(parts):
        train = [q for j, p in enumerate(parts) if j != i for q in p]
        a = on[best([scores[k] for k in on], train)]
        chosen.append({"fold": i + 1, "with": configs[a], "without": configs[b]})
        with_q.update({q: scores[a][q] for q in test})
    a_all, b_all = [with_q[q] for q in qids], [scores[b][q] for q in qids]
    gain = round((sum(a_all) - sum(b_all)) / len(qids), 4)
    p = _paired(a_all, b_all)
    verdict = ("helps" if gain > 0 else "hurts") if p is not None and p < 0.05 else "no significant difference"
    return {"with": round(sum(a_all) / len(qids), 4), "without": round(sum(b_all) / len(qids), 4),
            "gain": gain, "p_value": p, "verdict": verdict, "folds": chosen}


def tune(engine: Engine, judged: Judged, folds: int = 5, seed: int = 13, quick: bool = False,
         rerank: bool = True) -> dict:
    """`rerank`: put rerank in the grid when a reranker is configured and present (False: never)."""
    status = engine.reranker_status()
    reranker = rerank and bool(status.get("available"))
    rerank_now = bool(status.get("rerank_by_default"))
    configs = grid(quick, reranker, rerank_now)
    scores = score(engine, judged, configs)
    out = {"source": judged.source, **decide(scores, configs, folds, seed)}
    out["reranker"] = {"name": status.get("name"), "in_grid": reranker,
                       **({} if reranker else {"why_not": "--no-rerank" if not rerank and status.get("available")
                                               else status.get("reason", "not available")})}
    if reranker:
        out["rerank"] = rerank_verdict(scores, configs, rerank_now, folds, seed)
    return out


def decide(scores: list[dict[str, float]], configs: list[dict], folds: int = 5, seed: int = 13) -> dict:
    """Cross-validation over the per-query scores, and the configuration to write."""
    cv = cross_validate(scores, folds, seed)
    everything = sorted(scores[0])
    best_all = best(scores, everything)
    # Keep the current settings unless choosing beat them on queries the choice never saw: a grid
    # this size fits a few dozen queries' noise, and the held-out gain is what says so.
    chosen = best_all if cv["held_out"]["gain"] > 0 else 0
    return {"measure": str(MEASURE), "configs": configs, "grid_size": len(configs),
            **cv, "chosen": configs[chosen], "chosen_index": chosen, "best_on_all_index": best_all,
            "kept_current": chosen == 0 and best_all != 0,
            "all_queries": {"default": round(_mean(scores[0], everything), 4),
                            "best": round(_mean(scores[best_all], everything), 4)}}


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    return json.dumps(str(v))


def write_config(path: Path, result: dict, force: bool = False) -> Path:
    """The chosen configuration as a `[search]` config file; never over a file tune did not write."""
    path = Path(path)
    if path.exists() and not force and MARK not in path.read_text(encoding="utf-8").splitlines()[:1]:
        raise FileExistsError(f"{path} exists and was not written by refindery tune (use --force)")
    ho = result["held_out"]
    lines = [MARK, f"# from {result['source']}: {result['queries']} judged queries, {len(result['folds'])}-fold "
             f"cross-validation over {result['grid_size']} configurations;",
             f"# held-out {result['measure']}: current settings {ho['default']}, tuned {ho['tuned']} "
             f"(gain {ho['gain']:+}, paired t-test p = {ho['p_value']}).",
             "# Use it: REFINDERY_CONFIG=<this file> (or --config), or copy the lines below into your own config.",
             "[search]"]
    rr = result.get("rerank")
    if rr is not None:
        lines.insert(3, f"# rerank with {result['reranker']['name']}, held out: with {rr['with']}, without "
                        f"{rr['without']} (gain {rr['gain']:+}, p = {rr['p_value']}): {rr['verdict']}.")
    lines += [f"{k} = {_toml_value(v)}" for k, v in result["chosen"].items()]
    if result.get("kept_current"):
        lines.append("# the current settings are kept: choosing did not beat them on held-out queries")
    elif not result["chosen"]:
        lines.append("# the current settings were best: nothing to change")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def markdown(result: dict) -> str:
    def label(i: int) -> str:
        c = result["configs"][i]
        return ", ".join(f"{k}={v}" for k, v in c.items()) or "current settings"

    lines = [f"Tuning on {result['source']}: {result['queries']} judged queries, {result['grid_size']} "
             f"configurations, {len(result['folds'])}-fold cross-validation ({result['measure']}).", "",
             "| fold | held-out queries | chosen on the other folds | current | tuned | gain |",
             "|---|---|---|---|---|---|"]
    for r in result["folds"]:
        lines.append(f"| {r['fold']} | {r['queries']} | {label(r['chosen'])} | {r['default']:.4f} | "
                     f"{r['tuned']:.4f} | {r['gain']:+.4f} |")
    ho = result["held_out"]
    p = "–" if ho["p_value"] is None else f"{ho['p_value']:.4f}"
    lines += ["", f"Held out, all folds: current {ho['default']:.4f}, tuned {ho['tuned']:.4f} "
                  f"({ho['gain']:+.4f}, paired t-test p = {p})."]
    if result.get("kept_current"):
        lines.append(f"Best on all judged queries: {label(result['best_on_all_index'])} — not written: choosing "
                     "did not beat the current settings on held-out queries, so they are kept.")
    else:
        lines.append(f"Chosen on all judged queries (what is written): {label(result['chosen_index'])}.")
    rr = result.get("rerank")
    if rr is not None:
        p = "–" if rr["p_value"] is None else f"{rr['p_value']:.4f}"
        lines += ["", f"Rerank with {result['reranker']['name']}, held out: with rerank (its best fusion) "
                      f"{rr['with']:.4f}, the same settings without {rr['without']:.4f} ({rr['gain']:+.4f}, "
                      f"paired t-test p = {p}): {rr['verdict']} on these queries."]
    elif result.get("reranker") and not result["reranker"]["in_grid"]:
        lines += ["", f"Rerank not in the grid: {result['reranker']['why_not']}."]
    return "\n".join(lines) + "\n"
