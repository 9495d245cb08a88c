"""Batch embedding on Ray Data (`refindery ingest --ray ADDRESS`): a real local Ray cluster (a head
on loopback with 2 CPUs, started by the fixture), one embedder loaded per actor. The vectors equal
the in-process ones, and a SIGKILL of the driver mid-ingest leaves the store consistent and the
ingest re-runnable, as without Ray."""
from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, demo_records, loopback_up
from test_crash import assert_consistent

from engine.ingest.pipeline import Ingester
from engine.ingest.records import read_source

PAGES = 10


@pytest.fixture(scope="module")
def ray_address():
    """`ray start --head` on a free loopback port (2 CPUs, no dashboard, a short temp dir: Ray's
    socket paths must stay under the OS limit); `ray stop` at the end."""
    loopback_up()
    ray = str(Path(sys.executable).parent / "ray")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    temp = tempfile.mkdtemp(prefix="rt", dir="/tmp")
    # Ray >= 2.59 authenticates its control plane with a token: one for this cluster, given to the
    # head and to every driver (this process, and the `refindery ingest --ray` children)
    auth = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32), "RAY_USAGE_STATS_ENABLED": "0"}
    saved = {k: os.environ.get(k) for k in auth}
    os.environ.update(auth)
    env = dict(os.environ)
    started = subprocess.run([ray, "start", "--head", "--port", str(port), "--node-ip-address", "127.0.0.1",
                              "--num-cpus", "2", "--include-dashboard=false", "--disable-usage-stats",
                              "--object-store-memory", "200000000", "--temp-dir", temp],
                             env=env, capture_output=True, text=True, timeout=180)
    if started.returncode != 0:
        pytest.fail(f"ray start failed: {started.stderr[-2000:]}")
    try:
        yield f"127.0.0.1:{port}"
    finally:
        subprocess.run([ray, "stop", "--force"], env=env, capture_output=True, timeout=120)
        shutil.rmtree(temp, ignore_errors=True)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    path = tmp_path_factory.mktemp("ray") / "pages.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in demo_records(PAGES)))
    return path


def test_vectors_embedded_on_ray_equal_the_in_process_ones(ray_address, source, make_corpus, tmp_path):
    from models.ray_embed import EmbedderSource, RayEmbedding

    here = make_corpus(tmp_path / "here")
    Ingester(here, "default", progress=False).ingest(read_source(str(source)))
    there = make_corpus(tmp_path / "there")
    s = there.settings
    remote = RayEmbedding(ray_address, EmbedderSource(str(s.registry_path), str(s.models_cache_dir), str(s.data_dir),
                                                      "cpu", s.models.batch_size), actors=2, batch_size=16,
                          cpus_per_actor=0.5)
    calls, stats = [], []

    def encode(model, texts):
        calls.append(len(texts))
        vectors = remote.encode(model, texts)
        stats.append(remote.last_stats)
        return vectors

    try:
        report = Ingester(there, "default", progress=False, encode=encode, batch_chunks=40).ingest(read_source(str(source)))
    finally:
        remote.close()
    assert not report.errors and len(calls) > 1 and sum(calls) == report.chunks_embedded
    # every batch ran on Ray Data, in actor processes, not here: Ray's own execution record of each
    # names the embedding actors' map and the rows it put out, and the vectors came from other processes
    for n, st in zip(calls, stats):
        mapped = re.search(r"MapBatches\(_EmbedActor\).*?Total output num rows: (\d+) rows", st, re.S)
        assert mapped and int(mapped.group(1)) == n, st
    assert remote.workers and os.getpid() not in remote.workers
    model = s.models.active
    ids_a, vecs_a = here.store.embeddings_for(model)
    ids_b, vecs_b = there.store.embeddings_for(model)
    assert ids_a.tolist() == ids_b.tolist() and len(ids_a) > 50
    cos = np.sum(vecs_a * vecs_b, axis=1) / (np.linalg.norm(vecs_a, axis=1) * np.linalg.norm(vecs_b, axis=1))
    assert cos.min() >= 0.9999
    assert_consistent(there)


def test_sigkill_of_the_ray_driver_mid_ingest_leaves_the_store_consistent_and_re_runnable(
        ray_address, source, make_corpus, tmp_path):
    data = tmp_path / "data"
    env = {k: v for k, v in os.environ.items() if not k.startswith("REFINDERY_")}
    env.update(REFINDERY_DATA_DIR=str(data), REFINDERY_INGEST__RAY_BATCH_CHUNKS="12",
               REFINDERY_INGEST__RAY_CPUS_PER_ACTOR="0.5", REFINDERY_INGEST__RAY_ACTORS="1",
               REFINDERY_MODELS__DEVICE="cpu", REFINDERY_TEST_CRASH_AT="after_store:2")
    proc = subprocess.run([sys.executable, "-m", "server.cli", "ingest", str(source), "--no-progress",
                           "--ray", ray_address], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]

    corpus = make_corpus(data)        # opening repairs whatever index lags the store
    assert_consistent(corpus)
    landed = corpus.store.counts()["pages"]
    assert 0 < landed < PAGES        # the kill really was mid-ingest
    report = Ingester(corpus, "default", progress=False).ingest(read_source(str(source)))
    assert not report.errors and corpus.store.counts()["pages"] == PAGES
    assert report.count("created") == PAGES - landed
    assert_consistent(corpus)
