"""One truth across replicas (issue 70, rows 2 and 3), in one process over one PostgreSQL: the
shortcuts' choices, a live switch and a drop, each made through one replica, hold on the other within
the generation its reply carries. (The same through real processes behind Caddy: tests/cluster/.)
Before the fix, each replica's shortcuts were a cache of its own, the switch was read from the store
once at open, and a drop through one replica deleted the vectors another still served."""
from __future__ import annotations

import time

import pytest
from fastapi.testclient import TestClient

from conftest import demo_records, ingest, page
from server.app import create_app

WAIT_S = 30.0
BIRDS = [
    page("https://birds.example/gannet", "Gannets dive into the sea from great heights to catch fish."),
    page("https://birds.example/puffin", "Puffins dive underwater to catch small fish and nest in burrows."),
    page("https://birds.example/tern", "Terns dive for fish near the shore and migrate from pole to pole."),
]
QUERY, CLOSE = "seabirds that dive for fish", "seabirds diving for fish"


def _replica(pool, data_dir, url, **models):
    from engine.app import Engine
    from engine.core.settings import load_settings

    return Engine(load_settings(data_dir=str(data_dir), models={"device": "cpu", **models},
                                store={"url": url, "catch_up_wait_s": WAIT_S}), pool)


@pytest.fixture
def pair(pool, tmp_path, postgres_url):
    a = _replica(pool, tmp_path / "a", postgres_url)
    b = _replica(pool, tmp_path / "b", postgres_url)
    assert a.corpus.store.kind == b.corpus.store.kind == "postgres"
    try:
        with TestClient(create_app(engine=a)) as ca, TestClient(create_app(engine=b)) as cb:
            yield a, b, ca, cb
    finally:
        a.close()
        b.close()


def _urls(reply) -> list[str]:
    return [p["url"] for p in reply["pages"]]


def test_a_choice_and_its_clearing_through_one_replica_hold_on_the_other(pair):
    a, b, ca, cb = pair
    r = ca.post("/v1/pages", json={"pages": BIRDS})
    gen = {"Refindery-Min-Generation": r.headers["refindery-generation"]}
    first = cb.post("/v1/search", json={"query": CLOSE}, headers=gen).json()   # b's cache of the choices: none
    assert first["pages"]
    before = ca.post("/v1/search", json={"query": QUERY}).json()
    target = _urls(before)[-1]
    assert _urls(first)[0] != target
    pid = next(p["page_id"] for p in before["pages"] if p["url"] == target)
    r = ca.post("/v1/feedback", json={"query_id": before["query_id"], "page_id": pid, "kind": "found"})
    assert r.status_code == 200
    gen = {"Refindery-Min-Generation": r.headers["refindery-generation"]}
    after = cb.post("/v1/search", json={"query": CLOSE, "explain": True}, headers=gen).json()
    assert _urls(after)[0] == target, "the choice made through a did not reach b"
    assert [c["page_id"] for c in cb.get("/v1/feedback").json()["choices"]] == [pid]

    r = ca.delete("/v1/feedback")
    gen = {"Refindery-Min-Generation": r.headers["refindery-generation"]}
    assert _urls(cb.post("/v1/search", json={"query": CLOSE}, headers=gen).json())[0] != target
    assert cb.get("/v1/feedback").json()["choices"] == []

    # a page deleted through a and posted again at its URL is not lifted by the old choice on b
    choice = ca.post("/v1/search", json={"query": QUERY}).json()
    ca.post("/v1/feedback", json={"query_id": choice["query_id"], "page_id": pid, "kind": "found"})
    assert cb.post("/v1/search", json={"query": CLOSE}, headers={
        "Refindery-Min-Generation": str(a.corpus.store.generation())}).json()["pages"][0]["url"] == target
    r = ca.delete(f"/v1/pages/{pid}")
    assert r.status_code == 200, r.text
    r = ca.post("/v1/pages", json={"pages": [p for p in BIRDS if p["url"] == target]})
    gen = {"Refindery-Min-Generation": r.headers["refindery-generation"]}
    again = cb.post("/v1/search", json={"query": CLOSE, "explain": True}, headers=gen).json()
    assert not again["pages"][0].get("explain", {}).get("shortcut"), again["pages"][0]
    assert cb.get("/v1/feedback").json()["choices"] == []


def _wait(check, what: str, timeout: float = 240.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    pytest.fail(f"waited {timeout:g} s for {what}")


def test_a_switch_and_a_drop_through_one_replica_are_every_replicas(pool, int8_pool, tmp_path, postgres_url):
    """Switch through a: b follows (its embedder, and the pages it wrote meanwhile get the new model's
    vectors); a drop of the old model through b is refused while a replica uses it, and a drop of the
    switch's target through b is refused while the switch is under way; two switches at once: one wins."""
    from engine.core.errors import ModelInUse

    a = _replica(int8_pool, tmp_path / "a", postgres_url)
    b = _replica(int8_pool, tmp_path / "b", postgres_url)
    old, new = a.settings.models.active, "all-minilm-l6-v2-int8"
    try:
        ingest(a.corpus, demo_records(6))
        a.switch_model(new)
        with pytest.raises(ModelInUse, match="under way"):   # the store holds the switch: b cannot begin another
            b.switch_model(new)
        _wait(lambda: b.settings.switch_target == new, "b following the switch under way")
        with pytest.raises(ModelInUse):
            b.drop_model(new)                                # the target of a switch under way
        ingest(b.corpus, [page("https://example.org/during", "Written through b during the switch.")])
        _wait(lambda: a.settings.models.active == new, "a swapping in the new embedder")
        _wait(lambda: b.settings.models.active == new, "b following the swap")
        # b's pages (those written during the switch too) all get a vector of the new embedder
        _wait(lambda: not b.corpus.store.chunks_missing_embeddings(new, limit=1), "every chunk's new vector")
        ingest(b.corpus, [page("https://example.org/after", "Written through b after the swap.")])
        assert not b.corpus.store.chunks_missing_embeddings(new, limit=1)   # encoded on b's write path now
        assert b.switch_status()["active"] == a.switch_status()["active"] == new
        out = b.drop_model(old)
        assert out["dropped_vectors"] > 0 and b.corpus.store.counts()["embeddings"].get(old, 0) == 0
    finally:
        a.close()
        b.close()


def test_two_switches_at_the_same_moment_one_wins(tmp_path, int8_pool):
    """The switch is claimed in the store: two callers at once (here, the second after the first's
    check but before its write would have been) get one 202 and one 409."""
    import threading

    from engine.app import Engine
    from engine.core.errors import ModelInUse
    from engine.core.settings import load_settings

    with Engine(load_settings(data_dir=str(tmp_path / "d"), models={"device": "cpu"}), int8_pool) as e:
        ingest(e.corpus, demo_records(20))   # a switch that cannot end before the second call
        results: list = []
        barrier = threading.Barrier(2)

        def go():
            barrier.wait()
            try:
                e.switch_model("all-minilm-l6-v2-int8")
                results.append("accepted")
            except ModelInUse as exc:
                results.append(type(exc).__name__)

        threads = [threading.Thread(target=go) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert sorted(results) == ["ModelInUse", "accepted"], results
