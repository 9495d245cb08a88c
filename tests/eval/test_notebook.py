"""The A/B notebook runs (nbclient, a real kernel) against a real server — the app over a real corpus with
two embedders, served by uvicorn on a Unix socket, reached through the Python client — and a real report."""
from __future__ import annotations

import json
import threading
import time

import nbformat
import uvicorn
from conftest import ROOT
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient

from engine.app import Engine
from eval import collections, run
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
    result = run.evaluate_run(Engine(corpus=make_corpus(tmp_path / "evaldata")), collections.load(small), ["all-minilm-l6-v2"], ["sparse", "hybrid"])
    report = run.write_report(result, tmp_path / "reports")["json"]

    # the server the notebook's client talks to: a Unix socket, as with the network cut off (unshare -n)
    # even the loopback interface is down
    sock = tmp_path / "refindery.sock"
    server = uvicorn.Server(uvicorn.Config(create_app(ab_corpus.settings, ab_corpus), uds=str(sock),
                                           log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        for _ in range(600):
            if server.started:
                break
            time.sleep(0.1)
        assert server.started, "the server did not start"
        monkeypatch.setenv("REFINDERY_UDS", str(sock))
        monkeypatch.setenv("REFINDERY_URL", "http://refindery")
        monkeypatch.setenv("REFINDERY_MODELS", "all-minilm-l6-v2,minilm-prefixed")
        monkeypatch.setenv("REFINDERY_QUERIES", json.dumps(QUERIES))
        monkeypatch.setenv("REFINDERY_REPORT", str(report))
        nb = nbformat.read(ROOT / "eval" / "notebooks" / "ab_embedders.ipynb", as_version=4)
        km = KernelManager(kernel_name="python3", transport="ipc", ip=str(tmp_path / "kernel"))
        NotebookClient(nb, km=km, timeout=300, resources={"metadata": {"path": str(ROOT)}}).execute()
    finally:
        server.should_exit = True
        thread.join(timeout=30)
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    text = "".join(o.get("text", "") for o in outputs)
    assert not [o for o in outputs if o.get("output_type") == "error"], text[-3000:]
    assert "'queries': 3" in text and "minilm-prefixed" in text and "all-minilm-l6-v2" in text
    assert sum(1 for o in outputs if "image/png" in o.get("data", {})) == 2
    # what the notebook printed is what the server answers: the compare runs went through the engine's log
    assert ab_corpus.querylog.flush()
    logged = ab_corpus.store.cursor().execute(
        "SELECT count(*) FROM log_queries WHERE endpoint = 'compare'").fetchone()[0]
    assert logged >= len(QUERIES)
