"""GET /metrics (server/metrics.py): Prometheus' text format, parsed by prometheus_client's own parser;
counts that follow what was asked; a key that may administer, or an address of its own."""
from __future__ import annotations

import httpx
import pytest
from conftest import loopback_up, page
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from engine.core.access import create_key
from server.app import create_app


def samples(text: str) -> dict[tuple, float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(parsed: dict, name: str, **labels) -> float:
    return parsed.get((name, tuple(sorted(labels.items()))), 0.0)


@pytest.fixture
def free_port() -> int:
    import socket

    loopback_up()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def served(make_corpus, free_port):
    corpus = make_corpus(server={"metrics_listen": f"127.0.0.1:{free_port}"})
    keys = {"admin": create_key(corpus.keys, ["*"])["token"],
            "reader": create_key(corpus.keys, ["default"], read_only=True)["token"],
            "one_workspace": create_key(corpus.keys, ["default"])["token"],
            "scoped": create_key(corpus.keys, ["*"], scopes=["alpha"])["token"]}
    with TestClient(create_app(corpus.settings, corpus)) as c:
        c.keys = keys
        yield c


def test_metrics_count_what_was_asked_and_only_an_administrator_reads_them(served, free_port):
    admin = {"Authorization": f"Bearer {served.keys['admin']}"}
    for i in range(5):
        r = served.post("/v1/pages", json={"pages": [page(f"https://m.example/{i}", f"Zeppelin note {i} on airships.")]},
                        headers=admin)
        assert r.status_code == 200, r.text
    for i in range(10):
        assert served.post("/v1/search", json={"query": f"zeppelin {i}"}, headers=admin).status_code == 200
    assert served.post("/v1/search", json={"query": "x"}).status_code == 401   # no key: counted as a 401

    r = served.get("/metrics", headers=admin)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    m = samples(r.text)
    assert value(m, "refindery_requests_total", method="POST", route="/v1/search", status="200") == 10
    assert value(m, "refindery_requests_total", method="POST", route="/v1/pages", status="200") == 5
    assert value(m, "refindery_requests_total", method="POST", route="/v1/search", status="401") == 1
    assert value(m, "refindery_request_duration_seconds_count", method="POST", route="/v1/search") == 11
    assert value(m, "refindery_search_stage_duration_seconds_count", stage="sparse") == 10
    assert value(m, "refindery_pages") == 5 and value(m, "refindery_chunks") >= 5
    assert value(m, "refindery_vectors", model="all-minilm-l6-v2") == value(m, "refindery_chunks")
    assert value(m, "refindery_generation_lag") == 0
    # a path no route has is one label, never the path typed
    served.get("/no/such/thing/123")
    m = samples(served.get("/metrics", headers=admin).text)
    assert value(m, "refindery_requests_total", method="GET", route="unmatched", status="404") == 1
    assert not [k for k in m if "/no/such" in str(k)]

    # a key that may not administer: 403; none: 401
    reader = served.get("/metrics", headers={"Authorization": f"Bearer {served.keys['reader']}"})
    assert reader.status_code == 403 and reader.json()["detail"]["type"] == "forbidden"
    for name in ("one_workspace", "scoped"):   # a key of one workspace, a key of one scope: not the server's
        r = served.get("/metrics", headers={"Authorization": f"Bearer {served.keys[name]}"})
        assert r.status_code == 403 and r.json()["detail"]["type"] == "forbidden", name
    assert served.get("/metrics").status_code == 401
    # the address of its own answers without a key, with the same counts
    own = httpx.get(f"http://127.0.0.1:{free_port}/metrics", timeout=10)
    assert own.status_code == 200
    assert value(samples(own.text), "refindery_requests_total", method="POST", route="/v1/search", status="200") == 10


def test_an_open_server_never_serves_its_metrics_on_the_api_address(make_corpus, free_port):
    """No keys yet: every route is open on loopback, but /metrics stays closed there (403 naming the two
    ways in); the address of their own still answers."""
    corpus = make_corpus(server={"metrics_listen": f"127.0.0.1:{free_port}"})
    with TestClient(create_app(corpus.settings, corpus)) as c:
        assert c.post("/v1/search", json={"query": "zeppelin"}).status_code == 200   # open: no key asked
        r = c.get("/metrics")
        assert r.status_code == 403 and r.json()["detail"]["type"] == "forbidden"
        assert "metrics_listen" in r.json()["detail"]["title"] and "keys create" in r.json()["detail"]["title"]
        own = httpx.get(f"http://127.0.0.1:{free_port}/metrics", timeout=10)
        assert own.status_code == 200
        assert value(samples(own.text), "refindery_requests_total", method="POST", route="/v1/search",
                     status="200") == 1

