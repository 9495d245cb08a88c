"""Replicas of one PostgreSQL store in one process (engine/core/replica.py): each with a data dir of
its own, following every other's writes; the generation a reply carries and a request waits for
(server/generations.py). The same over real processes behind a balancer: tests/cluster/."""
from __future__ import annotations

from conftest import demo_records, index_ids, ingest, page

WAIT_S = 20.0


def _engine(pool, data_dir, url, **store):
    from engine.app import Engine
    from engine.core.settings import load_settings

    return Engine(load_settings(data_dir=str(data_dir), models={"device": "cpu"},
                                store={"url": url, **store}), pool)


def _urls(engine, query: str, k: int = 20) -> list[str]:
    from engine.refind.search import SearchRequest

    return [h.url for h in engine.search(SearchRequest(query=query, k=k), log=False).pages]


def _same_as_store(corpus) -> None:
    ids = index_ids(corpus)
    assert ids["sparse"] == ids["store"]
    for m in corpus.embedder_names:
        assert ids[f"dense:{m}"] == ids[f"vectors:{m}"] == ids["store"]


def test_each_replica_applies_every_others_writes_and_never_skips_one(pool, tmp_path, postgres_url):
    """Writes alternate between two replicas: each replica's indexes end with every page, whoever wrote
    it — the generations written by the other in between its own writes included (before replicas
    followed, a replica marked its indexes at its own write's generation and skipped the others')."""
    records = demo_records(12)
    with _engine(pool, tmp_path / "a", postgres_url) as a, _engine(pool, tmp_path / "b", postgres_url) as b:
        a.corpus.replica.stop()   # a's follower thread paused: only a's own writes bring b's in
        for n, rec in enumerate(records):
            ingest((a if n % 2 else b).corpus, [rec])
        gen = a.corpus.store.generation()
        _same_as_store(a.corpus)   # a wrote last: its write applied b's generations before its own
        assert a.corpus.applied == gen
        from engine.core.replica import Replica
        a.corpus.replica = Replica(a.corpus).start()
        assert b.wait_applied(gen, WAIT_S)
        for e in (a, b):
            _same_as_store(e.corpus)
            assert e.corpus.consistency()["sparse"]["generation"] == gen
        assert _urls(a, "python list comprehension") == _urls(b, "python list comprehension") != []

        # a rewrite through one (chunks kept, dropped and added) and a delete through the other
        first = records[0]
        ingest(a.corpus, [{**first, "body_text": first["body_text"] + "\n\nAn added paragraph about gannets.",
                           "seen_at": "2027-01-01T00:00:00Z"}])
        # (from the pages themselves: the change rows below every replica's generation may be pruned)
        gone = b.corpus.store.sql().rows("SELECT page_id FROM pages ORDER BY page_id LIMIT 1")[0][0]
        assert b.corpus.delete_page(gone)
        gen = b.corpus.store.generation()
        assert a.wait_applied(gen, WAIT_S) and b.wait_applied(gen, WAIT_S)
        for e in (a, b):
            _same_as_store(e.corpus)
            assert gone not in e.corpus.hot().page_rows([gone])
        # each has recorded what it applied in the store; the change rows are kept for the slowest
        replicas = {r["replica_id"]: r["applied"] for r in a.corpus.store.replicas()}
        assert set(replicas) == {a.corpus.replica.id, b.corpus.replica.id}


def test_change_rows_are_pruned_only_below_the_slowest_replica(pool, tmp_path, postgres_url):
    from engine.core.replica import Replica

    with _engine(pool, tmp_path / "a", postgres_url) as a:
        store = a.corpus.store
        store.report_applied("r-gone-for-an-hour", 0)   # a replica that has applied nothing yet
        ingest(a.corpus, [page("https://example.org/one", "Gannets dive from thirty metres.")])
        ingest(a.corpus, [page("https://example.org/two", "Terns hover, then plunge.")])
        a.flush()
        assert store.pruned_upto() == 0 and store.changed_pages_since(0)
        store.report_applied("r-gone-for-an-hour", store.generation())   # it caught up
        a.flush()
        assert store.pruned_upto() == store.generation() == a.corpus.applied
        assert isinstance(a.corpus.replica, Replica)


def test_a_replica_restarted_after_others_wrote_catches_up_from_the_change_rows(pool, tmp_path, postgres_url):
    records = demo_records(10)
    with _engine(pool, tmp_path / "a", postgres_url) as a:
        ingest(a.corpus, records[:4])
        with _engine(pool, tmp_path / "b", postgres_url) as b:
            assert b.wait_applied(a.corpus.store.generation(), WAIT_S)
        ingest(a.corpus, records[4:])         # b is down meanwhile
        with _engine(pool, tmp_path / "b", postgres_url) as b:
            assert b.corpus.applied == a.corpus.store.generation()
            _same_as_store(b.corpus)
            assert [r.action for r in b.corpus.repairs if r.index == "sparse"] == ["replayed"]


def test_a_reply_carries_the_generation_and_a_request_waits_for_the_one_it_sends(pool, tmp_path, postgres_url):
    """Read your writes on another replica: the write's Refindery-Generation sent back as
    Refindery-Min-Generation to the other finds the page; a generation no replica has is a 503
    not_caught_up after [store] catch_up_wait_s; a header that is not a number is a 422."""
    from fastapi.testclient import TestClient

    from server.app import create_app

    import threading
    import time

    from engine.core.replica import Replica

    a = _engine(pool, tmp_path / "a", postgres_url)
    b = _engine(pool, tmp_path / "b", postgres_url, catch_up_wait_s=WAIT_S)
    try:
        app_b = create_app(engine=b)
        with TestClient(create_app(engine=a)) as ca, TestClient(app_b) as cb:
            b.corpus.replica.stop()   # b's follower paused: b cannot have applied a's write when asked
            r = ca.post("/v1/pages", json={"pages": [page("https://example.org/gannets", "Gannets dive deep.")]})
            assert r.status_code == 200
            token = int(r.headers["refindery-generation"])
            assert token == a.corpus.store.generation() >= 1 and b.corpus.applied < token
            got: dict = {}
            asked = threading.Thread(target=lambda: got.update(r=cb.post(
                "/v1/search", json={"query": "gannets dive"}, headers={"Refindery-Min-Generation": str(token)})))
            asked.start()
            deadline = time.monotonic() + WAIT_S
            while app_b.state.waiters.count() < 1 and time.monotonic() < deadline:   # it waits ...
                time.sleep(0.01)
            assert app_b.state.waiters.count() == 1 and "r" not in got
            b.corpus.replica = Replica(b.corpus).start()   # ... until b's follower applies the write
            asked.join(WAIT_S)
            r = got["r"]
            assert r.status_code == 200 and [p["url"] for p in r.json()["pages"]] == ["https://example.org/gannets"]
            b.settings.store.catch_up_wait_s = 0.5
            assert int(r.headers["refindery-generation"]) >= token
            health = cb.get("/healthz").json()
            assert health["applied_generation"] >= token and health["replica"]["id"] == b.corpus.replica.id
            r = cb.post("/v1/search", json={"query": "gannets"}, headers={"Refindery-Min-Generation": str(token + 50)})
            assert r.status_code == 503 and r.headers["retry-after"] == "1"
            detail = r.json()["detail"]
            assert detail["type"] == "not_caught_up" and detail["min_generation"] == token + 50
            assert detail["applied_generation"] == token
            r = cb.post("/v1/search", json={"query": "gannets"}, headers={"Refindery-Min-Generation": "soon"})
            assert r.status_code == 422 and r.json()["detail"]["type"] == "validation_error"
    finally:
        a.close()
        b.close()


def test_with_the_duckdb_store_the_generation_is_what_was_committed(make_corpus):
    """One process over a DuckDB store applies its writes before it answers: the same header, and a
    request for a later generation than the store's is refused at once rather than waited for."""
    from fastapi.testclient import TestClient

    from server.app import create_app

    corpus = make_corpus()
    with TestClient(create_app(corpus=corpus)) as c:
        r = c.post("/v1/pages", json={"pages": [page("https://example.org/gannets", "Gannets dive deep.")]})
        token = int(r.headers["refindery-generation"])
        assert token == corpus.store.generation() and corpus.replica is None
        assert c.get("/healthz").json()["applied_generation"] == token and "replica" not in c.get("/healthz").json()
        assert c.post("/v1/search", json={"query": "gannets"},
                      headers={"Refindery-Min-Generation": str(token)}).status_code == 200
        assert c.post("/v1/search", json={"query": "gannets"},
                      headers={"Refindery-Min-Generation": str(token + 1)}).status_code == 503


def test_replicas_on_the_milvus_backend_keep_collections_of_their_own(pool, tmp_path, postgres_url, request):
    """With a fixed collection prefix (a deployment's), each replica's arms are still collections of
    its own, each holding every chunk: two replicas applying one write to one collection at once
    could leave a page twice (a sparse insert is not an upsert)."""
    from engine.app import Engine
    from engine.core.settings import load_settings
    from pymilvus import MilvusClient

    milvus = {"uri": request.getfixturevalue("milvus_uri"), "timeout_s": 20, "collection_prefix": "rf_shared"}

    def replica(name):
        return Engine(load_settings(data_dir=str(tmp_path / name), models={"device": "cpu"},
                                    store={"url": postgres_url}, index={"backend": "milvus"}, milvus=milvus), pool)

    with replica("a") as a, replica("b") as b:
        ingest(a.corpus, demo_records(6))
        assert b.wait_applied(a.corpus.store.generation(), WAIT_S)
        prefixes = {a.corpus.backend.prefix, b.corpus.backend.prefix}
        assert len(prefixes) == 2 and all(p.startswith("rf_shared_r") for p in prefixes)
        client = MilvusClient(uri=milvus["uri"])
        chunks = a.corpus.store.counts()["chunks"]
        for e in (a, b):
            name = f"{e.corpus.backend.prefix}_sparse"
            assert client.query(name, filter="chunk_id >= 0", output_fields=["count(*)"])[0]["count(*)"] == chunks
            assert e.corpus.consistency()["consistent"]
        assert _urls(a, "python list comprehension") == _urls(b, "python list comprehension") != []


def test_vectors_another_replica_embeds_in_the_background_reach_this_ones_index_without_a_write(
        pool, tmp_path, postgres_url):
    """A background embedding (a quality profile's catch-up, a model added) stores vectors without a
    new generation: the other replicas hear of it (a NOTIFY of its own) and take the vectors into the
    model's index — before, they waited for the next write, and a catch-up's chunks that another
    replica embedded first were never added to this one's index."""
    from engine.core.replica import VECTORS_EVERY_S

    second = "all-minilm-l6-v2-int8"
    with _engine(pool, tmp_path / "a", postgres_url) as a, _engine(pool, tmp_path / "b", postgres_url) as b:
        ingest(a.corpus, demo_records(4))
        assert b.wait_applied(a.corpus.store.generation(), WAIT_S)
        assert b.corpus.dense(second).count() == 0          # opened, nothing embedded yet
        gen = a.corpus.store.generation()
        done = a.corpus.embed_missing(second)
        stored = a.corpus.store.counts()["embeddings"][second]
        assert done == stored == a.corpus.store.counts()["chunks"] > 0
        from deploy.cluster import wait_until
        wait_until(lambda: b.corpus.dense(second).count() == stored, WAIT_S + VECTORS_EVERY_S,
                   "the second model's vectors in b's index")
        assert a.corpus.store.generation() == gen            # no write moved the generation
        ids = index_ids(b.corpus)
        assert sorted(int(i) for i in b.corpus.dense(second).ids()) == ids["store"]
