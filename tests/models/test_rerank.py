"""The rerank stage with a real cross-encoder: `tiny_reranker` (conftest) is the bundled MiniLM
encoder trained for a few steps by the product's own trainer, a real model weakly trained; these
tests check the stage's wiring, not the model's quality (that is eval/rerank.py's job)."""
from __future__ import annotations

import pytest
from conftest import QUERIES, TOPICS, ingest, page
from fastapi.testclient import TestClient

from server.app import create_app

@pytest.fixture
def rerank_corpus(make_corpus, tiny_reranker, tmp_path):
    from engine.core.settings import CONFIG_DIR

    reg = tmp_path / "models.toml"
    reg.write_text((CONFIG_DIR / "models.toml").read_text()
                   + f'\n[rerankers.tiny-ce]\nsource = "path"\npath = "{tiny_reranker}"\nmax_seq_length = 128\n')
    corpus = make_corpus(models={"registry": str(reg), "reranker": "tiny-ce"})
    long_page = "\n\n".join(
        [f"## Part {i}\n\n" + " ".join(f"Filler sentence {i}.{j} about municipal tax paperwork." for j in range(12))
         for i in range(6)] + ["## Seabirds\n\n" + " ".join(TOPICS["seabirds"])])
    ingest(corpus, [page(f"https://{t}.example/{i}", s) for t in TOPICS for i, s in enumerate(TOPICS[t])]
           + [page("https://long.example/report", long_page)])
    return corpus


def test_rerank_fusion_replace_orders_chunks_by_the_cross_encoder(rerank_corpus):
    from models.reranker import load_reranker

    q = "birds that live at sea"
    with TestClient(create_app(rerank_corpus.settings, rerank_corpus)) as c:
        fused = c.post("/v1/search", json={"query": q, "k": 50, "explain": True}).json()
        res = c.post("/v1/search", json={"query": q, "k": 50, "rerank": True, "rerank_n": 8, "explain": True,
                                         "rerank_fusion": "replace"}).json()
    assert "rerank" in res["timings_ms"]
    chunks = [ch for p in res["pages"] for ch in p["explain"]["chunks"]]
    assert len(chunks) == 8  # the ranked candidate set is the reranked top rerank_n chunks
    texts = {s["chunk_id"]: s["text"] for p in fused["pages"] for s in p["snippets"]}
    for p in fused["pages"]:
        for s in rerank_corpus.store.page_chunks(p["page_id"]):
            texts[s["chunk_id"]] = s["text"]
    rr = load_reranker(rerank_corpus.registry, "tiny-ce", "cpu")
    expected = rr.score(q, [texts[ch["chunk_id"]] for ch in chunks])
    for ch, e in zip(chunks, expected):
        assert ch["rerank"] == pytest.approx(float(e), abs=1e-5) and 0 < ch["rerank"] < 1
        assert ch["score"] == ch["rerank"]
    for p in res["pages"]:  # rollup max over the page's reranked chunks (recency is off by default) ...
        best = max(ch["rerank"] for ch in p["explain"]["chunks"])
        f = p["explain"]["focus"]   # ... times focus, whose matched chunks are the reranked ones
        assert f["before"] == pytest.approx(best) and f["chunks_matched"] == len(p["explain"]["chunks"])
        assert p["explain"]["rollup"]["value"] == pytest.approx(best * f["factor"])
        assert p["explain"]["decay"] is None and p["score"] == pytest.approx(p["explain"]["rollup"]["value"])
        assert p["snippets"][0]["chunk_id"] == max(p["explain"]["chunks"], key=lambda ch: ch["rerank"])["chunk_id"]
    scores = [p["score"] for p in res["pages"]]
    assert scores == sorted(scores, reverse=True)


def test_rerank_fusion_rrf_adds_the_rerankers_rank_as_an_arm(rerank_corpus):
    """rerank_fusion "rrf": each reranked chunk keeps its fused score and gains
    rerank_weight / (rrf_k + its rank by the reranker); explain shows that contribution. It is what
    `"rerank": true` alone does: the fusion measured best (replace lost on every collection)."""
    q = "birds that live at sea"
    with TestClient(create_app(rerank_corpus.settings, rerank_corpus)) as c:
        res = c.post("/v1/search", json={"query": q, "k": 50, "rerank": True, "rerank_n": 8, "explain": True,
                                         "rerank_fusion": "rrf", "rerank_weight": 2.0, "rrf_k": 10}).json()
        plain = c.post("/v1/search", json={"query": q, "k": 50, "rerank": True, "rerank_n": 8, "explain": True}).json()
        bad = c.post("/v1/search", json={"query": q, "rerank": True, "rerank_fusion": "blend"})
    assert bad.status_code == 422
    chunks = [ch for p in plain["pages"] for ch in p["explain"]["chunks"]]
    for rank, ch in enumerate(sorted(chunks, key=lambda ch: (-ch["rerank"], ch["chunk_id"])), start=1):
        arms = sum(v for k, v in ch["rrf"].items() if k in ("dense", "sparse"))
        assert ch["rrf"]["rerank"] == pytest.approx(1.0 / (60 + rank))    # the defaults: weight 1, rrf_k 60
        assert ch["score"] == pytest.approx(arms + 1.0 / (60 + rank)) != ch["rerank"]
    chunks = [ch for p in res["pages"] for ch in p["explain"]["chunks"]]
    assert len(chunks) == 8
    by_rerank = sorted(chunks, key=lambda ch: (-ch["rerank"], ch["chunk_id"]))
    for rank, ch in enumerate(by_rerank, start=1):
        arms = sum(v for k, v in ch["rrf"].items() if k in ("dense", "sparse"))
        assert ch["rrf"]["rerank"] == pytest.approx(2.0 / (10 + rank))
        assert ch["rrf"]["total"] == pytest.approx(arms + 2.0 / (10 + rank)) == pytest.approx(ch["score"])
    scores = [p["score"] for p in res["pages"]]
    assert scores == sorted(scores, reverse=True)


def test_a_long_page_is_scored_by_its_best_passage(rerank_corpus):
    with TestClient(create_app(rerank_corpus.settings, rerank_corpus)) as c:
        res = c.post("/v1/search", json={"query": "puffins gannets albatrosses terns", "k": 50, "rerank": True,
                                         "rerank_n": 40, "explain": True}).json()
    long = next(p for p in res["pages"] if p["url"] == "https://long.example/report")
    best = long["snippets"][0]
    assert "Puffins nest in burrows" in best["text"]  # the passage, not the filler, carries the page
    assert long["explain"]["rollup"]["value"] == pytest.approx(best["score"])


def test_rerank_without_a_reranker_is_503(shared_corpus, make_corpus):
    """The default names refindery-local, which a fresh data dir has not trained yet: a rerank
    request is refused with 503 and the way to train it; an empty name is refused the same way."""
    with TestClient(create_app(shared_corpus.settings, shared_corpus)) as c:
        r = c.post("/v1/search", json={"query": "anything", "rerank": True})
        st = c.get("/v1/status").json()["reranker"]
    assert r.status_code == 503 and r.json()["detail"]["type"] == "reranker_unavailable"
    assert "refindery reranker train" in r.json()["detail"]["title"] + r.json()["detail"].get("detail", "")
    assert st["name"] == "refindery-local" and st["available"] is False and "reranker train" in st["install"]
    none = make_corpus(models={"reranker": ""})
    with TestClient(create_app(none.settings, none)) as c:
        r = c.post("/v1/search", json={"query": "anything", "rerank": True})
        assert c.get("/v1/status").json()["reranker"]["available"] is False
    assert r.status_code == 503 and r.json()["detail"]["type"] == "reranker_unavailable"


def test_eval_run_has_a_rerank_variant(rerank_corpus, tmp_path):
    """`eval run --variants hybrid,rerank` scores the reranked lists like any other run."""
    import json as _json

    from engine.app import Engine
    from eval import collections, run

    root = tmp_path / "topics"
    root.mkdir()
    docs = [{"id": f"{t}{i}", "title": "", "text": s} for t in TOPICS for i, s in enumerate(TOPICS[t])]
    (root / "docs.jsonl").write_text("".join(_json.dumps(d) + "\n" for d in docs))
    (root / "queries.jsonl").write_text("".join(_json.dumps({"id": t, "text": q}) + "\n" for t, q in QUERIES.items()))
    (root / "qrels.tsv").write_text("".join(f"{t}\t{d['id']}\t1\n" for t in TOPICS for d in docs
                                            if d["id"].startswith(t)))
    result = run.evaluate_run(Engine(corpus=rerank_corpus), collections.load(root), ["all-minilm-l6-v2"], ["hybrid", "rerank"])
    assert set(result["metrics"]) == {"hybrid/all-minilm-l6-v2", "rerank/all-minilm-l6-v2"}
    assert result["metrics"]["rerank/all-minilm-l6-v2"]["nDCG@10"] > 0.5
    assert len(result["significance"]) == 1


def test_eval_rerank_model_scores_a_trained_reranker_on_each_collection_in_both_fusions(rerank_corpus, tiny_reranker,
                                                                                        tmp_path):
    """`python -m eval.rerank --model DIR`: no training, every collection held out; each rerank
    variant is compared with the same fusion without it, and the report carries the training curve."""
    import json as _json

    from eval.rerank import TRAINED_VARIANTS, evaluate_model

    root = tmp_path / "ir" / "topics"
    root.mkdir(parents=True)
    docs = [{"id": f"{t}{i}", "title": "", "text": s} for t in TOPICS for i, s in enumerate(TOPICS[t])]
    (root / "docs.jsonl").write_text("".join(_json.dumps(d) + "\n" for d in docs))
    (root / "queries.jsonl").write_text("".join(_json.dumps({"id": t, "text": q}) + "\n" for t, q in QUERIES.items()))
    (root / "qrels.tsv").write_text("".join(f"{t}\t{d['id']}\t1\n" for t in TOPICS for d in docs
                                            if d["id"].startswith(t)))
    out = evaluate_model(rerank_corpus.settings, tiny_reranker, ["topics"], tmp_path / "ir", tmp_path / "data",
                         max_length=128, results=tmp_path / "res", progress=False)
    row = out["collections"]["topics"]
    assert row["queries"] == len(QUERIES) and set(TRAINED_VARIANTS) <= set(row)
    for v, ref in (("rerank", "hybrid"), ("rerank-rrf", "hybrid"), ("rerank-linear", "hybrid-linear")):
        assert row[v]["vs"] == ref
        assert row[v]["delta_ndcg10"] == pytest.approx(row[v]["nDCG@10"] - row[ref]["nDCG@10"], abs=1e-3)
        assert row[v]["p_value"] is None or 0.0 <= row[v]["p_value"] <= 1.0
    assert set(row["per_query"]["rerank-linear"]) == set(QUERIES)
    md = (tmp_path / "res" / "rerank_squad.md").read_text()
    assert f"| topics | {len(QUERIES)} | {row['hybrid']['nDCG@10']:.3f} |" in md
    assert "how it was trained is not known here" in md  # the tiny model was saved without a card
    card = {"base_model": "all-minilm-l6-v2", "config": {"layers": 2, "batch_size": 8, "loss": "listwise"},
            "result": {"steps": 3, "train_pairs": 40, "validation": [{"step": 0, "mrr": 0.5}, {"step": 3, "mrr": 0.75}]}}
    from eval.rerank import markdown_model

    md = markdown_model({**out, "training": card})
    assert "its first 2 layers; 3 steps of 8 sequences: 24 pairs drawn from 40" in md
    assert "| 3 | 0.75 |" in md  # the validation curve
