"""SIGKILL the running server while clients ingest pages and search (so the query log is being
written), then restart it: the store and every index agree, every page the server acknowledged is
there and findable, and the query log holds only whole executions.

A real `refindery serve` on a Unix socket (the suite runs with the network cut off), killed from
outside at a moment nobody chose: after a few acknowledged ingest batches, with requests in flight.
"""
from __future__ import annotations

import signal
import threading
import time

import httpx
from conftest import demo_records, serving_on
from conftest import serve_uds as serve
from test_crash import assert_consistent

BATCH = 4


def test_sigkill_during_ingest_and_log_writes_loses_nothing_acknowledged(make_corpus, tmp_path):
    data, sock = tmp_path / "data", tmp_path / "refindery.sock"
    records = demo_records(48)
    proc = serve(data, sock)
    acknowledged: list[str] = []
    searches_answered = []
    stop = threading.Event()
    try:
        client = serving_on(sock)
        assert client.get("/healthz").status_code == 200

        def ingest():
            c = httpx.Client(transport=httpx.HTTPTransport(uds=str(sock)), base_url="http://refindery", timeout=120)
            for i in range(0, len(records), BATCH):
                if stop.is_set():
                    return
                try:
                    r = c.post("/v1/pages", json={"pages": records[i:i + BATCH]})
                except httpx.HTTPError:
                    return  # the server died with this batch in flight: not acknowledged
                if r.status_code == 200:
                    acknowledged.extend(it["page_id"] for it in r.json()["items"] if it["status"] == "created")

        def search():
            c = httpx.Client(transport=httpx.HTTPTransport(uds=str(sock)), base_url="http://refindery", timeout=120)
            n = 0
            while not stop.is_set():
                try:
                    r = c.post("/v1/search", json={"query": f"functions and tables {n}", "k": 3})
                except httpx.HTTPError:
                    return
                if r.status_code == 200:
                    searches_answered.append(r.json()["query_id"])
                n += 1

        workers = [threading.Thread(target=ingest), threading.Thread(target=search)]
        for w in workers:
            w.start()
        deadline = time.monotonic() + 300
        while len(acknowledged) < 3 * BATCH and time.monotonic() < deadline and workers[0].is_alive():
            time.sleep(0.02)
        assert len(acknowledged) >= 3 * BATCH and len(acknowledged) < len(records), \
            "the kill must land mid-ingest"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        stop.set()
        if proc.poll() is None:
            proc.kill()
    for w in workers:
        w.join(timeout=60)
    assert searches_answered, "searches were running (and being logged) when the server was killed"

    # Restart: opening the data dir repairs what lags, then the store and every index agree.
    corpus = make_corpus(data)
    assert_consistent(corpus)
    stored = set(corpus.store.filtered_pages(corpus.settings.default_workspace))
    assert set(acknowledged) <= stored, "a page the server acknowledged was lost"
    indexed = set(corpus.chunk_pages(corpus.sparse.ids()).values())
    assert set(acknowledged) <= indexed
    # The query log holds whole executions only: every row of an execution has its execution.
    cur = corpus.store.cursor()
    for table in ("log_candidates", "log_fused", "log_results"):
        orphans = cur.execute(f"SELECT count(*) FROM {table} t ANTI JOIN log_queries q USING (query_id)").fetchone()[0]
        assert orphans == 0, table
    corpus.close()

    # And the server itself comes back over the same data dir and finds an acknowledged page by its URL.
    proc = serve(data, sock)
    try:
        client = serving_on(sock)
        status = client.get("/v1/status").json()
        assert status["generations"]["consistent"] and status["counts"]["pages"] >= len(acknowledged)
        url = client.get(f"/v1/pages/{acknowledged[0]}").json()["url"]
        hit = client.post("/v1/search", json={"query": url, "k": 1}).json()["pages"][0]
        assert hit["page_id"] == acknowledged[0] and hit["pinned"] == "url"
    finally:
        proc.kill()
        proc.wait(timeout=60)
