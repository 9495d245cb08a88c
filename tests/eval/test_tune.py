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


def test_the_rerank_verdict_compares_rerank_with_the_same_settings_without_it_held_out():
    """Per fold the rerank configuration best on the other folds, against the current settings
    (the rerank configurations sit over them); over every held-out query, with a paired t-test.
    Fusion configurations of the grid take no part: they change more than rerank."""
    qids = [f"q{i}" for i in range(10)]
    configs = [{}, {"fusion": "linear"}, {"rerank": True, "rerank_fusion": "rrf"},
               {"rerank": True, "rerank_fusion": "replace"}]
    helps = [{q: 0.5 for q in qids}, {q: 0.9 for q in qids},
             {q: 0.6 + 0.01 * int(q[1:]) for q in qids}, {q: 0.2 for q in qids}]
    rr = tune.rerank_verdict(helps, configs, folds=5, seed=2)
    assert all(f["with"] == configs[2] and f["without"] == {} for f in rr["folds"])
    assert rr["without"] == pytest.approx(0.5) and rr["with"] == pytest.approx(0.645)
    assert rr["gain"] == pytest.approx(0.145) and rr["p_value"] < 0.05 and rr["verdict"] == "helps"
    hurts = [helps[0], helps[1], {q: 0.3 + 0.01 * int(q[1:]) for q in qids}, helps[3]]
    assert tune.rerank_verdict(hurts, configs, folds=5, seed=2)["verdict"] == "hurts"
    # rerank on by default: the current settings ({}) are the rerank side, {"rerank": False} the other
    now_on = [{}, {"rerank": False}]
    rr = tune.rerank_verdict([{q: 0.5 for q in qids}, {q: 0.5 for q in qids}], now_on, rerank_now=True, folds=5)
    assert rr["folds"][0] == {"fold": 1, "with": {}, "without": {"rerank": False}}
    assert rr["p_value"] is None and rr["verdict"] == "no significant difference"
    assert tune.rerank_verdict(helps[:2], configs[:2], folds=5) is None      # no reranker in the grid


def test_the_grid_has_rerank_on_off_and_its_fusion_only_with_a_reranker():
    assert not any("rerank" in c for c in tune.grid())
    full = tune.grid(reranker=True)
    assert [c for c in full if "rerank" in c] == [
        {"rerank": True, "rerank_fusion": "rrf", "rerank_weight": w} for w in (1.0, 0.5, 2.0)] + [
        {"rerank": True, "rerank_fusion": "replace"}]
    assert tune.grid(quick=True, reranker=True, rerank_now=True)[-1] == {"rerank": False}


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


def test_tune_puts_a_present_reranker_in_the_grid_and_says_whether_it_helps(make_corpus, tiny_reranker, tmp_path,
                                                                            capsys):
    """With a reranker configured and present, the quick grid adds rerank as an arm and as replace;
    each is a request that really reranks, and the reply and the printed table say whether it helps
    held out. --no-rerank leaves it out and says so."""
    from engine.core.settings import CONFIG_DIR

    reg = tmp_path / "models.toml"
    reg.write_text((CONFIG_DIR / "models.toml").read_text()
                   + f'\n[rerankers.tiny-ce]\nsource = "path"\npath = "{tiny_reranker}"\nmax_seq_length = 128\n')
    corpus = make_corpus(models={"registry": str(reg), "reranker": "tiny-ce"})
    topics = {"herons": "Herons wade in shallow water and spear fish.", "owls": "Owls hunt small mammals at night.",
              "comets": "Comets grow icy tails near the sun.", "bread": "Sourdough bread rises with a starter.",
              "glaciers": "Glaciers carve deep valleys in mountains.", "coral": "Coral reefs need warm clear seas."}
    rep = ingest(corpus, [page(f"https://t.example/{t}", body) for t, body in topics.items()])
    ids = {o.url.rsplit("/", 1)[1]: o.page_id for o in rep.outcomes}
    engine = Engine(corpus=corpus)
    judged = tune.Judged({q: (q, {"workspace": "default"}) for q in ("wading birds", "night hunters", "icy tails",
                                                                     "a starter", "valleys cut by ice", "warm reefs")},
                         [], "page_id", "test")
    truth = dict(zip(judged.queries, ("herons", "owls", "comets", "bread", "glaciers", "coral")))
    import ir_measures
    judged.qrels = [ir_measures.Qrel(q, ids[t], 1) for q, t in truth.items()]
    result = tune.tune(engine, judged, folds=3, quick=True)
    assert result["grid_size"] == 6 and result["reranker"] == {"name": "tiny-ce", "in_grid": True}
    assert result["configs"][4:] == [{"rerank": True, "rerank_fusion": "rrf", "rerank_weight": 1.0},
                                     {"rerank": True, "rerank_fusion": "replace"}]
    rr = result["rerank"]
    assert set(rr) == {"with", "without", "gain", "p_value", "verdict", "folds"} and len(rr["folds"]) == 3
    assert all(f["with"].get("rerank") and f["without"] == {} for f in rr["folds"])
    assert rr["gain"] == pytest.approx(rr["with"] - rr["without"], abs=1e-3)
    for cfg in result["configs"][4:]:   # each is a request that reranks, as `score` sends it
        res = engine.search(SearchRequest(query="wading birds", k=5, pin=False, explain=True, **cfg), log=False)
        assert res.pages and all(ch.rerank is not None for p in res.pages for ch in p.explain.chunks)
    assert f"Rerank with tiny-ce, held out: with rerank (its best fusion) {rr['with']:.4f}" in tune.markdown(result)
    off = tune.tune(engine, judged, folds=3, quick=True, rerank=False)
    assert off["grid_size"] == 4 and off["reranker"]["why_not"] == "--no-rerank" and "rerank" not in off
    corpus.close()
