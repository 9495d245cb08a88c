"""`refindery eval replay`: re-run logged searches under another config or embedder and compare
with what was logged — agreement of the page lists, and quality against logged feedback
(`found` / `click` = relevant, `irrelevant` = judged not relevant) used as judgments."""
from __future__ import annotations

from datetime import datetime
from statistics import mean

import ir_measures
from ir_measures import RR, nDCG

from engine.app import Engine
from engine.core.settings import Settings
from engine.refind.agreement import agreement
from engine.refind.search import SearchRequest

MEASURES = [nDCG @ 10, RR @ 10]


def replay(engine: Engine, since: datetime, other: Settings, limit: int = 10_000) -> dict:
    log = engine.logged_searches(since, limit)
    rows, logged = log["searches"], log["results"]
    qrels = [ir_measures.Qrel(q, p, 0 if kind == "irrelevant" else 1) for q, p, kind in log["feedback"]]
    model = other.models.active
    per_query, run_logged, run_new = [], [], []
    import json

    for qid, params, _model in rows:
        # judged by the log's feedback: the replayed ranking must not be lifted by that same feedback
        req = SearchRequest(**json.loads(params) | {"shortcuts": False})
        new = [h.page_id for h in engine.search(req, model=model, log=False, search_settings=other.search).pages]
        old = logged.get(qid, [])
        k = max(len(old), len(new), 1)
        per_query.append({"query_id": qid, "query": req.query, **agreement(old, new, k)})
        run_logged += [ir_measures.ScoredDoc(qid, p, -i) for i, p in enumerate(old)]
        run_new += [ir_measures.ScoredDoc(qid, p, -i) for i, p in enumerate(new)]
    judged = {q.query_id for q in qrels} & {r[0] for r in rows}
    quality = None
    if judged:
        sub = [q for q in qrels if q.query_id in judged]
        quality = {
            "judged_queries": len(judged),
            "logged": {str(m): round(float(v), 4) for m, v in ir_measures.calc_aggregate(
                MEASURES, sub, [r for r in run_logged if r.query_id in judged]).items()},
            "replayed": {str(m): round(float(v), 4) for m, v in ir_measures.calc_aggregate(
                MEASURES, sub, [r for r in run_new if r.query_id in judged]).items()},
        }
    taus = [q["kendall_tau_b"] for q in per_query if q["kendall_tau_b"] is not None]
    return {
        "since": since.isoformat(), "queries": len(per_query), "model": model,
        "mean_jaccard": round(mean(q["jaccard"] for q in per_query), 4) if per_query else None,
        "mean_rbo_ext": round(mean(q["rbo_ext"] for q in per_query), 4) if per_query else None,
        "mean_kendall_tau_b": round(mean(taus), 4) if taus else None,
        "quality_on_feedback": quality, "per_query": per_query,
    }
