"""`refindery eval stages`: where each relevant page was lost, read from the query log.

Every search logs what each stage held (log_candidates: each arm's chunks; log_fused: the fused and
the reranked chunks; log_results: the pages returned). For logged searches with judgments — a test
collection's qrels (its queries are searched once through the real pipeline, logged, and the log is
what is read) or the log's own feedback (`found` / `click` on a page) — each relevant page is placed
at the stage that lost it, with k the search's own k:

  found          returned (ranks 1..k)
  not_retrieved  in neither arm's candidates (the arms' dense_top_n / sparse_top_n)
  below_slice    in the candidates, but no stage ever ranked it within the top k pages
  fusion         an arm had it within the top k pages, the fused order did not
  rerank         the fused order had it within the top k, the reranked chunks did not (rerank on)
  rollup         the last chunk stage had it within the top k, the pages returned did not (the
                 page-level order: rollup, recency, pins)

A page's place at a chunk stage is where its first chunk is (what max rollup gives). A search asked
with an offset is left out (the log holds only the slice it returned). Logged compares are
summarised per pair of embedders from log_agreement (Jaccard@k, RBO, Kendall's tau-b: median and
quartiles).
"""
from __future__ import annotations

import json
from collections import Counter, defaultdict
from datetime import datetime
from pathlib import Path
from statistics import mean, quantiles

from engine.app import Engine
from engine.core.identity import page_id_for
from engine.core.urls import normalize_url
from engine.refind.search import SearchRequest

from . import collections, run

STAGES = ("found", "not_retrieved", "below_slice", "fusion", "rerank", "rollup")
LOST = STAGES[1:]
PIPELINE = ("not_retrieved", "fusion", "rerank", "rollup")   # the stages that drop a page, not depth
LABELS = {"found": "found", "not_retrieved": "not in either arm's candidates",
          "below_slice": "retrieved, never in the top k", "fusion": "lost in fusion", "rerank": "lost in rerank",
          "rollup": "lost in rollup (page order)"}


def page_order(pages: list[str]) -> list[str]:
    """Pages in the order their first chunk appears."""
    return list(dict.fromkeys(p for p in pages if p is not None))


def ranked(stages: dict) -> dict[str, list[str]]:
    """Each stage's pages in order, once per search (a chunk stage by first chunk)."""
    return {name: page_order(pages) for name, pages in stages.items()
            if name in ("dense", "sparse", "fused", "reranked", "results")}


def lost_at(stages: dict, page: str, k: int) -> str:
    """The stage that lost `page` (or "found"): after the last stage that had it within the top k."""
    return _lost_at(ranked(stages), page, k)


def _lost_at(order: dict[str, list[str]], page: str, k: int) -> str:
    if page in order["results"][:k]:
        return "found"
    arms = [order["dense"], order["sparse"]]
    if not any(page in arm for arm in arms):
        return "not_retrieved"
    funnel = [("arms", any(page in arm[:k] for arm in arms)), ("fusion", page in order["fused"][:k])]
    if order["reranked"]:
        funnel.append(("rerank", page in order["reranked"][:k]))
    funnel.append(("rollup", False))
    inside = [i for i, (_, held) in enumerate(funnel) if held]
    return funnel[inside[-1] + 1][0] if inside else "below_slice"


def attribute(engine: Engine, judged: dict[str, list[str]], source: str) -> dict:
    """judged: logged query id -> its relevant pages. Counts per stage over every relevant page."""
    rows = engine.logged_stages(list(judged))
    counts: Counter = Counter()
    per_query, offset, missing = [], 0, 0
    for qid, pages in judged.items():
        st = rows.get(qid)
        if st is None:
            missing += 1
            continue
        params = json.loads(st["params"]) if isinstance(st["params"], str) else dict(st["params"] or {})
        if params.get("offset"):
            offset += 1
            continue
        k = int(params.get("k") or engine.settings.search.k)
        order = ranked(st)
        where = {p: _lost_at(order, p, k) for p in pages}
        counts.update(where.values())
        per_query.append({"query_id": qid, "k": k, "rerank": bool(st["reranked"]), "relevant": len(pages),
                          "stages": where})
    total = sum(counts.values())
    return {"source": source, "queries": len(per_query), "relevant": total,
            # at most k of a query's relevant pages fit in its slice: more relevant than k is a
            # below_slice count no stage could have avoided
            "room": sum(min(q["relevant"], q["k"]) for q in per_query),
            "counts": {s: counts[s] for s in STAGES},
            "shares": {s: round(counts[s] / total, 4) if total else 0.0 for s in STAGES},
            "worst_stage": _worst(counts, LOST), "worst_pipeline_stage": _worst(counts, PIPELINE),
            "left_out": {"offset": offset, "not_logged": missing}, "per_query": per_query}


def _worst(counts: Counter, among: tuple[str, ...]) -> str | None:
    """The stage of `among` that lost most pages (the earlier on a tie); None when none lost any."""
    lost = {s: counts[s] for s in among}
    return max(among, key=lambda s: (lost[s], -among.index(s))) if any(lost.values()) else None


def from_collection(engine: Engine, coll_dir: Path, workspace: str | None = None, k: int = 10,
                    search: dict | None = None, progress: bool = False) -> dict:
    """The collection ingested (as `eval run` does), each judged query searched once through the
    real pipeline with logging on, then the stages read back from the log."""
    coll = collections.load(coll_dir)
    ws = workspace or coll.name
    run.prepare(engine, coll, ws, [engine.settings.models.active], progress)
    relevant: dict[str, list[str]] = defaultdict(list)
    for q in coll.qrels:
        if q.relevance > 0:
            relevant[q.query_id].append(page_id_for(ws, normalize_url(run.doc_url(coll.name, q.doc_id))))
    judged = {}
    for qid, text in coll.queries.items():
        if qid not in relevant:
            continue
        res = engine.search(SearchRequest(query=text[:2000], k=k, workspace=ws, pin=False, shortcuts=False,
                                          **(search or {})), log=True)
        judged[res.query_id] = relevant[qid]
    return attribute(engine, judged, f"collection {coll.name}")


def from_log(engine: Engine, since: datetime) -> dict:
    judged = {qid: pages for qid, (_text, pages) in engine.logged_judgments(since).items()}
    return attribute(engine, judged, "query log feedback")


def _quartiles(values: list[float]) -> dict:
    if not values:
        return {"n": 0}
    q = quantiles(values, n=4, method="inclusive") if len(values) > 1 else [values[0]] * 3
    return {"n": len(values), "median": round(q[1], 4), "p25": round(q[0], 4), "p75": round(q[2], 4),
            "mean": round(mean(values), 4)}


def agreement(engine: Engine, since: datetime) -> list[dict]:
    """Logged compares per pair of embedders: the distribution of each agreement figure."""
    by_pair: dict[tuple[str, str], list[tuple]] = defaultdict(list)
    for a, b, k, jac, rbo, tau in engine.logged_agreement(since):
        by_pair[(a, b)].append((k, jac, rbo, tau))
    out = []
    for (a, b), rows in sorted(by_pair.items()):
        ks = Counter(r[0] for r in rows)
        out.append({"model_a": a, "model_b": b, "compares": len(rows), "k": ks.most_common(1)[0][0],
                    "jaccard": _quartiles([r[1] for r in rows]), "rbo_ext": _quartiles([r[2] for r in rows]),
                    "kendall_tau_b": _quartiles([r[3] for r in rows if r[3] is not None])})
    return out


def markdown(result: dict) -> str:
    lines = ["Where each relevant page was lost (the query log's stages; k = each search's k; room: the relevant "
             "pages that fit in the slices, min(relevant, k) per query):", "",
             "| source | queries | relevant pages | room | " + " | ".join(LABELS[s] for s in STAGES)
             + " | loses most | of the pipeline's stages |",
             "|---|---|---|---|" + "---|" * len(STAGES) + "---|---|"]
    for r in result["reports"]:
        cells = [f"{r['counts'][s]} ({100 * r['shares'][s]:.0f} %)" for s in STAGES]
        worst = [LABELS[w] if w else "–" for w in (r["worst_stage"], r["worst_pipeline_stage"])]
        lines.append(f"| {r['source']} | {r['queries']} | {r['relevant']} | {r['room']} | " + " | ".join(cells)
                     + f" | {worst[0]} | {worst[1]} |")
    left = [r for r in result["reports"] if any(r["left_out"].values())]
    for r in left:
        lines.append(f"\n{r['source']}: left out {r['left_out']['offset']} searches asked with an offset and "
                     f"{r['left_out']['not_logged']} not in the log.")
    pairs = result.get("agreement") or []
    lines += ["", "Logged compares per pair of embedders (median [p25, p75]):", ""]
    if not pairs:
        lines.append("No compare is logged in this period.")
    else:
        lines += ["| model a | model b | compares | k | Jaccard@k | RBO_EXT | Kendall's tau-b |", "|---|---|---|---|---|---|---|"]
        for p in pairs:
            cell = [f"{d['median']:.3f} [{d['p25']:.3f}, {d['p75']:.3f}]" if d["n"] else "–"
                    for d in (p["jaccard"], p["rbo_ext"], p["kendall_tau_b"])]
            lines.append(f"| {p['model_a']} | {p['model_b']} | {p['compares']} | {p['k']} | " + " | ".join(cell) + " |")
    return "\n".join(lines) + "\n"


def plot(result: dict, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    reports = result["reports"]
    fig, ax = plt.subplots(figsize=(8, 0.6 + 0.5 * max(1, len(reports))))
    colours = ["#4c9a2a", "#9e9e9e", "#c9c9c9", "#d1495b", "#edae49", "#00798c"]
    for i, r in enumerate(reports):
        left = 0.0
        for s, colour in zip(STAGES, colours):
            share = r["shares"][s]
            ax.barh(i, share, left=left, color=colour, label=LABELS[s] if i == 0 else None)
            left += share
    ax.set_yticks(range(len(reports)), [r["source"] for r in reports], fontsize=8)
    ax.set_xlim(0, 1)
    ax.set_xlabel("share of relevant pages")
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    ax.set_title("Where relevant pages were lost")
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def compact(result: dict) -> dict:
    """The result as written to stages.json: per query its counts per stage, not every page's."""
    reports = [{**r, "per_query": [{**{k: v for k, v in q.items() if k != "stages"},
                                    "counts": dict(Counter(q["stages"].values()))} for q in r["per_query"]]}
               for r in result["reports"]]
    return {**result, "reports": reports}


def write(result: dict, out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    j, m = out_dir / "stages.json", out_dir / "stages.md"
    j.write_text(json.dumps(compact(result), indent=1, default=str) + "\n")
    m.write_text(markdown(result))
    return [j, m, plot(result, out_dir / "stages.png")]
