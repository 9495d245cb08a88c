"""The quality profile's catch-up (issue 54, item 3): a page is written with the fast embedder (and BM25)
and is searchable at once; the quality embedder catches up in the background from the store's queue,
following later writes; search ranks by the quality embedder what it covers and by the fast one the
rest; a SIGKILL during the catch-up resumes on restart and ends with one vector per chunk and model.

The quality embedder here is the int8 MiniLM (fast enough for `make test`; the mechanism does not
depend on which model is slow). Real DuckDB, tantivy, FAISS and ONNX Runtime."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from conftest import ROOT, demo_records, index_ids, ingest, killed_then_restarted, serving_on, stored_vectors

QUALITY = "all-minilm-l6-v2-int8"
FAST = "all-minilm-l6-v2"
QUERIES = ["how do I pretty-print JSON", "python list comprehension", "git rebase interactive",
           "postgres index performance", "regular expressions lookahead"]


def quality_settings(data_dir, int8_pool, **models):
    from engine.core.settings import load_settings

    return load_settings(data_dir=str(data_dir), profile="quality",
                         models={"quality": QUALITY, "quality_fast": FAST, "device": "cpu",
                                 "cache_dir": str(int8_pool.registry.cache_dir), **models})


def vector_rows(corpus) -> dict[str, tuple[int, int]]:
    """model -> (vector rows, distinct chunks among them) in the store."""
    rows = corpus.store.sql().rows(
        "SELECT model, count(*), count(DISTINCT chunk_id) FROM embeddings GROUP BY model")
    return {m: (n, d) for m, n, d in rows}


def ranking(engine, query, model=None):
    from engine.refind.search import SearchRequest

    r = engine.search(SearchRequest(query=query, k=10, shortcuts=False), model=model, log=False)
    return [h.page_id for h in r.pages], r


@pytest.fixture(scope="module")
def records():
    return demo_records(12)


def test_merge_by_estimated_rank():
    from engine.refind.fusion import merge_catching_up

    q = [(1, .9), (2, .8), (3, .7)]
    f = [(10, .5), (11, .4)]
    assert merge_catching_up(q, f, 0.0, 10) == f
    assert merge_catching_up(q, f, 1.0, 10) == q
    # a quarter covered: the covered hits rank 4, 8, 12; the others 1.33, 2.67
    assert [c for c, _ in merge_catching_up(q, f, 0.25, 10)] == [10, 11, 1, 2, 3]
    # three quarters: 1.33, 2.67, 4 against 4, 8 (a tie goes to the covered hit)
    assert [c for c, _ in merge_catching_up(q, f, 0.75, 4)] == [1, 2, 3, 10]


def test_written_with_the_fast_embedder_searched_by_coverage_then_caught_up(int8_pool, tmp_path, records):
    from engine.app import Engine

    s = quality_settings(tmp_path / "data", int8_pool)
    assert s.catch_up_model == QUALITY and s.write_models == [FAST] and s.embedder_names == [QUALITY, FAST]
    with Engine(s, int8_pool) as e:
        ingest(e.corpus, records)
        chunks = e.corpus.store.counts()["chunks"]
        assert vector_rows(e.corpus) == {FAST: (chunks, chunks)}   # the write path encoded the fast one only

        # nothing covered yet: the dense arm is the fast embedder's, so the ranking is the default profile's
        for q in QUERIES:
            order, r = ranking(e, q)
            assert r.catch_up is not None and r.catch_up.coverage == 0 and r.catch_up.waiting == chunks
            assert r.catch_up.stand_in == FAST and r.model == QUALITY
            assert order == ranking(e, q, model=FAST)[0]
        row = {m["name"]: m for m in e.models()}[QUALITY]
        assert row["coverage"] == 0 and row["catches_up"] == {"stand_in": FAST, "waiting": chunks}

        # part of the way: the covered chunks by the quality model, the rest by the fast one
        stop = threading.Event()
        e.corpus.embed_missing(QUALITY, batch=8, stop=stop, progress=lambda done, total: done >= 24 and stop.set())
        covered = set(e.corpus.dense(QUALITY).ids().tolist())
        assert 0 < len(covered) < chunks
        trace: dict = {}
        from engine.refind.search import SearchRequest
        r = e.pages.search(SearchRequest(query=QUERIES[0], k=10, shortcuts=False, workspace="default"), log=False,
                           trace=trace)
        assert 0 < r.catch_up.coverage < 1 and r.catch_up.waiting == chunks - len(covered)
        dense = trace["candidates"].dense
        assert {c for c, _ in dense} & covered and {c for c, _ in dense} - covered   # both kinds ranked

        # caught up: no catch_up in the reply, and the quality model's own ranking
        e.corpus.embed_missing(QUALITY)
        order, r = ranking(e, QUERIES[0])
        assert r.catch_up is None
        assert vector_rows(e.corpus) == {FAST: (chunks, chunks), QUALITY: (chunks, chunks)}
        assert {m["name"]: m for m in e.models()}[QUALITY]["coverage"] == 1.0


def test_the_catch_ups_total_is_what_waits_now(int8_pool, tmp_path, records):
    """Issue 70, row 5: pages that arrive while the catch-up runs count in its total (the server log's
    "done/total chunks" line); a total frozen at the start read "1536/675 chunks"."""
    from engine.app import Engine

    with Engine(quality_settings(tmp_path / "data", int8_pool), int8_pool) as e:
        ingest(e.corpus, records[:3])
        first = e.corpus.store.counts()["chunks"]
        seen: list[tuple[int, int]] = []

        def progress(done, total):
            seen.append((done, total))
            if len(seen) == 2:   # after the first batch, the rest of the pages arrive
                ingest(e.corpus, records[3:6])

        e.corpus.embed_missing(QUALITY, batch=4, progress=progress)
        chunks = e.corpus.store.counts()["chunks"]
        assert first > 8 and chunks > first
        assert seen[0] == (0, first) and seen[1] == (4, first)
        assert [t for _, t in seen[2:]] == [chunks] * len(seen[2:])   # every total after they arrived
        assert seen[-1] == (chunks, chunks)


def test_the_background_catch_up_follows_later_writes(int8_pool, tmp_path, records):
    """A server's catch-up stays: after it has caught up, a later write is embedded too; a page written
    while it runs is found by its exact words at once (BM25 and the fast embedder)."""
    from engine.app import Engine

    s = quality_settings(tmp_path / "data", int8_pool, catch_up_batch=4)
    with Engine(s, int8_pool) as e:
        ingest(e.corpus, records[:4])
        state = e.embed_model_in_background(QUALITY)
        assert state["follows_writes"] and state["state"] == "embedding"
        thread = next(t for t in threading.enumerate() if t.name == f"embed-{QUALITY}")
        if sys.platform == "linux":   # its priority: searches take the cores first
            assert os.getpriority(os.PRIO_PROCESS, thread.native_id) == s.models.catch_up_nice == 10
        # its own model session: the one that encodes queries is never busy with a catch-up batch
        assert e.corpus.pool.background(QUALITY).model.session is not e.corpus.embedder(QUALITY).model.session
        ingest(e.corpus, [{"url": "https://notes.example/zanzibar", "title": "Zanzibar quokka notes",
                           "body_text": "The zanzibar quokka ledger lists every spice crate.",
                           "seen_at": "2026-06-01T10:00:00Z"}])
        order, r = ranking(e, "zanzibar quokka ledger")
        assert order and e.corpus.store.page(order[0])["url"] == "https://notes.example/zanzibar"

        def caught_up():
            return e.corpus.store.counts()["embeddings"].get(QUALITY, 0) == e.corpus.store.counts()["chunks"]

        deadline = time.monotonic() + 120
        while not (caught_up() and e.embedding(QUALITY)["state"] == "ready") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert caught_up() and e.embedding(QUALITY)["state"] == "ready"
        ingest(e.corpus, records[4:6])                # after it caught up: followed
        deadline = time.monotonic() + 120
        while not caught_up() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert caught_up()
        ids = index_ids(e.corpus)
        assert ids[f"dense:{QUALITY}"] == ids[f"vectors:{QUALITY}"] == ids["store"]
    assert e.embedding(QUALITY)["state"] == "stopped"   # closing the engine ended it between two passes


def test_sigkill_during_the_catch_up_resumes_with_one_vector_per_chunk(int8_pool, tmp_path, records):
    """A real `refindery serve --profile quality`, killed by SIGKILL inside a catch-up batch (its
    vectors stored, not yet in the index); started again, the queue resumes and ends with exactly
    one vector per chunk and model, in the store and in the index."""
    from engine.app import Engine
    from engine.core.faults import CRASH_ENV

    data, sock = tmp_path / "data", tmp_path / "refindery.sock"
    s = quality_settings(data, int8_pool)
    with Engine(s, int8_pool) as e:
        ingest(e.corpus, records[:5])   # ~50 chunks: the kill lands in the third batch of 8, work is left after it
        chunks = e.corpus.store.counts()["chunks"]
    assert chunks > 40

    def serve(crash: str | None):
        env = {k: v for k, v in os.environ.items() if not k.startswith("REFINDERY_")}
        env.update(REFINDERY_DATA_DIR=str(data), REFINDERY_PROFILE="quality", REFINDERY_MODELS__QUALITY=QUALITY,
                   REFINDERY_MODELS__QUALITY_FAST=FAST, REFINDERY_MODELS__DEVICE="cpu",
                   REFINDERY_MODELS__CACHE_DIR=str(int8_pool.registry.cache_dir),
                   REFINDERY_MODELS__CATCH_UP_BATCH="8")
        if crash:
            env[CRASH_ENV] = crash
        return subprocess.Popen([sys.executable, "-m", "server.cli", "serve", "--uds", str(sock)], cwd=ROOT,
                                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    kept = {}
    proc = killed_then_restarted(serve, f"embedded:{QUALITY}:24",   # the third batch of 8: stored, then killed
                                 between=lambda: kept.update(n=stored_vectors(data, QUALITY)))
    assert kept["n"] >= 24   # what the killed server stored stays in the store ...
    try:
        client = serving_on(sock)
        deadline = time.monotonic() + 180
        row = {}
        while time.monotonic() < deadline:
            row = {m["name"]: m for m in client.get("/v1/models", timeout=120).json()["models"]}[QUALITY]
            if row["coverage"] == 1.0 and row.get("embedding", {}).get("state") == "ready":
                break
            time.sleep(0.1)
        assert row["coverage"] == 1.0 and row["chunks_embedded"] == chunks, row
        # ... and the restarted one resumes: it embeds only what was missing, never from zero
        assert row["embedding"]["done"] == chunks - kept["n"], (row, kept)
        hit = client.post("/v1/search", json={"query": QUERIES[0], "k": 3}, timeout=60).json()
        assert hit["model"] == QUALITY and hit.get("catch_up") is None
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    with Engine(s, int8_pool) as e:
        assert vector_rows(e.corpus) == {FAST: (chunks, chunks), QUALITY: (chunks, chunks)}
        ids = index_ids(e.corpus)
        for m in (QUALITY, FAST):
            assert ids[f"dense:{m}"] == ids[f"vectors:{m}"] == ids["store"]
            assert len(np.unique(e.corpus.dense(m).ids())) == chunks
