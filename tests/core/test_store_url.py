"""`[store] url`: the engine's corpus store in PostgreSQL — the same pages searched alike as with the
DuckDB file, the relation tables in a DuckDB file of their own beside it, any number of processes
(replicas) over one store, each with a data dir of its own, and one process a data dir."""
from __future__ import annotations

from datetime import datetime

import pytest
from conftest import demo_records, ingest

QUERIES = ["how do I pretty-print JSON", "python list comprehension", "sqlite transactions and locking"]


def _engine(pool, data_dir, **store):
    from engine.app import Engine
    from engine.core.settings import load_settings

    return Engine(load_settings(data_dir=str(data_dir), models={"device": "cpu"}, store=store), pool)


def _rankings(engine) -> dict:
    from engine.refind.search import SearchRequest

    return {q: [(h.url, round(h.score, 6)) for h in engine.search(SearchRequest(query=q, k=8), log=False).pages]
            for q in QUERIES}


def test_the_same_pages_search_alike_with_the_store_in_duckdb_or_postgresql(pool, tmp_path, postgres_url):
    from engine.app import DataDirBusy

    records = demo_records(20)
    with _engine(pool, tmp_path / "duck") as duck:
        ingest(duck.corpus, records)
        want, want_counts = _rankings(duck), duck.corpus.store.counts()
    with _engine(pool, tmp_path / "pg", url=postgres_url) as pg:
        assert type(pg.corpus.store).__name__ == "PgCorpusStore"
        ingest(pg.corpus, records)
        assert _rankings(pg) == want and pg.corpus.store.counts() == want_counts
        assert all(want.values())
        # relation tables: a file of their own in the data dir; the workspace row in PostgreSQL
        pg.corpus.relations.create_workspace("team", "Team", ["people"], datetime(2026, 12, 6))
        assert pg.corpus.relations.workspace("team")["packs"] == ["people"]
        assert "team" in pg.corpus.store.workspaces() and (tmp_path / "pg" / "relations.duckdb").exists()
        assert not (tmp_path / "pg" / "refindery.duckdb").exists()
        # a second process on the same data dir is refused, in one line that says why ...
        with pytest.raises(DataDirBusy, match=r"data dir .*pg is in use by process \d+"):
            _engine(pool, tmp_path / "pg", url=postgres_url)
        # ... and one with a data dir of its own is a replica: its indexes built from the store
        with _engine(pool, tmp_path / "pg-second", url=postgres_url) as second:
            assert _rankings(second) == want and second.corpus.applied == pg.corpus.applied
    # closed: the store is free again, and everything written is there
    with _engine(pool, tmp_path / "pg", url=postgres_url) as again:
        assert _rankings(again) == want and again.corpus.relations.workspace("team") is not None


def test_a_store_url_that_is_not_postgresql_is_refused_by_the_settings(tmp_path):
    from pydantic import ValidationError

    from engine.core.settings import load_settings

    with pytest.raises(ValidationError, match="store.url"):
        load_settings(data_dir=str(tmp_path), store={"url": "mysql://db/refindery"})


def test_while_postgresql_restarts_requests_get_a_typed_503_and_then_succeed_again(pool, tmp_path):
    """The server's store stopped under it: a search and a write are answered 503 store_unavailable
    (Retry-After: 1), nothing else breaks, and once PostgreSQL is back the same app answers again and
    the write sent again lands once."""
    from urllib.parse import urlsplit, urlunsplit

    import psycopg
    from conftest import postgres_server
    from fastapi.testclient import TestClient

    from engine.refind.search import SearchRequest
    from server.app import create_app

    server, uri = postgres_server(tmp_path / "pg")
    with psycopg.connect(uri, autocommit=True) as con:
        con.execute("CREATE DATABASE rf")
    url = urlunsplit(urlsplit(uri)._replace(path="/rf"))
    engine = _engine(pool, tmp_path / "data", url=url, connect_timeout_s=2)
    from conftest import page
    body = {"pages": [page("https://example.org/gannets", "Gannets dive from thirty metres.")]}
    terns = {"pages": [page("https://example.org/terns", "Terns hover, then plunge.")]}
    try:
        with TestClient(create_app(engine=engine)) as client:
            assert client.post("/v1/pages", json=body).status_code == 200
            assert client.post("/v1/search", json={"query": "gannets dive"}).json()["pages"]
            server.cleanup()                                        # stopped
            for r in (client.post("/v1/search", json={"query": "gannets dive"}),
                      client.post("/v1/pages", json=terns)):
                assert r.status_code == 503 and r.json()["detail"]["type"] == "store_unavailable", r.text
                assert r.headers["retry-after"] == "1"
            server, _ = postgres_server(tmp_path / "pg")             # back
            r = client.post("/v1/pages", json=terns)
            assert r.status_code == 200, r.text
            hits = client.post("/v1/search", json={"query": "terns plunge"}).json()["pages"]
            assert hits and hits[0]["url"] == "https://example.org/terns"
            assert engine.corpus.store.counts()["pages"] == 2
            # a replica opened after the restart finds both pages
            with _engine(pool, tmp_path / "second", url=url) as second:
                assert [h.url for h in second.search(SearchRequest(query="terns plunge"), log=False).pages][0] \
                    == "https://example.org/terns"
    finally:
        engine.close()
        server.cleanup()
