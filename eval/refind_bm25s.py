"""The BM25 arm against bm25s on the refind benchmark (issue 42): our arm scores chunks and a page by
its best chunk; bm25s (Snowball English stemmer, English stop words) indexes each page whole (title
and body). Vague, exact and recent queries of both halves, pins off; success@1 / MRR@10. Then the
hybrid pipeline with a whole-page BM25 arm added to its fusion, simulated with bm25s's page ranking (a
study for a page-level arm: its weight is to be chosen on the dev half). Needs bm25s and PyStemmer (the
`bench` extra); run by `make eval-studies` over the data dir `make eval` built.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from engine.app import Engine
from engine.core.settings import load_settings
from engine.core.urls import normalize_url
from engine.refind.search import SearchRequest

from eval import refind, studies

KINDS = ("vague", "exact", "recent")
SYSTEMS = ("BM25 arm (chunks, best chunk)", "bm25s (whole pages)")
# A whole-page BM25 arm beside the pipeline, simulated: each page's fused score (hybrid, recency off)
# plus w / (rrf_k + its bm25s rank) — what a page-level arm in RRF would add — for these weights.
PAGE_ARM_WEIGHTS = (0.5, 1.0, 2.0)


def compare(engine: Engine) -> dict:
    import bm25s
    import Stemmer

    pages = refind.corpus()
    urls = sorted(pages)
    stemmer = Stemmer.Stemmer("english")
    peer = bm25s.BM25()
    peer.index(bm25s.tokenize([(pages[u]["title"] or "") + "\n" + pages[u]["body_text"] for u in urls],
                              stopwords="en", stemmer=stemmer, show_progress=False), show_progress=False)
    ranks: dict = {}
    for c in refind.cases(refind.history()):
        if c["kind"] not in KINDS:
            continue
        req = SearchRequest(query=c["query"], k=10, workspace=refind.WORKSPACE, dense_weight=0.0, pin=False)
        ours = [normalize_url(h.url) for h in engine.search(req, log=False, now=refind.NOW).pages]
        docs, scores = peer.retrieve(bm25s.tokenize([c["query"]], stopwords="en", stemmer=stemmer, show_progress=False),
                                     k=10, show_progress=False, n_threads=1)
        theirs = [normalize_url(urls[int(i)]) for i, s in zip(docs[0], scores[0]) if s > 0]
        hybrid = SearchRequest(query=c["query"], k=100, workspace=refind.WORKSPACE, pin=False)
        fused = {normalize_url(h.url): h.score for h in engine.search(hybrid, log=False, now=refind.NOW).pages}
        systems = {SYSTEMS[0]: ours, SYSTEMS[1]: theirs, "hybrid (as shipped)": _order(fused)}
        docs, scores = peer.retrieve(bm25s.tokenize([c["query"]], stopwords="en", stemmer=stemmer, show_progress=False),
                                     k=100, show_progress=False, n_threads=1)
        page_rank = {normalize_url(urls[int(i)]): r for r, (i, s) in enumerate(zip(docs[0], scores[0]), start=1) if s > 0}
        for w in PAGE_ARM_WEIGHTS:
            systems[f"hybrid + whole-page BM25 arm, w {w:g}"] = _order(
                {u: v + (w / (60 + page_rank[u]) if u in page_rank else 0.0) for u, v in fused.items()})
        for name, found in systems.items():
            found = found[:10]
            rank = found.index(c["target"]) + 1 if c["target"] in found else None
            ranks.setdefault(name, {}).setdefault(c["half"], {}).setdefault(c["kind"], []).append(rank)
    return {name: {h: {k: {"n": len(v), "success@1": round(sum(1 for r in v if r == 1) / len(v), 3),
                              "mrr@10": round(sum(1 / r for r in v if r) / len(v), 3)} for k, v in by.items()}
                   for h, by in halves.items()} for name, halves in ranks.items()}


def _order(scores: dict[str, float]) -> list[str]:
    return sorted(scores, key=lambda u: (-scores[u], u))


def markdown(result: dict) -> str:
    lines = ["The BM25 arm against bm25s on the refind benchmark (eval/refind_bm25s.py), BM25 alone; then the "
             "hybrid with a whole-page BM25 arm added to RRF (simulated with bm25s's page ranking: fused score + "
             "w / (60 + page rank)); pins and recency off; success@1 / MRR@10.", "", "| system | half | " + " | ".join(KINDS) + " |", "|---|---|" + "---|" * len(KINDS)]
    for name, halves in result.items():
        for h in refind.HALVES:
            cells = [f"{halves[h][k]['success@1']:.2f} / {halves[h][k]['mrr@10']:.2f}" for k in KINDS]
            lines.append(f"| {name} | {h} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--refind-data", required=True, help="the data dir `refindery eval refind` built")
    ap.add_argument("--out", default=str(studies.RESULTS))
    args = ap.parse_args(argv)
    with Engine(load_settings().model_copy(update={"data_dir": Path(args.refind_data)})) as engine:
        result = compare(engine)
    return studies.write(args.out, "refind_bm25s", result, markdown(result))


if __name__ == "__main__":
    raise SystemExit(main())
