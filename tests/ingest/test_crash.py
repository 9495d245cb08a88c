"""A crash anywhere in an ingest leaves the store consistent and the ingest re-runnable.

The child process is a real `refindery ingest`, killed with SIGKILL: at named points inside a
batch (fault injection through REFINDERY_TEST_CRASH_AT, so every window is hit on purpose), and
once from outside at an arbitrary moment after its first batch landed.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import ROOT, demo_records, index_ids

from engine.ingest.pipeline import Ingester
from engine.ingest.records import read_source
from indexes.generation import read_marker

PAGES = 10


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    path = tmp_path_factory.mktemp("crash") / "pages.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in demo_records(PAGES)))
    return path


def child_env(data_dir, crash_at=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("REFINDERY_")}
    env.update(REFINDERY_DATA_DIR=str(data_dir), REFINDERY_INGEST__BATCH_CHUNKS="12",
               REFINDERY_MODELS__DEVICE="cpu")
    if crash_at:
        env["REFINDERY_TEST_CRASH_AT"] = crash_at
    return env


def run_ingest(source, data_dir, crash_at=None):
    return subprocess.run([sys.executable, "-m", "server.cli", "ingest", str(source), "--no-progress"],
                          cwd=ROOT, env=child_env(data_dir, crash_at), capture_output=True, text=True, timeout=600)


def assert_consistent(corpus):
    ids = index_ids(corpus)
    m = corpus.settings.models.active
    assert ids["store"] == ids["sparse"] == ids[f"dense:{m}"] == ids[f"vectors:{m}"]
    # No page is half there: every stored page has chunks, every chunk's page is stored.
    cur = corpus.store.cursor()
    assert cur.execute("SELECT count(*) FROM pages p ANTI JOIN chunks c USING (page_id)").fetchone()[0] == 0
    assert cur.execute("SELECT count(*) FROM chunks c ANTI JOIN pages p USING (page_id)").fetchone()[0] == 0
    assert corpus.consistency()["consistent"]


@pytest.mark.parametrize("point", ["before_store:2", "after_store:2", "after_sparse:2", "after_indexes:3"])
def test_sigkill_inside_a_batch_then_restart(point, source, make_corpus, tmp_path):
    data = tmp_path / "data"
    proc = run_ingest(source, data, crash_at=point)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]

    corpus = make_corpus(data)  # opening repairs whatever index lags the store
    assert_consistent(corpus)
    landed = corpus.store.counts()["pages"]
    assert 0 < landed < PAGES  # the kill really was mid-ingest

    report = Ingester(corpus, "default", progress=False).ingest(read_source(str(source)))
    assert not report.errors
    assert corpus.store.counts()["pages"] == PAGES
    assert report.count("created") == PAGES - landed
    assert_consistent(corpus)


def test_sigkill_from_outside_then_rerun(source, make_corpus, tmp_path):
    data = tmp_path / "data"
    proc = subprocess.Popen([sys.executable, "-m", "server.cli", "ingest", str(source), "--no-progress"],
                            cwd=ROOT, env=child_env(data), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    marker = data / "sparse.json"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        m = read_marker(marker)
        if m and m.get("generation", 0) >= 1:  # the first batch is in the store and in tantivy
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL, "the ingest ended before the kill"

    corpus = make_corpus(data)
    assert_consistent(corpus)
    assert 0 < corpus.store.counts()["pages"] < PAGES  # the kill landed mid-ingest
    Ingester(corpus, "default", progress=False).ingest(read_source(str(source)))
    assert corpus.store.counts()["pages"] == PAGES
    assert_consistent(corpus)


def test_a_lost_index_is_rebuilt_from_the_store(source, make_corpus, tmp_path):
    import shutil

    data = tmp_path / "data"
    corpus = make_corpus(data)
    Ingester(corpus, "default", progress=False).ingest(read_source(str(source)))
    before = index_ids(corpus)
    corpus.close()
    shutil.rmtree(data / "sparse")
    (data / "sparse.json").unlink()
    for f in (data / "dense").iterdir():
        f.unlink()
    reopened = make_corpus(data)
    assert index_ids(reopened) == before
    assert {r.index for r in reopened.repairs} == {"sparse", "dense:all-minilm-l6-v2"}
