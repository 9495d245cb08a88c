"""The A/B notebook runs (nbclient, a real kernel) against a real server — the app over a real corpus with
two embedders, served by uvicorn on a Unix socket, reached through the Python client — and real reports
(an `eval run` report, and an `eval stages` report read from the log); what it prints is checked
against what the server answered and what the reports hold."""
from __future__ import annotations

import json

import nbformat
from conftest import ROOT, served_on_socket
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient

from engine.app import Engine
from eval import collections, run, stages
from eval.ir import DEFAULT_IR_DIR
from server.app import create_app

QUERIES = ["where to find owls", "icy comets", "coral and moss"]


def test_ab_notebook_executes(ab_corpus, make_corpus, tmp_path, monkeypatch):
    full = collections.load(DEFAULT_IR_DIR / "med")
    qids = sorted(full.queries, key=int)[:2]
    keep = {q.doc_id for q in full.qrels if q.query_id in qids} | {d["id"] for d in full.docs[:20]}
    small = tmp_path / "medmini"
    small.mkdir()
    (small / "docs.jsonl").write_text("".join(json.dumps(d) + "\n" for d in full.docs if d["id"] in keep))
    (small / "queries.jsonl").write_text("".join(json.dumps({"id": q, "text": full.queries[q]}) + "\n" for q in qids))
    (small / "qrels.tsv").write_text("".join(f"{q.query_id}\t{q.doc_id}\t{q.relevance}\n" for q in full.qrels
                                             if q.query_id in qids))
    evaldata = Engine(corpus=make_corpus(tmp_path / "evaldata"))
    result = run.evaluate_run(evaldata, collections.load(small), ["all-minilm-l6-v2"], ["sparse", "hybrid"])
    report = run.write_report(result, tmp_path / "reports")["json"]
    where = stages.from_collection(evaldata, small, k=5)        # searched, logged, read back from the log
    stages.write({"reports": [where], "agreement": []}, tmp_path / "stages")

    # the server the notebook's client talks to: a Unix socket, as with the network cut off (unshare -n)
    # even the loopback interface is down
    sock = tmp_path / "refindery.sock"
    with served_on_socket(create_app(ab_corpus.settings, ab_corpus), sock):
        monkeypatch.setenv("REFINDERY_UDS", str(sock))
        monkeypatch.setenv("REFINDERY_URL", "http://refindery")
        monkeypatch.setenv("REFINDERY_MODELS", "all-minilm-l6-v2,minilm-prefixed")
        monkeypatch.setenv("REFINDERY_QUERIES", json.dumps(QUERIES))
        monkeypatch.setenv("REFINDERY_REPORT", str(report))
        monkeypatch.setenv("REFINDERY_STAGES", str(tmp_path / "stages" / "stages.json"))
        nb = nbformat.read(ROOT / "eval" / "notebooks" / "ab_embedders.ipynb", as_version=4)
        km = KernelManager(kernel_name="python3", transport="ipc", ip=str(tmp_path / "kernel"))
        NotebookClient(nb, km=km, timeout=300, resources={"metadata": {"path": str(ROOT)}}).execute()
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    text = "".join(o.get("text", "") for o in outputs)
    assert not [o for o in outputs if o.get("output_type") == "error"], text[-3000:]
    assert "'queries': 3" in text and "minilm-prefixed" in text and "all-minilm-l6-v2" in text
    assert sum(1 for o in outputs if "image/png" in o.get("data", {})) == 3
    # What the notebook printed is what the server answered: each query's agreement line carries the
    # figures the server's compare logged for that query, and the status line the server's counts.
    assert ab_corpus.querylog.flush()
    answered = ab_corpus.store.sql().rows(
        """SELECT q.query, a.k, a.jaccard, a.rbo_ext FROM log_queries q JOIN log_agreement a USING (query_id)
           WHERE q.endpoint = 'compare'""")
    assert {row[0] for row in answered} == set(QUERIES)
    for query, k, jac, rbo in answered:
        assert f"{query[:40]:40s}  J@{k}={jac:.2f}  RBO={rbo:.2f}" in text
    assert f"| pages: {ab_corpus.store.counts()['pages']} |" in text
    # the stage table as the report read it from the log
    assert (f"{where['source']} | queries {where['queries']} | relevant {where['relevant']} | "
            + " ".join(f"{s}={where['counts'][s]}" for s in stages.STAGES)) in text
