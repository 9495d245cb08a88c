"""The IR evaluation over a slice of a real test collection (MED): ingest as pages, search in the
three modes, score with ir_measures against the real judgments."""
from __future__ import annotations

import json

from engine.app import Engine
from eval.collections import load as load_collection
from eval.ir import DEFAULT_IR_DIR, evaluate, markdown


def test_evaluation_on_a_slice_of_med(make_corpus, tmp_path):
    full = load_collection(DEFAULT_IR_DIR / "med")
    qids = sorted(full.queries, key=int)[:3]
    relevant = {q.doc_id for q in full.qrels if q.query_id in qids and q.relevance > 0}
    others = [d for d in full.docs if str(d["id"]) not in relevant][:60]
    docs = [d for d in full.docs if str(d["id"]) in relevant] + others
    small = tmp_path / "ir" / "med"
    small.mkdir(parents=True)
    (small / "docs.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    (small / "queries.jsonl").write_text("".join(json.dumps({"id": q, "text": full.queries[q]}) + "\n" for q in qids))
    (small / "qrels.tsv").write_text("".join(f"{q.query_id}\t{q.doc_id}\t{q.relevance}\n"
                                             for q in full.qrels if q.query_id in qids))
    engine = Engine(corpus=make_corpus())
    result = evaluate(engine, tmp_path / "ir", ["med"], progress=False)
    row = result["collections"]["med"]
    assert row["docs"] == len(docs) and row["queries"] == 3
    for mode in ("sparse", "dense", "hybrid"):
        assert 0.3 < row[mode]["nDCG@10"] <= 1.0  # real retrieval of judged-relevant documents
        assert 0.0 < row[mode]["R@100"] <= 1.0
    table = markdown(result)
    assert "| med |" in table and "hybrid" in table
    # Ingesting again is idempotent: the collection's pages stay as they were.
    again = evaluate(engine, tmp_path / "ir", ["med"], progress=False)
    assert again["collections"]["med"]["ingest"]["unchanged"] == len(docs)
    assert again["collections"]["med"]["hybrid"] == row["hybrid"]  # same data, same answers
