"""`eval run`: collections in BEIR and TREC layouts, variants, significance tests and a report."""
from __future__ import annotations

import json

import pytest

from engine.app import Engine
from eval import collections, run
from eval.ir import DEFAULT_IR_DIR


@pytest.fixture(scope="module")
def med_slice():
    full = collections.load(DEFAULT_IR_DIR / "med")
    qids = sorted(full.queries, key=int)[:4]
    relevant = {q.doc_id for q in full.qrels if q.query_id in qids and q.relevance > 0}
    docs = [d for d in full.docs if d["id"] in relevant] + [d for d in full.docs if d["id"] not in relevant][:40]
    qrels = [q for q in full.qrels if q.query_id in qids]
    return docs, {q: full.queries[q] for q in qids}, qrels


def write_beir(root, docs, queries, qrels):
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text("".join(json.dumps({"_id": d["id"], "title": d["title"], "text": d["text"]}) + "\n"
                                               for d in docs))
    (root / "queries.jsonl").write_text("".join(json.dumps({"_id": q, "text": t}) + "\n" for q, t in queries.items()))
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
        f"{q.query_id}\t{q.doc_id}\t{q.relevance}\n" for q in qrels))


def write_trec(root, docs, queries, qrels):
    root.mkdir(parents=True)
    (root / "docs.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    (root / "topics.tsv").write_text("".join(f"{q}\t{t}\n" for q, t in queries.items()))
    (root / "qrels.trec").write_text("".join(f"{q.query_id} 0 {q.doc_id} {q.relevance}\n" for q in qrels))


def test_beir_and_trec_layouts_load_alike(tmp_path, med_slice):
    docs, queries, qrels = med_slice
    write_beir(tmp_path / "beir", docs, queries, qrels)
    write_trec(tmp_path / "trec", docs, queries, qrels)
    b, t = collections.load(tmp_path / "beir"), collections.load(tmp_path / "trec")
    assert (b.format, t.format) == ("beir", "trec")
    assert b.queries == t.queries == queries
    assert sorted(b.qrels) == sorted(t.qrels) and len(b.docs) == len(t.docs) == len(docs)
    with pytest.raises(collections.CollectionError):
        collections.load(tmp_path)


def test_eval_run_reports_metrics_significance_and_a_plot(make_corpus, tmp_path, med_slice):
    docs, queries, qrels = med_slice
    write_beir(tmp_path / "medslice", docs, queries, qrels)
    coll = collections.load(tmp_path / "medslice")
    engine = Engine(corpus=make_corpus())
    result = run.evaluate_run(engine, coll, ["all-minilm-l6-v2"], ["sparse", "dense", "hybrid"])
    assert set(result["metrics"]) == {"sparse", "dense/all-minilm-l6-v2", "hybrid/all-minilm-l6-v2"}
    for vals in result["metrics"].values():
        assert set(vals) == {"nDCG@10", "R@100", "RR@10", "AP@100"}
        assert 0.3 < vals["nDCG@10"] <= 1 and 0 < vals["AP@100"] <= 1
    assert len(result["significance"]) == 3
    for s in result["significance"]:
        assert s["p_value"] is None or 0 <= s["p_value"] <= 1
    paths = run.write_report(result, tmp_path / "reports")
    assert paths["png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "| hybrid/all-minilm-l6-v2 |" in paths["md"].read_text()
    assert json.loads(paths["json"].read_text())["queries"] == 4
    with pytest.raises(ValueError, match="unknown variants"):
        run.evaluate_run(engine, coll, ["all-minilm-l6-v2"], ["magic"])
