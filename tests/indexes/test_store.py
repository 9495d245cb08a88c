"""The corpus store behind one Protocol, on two databases: DuckDB (one process) and PostgreSQL (any
number of processes over one database, indexes/pg_store.py).

One scripted history of writes is applied to both, and every read verb must answer the same; then
what only several writers can do to a store: two of them posting the same pages at once, two opening
a fresh database at once (the schema migrated once), one refusing a schema newer than it knows."""
from __future__ import annotations

import inspect
import threading
import time
from datetime import datetime, timedelta

import numpy as np
import pytest

from indexes.pg_schema import LATEST, SchemaTooNew
from indexes.pg_store import PgCorpusStore, StoreUnavailable
from indexes.store import ChunkRow, CorpusStore, EntityRow, PageRow, PageWrite, Touch
from indexes.store_protocol import Store

T0 = datetime(2026, 3, 1, 12, 0, 0, 123456)
DIM = 8


def _vec(cid: int) -> np.ndarray:
    return np.random.default_rng(cid).standard_normal(DIM).astype(np.float32)


def _page(n: int, ws: str = "default", version: int = 0, first_chunk: int = 1, scope: str | None = None,
          entities: tuple[EntityRow, ...] = (), vectors: bool = True) -> PageWrite:
    pid = f"{ws}:p{n}"
    chunks = [ChunkRow(first_chunk + o, pid, o, f"text {n} {o} v{version} Ünïcode", o * 100, o * 100 + 90,
                       ["Guide", f"Part {o}"] if o else None, 5 + o) for o in range(1 + n % 3)]
    domain = "docs.ex.org" if n % 2 else "ex.org"
    page = PageRow(pid, ws, f"https://{domain}/Path/{n}", f"{domain}/Path/{n}", domain,
                   None if n % 4 == 0 else f"Title {n} v{version}", f"body {n}", f"h{n}.{version}",
                   T0, T0 + timedelta(days=n, microseconds=n), published=None if n % 2 else T0 - timedelta(days=3),
                   scope=scope)
    vecs = {"m": {c.chunk_id: _vec(c.chunk_id) for c in chunks}} if vectors else {}
    return PageWrite(page, chunks, vecs, list(entities))


def _history(store) -> list:
    """Every kind of write the product makes, in one order; returns the generations they reached."""
    gens = []
    for ws in ("default", "other"):
        store.ensure_workspace(ws)
    sqlite = EntityRow("e:sqlite", "default", "SQLite", ["sqlite3", "Lite"])
    mueller = EntityRow("e:mueller", "default", "Müller GmbH", ["MÜLLER", "mueller"], scope="hr")
    gens.append(store.apply([_page(n, first_chunk=10 * n, entities=(sqlite,) if n < 4 else ())
                             for n in range(1, 9)], []))
    gens.append(store.apply([_page(9, scope="hr", first_chunk=90, entities=(mueller,)),
                             _page(3, "other", first_chunk=300)], []))
    # a page rewritten: one chunk kept (its vector stays), one new; a re-visit; a delete
    w = _page(2, version=1, first_chunk=20)
    w.chunks[1] = ChunkRow(25, w.page.page_id, 1, "a new second chunk", 100, 180, ["New"], 4)
    w.vectors = {"m": {25: _vec(25)}}
    gens.append(store.apply([w], [Touch("default:p4", T0 + timedelta(days=40), 2)], deletes=["default:p5"]))
    gens.append(store.upsert_entity(EntityRow("e:sqlite", "default", "SQLite", ["SQLITE", "embedded db"]),
                                    ["default:p6"]))
    gens.append(store.upsert_entity(EntityRow("e:alpha", "default", "Alpha", ["α"]), ["default:p2"]))
    gens.append(store.replace_clusters("default", "m", {"default:p1": 7, "default:p2": 7, "default:p3": 8},
                                       {7: 2, 8: 1}))
    gens.append(store.quarantine({"default:p7": "too long"}, T0))
    store.add_embeddings("m2", [10, 20, 25, 999], np.stack([_vec(1), _vec(2), _vec(3), _vec(4)]))
    store.set_settings({"embedder": "m2", "switching_to": None})
    return gens


def _reads(store) -> dict:
    """Every read verb's answer, in comparable form."""
    ids = [10, 11, 20, 25, 30, 31, 32, 60, 90, 300, 999]
    pids = ["default:p1", "default:p2", "default:p4", "default:p5", "default:p9", "other:p3"]
    emb_ids, emb = store.embeddings_for("m")
    some_ids, some = store.embeddings_for("m", [25, 10, 77])
    hot = store.hot_read(None, None, 2**20)
    delta = store.hot_read(2, None, 2**20)
    docs = [d for batch in store.index_docs(batch=3) for d in batch]
    return {
        "generation": store.generation(), "schema": store.schema_version(), "workspaces": store.workspaces(),
        "setting": (store.setting("embedder"), store.setting("switching_to")),
        "existing": store.existing_pages(pids), "page": store.page("default:p2"), "page_none": store.page("nope"),
        "pages_by_id": store.pages_by_id(pids), "chunk_pages": store.chunk_pages(ids),
        "last_seen": store.last_seen_of(pids), "chunks_by_id": store.chunks_by_id(ids),
        "snippets": store.snippet_chunks(ids), "lead": store.lead_chunks(pids),
        "page_chunks": store.page_chunks("default:p2"),
        "docs": docs, "docs_some": [d for b in store.index_docs(["default:p2"]) for d in b],
        "docs_chunks": [d for b in store.index_docs(chunk_ids=[25, 90]) for d in b],
        "resolve": [store.resolve_entities("default", r) for r in ("sqlite", "EMBEDDED DB", "müller", "e:alpha", "x")],
        "resolve_scoped": store.resolve_entities("default", "mueller", scopes=["hr"]),
        "resolve_other_scope": store.resolve_entities("default", "mueller", scopes=[]),
        "filtered": [store.filtered_pages("default"), store.filtered_pages("default", domains=["ex.org"]),
                     store.filtered_pages("default", after=T0 + timedelta(days=3), before=T0 + timedelta(days=8)),
                     store.filtered_pages("default", cluster_ids=[7]), store.filtered_pages("default", entity_ids=["e:sqlite"]),
                     store.filtered_pages("default", scopes=["hr"]), store.filtered_pages("default", page_ids=pids)],
        "facets": store.facets("default"), "facets_scoped": store.facets("default", scopes=["hr"]),
        "doc_keys": store.entity_document_keys("default", ["sqlite", "Müller GmbH", "none"], None),
        "doc_keys_scoped": store.entity_document_keys("default", ["sqlite", "mueller"], ["hr"]),
        "entity_pages": store.entity_pages("default", "LITE", None, 12),
        "hot": (hot.generation, hot.changed, hot.pages, hot.links, _by_chunk_id(hot.chunks),
                hot.names, hot.texts, hot.last_seen_us.tolist()),
        "hot_delta": (delta.changed, delta.pages, delta.links),
        "ws_chunk_pages": store.workspace_chunk_pages("default"),
        "sample": store.sample_chunk_texts("default", 5), "ws_chunks": store.workspace_chunks("default"),
        "chunk_ids_of": store.chunk_ids_of_pages(pids).tolist(), "outline": store.page_outline("default"),
        "populated": store.workspaces_with_pages(),
        "pins": [store.pages_with_url("default", "ex.org/Path/2"), store.pages_of_domain("default", "ex.org", 10),
                 store.pages_of_domain("default", "ex.org", 10, subdomains=True),
                 store.pages_under_prefix("default", "EX.org/path", 10),
                 store.pages_under_prefix("default", "docs.ex.org/path/1", 10, scopes=[])],
        "entity_sets": store.page_entity_sets("default"), "next_cluster": store.next_cluster_id(),
        "clusters": [{k: v for k, v in c.items() if k not in ("created_at", "tombstoned_at")}
                     for c in store.clusters("default", include_tombstoned=True)],
        "clusters_scoped": [c["size"] for c in store.clusters("default", scopes=["hr"])],
        "entity": store.entity("e:sqlite"), "entity_scoped": store.entity("e:mueller"),
        "identity": {k: sorted(v) for k, v in store.identity_rows().items()},
        "embeddings": (emb_ids.tolist(), emb.tolist(), some_ids.tolist(), some.tolist()),
        "missing": store.chunks_missing_embeddings("m2"), "missing_1": store.chunks_missing_embeddings("m2", 1),
        "changed": store.changed_pages_since(3), "counts": store.counts(),
        "quarantined": {**store.quarantined(), "recent": [{k: v for k, v in r.items()}
                                                           for r in store.quarantined()["recent"]]},
        "embedding_ids": [x.tolist() if hasattr(x, "tolist") else x for x in store.embedding_ids("m")],
        "pruned": store.pruned_upto(),
    }


def _by_chunk_id(chunks: dict) -> dict:
    """A read's chunk columns in chunk id order (the view sorts them; the rows come in any order)."""
    order = np.argsort(chunks["chunk_id"], kind="stable")
    out = {k: [v[i] for i in order] for k, v in chunks.items() if k != "section_path"}
    if "section_path" in chunks:   # DuckDB hands a masked column (a NULL is masked), PostgreSQL None
        col = chunks["section_path"]
        mask = np.ma.getmaskarray(col)
        out["section_path"] = [None if mask[i] or np.ma.getdata(col)[i] is None else list(np.ma.getdata(col)[i])
                               for i in order]
    return out


def test_both_stores_offer_every_verb_of_the_protocol_with_the_same_signature():
    verbs = [n for n in dir(Store) if not n.startswith("_")]
    assert len(verbs) > 40
    for name in verbs:
        for cls in (CorpusStore, PgCorpusStore):
            assert hasattr(cls, name), f"{cls.__name__} lacks {name}"
            if callable(getattr(Store, name)):
                want = inspect.signature(getattr(Store, name))
                assert inspect.signature(getattr(cls, name)) == want, f"{cls.__name__}.{name}"


def test_one_history_of_writes_reads_back_the_same_from_duckdb_and_postgresql(tmp_path, postgres_url):
    duck = CorpusStore(tmp_path / "store.duckdb")
    pg = PgCorpusStore(postgres_url, scratch_dir=tmp_path)
    try:
        assert _history(duck) == _history(pg) == list(range(1, 8))
        a, b = _reads(duck), _reads(pg)
        for key in a:
            assert a[key] == b[key], key
        # the reads are not empty by accident: the history left what it wrote
        assert a["counts"] == {"pages": 8, "chunks": 14, "entities": 3, "embeddings": {"m": 14, "m2": 3},
                               "pages_per_workspace": {"default": 7, "other": 1}}
        assert a["resolve"][2] == ["e:mueller"] and a["resolve"][1] == ["e:sqlite"] and a["resolve_other_scope"] == []
        assert a["quarantined"]["pages"] == 1 and len(a["sample"]) == 5
        # drop a model and prune the change rows: both again alike
        assert duck.drop_embeddings("m2") == pg.drop_embeddings("m2") == 3
        duck.prune_changes(5)
        pg.prune_changes(5)
        a, b = _reads(duck), _reads(pg)
        assert a == b and a["pruned"] == 5 and a["hot_delta"][0] is None   # older than the pruned rows: whole
        # re-keying (a schema upgrade): a page renamed everywhere, the entities and links replaced
        ents = [EntityRow("e:sqlite", "default", "SQLite", ["sqlite3"]), EntityRow("e:new", "default", "New", [])]
        links = [("default:p1x", "e:sqlite"), ("default:p3", "e:new"), ("default:p3", "e:new")]
        assert duck.rekey({"default:p1": "default:p1x"}, ents, links, "3") == \
            pg.rekey({"default:p1": "default:p1x"}, ents, links, "3") == 8
        a, b = _reads(duck), _reads(pg)
        assert a == b and a["schema"] == "3" and a["counts"]["entities"] == 2
        # changed: the renamed page's two ids, and the pages whose links differ (p2, p6, p9 lost theirs)
        assert duck.changed_pages_since(7) == ["default:p1", "default:p1x", "default:p2", "default:p3",
                                               "default:p6", "default:p9"] == pg.changed_pages_since(7)
        assert duck.page_chunks("default:p1x") == pg.page_chunks("default:p1x") != []
    finally:
        duck.close()
        pg.close()


def test_a_rewritten_page_keeps_the_vectors_of_the_chunks_it_keeps(new_store):
    store = new_store()
    store.ensure_workspace("default")
    store.apply([_page(2, first_chunk=20)], [])
    w = _page(2, version=1, first_chunk=20, vectors=False)      # same chunk ids, new texts for none
    w.chunks = w.chunks[:1]                                      # one chunk fewer
    store.apply([w], [])
    ids, vecs = store.embeddings_for("m")
    assert ids.tolist() == [20] and np.array_equal(vecs[0], _vec(20))
    assert store.counts()["chunks"] == 1 and store.changed_pages_since(1) == ["default:p2"]


def test_two_writers_posting_the_same_pages_at_once_leave_one_of_each(new_store):
    """Two replicas (PostgreSQL: two stores over one database; DuckDB: two threads of its one process)
    post the same 200 pages, in batches, at the same time: 200 pages, each chunk once, one vector per
    chunk and model, and generations that never repeat."""
    a = new_store()
    b = new_store() if new_store.backend == "postgres" else a
    a.ensure_workspace("default")
    pages = [_page(n, first_chunk=10 * n) for n in range(1, 201)]
    gens: list[int] = []
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def post(store, order):
        try:
            start.wait()
            for i in range(0, len(order), 20):
                gens.append(store.apply(order[i:i + 20], []))
        except BaseException as exc:   # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=post, args=(a, pages)), threading.Thread(target=post, args=(b, pages[::-1]))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    counts = a.counts()
    n_chunks = sum(len(p.chunks) for p in pages)
    assert counts["pages"] == 200 and counts["chunks"] == n_chunks and counts["embeddings"] == {"m": n_chunks}
    assert len(a.embedding_ids("m")[0]) == len(set(a.embedding_ids("m")[0].tolist())) == n_chunks
    assert sorted(gens) == list(range(1, 21)) and a.generation() == b.generation() == 20


def test_add_embeddings_stores_one_vector_per_chunk_and_model_whoever_adds_it(new_store):
    a = new_store()
    b = new_store() if new_store.backend == "postgres" else a
    a.ensure_workspace("default")
    a.apply([_page(n, first_chunk=10 * n, vectors=False) for n in range(1, 4)], [])
    ids = [c for c, _ in a.chunks_missing_embeddings("m")]
    vecs = np.stack([_vec(c) for c in ids])
    landed = a.add_embeddings("m", ids, vecs)
    assert landed == ids and b.add_embeddings("m", ids, vecs) == []          # the second finds them there
    assert b.add_embeddings("m", [12345], vecs[:1]) == []                     # no such chunk: nothing lands
    assert a.counts()["embeddings"] == {"m": len(ids)} and a.generation() == 1


def test_two_processes_opening_a_fresh_postgresql_store_migrate_it_once(postgres_url, tmp_path):
    import psycopg
    stores, errors = [], []

    def open_one():
        try:
            stores.append(PgCorpusStore(postgres_url, scratch_dir=tmp_path))
        except BaseException as exc:   # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=open_one) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert not errors and len(stores) == 4
        assert sorted(s.migrated_from for s in stores) == [0, LATEST, LATEST, LATEST]
        with psycopg.connect(postgres_url) as con:
            assert con.execute("SELECT version FROM schema_migrations ORDER BY 1").fetchall() == \
                [(v,) for v in range(1, LATEST + 1)]
            assert con.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone() == ("0",)
    finally:
        for s in stores:
            s.close()


def test_a_postgresql_store_migrated_by_a_newer_refindery_is_refused(postgres_url, tmp_path):
    import psycopg
    PgCorpusStore(postgres_url, scratch_dir=tmp_path).close()
    with psycopg.connect(postgres_url, autocommit=True) as con:
        con.execute("INSERT INTO schema_migrations VALUES (%s, 'from the future', now())", [LATEST + 1])
    with pytest.raises(SchemaTooNew, match=f"version {LATEST + 1}, newer than this refindery knows"):
        PgCorpusStore(postgres_url, scratch_dir=tmp_path)


def test_a_postgresql_that_does_not_answer_is_a_typed_error(tmp_path):
    with pytest.raises(StoreUnavailable, match="cannot reach the store's PostgreSQL"):
        PgCorpusStore(f"postgresql://postgres@/postgres?host={tmp_path}", connect_timeout_s=2)


def test_followers_see_every_committed_generation_whichever_writer_wrote_it(new_store):
    """The change feed: a second store over the same data (PostgreSQL: another process's, as a replica
    has) is told each generation another one commits, in order; wait_for answers a write's token."""
    a = new_store()
    b = new_store() if new_store.backend == "postgres" else a
    a.ensure_workspace("default")
    seen: list[int] = []
    done = threading.Event()

    def follow(gen):
        seen.append(gen)
        if gen >= 3:
            done.set()
    b.on_generation(follow)
    assert not b.wait_for(1, 0.2)                         # nothing written: not there, after the timeout
    tokens = [a.apply([_page(n, first_chunk=10 * n)], []) for n in (1, 2, 3)]
    assert tokens == [1, 2, 3] and b.wait_for(3, 30)
    assert done.wait(30)
    assert [g for g in seen if g > 0] == sorted(set(g for g in seen if g > 0)) and seen[-1] == 3
    if new_store.backend == "duckdb":
        assert seen == [1, 2, 3]                           # one process: called after each commit


def test_a_postgresql_restart_is_a_typed_error_while_it_lasts_and_then_nothing_is_lost(tmp_path):
    """PostgreSQL stopped under a store: reads and writes fail with StoreUnavailable (nothing half
    written), and once it is back the same store reads, writes and follows again by itself."""
    from conftest import postgres_server
    server, uri = postgres_server(tmp_path / "pg")
    store = PgCorpusStore(uri, scratch_dir=tmp_path)
    try:
        store.ensure_workspace("default")
        seen: list[int] = []
        store.on_generation(seen.append)
        acked = [store.apply([_page(1, first_chunk=10)], [])]
        assert store.wait_for(acked[-1], 30)
        server.cleanup()                                   # stopped
        with pytest.raises(StoreUnavailable):
            store.apply([_page(2, first_chunk=20)], [])
        with pytest.raises(StoreUnavailable):
            store.counts()
        server, _ = postgres_server(tmp_path / "pg")       # back, same data
        acked.append(store.apply([_page(3, first_chunk=30)], []))
        assert acked == [1, 2]                             # the failed write took no generation
        assert store.counts()["pages"] == 2 and store.page("default:p2") is None
        assert store.wait_for(2, 30)
        deadline = time.monotonic() + 30
        while (not seen or seen[-1] < 2) and time.monotonic() < deadline:   # the follower reconnected
            time.sleep(0.05)
        assert seen[-1] == 2
    finally:
        store.close()
        server.cleanup()


def test_a_postgresql_store_holds_at_most_its_pool_of_connections_however_many_threads_read(postgres_url, tmp_path):
    """A replica's request threads share pool_size connections: the server's max_connections is
    shared by every replica, so a store must not open one per thread."""
    import psycopg
    store = PgCorpusStore(postgres_url, scratch_dir=tmp_path, pool_size=3)
    store.ensure_workspace("default")
    store.apply([_page(n, first_chunk=10 * n) for n in range(1, 6)], [])
    most, errors, stop = [0], [], threading.Event()

    def read():
        try:
            for _ in range(30):
                assert store.counts()["pages"] == 5 and store.pages_by_id(["default:p1"])
        except BaseException as exc:   # noqa: BLE001
            errors.append(exc)

    def sample():
        with psycopg.connect(postgres_url, autocommit=True) as con:
            while not stop.is_set():
                # client backends only: an autovacuum worker visiting the new database shows its name too
                n = con.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                                "AND backend_type = 'client backend' AND pid <> pg_backend_pid()").fetchone()[0]
                most[0] = max(most[0], n)
                time.sleep(0.005)
    sampler = threading.Thread(target=sample)
    sampler.start()
    readers = [threading.Thread(target=read) for _ in range(16)]
    try:
        for t in readers:
            t.start()
        for t in readers:
            t.join()
    finally:
        stop.set()
        sampler.join()
        store.close()
    assert not errors
    assert 2 <= most[0] <= 3 + 1          # the pool's 3, and the store's writer connection
