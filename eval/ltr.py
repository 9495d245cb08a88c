"""A study of a learned final ranking (issue 42): does LambdaMART — or a linear model — over the
pipeline's own features rank pages better than the fusion, out of sample? Run by `make eval-studies`
(after `make eval` built the data dirs); not part of the search pipeline: a ranking ships only where
it wins out of sample on both the test collections and the refind benchmark's test half.

Features of each candidate page (the pages the fused chunks roll up to, recency and pins off):
  rrf            the page's fused score (rollup max of RRF)
  dense_score / sparse_score   the best chunk's score in each arm (0: not returned)
  dense_rank / sparse_rank     the page's rank in each arm (by its best chunk; 0: not returned), as 1 / rank
  dense_level / sparse_level   the best chunk's score over the arm's best score
  dense_chunks / sparse_chunks how many of the page's chunks each arm returned
  title_cover    the query terms' idf-weighted share found in the page's title and URL path
  log_visits     log(1 + visit count)       age_days   days since last seen (at the search's clock)
Labels: a test collection's judgments (graded); the refind benchmark: the one page meant (1), others 0.

Out of sample: every test collection scored by a model trained on the other collections and the
refind benchmark's dev half (leave one collection out); the refind test half by a model trained on
every collection and the dev half. Paired against the fusion per query (a two-sided Wilcoxon test).
"""
from __future__ import annotations

import argparse
import math
import re
import time
from datetime import datetime
from pathlib import Path

import numpy as np

from engine.app import Engine
from engine.core.settings import load_settings
from engine.core.urls import normalize_url
from engine.refind.search import SearchRequest
from engine.refind.highlight import query_terms

from eval import collections, refind, studies

ROOT = Path(__file__).resolve().parent.parent
FEATURES = ("rrf", "dense_score", "dense_rank", "dense_level", "sparse_score", "sparse_rank", "sparse_level",
            "dense_chunks", "sparse_chunks", "title_cover", "log_visits", "age_days")
# The same without when and how often a page was seen (the test collections hold one visit a page, all
# at one moment: what a model learns of those features it learns from the refind benchmark alone).
RELEVANCE = FEATURES[:-2]
FEATURE_SETS = {"all features": FEATURES, "relevance features only": RELEVANCE}
IR_NOW = datetime(2026, 1, 2)


def _url_words(url: str) -> str:
    path = url.split("://", 1)[-1].split("/", 1)[-1]
    return re.sub(r"[/._\-#?=&]+", " ", path)


def candidates(engine: Engine, query: str, workspace: str, now: datetime) -> list[dict]:
    """Every candidate page of a search with its features, in the fusion's order."""
    trace: dict = {}
    req = SearchRequest(query=query[:2000], k=10, workspace=workspace, pin=False, recency_half_life_days=0.0)
    engine.pages.search(req, log=False, now=now, trace=trace)
    cand = trace["candidates"]
    view, rolled = cand.view, cand.rolled
    names = view.page_ids_of(rolled.pages)
    key = {int(r): i for i, r in enumerate(rolled.pages.tolist())}
    arms = {}
    for arm, hits in (("dense", cand.dense), ("sparse", cand.sparse)):
        ids = np.fromiter((c for c, _ in hits), dtype=np.int64, count=len(hits))
        rows = view.chunk_rows(ids).tolist()
        best: dict[int, float] = {}
        count: dict[int, int] = {}
        rank: dict[int, int] = {}
        for r, (_, s) in zip(rows, hits):
            i = key.get(r)
            if i is None:
                continue
            if i not in best:
                rank[i] = len(rank) + 1
                best[i] = s
            count[i] = count.get(i, 0) + 1
        top = max((s for _, s in hits), default=0.0)
        arms[arm] = (best, count, rank, top)
    meta = view.page_rows(names)
    terms = sorted(query_terms(query))
    df, n = engine.term_stats(terms)
    n = max(1, n)
    idf = {t: math.log(1 + n / (1 + df.get(t, 0))) for t in terms}
    total_idf = sum(idf.values()) or 1.0
    out = []
    for i, pid in enumerate(names):
        m = meta[pid]
        words = query_terms((m["title"] or "") + " " + _url_words(m["url"]))
        f = {"page_id": pid, "url": m["url"], "rrf": float(rolled.values[i]),
             "title_cover": sum(w for t, w in idf.items() if t in words) / total_idf,
             "log_visits": math.log1p(m["visit_count"]),
             "age_days": max(0.0, (now - m["last_seen"]).total_seconds() / 86400)}
        for arm, (best, count, rank, top) in arms.items():
            s = best.get(i)
            f[f"{arm}_score"] = float(s) if s is not None else 0.0
            f[f"{arm}_rank"] = 1.0 / rank[i] if s is not None else 0.0
            f[f"{arm}_level"] = float(s) / top if s is not None and top > 0 else 0.0
            f[f"{arm}_chunks"] = float(count.get(i, 0))
        out.append(f)
    out.sort(key=lambda f: (-f["rrf"], f["page_id"]))
    return out


def ir_groups(engine: Engine, name: str, ir_dir: Path) -> list[dict]:
    coll = collections.load(ir_dir / name)
    grades: dict[str, dict[str, int]] = {}
    for q in coll.qrels:
        grades.setdefault(q.query_id, {})[q.doc_id] = int(q.relevance)
    groups = []
    for qid, text in coll.queries.items():
        cands = candidates(engine, text, name, IR_NOW)
        for c in cands:
            c["label"] = max(0, grades.get(qid, {}).get(c["url"].rsplit("/", 1)[1], 0))
        groups.append({"source": name, "qid": qid, "cands": cands, "judged": grades.get(qid, {})})
    return groups


def refind_groups(engine: Engine) -> list[dict]:
    groups = []
    for c in refind.cases(refind.history()):
        if c["kind"] in ("url", "site"):      # pins decide those, not the ranking
            continue
        cands = candidates(engine, c["query"], refind.WORKSPACE, refind.NOW)
        for f in cands:
            f["label"] = int(normalize_url(f["url"]) == c["target"])
        groups.append({"source": f"refind-{c['half']}", "qid": c["query"], "kind": c["kind"], "cands": cands})
    return groups


def _matrix(groups: list[dict], features) -> tuple[np.ndarray, np.ndarray, list[int]]:
    x = np.array([[f[k] for k in features] for g in groups for f in g["cands"]], dtype=np.float64)
    y = np.array([f["label"] for g in groups for f in g["cands"]], dtype=np.int64)
    return x, y, [len(g["cands"]) for g in groups]


def train(groups: list[dict], how: str, features=FEATURES, seed: int = 0):
    """A ranker over `features`: "lambdamart" (LightGBM's lambdarank) or "linear" (a logistic
    regression on standardised features). Returns a scorer of candidate lists."""
    x, y, sizes = _matrix(groups, features)

    def scorer(predict):
        return lambda cands: predict(np.array([[f[k] for k in features] for f in cands], dtype=np.float64))

    if how == "lambdamart":
        import lightgbm

        model = lightgbm.LGBMRanker(objective="lambdarank", n_estimators=200, learning_rate=0.05, num_leaves=15,
                                    min_child_samples=20, subsample=0.8, subsample_freq=1, colsample_bytree=0.8,
                                    random_state=seed, verbose=-1, deterministic=True, force_row_wise=True)
        model.fit(x, y, group=sizes)
        return scorer(model.predict)
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    model = make_pipeline(StandardScaler(), LogisticRegression(C=1.0, max_iter=2000, class_weight="balanced"))
    model.fit(x, (y > 0).astype(int))
    return scorer(model.decision_function)


def _ranked(group: dict, scorer=None) -> list[dict]:
    cands = group["cands"]
    if scorer is None:
        return cands
    s = scorer(cands) if cands else []
    return [cands[i] for i in sorted(range(len(cands)), key=lambda i: (-s[i], cands[i]["page_id"]))]


def ndcg10(group: dict, ranked: list[dict]) -> float:
    gains = [f["label"] for f in ranked[:10]]
    dcg = sum((2 ** g - 1) / math.log2(i + 2) for i, g in enumerate(gains))
    ideal = sorted(group["judged"].values(), reverse=True)[:10]
    idcg = sum((2 ** g - 1) / math.log2(i + 2) for i, g in enumerate(ideal) if g > 0)
    return dcg / idcg if idcg > 0 else 0.0


def rr10(ranked: list[dict]) -> float:
    return next((1 / (i + 1) for i, f in enumerate(ranked[:10]) if f["label"] > 0), 0.0)


def _paired(a: list[float], b: list[float]) -> float:
    from scipy.stats import wilcoxon

    d = [x - y for x, y in zip(a, b)]
    return 1.0 if not any(d) else float(wilcoxon(a, b, zero_method="zsplit").pvalue)


def study(groups: list[dict], names: list[str], features=FEATURES) -> dict:
    out: dict = {"features": list(features), "collections": {}, "refind": {}}
    for how in ("lambdamart", "linear"):
        for held in names:            # leave one collection out
            train_on = [g for g in groups if g["source"] not in (held, "refind-test")]
            scorer = train(train_on, how, features)
            test = [g for g in groups if g["source"] == held]
            base = [ndcg10(g, _ranked(g)) for g in test]
            mine = [ndcg10(g, _ranked(g, scorer)) for g in test]
            row = out["collections"].setdefault(held, {"fusion": round(float(np.mean(base)), 4)})
            row[how] = {"nDCG@10": round(float(np.mean(mine)), 4), "delta": round(float(np.mean(mine) - np.mean(base)), 4),
                        "p": round(_paired(mine, base), 3)}
        scorer = train([g for g in groups if g["source"] != "refind-test"], how, features)
        test = [g for g in groups if g["source"] == "refind-test"]
        for kind in sorted({g["kind"] for g in test}) + ["all"]:
            part = [g for g in test if kind == "all" or g["kind"] == kind]
            base = [rr10(_ranked(g)) for g in part]
            mine = [rr10(_ranked(g, scorer)) for g in part]
            row = out["refind"].setdefault(kind, {"n": len(part), "fusion": {
                "success@1": round(sum(1 for r in base if r == 1) / len(part), 3), "mrr@10": round(float(np.mean(base)), 3)}})
            row[how] = {"success@1": round(sum(1 for r in mine if r == 1) / len(part), 3),
                        "mrr@10": round(float(np.mean(mine)), 3), "p": round(_paired(mine, base), 3)}
    return out


def markdown(results: dict) -> str:
    lines = ["Learned final ranking, out of sample (eval/ltr.py). Test collections: nDCG@10, each scored by a model "
             "trained on the other collections and the refind benchmark's dev half; p: two-sided Wilcoxon against "
             "the fusion, per query.", ""]
    for name, result in results.items():
        if isinstance(result, dict) and "collections" in result:
            lines += [f"## {name}: {', '.join(result['features'])}", ""] + _table(result)
    return "\n".join(lines) + "\n"


def _table(result: dict) -> list[str]:
    lines = ["| collection | fusion (RRF) | LambdaMART | Δ (p) | linear | Δ (p) |", "|---|---|---|---|---|---|"]
    for name, r in result["collections"].items():
        lm, li = r["lambdamart"], r["linear"]
        lines.append(f"| {name} | {r['fusion']:.3f} | {lm['nDCG@10']:.3f} | {lm['delta']:+.3f} ({lm['p']:.2f}) | "
                     f"{li['nDCG@10']:.3f} | {li['delta']:+.3f} ({li['p']:.2f}) |")
    lines += ["", "Refind benchmark, test half (url and site left out: pins decide them), models trained on every "
              "collection and the dev half; success@1 / MRR@10 (p on reciprocal rank):", "",
              "| kind | n | fusion | LambdaMART (p) | linear (p) |", "|---|---|---|---|---|"]
    for kind, r in result["refind"].items():
        f, lm, li = r["fusion"], r["lambdamart"], r["linear"]
        lines.append(f"| {kind} | {r['n']} | {f['success@1']:.2f} / {f['mrr@10']:.2f} | "
                     f"{lm['success@1']:.2f} / {lm['mrr@10']:.2f} ({lm['p']:.2f}) | "
                     f"{li['success@1']:.2f} / {li['mrr@10']:.2f} ({li['p']:.2f}) |")
    return lines + [""]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ir-data", required=True, help="the data dirs `refindery eval ir` built, one per collection")
    ap.add_argument("--refind-data", required=True, help="the data dir `refindery eval refind` built")
    ap.add_argument("--ir-dir", default=str(ROOT.parent / "shared" / "data" / "ir"))
    ap.add_argument("--out", default=str(studies.RESULTS))
    args = ap.parse_args(argv)
    settings = load_settings()
    names = ["cisi", "med", "npl", "cacm"]
    groups = []
    t = time.perf_counter()
    for name in names:
        with Engine(settings.model_copy(update={"data_dir": Path(args.ir_data) / name})) as engine:
            groups += ir_groups(engine, name, Path(args.ir_dir))
    with Engine(settings.model_copy(update={"data_dir": Path(args.refind_data)})) as engine:
        groups += refind_groups(engine)
    result = {name: study(groups, names, features) for name, features in FEATURE_SETS.items()}
    result["seconds"] = round(time.perf_counter() - t, 1)
    return studies.write(args.out, "ltr", result, markdown(result))


if __name__ == "__main__":
    raise SystemExit(main())
