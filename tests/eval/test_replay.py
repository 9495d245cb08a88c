"""Replaying logged searches under another config, judged by logged feedback."""
from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from conftest import STORE_BACKENDS, ingest, page

from engine.refind.search import SearchRequest, SearchService
from engine.core.settings import load_settings
from engine.app import Engine
from eval.replay import replay


@pytest.mark.parametrize("store_backend", STORE_BACKENDS, indirect=True)
def test_replay_same_config_agrees_and_other_config_is_measured(store_backend, make_corpus):
    corpus = make_corpus(log={"flush_interval_s": 0.05})
    topics = ["herons wade in shallow water", "owls hunt at night", "comets have icy tails",
              "sourdough bread needs a starter", "glaciers carve valleys", "coral reefs need warm seas"]
    rep = ingest(corpus, [page(f"https://rp.example/{i}", t) for i, t in enumerate(topics)])
    service = SearchService(corpus)
    for i, q in enumerate(["birds in water", "night hunters", "baking bread"]):
        res = service.search(SearchRequest(workspace="default", query=q, k=4))
        corpus.querylog.add_feedback(res.query_id, rep.outcomes[[0, 1, 3][i]].page_id, "found")
    # a page found below the first: the replay must not be lifted by that same judgment (a shortcut)
    res = service.search(SearchRequest(workspace="default", query="icy tails of comets", k=4))
    corpus.querylog.add_feedback(res.query_id, res.pages[2].page_id, "found")
    since = datetime.utcnow() - timedelta(hours=1)

    engine = Engine(corpus=corpus)
    same = replay(engine, since, corpus.settings)
    assert same["queries"] == 4 and same["mean_jaccard"] == 1.0 and same["mean_rbo_ext"] == 1.0
    q = same["quality_on_feedback"]
    assert q["judged_queries"] == 4 and q["logged"] == q["replayed"]

    other = load_settings(data_dir=str(corpus.data_dir), search={"dense_weight": 0.0})
    diff = replay(engine, since, other)
    assert diff["queries"] == 4
    assert 0.0 <= diff["mean_rbo_ext"] <= 1.0 and diff["mean_jaccard"] <= 1.0
    assert set(diff["quality_on_feedback"]["replayed"]) == {"nDCG@10", "RR@10"}
    assert replay(engine, datetime.utcnow() + timedelta(days=1), corpus.settings)["queries"] == 0
