"""The A/B notebook runs (nbclient, a real kernel) against a small real log and a real report."""
from __future__ import annotations

import json

import nbformat
from conftest import ROOT
from fastapi.testclient import TestClient
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient

from engine.app import Engine
from eval import collections, run
from eval.ir import DEFAULT_IR_DIR
from server.app import create_app


def test_ab_notebook_executes(ab_corpus, make_corpus, tmp_path, monkeypatch):
    with TestClient(create_app(ab_corpus.settings, ab_corpus)) as c:
        for q in ("where to find owls", "icy comets", "coral and moss"):
            assert c.post("/v1/compare", json={"query": q, "models": ["all-minilm-l6-v2", "minilm-prefixed"],
                                               "k": 4}).status_code == 200
    db = ab_corpus.data_dir / "refindery.duckdb"
    ab_corpus.close()  # the notebook opens the file read-only

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

    monkeypatch.setenv("REFINDERY_LOG_DB", str(db))
    monkeypatch.setenv("REFINDERY_REPORT", str(report))
    nb = nbformat.read(ROOT / "eval" / "notebooks" / "ab_embedders.ipynb", as_version=4)
    # IPC rather than TCP between client and kernel: with the network cut off (unshare -n) even
    # the loopback interface is down.
    km = KernelManager(kernel_name="python3", transport="ipc", ip=str(tmp_path / "kernel"))
    NotebookClient(nb, km=km, timeout=300, resources={"metadata": {"path": str(ROOT)}}).execute()
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    text = "".join(o.get("text", "") for o in outputs)
    assert "'queries': 3" in text and "minilm-prefixed" in text and "all-minilm-l6-v2" in text
    assert sum(1 for o in outputs if "image/png" in o.get("data", {})) == 2
    assert not [o for o in outputs if o.get("output_type") == "error"]
