"""`refindery tune`: configurations chosen by cross-validation, figures only on held-out queries, and
a config file the server loads."""
from __future__ import annotations

import json

import pytest
from conftest import ingest, page

from engine.app import Engine
from engine.core.settings import load_settings
from engine.refind.search import SearchRequest
from eval import tune


def test_each_fold_is_scored_on_queries_its_choice_never_saw():
    # config 1 is perfect on q0..q5 and useless on q6..q9; config 2 is fair everywhere
    qids = [f"q{i}" for i in range(10)]
    scores = [{q: 0.5 for q in qids},
              {q: (1.0 if int(q[1:]) < 6 else 0.0) for q in qids},
              {q: 0.6 for q in qids}]
    cv = tune.cross_validate(scores, folds=5, seed=1)
    assert sum(r["queries"] for r in cv["folds"]) == 10
    order = qids[:]
    import random
    random.Random(1).shuffle(order)
    parts = [order[i::5] for i in range(5)]
    for r, test in zip(cv["folds"], parts):
        train = [q for q in qids if q not in test]
        assert r["chosen"] == tune.best(scores, train)                       # chosen without the fold
        assert r["tuned"] == pytest.approx(sum(scores[r["chosen"]][q] for q in test) / len(test), abs=1e-4)
        assert r["default"] == pytest.approx(0.5)
    held = cv["held_out"]
    assert held["default"] == pytest.approx(0.5)
    assert held["gain"] == pytest.approx(held["tuned"] - held["default"], abs=1e-4)
    assert tune.best(scores, qids) == 1                                    # 0.6 mean: 6 perfect of 10
    assert tune.best([{"a": 1.0}, {"a": 1.0}], ["a"]) == 0                 # a tie keeps the current settings
    with pytest.raises(ValueError, match="cannot make 5 folds"):
        tune.cross_validate([{"a": 1.0}], folds=5)


def test_a_choice_that_does_not_win_held_out_keeps_the_current_settings():
    qids = [f"q{i}" for i in range(10)]
    configs = [{}, {"fusion": "linear"}]
    lucky = [{q: 0.5 for q in qids}, {q: (1.0 if q == "q1" else 0.45) for q in qids}]   # one lucky query
    got = tune.decide(lucky, configs, folds=5, seed=3)
    assert got["best_on_all_index"] == 1                   # best over everything: 0.505 > 0.5
    assert got["held_out"]["gain"] <= 0 and got["kept_current"] and got["chosen"] == {}
    steady = [{q: 0.5 for q in qids}, {q: 0.6 for q in qids}]
    got = tune.decide(steady, configs, folds=5, seed=3)
    assert got["held_out"]["gain"] == pytest.approx(0.1) and got["chosen"] == {"fusion": "linear"}


def test_the_written_config_is_loaded_and_a_foreign_file_is_never_overwritten(tmp_path):
    result = {"source": "test", "measure": "nDCG@10", "queries": 8, "folds": [{}] * 2, "grid_size": 3,
              "kept_current": False,
              "held_out": {"default": 0.5, "tuned": 0.6, "gain": 0.1, "p_value": 0.2},
              "chosen": {"fusion": "linear", "normalizer": "dbsf", "sparse_weight": 0.5, "rrf_k": 30}}
    out = tune.write_config(tmp_path / "tuned.toml", result)
    s = load_settings(config=out).search
    assert (s.fusion, s.normalizer, s.sparse_weight, s.rrf_k) == ("linear", "dbsf", 0.5, 30)
    tune.write_config(out, {**result, "chosen": {}})                       # its own file: replaced
    assert load_settings(config=out).search.fusion == "rrf"
    mine = tmp_path / "mine.toml"
    mine.write_text("[search]\nk = 20\n")
    with pytest.raises(FileExistsError):
        tune.write_config(mine, result)
    assert mine.read_text() == "[search]\nk = 20\n"


def test_tune_from_the_query_log_runs_the_real_pipeline(make_corpus, tmp_path, capsys):
    """Feedback in the log judges the queries; each configuration is searched for real."""
    from server.cli import main

    corpus = make_corpus(log={"flush_interval_s": 0.05})
    topics = {"herons": "Herons wade in shallow water and spear fish.", "owls": "Owls hunt small mammals at night.",
              "comets": "Comets grow icy tails near the sun.", "bread": "Sourdough bread rises with a starter.",
              "glaciers": "Glaciers carve deep valleys in mountains.", "coral": "Coral reefs need warm clear seas.",
              "tides": "Tides follow the pull of the moon.", "moss": "Moss grows on damp north-facing stones."}
    rep = ingest(corpus, [page(f"https://t.example/{t}", body) for t, body in topics.items()])
    ids = {o.url.rsplit("/", 1)[1]: o.page_id for o in rep.outcomes}
    engine = Engine(corpus=corpus)
    for q, t in [("wading birds", "herons"), ("night hunters", "owls"), ("icy tails", "comets"),
                 ("baking with a starter", "bread"), ("valleys cut by ice", "glaciers"), ("warm reefs", "coral")]:
        res = engine.search(SearchRequest(query=q, k=5))
        corpus.querylog.add_feedback(res.query_id, ids[t], "found")
    corpus.querylog.flush()
    data_dir = corpus.data_dir
    corpus.close()
    out = tmp_path / "tuned.toml"
    assert main(["tune", "--from-log", "--folds", "3", "--quick", "--json", "--out", str(out),
                 "--data-dir", str(data_dir)]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["queries"] == 6 and len(got["folds"]) == 3 and got["grid_size"] == 4
    assert all(0.0 <= r["tuned"] <= 1.0 and 0.0 <= r["default"] <= 1.0 for r in got["folds"])
    assert got["held_out"]["default"] > 0.5          # the real pipeline finds most of these pages
    written = load_settings(config=out).search
    if got["held_out"]["gain"] > 0:
        assert got["chosen"] == got["configs"][got["best_on_all_index"]]
    else:   # choosing did not pay off on held-out queries: the current settings are kept
        assert got["chosen"] == {} and written.fusion == "rrf" and written.rrf_k == 60
    assert main(["tune", "--folds", "3", "--quick"]) == 2                 # no judged queries named: refused
