"""Backups taken while the data dir is written, checked, and restored (engine/core/backup.py), on the
DuckDB store and on PostgreSQL: the restore drill of issue 74, a backup cut short, and bad input."""
from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import MODELS_CACHE, STORE_BACKENDS, _new_database, demo_records

from engine.app import Engine
from engine.core import backup
from engine.core.settings import load_settings
from engine.refind.search import SearchRequest

ROOT = Path(__file__).resolve().parents[2]
# 20 searches over the demo pages (their words, none a title's whole)
QUERIES = ["sqlite returning clause", "json functions", "window functions over rows", "python file locking",
           "drop a function", "session authorization", "create index concurrently", "async tasks and events",
           "regular expressions", "date and time formatting", "transactions and savepoints", "foreign keys",
           "unicode strings", "csv reading and writing", "socket timeouts", "full text search", "vacuum",
           "logging handlers", "type hints", "upsert on conflict"]
WORDS = "amber basalt cobalt dune ember fjord glacier harbor isthmus juniper kelp lagoon meadow".split()


def _page(writer: str, i: int) -> dict:
    words = " ".join(WORDS[(i + j) % len(WORDS)] for j in range(6))
    return {"url": f"https://writes.example/{writer}/{i}", "title": f"{writer} note {i}",
            "body_text": f"A note written by {writer} while the backup ran: {words}. Number {i}."}


def _ingest(e: Engine, records: list[dict]) -> None:
    e.ingest(((i, "test", r) for i, r in enumerate(records, start=1)), progress=False)


def _urls(e: Engine, query: str) -> list[str]:
    return [p.url for p in e.search(SearchRequest(query=query, k=10, shortcuts=False)).pages]


def _chunks_per_page(store) -> dict[str, int]:
    return dict(store.sql().rows("SELECT p.url, count(c.chunk_id) FROM pages p LEFT JOIN chunks c USING (page_id) "
                                 "GROUP BY p.url"))


@pytest.mark.parametrize("store_backend", STORE_BACKENDS, indirect=True)
def test_a_backup_taken_while_two_clients_write_restores_to_the_same_answers(make_corpus, store_backend, tmp_path,
                                                                             request, pool):
    e = Engine(corpus=make_corpus())
    _ingest(e, demo_records(6))
    token = e.create_key(["*"], name="admin")["token"]
    e.search(SearchRequest(query="sqlite", k=3))
    acked: list[tuple[float, str]] = []    # (when acknowledged, url)
    lock = threading.Lock()
    backing_up = threading.Event()

    def write(writer: str) -> None:
        for start in range(0, 150, 10):
            batch = [_page(writer, i) for i in range(start, start + 10)]
            _ingest(e, batch)
            with lock:
                acked.extend((time.monotonic(), p["url"]) for p in batch)
            if start == 20:
                backing_up.wait(30)   # the backup starts with some of each writer's pages acknowledged

    writers = [threading.Thread(target=write, args=(w,)) for w in ("alpha", "beta")]
    for t in writers:
        t.start()
    while len(acked) < 40:
        time.sleep(0.05)
    began = time.monotonic()
    with lock:
        before = {url for _, url in acked}
    dest = tmp_path / "backup"
    # a pause after each table, so the writers' batches land while the backup is written
    backing_up.set()
    manifest = backup.take(e.corpus, dest, on_table=lambda name, rows: time.sleep(0.06))
    ended = time.monotonic()
    for t in writers:
        t.join()
    during = [url for at, url in acked if began < at < ended]
    assert during, "no page was acknowledged while the backup was written: the drill did not overlap"
    assert len(acked) == 300

    assert backup.verify(dest)["complete"]
    new_dir = tmp_path / "restored"
    over = {"store": {"url": _new_database(request.getfixturevalue("postgres_uri"))}} if store_backend == "postgres" else {}
    report = backup.restore(dest, load_settings(data_dir=str(new_dir), **over), pool)
    assert report["backup_generation"] == manifest["generation"] == report["generation"]
    r = Engine(load_settings(data_dir=str(new_dir), **over), pool)
    try:
        restored = _chunks_per_page(r.store)
        assert before <= set(restored), "a page acknowledged before the backup began is missing"
        assert len(restored) == manifest["counts"]["pages"] < 6 + 300   # the snapshot, not what came after
        source = _chunks_per_page(e.store)
        assert {u: source[u] for u in restored} == restored   # every page whole: all its chunks or none
        # and no chunk or vector of a page the snapshot does not hold (each table read in the same snapshot)
        assert r.store.counts()["chunks"] == sum(restored.values())
        assert r.store.counts()["embeddings"][e.settings.models.active] == sum(restored.values())
        assert r.grant_for(f"Bearer {token}").everywhere   # the keys, hashed as stored, still open the door
        # the source at the backup's generation: what the backup missed forgotten, its indexes rebuilt
        for url in set(source) - set(restored):
            e.forget(url)
        e.reindex()
        for q in QUERIES:
            assert _urls(r, q) == _urls(e, q), q
    finally:
        r.close()


@pytest.fixture
def small(make_corpus):
    e = Engine(corpus=make_corpus(log={"enabled": False}))
    _ingest(e, demo_records(4))
    return e   # (make_corpus closes its corpus)


def test_a_backup_killed_midway_is_reported_incomplete_and_refused(tmp_path, small):
    data = small.corpus.data_dir
    small.corpus.close()
    env = {k: v for k, v in os.environ.items() if not k.startswith("REFINDERY_")}
    env.update(REFINDERY_DATA_DIR=str(data), REFINDERY_MODELS__CACHE_DIR=MODELS_CACHE,
               REFINDERY_TEST_CRASH_AT="backup:table")
    dest = tmp_path / "cut"
    run = subprocess.run([sys.executable, "-m", "server.cli", "backup", str(dest)], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == -9, run.stderr
    assert list((dest / "tables").iterdir())   # it had begun
    env.pop("REFINDERY_TEST_CRASH_AT")
    check = subprocess.run([sys.executable, "-m", "server.cli", "backup", "--verify", str(dest)], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=300)
    assert check.returncode == 1
    report = json.loads(check.stdout)
    assert not report["complete"] and any("cut short" in p for p in report["problems"])
    new_dir = tmp_path / "new"
    refused = subprocess.run([sys.executable, "-m", "server.cli", "restore", str(dest), "--data-dir", str(new_dir)],
                             cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert refused.returncode == 2 and "not whole" in refused.stderr and "Traceback" not in refused.stderr
    assert not new_dir.exists() and not list(tmp_path.glob(".new.restoring-*"))


def test_bad_input_is_a_clear_error_and_leaves_nothing_half_written(tmp_path, small, pool, capsys):
    full = tmp_path / "full"
    full.mkdir()
    (full / "mine.txt").write_text("not a backup")
    with pytest.raises(backup.BackupFailed, match="not an empty folder"):
        small.backup(full)
    assert [p.name for p in full.iterdir()] == ["mine.txt"]

    # a disk that fills up: this process may not write a file past 64 KiB while the backup runs
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, hard))
    try:
        with pytest.raises(backup.BackupNoSpace) as exc:
            small.backup(tmp_path / "nospace")
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    assert exc.value.status == 507 and "nothing of it was kept" in exc.value.title
    assert not (tmp_path / "nospace").exists()

    good = tmp_path / "good"
    small.backup(good)
    assert backup.verify(good)["complete"]
    m = json.loads((good / "manifest.json").read_text())
    chunks = good / m["tables"]["chunks"]["file"]
    raw = bytearray(chunks.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    chunks.write_bytes(bytes(raw))
    check = backup.verify(good)
    assert not check["complete"] and check["problems"] == [f"{m['tables']['chunks']['file']}: its SHA-256 is not the "
                                                           "manifest's (changed since the backup)"]
    target = tmp_path / "restored"
    with pytest.raises(backup.BackupIncomplete, match="SHA-256"):
        backup.restore(good, load_settings(data_dir=str(target)), pool)
    assert not target.exists() and not list(tmp_path.glob(".restored.restoring-*"))

    # a data dir that is not empty is never restored over
    used = tmp_path / "used"
    used.mkdir()
    (used / "refindery.duckdb").write_bytes(b"")
    fresh = tmp_path / "fresh"
    small.backup(fresh)
    with pytest.raises(backup.RestoreRefused, match="not an empty folder"):
        backup.restore(fresh, load_settings(data_dir=str(used)), pool)
    assert [p.name for p in used.iterdir()] == ["refindery.duckdb"]
    # the command line's restore of a whole backup: a data dir that opens, with the backup's pages
    from server.cli import main
    assert main(["restore", str(fresh), "--data-dir", str(tmp_path / "by-cli")]) == 0
    assert json.loads(capsys.readouterr().out)["counts"]["pages"] == 4


@pytest.mark.parametrize("store_backend", STORE_BACKENDS, indirect=True)
def test_an_export_read_back_by_ingest_gives_the_same_answers_and_the_log_comes_out_as_parquet(make_corpus, tmp_path,
                                                                                                pool, store_backend):
    import pyarrow.parquet as pq

    from engine.ingest.records import read_source

    e = Engine(corpus=make_corpus())
    _ingest(e, demo_records(6))
    for q in QUERIES[:3]:
        e.search(SearchRequest(query=q, k=5))
    out = e.export("pages", tmp_path / "pages.jsonl.gz")
    assert out["pages"] == 6
    with pytest.raises(Exception, match="exists"):
        e.export("pages", tmp_path / "pages.jsonl.gz")   # never over a file
    other = Engine(load_settings(data_dir=str(tmp_path / "other")), pool)
    try:
        report = other.ingest(read_source(str(tmp_path / "pages.jsonl.gz")), progress=False)
        assert not report.errors and other.counts()["pages"] == 6
        for q in QUERIES:
            assert _urls(other, q) == _urls(e, q), q
        pid = e.search(SearchRequest(query="sqlite", k=1)).pages[0].page_id
        assert other.store.page(pid)["url"] == e.store.page(pid)["url"]   # the same ids: workspace, URL, scope
    finally:
        other.close()
    log = e.export("log", tmp_path / "log")
    ran = [*QUERIES[:3], *QUERIES, "sqlite"]   # every search run on this corpus above
    assert log["tables"]["log_queries"]["rows"] == len(ran)
    queries = pq.read_table(tmp_path / "log" / "log_queries.parquet").to_pylist()
    assert sorted(r["query"] for r in queries) == sorted(ran)
    results = pq.read_table(tmp_path / "log" / "log_results.parquet")
    assert set(results.column("query_id").to_pylist()) <= {r["query_id"] for r in queries}
    assert e.export("log", tmp_path / "log-ws", workspace="default")["tables"]["log_queries"]["rows"] == len(ran)
    assert "log_queries" not in e.export("log", tmp_path / "log-none", workspace="elsewhere")["tables"]
    with pytest.raises(Exception, match="not an empty folder"):
        e.export("log", tmp_path / "log")


def test_a_relation_workspace_exported_and_loaded_elsewhere_gives_the_same_warrant(make_corpus, tmp_path, pool):
    from relations_helpers import c, export as warehouse, load_body, role, screening

    from engine.relations.loads import LoadRequest
    from engine.relations.search import RelationSearchRequest
    from engine.relations.workspaces import WorkspaceCreate

    e = Engine(corpus=make_corpus())
    src = warehouse(tmp_path / "warehouse.duckdb", ["ann", "bo", "cy", "dee", "eli"],
                    roles=[role("ann", function="Sales"), role("bo", function="Sales", geography="France"),
                           role("cy", function="Finance"), role(None, function="Sales")],
                    screenings=[screening("ann", outcome="passed"), screening("bo", outcome="failed")],
                    screened=["ann", "bo", "cy"])
    ws = e.create_relation_workspace(WorkspaceCreate(workspace_id="crew"))["workspace_id"]
    e.load(ws, LoadRequest.model_validate(load_body(src)), confined=False)
    asks = [[c("held_role", "function", "eq", "Sales")],
            [c("held_role", "function", "eq", "Sales"), c("screening", "outcome", "eq", "passed")],
            [c("held_role", "geography", "eq", "Germany"), c("screening", "outcome", "eq", "failed", required=False)]]

    def warrants(engine) -> list[tuple]:
        out = []
        for constraints in asks:
            r = engine.relation_search(RelationSearchRequest.model_validate({"workspace_id": "crew",
                                                                              "constraints": constraints}))
            r = r if isinstance(r, dict) else r.model_dump(mode="json")
            out.append((r["counts"], {k: sorted(v) for k, v in r["entities"].items()}))
        return out

    before = warrants(e)
    out = e.export("relations", tmp_path / "rel")
    assert out["workspaces"]["crew"]["rows"] == {"held_role": 4, "screening": 2}
    spec = json.loads((tmp_path / "rel" / "crew" / "load.json").read_text())
    packs = json.loads((tmp_path / "rel" / "crew" / "workspace.json").read_text())["packs"]
    other = Engine(load_settings(data_dir=str(tmp_path / "other")), pool)
    try:
        other.create_relation_workspace(WorkspaceCreate(workspace_id="crew", packs=packs))
        other.load("crew", LoadRequest.model_validate(spec), confined=False)
        assert warrants(other) == before
    finally:
        other.close()


def test_a_backup_written_inside_the_data_dir_leaves_itself_out(small):
    (small.corpus.data_dir / "dictionaries").mkdir()
    (small.corpus.data_dir / "dictionaries" / "terms.txt").write_text("zeppelin: airship\n")
    dest = small.corpus.data_dir / "dictionaries" / "nightly"
    small.backup(dest)
    m = json.loads((dest / "manifest.json").read_text())
    assert sorted(m["files"]) == ["files/dictionaries/terms.txt", "settings.json"]
    assert backup.verify(dest)["complete"]
