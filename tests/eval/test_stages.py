"""`refindery eval stages`: where each relevant page was lost, read back from the query log the
real pipeline wrote; and logged compares summarised per pair of embedders."""
from __future__ import annotations

import json

import pytest
from conftest import STORE_BACKENDS, ingest, page
from fastapi.testclient import TestClient

from engine.app import Engine
from engine.refind.search import SearchRequest
from eval import stages

TOPICS = {"herons": "Herons wade in shallow water and spear fish with their long bills.",
          "owls": "Owls hunt small mammals at night with silent wings.",
          "comets": "Comets grow icy tails as they pass near the sun.",
          "bread": "Sourdough bread rises slowly with a wild yeast starter.",
          "glaciers": "Glaciers carve deep valleys into mountains over millennia.",
          "coral": "Coral reefs need warm clear shallow seas to grow.",
          "tides": "Tides follow the pull of the moon on the oceans.",
          "moss": "Moss grows on damp north-facing stones in the forest."}


def stage_lists(dense=(), sparse=(), fused=(), reranked=(), results=()):
    return {"dense": list(dense), "sparse": list(sparse), "fused": list(fused), "reranked": list(reranked),
            "results": list(results)}


def test_each_stage_is_the_one_after_the_last_that_held_the_page_within_k():
    # k = 2; a page's place at a chunk stage is its first chunk's
    assert stages.lost_at(stage_lists(["a", "b"], ["b"], ["a", "b"], [], ["a", "b"]), "b", 2) == "found"
    assert stages.lost_at(stage_lists(["a", "b"], ["b"], ["a", "b"], [], ["a", "b"]), "z", 2) == "not_retrieved"
    # the dense arm had c at 2 (after a's second chunk only once): fusion put it at 3
    assert stages.lost_at(stage_lists(["a", "a", "c"], ["b"], ["a", "b", "c"], [], ["a", "b"]), "c", 2) == "fusion"
    # in the arms, but at 3 in each, and nowhere better after: never within k
    assert stages.lost_at(stage_lists(["a", "b", "c"], ["b", "a", "c"], ["a", "b", "c"], [], ["a", "b"]), "c",
                          2) == "below_slice"
    # fused at 2, the reranked chunks put it at 3
    assert stages.lost_at(stage_lists(["c"], ["a"], ["a", "c", "b"], ["a", "b", "c"], ["a", "b"]), "c", 2) == "rerank"
    # fused within k (no rerank), not returned: the page order (rollup, recency, pins) lost it
    assert stages.lost_at(stage_lists(["c"], ["a"], ["a", "c", "b"], [], ["a", "b"]), "c", 2) == "rollup"
    # reranked within k, not returned
    assert stages.lost_at(stage_lists(["c"], ["a"], ["b", "a", "c"], ["c", "a"], ["a", "b"]), "c", 2) == "rollup"


@pytest.fixture
def engine(make_corpus, tmp_path):
    # arms no deeper than asked (a corpus this small would otherwise deepen them to every page)
    corpus = make_corpus(log={"flush_interval_s": 0.05}, search={"min_candidate_pages": 1})
    rep = ingest(corpus, [page(f"https://t.example/{t}", body) for t, body in TOPICS.items()])
    eng = Engine(corpus=corpus)
    eng.ids = {o.url.rsplit("/", 1)[1]: o.page_id for o in rep.outcomes}
    return eng


# the log read back through the store's Protocol into DuckDB (eval's one code path), on either store
@pytest.mark.parametrize("store_backend", STORE_BACKENDS, indirect=True)
def test_feedback_judged_searches_are_placed_as_the_pipeline_ranked_them(store_backend, engine):
    """Judgments from the log's feedback; every page placed where an independent look at the same
    search says: returned -> found; not among the pages a deep search with the same arms' depth
    returns -> not retrieved; returned deep but not within k -> lost after the arms."""
    shallow = {"k": 1, "dense_top_n": 2, "sparse_top_n": 2}
    asked = {}
    for q, targets in [("wading birds that spear fish", ["herons", "moss"]),
                       ("icy tails near the sun", ["comets", "owls", "tides"])]:
        res = engine.search(SearchRequest(query=q, **shallow))
        for t in targets:
            engine.corpus.querylog.add_feedback(res.query_id, engine.ids[t], "found")
        engine.corpus.querylog.add_feedback(res.query_id, engine.ids["bread"], "irrelevant")  # not a judgment
        deep = engine.search(SearchRequest(query=q, **{**shallow, "k": 50}), log=False)
        asked[res.query_id] = ([h.page_id for h in res.pages], [h.page_id for h in deep.pages], targets)
    from datetime import datetime

    report = stages.from_log(engine, datetime(1970, 1, 1))
    assert report["queries"] == 2 and report["relevant"] == 5 and sum(report["counts"].values()) == 5
    placed = {(q["query_id"], p): s for q in report["per_query"] for p, s in q["stages"].items()}
    for qid, (returned, retrieved, targets) in asked.items():
        for t in targets:
            pid = engine.ids[t]
            expected = ("found" if pid in returned else "not_retrieved" if pid not in retrieved else None)
            got = placed[(qid, pid)]
            if expected is None:
                assert got in ("below_slice", "fusion", "rollup")
            else:
                assert got == expected, (t, got)
    assert report["counts"]["found"] == 2 and report["counts"]["not_retrieved"] >= 1
    assert engine.ids["bread"] not in {p for q in report["per_query"] for p in q["stages"]}
    assert report["worst_stage"] in stages.LOST and report["worst_pipeline_stage"] in stages.PIPELINE
    assert report["room"] == 1 + 1                         # k = 1: one page of each query's fits


@pytest.mark.parametrize("store_backend", STORE_BACKENDS, indirect=True)
def test_a_collection_is_searched_logged_and_read_back(store_backend, engine, tmp_path):
    """A collection folder: its judged queries searched once each through the pipeline (logged),
    every relevant page placed; the CLI prints the table, the worst stage, and writes md/json/png."""
    coll = tmp_path / "mini"
    coll.mkdir()
    docs = [{"id": t, "title": t, "text": body} for t, body in TOPICS.items()]
    (coll / "docs.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    (coll / "queries.jsonl").write_text(json.dumps({"id": "1", "text": "birds hunting at night"}) + "\n"
                                        + json.dumps({"id": "2", "text": "the moon and the sea"}) + "\n")
    (coll / "qrels.tsv").write_text("1\towls\t1\n1\therons\t1\n2\ttides\t1\n2\tcoral\t0\n")
    before = engine.corpus.store.sql().row("SELECT count(*) FROM log_queries")[0]
    report = stages.from_collection(engine, coll, k=1)
    engine.corpus.querylog.flush()
    after = engine.corpus.store.sql().row("SELECT count(*) FROM log_queries")[0]
    assert after == before + 2                               # one logged search per judged query
    assert report["queries"] == 2 and report["relevant"] == 3   # relevance 0 is no judgment
    assert report["counts"]["found"] <= 2                    # k = 1: at most one per query
    for q in report["per_query"]:
        assert q["k"] == 1 and sum(1 for s in q["stages"].values() if s == "found") <= 1
    owls_or_herons = [s for q in report["per_query"] for s in q["stages"].values()]
    assert "found" in owls_or_herons and len(owls_or_herons) == 3


def test_the_cli_writes_the_report_with_logged_compares(ab_corpus, tmp_path, capsys):
    """`refindery eval stages --from-log`: the table, and each logged compare's agreement summarised
    per pair of embedders (the median is the figure each compare answered, recomputed here)."""
    from server.cli import main

    with TestClient(__import__("server.app", fromlist=["create_app"]).create_app(ab_corpus.settings, ab_corpus)) as c:
        figures = []
        for q in ("where to find owls at night", "icy comets", "coral and moss"):
            r = c.post("/v1/compare", json={"query": q, "models": ["all-minilm-l6-v2", "minilm-prefixed"], "k": 5})
            assert r.status_code == 200, r.text
            figures.append(r.json()["agreement"][0])
        res = c.post("/v1/search", json={"query": "owls", "k": 3}).json()
        assert c.post("/v1/feedback", json={"query_id": res["query_id"], "page_id": res["pages"][0]["page_id"],
                                            "kind": "found"}).status_code in (200, 201, 204)
    ab_corpus.querylog.flush()
    data_dir = ab_corpus.data_dir
    ab_corpus.close()
    out = tmp_path / "reports"
    assert main(["eval", "stages", "--from-log", "--data-dir", str(data_dir), "--reports", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "| query log feedback | 1 | 1 | 1 | 1 (100 %)" in printed
    got = json.loads((out / "stages.json").read_text())
    # written per query as counts per stage (not every page's), adding up to its relevant pages
    assert all(sum(q["counts"].values()) == q["relevant"] and "stages" not in q
               for r in got["reports"] for q in r["per_query"])
    (pair,) = got["agreement"]
    assert (pair["model_a"], pair["model_b"], pair["compares"], pair["k"]) == ("all-minilm-l6-v2", "minilm-prefixed",
                                                                               3, 5)
    jac = sorted(f["jaccard"] for f in figures)
    assert pair["jaccard"]["median"] == pytest.approx(jac[1], abs=1e-4)
    assert pair["rbo_ext"]["median"] == pytest.approx(sorted(f["rbo_ext"] for f in figures)[1], abs=1e-4)
    assert f"{pair['jaccard']['median']:.3f}" in printed
    assert (out / "stages.png").stat().st_size > 1000 and (out / "stages.md").read_text() in printed
