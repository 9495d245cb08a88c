"""The learned-ranking study's features (eval/ltr.py): each candidate page described by what the
pipeline itself computed — its fused score, each arm's best chunk, rank and share of the arm's best,
its title's share of the query — in the fusion's own order. (The study's run is `make eval-ltr`.)"""
from __future__ import annotations

from datetime import datetime

import pytest

from engine.app import Engine
from engine.refind.search import SearchRequest
from eval import ltr


def test_candidates_carry_the_pipelines_own_scores_in_its_order(shared_corpus, demo_subset):
    engine = Engine(corpus=shared_corpus)
    query = f"what was that page, {demo_subset[0]['title']}"
    now = datetime(2026, 12, 1)
    cands = ltr.candidates(engine, query, shared_corpus.settings.default_workspace, now)
    res = engine.search(SearchRequest(query=query, k=10, pin=False), log=False, now=now)
    assert [c["page_id"] for c in cands[:10]] == [p.page_id for p in res.pages]     # recency is off by default
    assert [c["rrf"] for c in cands[:10]] == pytest.approx([p.score for p in res.pages])
    for arm in ("dense", "sparse"):
        levels = [c[f"{arm}_level"] for c in cands]
        assert max(levels) == pytest.approx(1.0) and all(-1 <= x <= 1 + 1e-9 for x in levels)   # a cosine may be < 0
        ranks = sorted((1 / c[f"{arm}_rank"] for c in cands if c[f"{arm}_rank"]))
        assert ranks == list(range(1, len(ranks) + 1))          # each page once, by its best chunk
        assert all((c[f"{arm}_chunks"] > 0) == (c[f"{arm}_rank"] > 0) for c in cands)
    assert all(0 <= c["title_cover"] <= 1 for c in cands)
    assert max(cands, key=lambda c: c["title_cover"])["url"] == demo_subset[0]["url"]   # the title asked for
    assert all(c["log_visits"] > 0 and c["age_days"] >= 0 for c in cands)
    x, _, sizes = ltr._matrix([{"cands": [{**c, "label": 0} for c in cands]}], ltr.FEATURES)
    assert x.shape == (len(cands), len(ltr.FEATURES)) and sizes == [len(cands)]


def test_the_fusion_study_chooses_on_the_other_collections_and_compares_with_the_better_arm():
    from eval import fusion_loo

    def flat(v):   # one query per collection is enough for the arithmetic
        return {"q": v}

    scores = {}
    for name, (bm25, dense, rrf1, lin1) in {"a": (0.5, 0.3, 0.45, 0.6), "b": (0.2, 0.6, 0.55, 0.7),
                                            "c": (0.4, 0.4, 0.5, 0.1)}.items():
        scores[name] = {"BM25 arm": flat(bm25), "dense arm": flat(dense),
                        **{k: flat(0.0) for k in fusion_loo.FUSIONS}}
        scores[name]["rrf w_bm25=1"] = flat(rrf1)
        scores[name]["linear w_bm25=1"] = flat(lin1)
    got = fusion_loo.study(scores)
    # held out c: linear wins on a and b, so it is chosen — and is 0.3 below c's better arm
    assert got["c"]["chosen"] == "linear w_bm25=1" and got["c"]["chosen_vs_better_arm"] == pytest.approx(-0.3)
    # held out a: linear's mean over b and c (0.4) loses to RRF's (0.525): RRF is chosen
    assert got["a"]["chosen"] == "rrf w_bm25=1" and got["a"]["better_arm"] == "BM25 arm"
    assert got["a"]["default_vs_better_arm"] == pytest.approx(-0.05)
    assert "Worst case against the better arm: default -0.050, chosen leave-one-out -0.300" in fusion_loo.markdown(got)
