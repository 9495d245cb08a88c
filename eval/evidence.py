"""Calibration of evidence search's confidence on the development collections, and its check.

For every judged query of a collection, one round as evidence search runs it (hybrid, k pages,
explain on) gives each returned page its signals (engine/evidence/confidence.py) and a
label: judged relevant or not. A logistic regression (scikit-learn) over the signals of all
collections is the shipped calibration. The check is leave-one-collection-out: fit on the other
collections, then count on the held-out one how many sources each level holds and how many of
them are judged relevant (the precision of the high-confidence sources is the figure docs/evidence.md
reports).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from engine.app import Engine
from engine.evidence.confidence import FEATURES, LEVELS, Calibration, candidate_chunks, signals, word_concepts
from engine.refind.search import SearchRequest

from .collections import Collection

ROUND_K = 10


def collect(engine: Engine, coll: Collection, workspace: str, k: int = ROUND_K) -> dict:
    """Signals and labels of the pages one round returns for each judged query."""
    relevant = {(q.query_id, q.doc_id) for q in coll.qrels if q.relevance > 0}
    x, y, qid = [], [], []
    for q, text in coll.queries.items():
        text = text[:2000]
        res = engine.search(SearchRequest(query=text, k=k, workspace=workspace, pin=False, explain=True), log=False)
        concepts = word_concepts(text)
        cosines = engine.chunk_cosines(text, [c for h in res.pages for c in candidate_chunks(h)])
        for hit in res.pages:
            x.append(signals(hit, concepts, cosines).vector())
            y.append(int((q, hit.url.rsplit("/", 1)[1]) in relevant))
            qid.append(q)
    return {"collection": coll.name, "x": x, "y": y, "query": qid}


def fit(parts: list[dict], thresholds: dict | None = None) -> Calibration:
    from sklearn.linear_model import LogisticRegression

    x = np.array([v for p in parts for v in p["x"]], dtype=float)
    y = np.array([v for p in parts for v in p["y"]], dtype=int)
    mu, sd = x.mean(axis=0), x.std(axis=0)
    sd[sd == 0] = 1.0
    model = LogisticRegression(C=1.0, max_iter=1000).fit((x - mu) / sd, y)
    w = model.coef_[0] / sd                       # back to the raw signals' scale
    b = float(model.intercept_[0] - (model.coef_[0] * mu / sd).sum())
    cal = Calibration({f: round(float(v), 6) for f, v in zip(FEATURES, w)}, round(b, 6),
                      fitted_on={"collections": [p["collection"] for p in parts], "pages": int(len(y)),
                                 "relevant": int(y.sum()), "round_k": ROUND_K})
    if thresholds:
        cal.thresholds = dict(thresholds)
    return cal


def levels_table(cal: Calibration, part: dict) -> dict:
    """Per level: sources, judged relevant, precision; and the queries with at least one high source."""
    from engine.evidence.confidence import Signals

    out = {lvl: {"sources": 0, "relevant": 0} for lvl in (*LEVELS, "not_a_source")}
    queries_high: set[str] = set()
    for v, y, q in zip(part["x"], part["y"], part["query"]):
        s = Signals(v[0], bool(v[1]), int(round(np.exp(v[2]))), v[3])
        lvl = cal.assess(s)[1] or "not_a_source"
        out[lvl]["sources"] += 1
        out[lvl]["relevant"] += y
        if lvl == "high":
            queries_high.add(q)
    for row in out.values():
        row["precision"] = round(row["relevant"] / row["sources"], 4) if row["sources"] else None
    base = sum(part["y"]) / len(part["y"]) if part["y"] else 0.0
    return {"levels": out, "base_rate": round(base, 4), "pages": len(part["y"]),
            "queries": len(set(part["query"])), "queries_with_high": len(queries_high)}


def evaluate(parts: list[dict]) -> dict:
    """Leave-one-collection-out check of the levels, and the calibration fitted on all."""
    held_out = {}
    for i, part in enumerate(parts):
        others = parts[:i] + parts[i + 1:]
        held_out[part["collection"]] = levels_table(fit(others), part)
    pooled = {lvl: {"sources": sum(h["levels"][lvl]["sources"] for h in held_out.values()),
                    "relevant": sum(h["levels"][lvl]["relevant"] for h in held_out.values())}
              for lvl in (*LEVELS, "not_a_source")}
    for row in pooled.values():
        row["precision"] = round(row["relevant"] / row["sources"], 4) if row["sources"] else None
    final = fit(parts)
    return {"held_out": held_out, "held_out_pooled": pooled, "calibration": final.as_dict(),
            "in_sample": {p["collection"]: levels_table(final, p) for p in parts}}


def markdown(result: dict) -> str:
    lines = ["## Evidence search: precision of the confidence levels", "",
             "Leave-one-collection-out: the calibration is fitted on the other collections and counted on the "
             "held-out one. A source is a page one round (hybrid, k=10) returned at or above the low threshold "
             "(low only when it shares a word with the question); "
             "precision = share of them judged relevant.", "",
             "| held-out collection | base rate | high: sources / precision | medium | low | not a source |",
             "|---|---|---|---|---|---|"]
    for name, h in result["held_out"].items():
        cells = []
        for lvl in (*LEVELS, "not_a_source"):
            r = h["levels"][lvl]
            cells.append(f"{r['sources']} / {r['precision']:.3f}" if r["sources"] else "0 / –")
        lines.append(f"| {name} | {h['base_rate']:.3f} | " + " | ".join(cells) + " |")
    p = result["held_out_pooled"]
    lines.append("| **all, pooled** | | " + " | ".join(
        f"{p[lvl]['sources']} / {p[lvl]['precision']:.3f}" if p[lvl]["sources"] else "0 / –"
        for lvl in (*LEVELS, "not_a_source")) + " |")
    c = result["calibration"]
    lines += ["", "Shipped calibration (fitted on all): " + ", ".join(f"{f} {w:+.3f}" for f, w in c["weights"].items())
              + f", bias {c['bias']:+.3f}; thresholds " + ", ".join(f"{k} {v}" for k, v in c["thresholds"].items())]
    return "\n".join(lines) + "\n"


def write(result: dict, results_dir: Path, calibration_file: Path) -> list[Path]:
    results_dir.mkdir(parents=True, exist_ok=True)
    j = results_dir / "evidence_confidence.json"
    m = results_dir / "evidence_confidence.md"
    j.write_text(json.dumps({k: v for k, v in result.items()}, indent=2) + "\n")
    m.write_text(markdown(result) + ("\n" + packets_markdown(result["packets"]) if result.get("packets") else ""))
    calibration_file.write_text(json.dumps(result["calibration"], indent=2) + "\n")
    return [j, m, calibration_file]


def packets(engine: Engine, coll: Collection, workspace: str, calibration: Calibration,
            reports_dir: Path) -> dict:
    """The whole verb on every judged query (default settings: rounds, early stop, decomposition,
    siblings), one packet per query: per level, the sources and how many are judged relevant; the
    terminations; rounds per call; and the call's wall time (median, ms)."""
    import statistics
    import time

    from engine.evidence.search import EvidenceRequest

    es = engine.evidence_with(calibration, reports_dir)
    relevant = {(q.query_id, q.doc_id) for q in coll.qrels if q.relevance > 0}
    levels = {lvl: {"sources": 0, "relevant": 0} for lvl in LEVELS}
    ends: dict[str, int] = {}
    rounds, times, decomposed, empty = [], [], 0, 0
    for q, text in coll.queries.items():
        t = time.perf_counter()
        resp = es.search(EvidenceRequest(query=text[:2000], workspace=workspace, session_id=f"{coll.name}-{q}"))
        times.append((time.perf_counter() - t) * 1000)
        state = es.session_state(workspace, f"{coll.name}-{q}")
        call = state["calls"][-1]
        for src in call["sources"]:
            levels[src["confidence"]]["sources"] += 1
            levels[src["confidence"]]["relevant"] += int((q, src["path"].rsplit("/", 1)[1]) in relevant)
        end = resp.navigation["search_termination"]
        ends[end] = ends.get(end, 0) + 1
        rounds.append(resp.navigation["search_rounds"])
        decomposed += len(call["decomposition"]["sub_queries"]) > 1
        empty += resp.sources_found == 0
    for row in levels.values():
        row["precision"] = round(row["relevant"] / row["sources"], 4) if row["sources"] else None
    return {"collection": coll.name, "queries": len(coll.queries), "levels": levels, "terminations": ends,
            "mean_rounds": round(sum(rounds) / len(rounds), 2), "decomposed": decomposed, "no_source": empty,
            "median_ms": round(statistics.median(times), 1)}


def packets_markdown(rows: list[dict]) -> str:
    lines = ["## Evidence search, whole verb: sources in the packets", "",
             "Default settings (5 rounds, k=10, early stop, decomposition, siblings); each collection's levels "
             "come from the calibration fitted on the other three.", "",
             "| collection | queries | high: sources / precision | medium | low | mean rounds | terminations | "
             "median ms / call |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        cells = [f"{r['levels'][lvl]['sources']} / {r['levels'][lvl]['precision']:.3f}"
                 if r["levels"][lvl]["sources"] else "0 / –" for lvl in LEVELS]
        ends = ", ".join(f"{k} {v}" for k, v in sorted(r["terminations"].items(), key=lambda t: -t[1]))
        lines.append(f"| {r['collection']} | {r['queries']} | " + " | ".join(cells)
                     + f" | {r['mean_rounds']} | {ends} | {r['median_ms']} |")
    return "\n".join(lines) + "\n"
