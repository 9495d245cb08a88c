"""The Python client's models (clients/python: refindery.client.models) and the server's OpenAPI schema
agree: every client model names a schema of the server's, with exactly its fields and its required ones —
a field added, removed or renamed on either side fails here. (The client's own suite, in a venv without
the engine, runs against a real server: clients/python/tests, from `make test`.)"""
from __future__ import annotations

import inspect

import pytest

from refindery.client import models


@pytest.fixture(scope="module")
def openapi(tmp_path_factory):
    from docs.examples import make_client

    client = make_client(tmp_path_factory.mktemp("client-schema") / "data")
    yield client.app.openapi()
    client.corpus.close()


# Replies the server describes as plain objects (no schema of their own): nothing to compare them with.
UNTYPED = {"Page", "SimilarResponse", "RelationSearchResponse", "FactsResponse"}
SCHEMA_MODELS = [c for _, c in inspect.getmembers(models, inspect.isclass)
                 if issubclass(c, (models.Request, models.Reply)) and c not in (models.Request, models.Reply)
                 and c.__name__ not in UNTYPED]


def test_every_client_model_is_compared(openapi):
    """A client model is compared field by field with the server's schema of its name, or the server
    has no schema of that name (it answers a plain object): listing a model as untyped cannot hide
    one the server does describe, and no untyped name is stale."""
    server = set(openapi["components"]["schemas"])
    client = {c.__name__ for _, c in inspect.getmembers(models, inspect.isclass)
              if issubclass(c, (models.Request, models.Reply))} - {"Request", "Reply"}
    assert UNTYPED <= client, UNTYPED - client
    assert not UNTYPED & server, f"the server describes {UNTYPED & server}: compare them, do not list them untyped"
    assert {c.__name__ for c in SCHEMA_MODELS} == client - UNTYPED
    assert client - UNTYPED <= server, (client - UNTYPED) - server
    assert {"SearchRequest", "SearchResponse", "PageHit", "EvidenceRequest", "UpsertResponse"} <= client - UNTYPED


@pytest.mark.parametrize("model", SCHEMA_MODELS, ids=lambda c: c.__name__)
def test_the_client_model_has_exactly_the_servers_fields(openapi, model):
    schema = openapi["components"]["schemas"].get(model.__name__)
    assert schema is not None, f"the server's OpenAPI schema has no {model.__name__}"
    server_fields = set(schema.get("properties", {}))
    assert set(model.model_fields) == server_fields, (
        f"{model.__name__}: client only {set(model.model_fields) - server_fields}, "
        f"server only {server_fields - set(model.model_fields)}")
    client_required = {n for n, f in model.model_fields.items() if f.is_required()}
    assert client_required == set(schema.get("required", [])), model.__name__


def test_every_client_operation_reaches_the_route_it_names_on_a_real_server(pool, tmp_path):
    """Every operation of the client, called against a real server (uvicorn on a Unix socket): the
    server's own access log shows each reaching the route it names, with its method, answered (a
    misspelt path is a 404 on no route, a wrong method a 405). Every public operation is called."""
    from conftest import served_on_socket
    from docs.examples import make_client
    from docs.examples.roster import roster
    from refindery.client import Client
    from refindery.client.sync import _Operations

    app_client = make_client(tmp_path / "data", pool, models={"also_embed": ["all-minilm-l6-v2-int8"]})
    corpus = app_client.corpus
    ws = roster(app_client).workspace_id
    sock = tmp_path / "refindery.sock"
    with served_on_socket(app_client.app, sock), Client("http://refindery", uds=str(sock)) as rf:
        up = rf.upsert_pages([{"url": "https://a.example/gannets", "body_text": "Gannets dive for fish."},
                              {"url": "https://a.example/puffins", "body_text": "Puffins nest in burrows."}])
        pid = up.items[0].page_id
        res = rf.search("gannets", k=2)
        calls = {
            "upsert_pages": lambda: up,
            "search": lambda: res,
            "compare": lambda: rf.compare("gannets", ["all-minilm-l6-v2", "all-minilm-l6-v2-int8"], k=2),
            "feedback": lambda: rf.feedback(res.query_id, pid, "found"),
            "choices": rf.choices,
            "clear_feedback": lambda: rf.clear_feedback(query_id=res.query_id),
            "get_page": lambda: rf.get_page(pid),
            "similar": lambda: rf.similar(pid, k=1),
            "relation_search": lambda: rf.relation_search(ws, constraints=[
                {"relation": "held_role", "slot": "function", "op": "eq", "value": "Sales"}]),
            "relation_workspaces": rf.relation_workspaces,
            "facts": lambda: rf.facts(workspace_id=ws, entity_id="yusuf_alderane", relation="held_role"),
            "evidence": lambda: rf.evidence("gannets diving", session_id="routes"),
            "read_packet": lambda: rf.read_packet("routes"),
            "start_import": lambda: rf.start_import("history", "/home/me/History", [
                {"url": "https://a.example/terns", "title": "Terns", "visits": ["2026-11-01T10:00:00Z"]}],
                fetch=False),
            "import_status": rf.import_status,
            "forget": lambda: rf.forget("https://a.example/nothing-here"),
            "request": lambda: rf.request("GET", "/v1/models"),
            "status": rf.status,
            "health": rf.health,
            "delete_page": lambda: rf.delete_page(up.items[1].page_id),
        }
        public = {n for n, f in inspect.getmembers(_Operations, inspect.isfunction) if not n.startswith("_")}
        assert set(calls) == public, public ^ set(calls)
        got = {name: call() for name, call in calls.items()}
        assert all(v is not None for v in got.values())
        # the health check is not an access-logged call: its answer is the server's own
        # (but for the generation applied, which the delete_page after it moved on)
        health = app_client.get("/healthz").json()
        assert got["health"].pop("applied_generation") == health.pop("applied_generation") - 1
        assert got["health"] == health
        facts = rf.facts(workspace_id=ws, entity_id="yusuf_alderane", relation="held_role")
        assert facts.model_dump()    # the reply read as the client's model
    corpus.querylog.flush()
    seen = {(m, r): st for m, r, st in corpus.store.sql().rows(
        "SELECT method, route, max(status) FROM log_access GROUP BY 1, 2")}
    corpus.close()
    for method, route in [("POST", "/v1/search"), ("POST", "/v1/compare"), ("POST", "/v1/feedback"),
                          ("GET", "/v1/feedback"), ("DELETE", "/v1/feedback"),
                          ("POST", "/v1/pages"), ("GET", "/v1/pages/{page_id}"), ("DELETE", "/v1/pages/{page_id}"),
                          ("GET", "/v1/pages/{page_id}/similar"), ("POST", "/v1/public/search"),
                          ("GET", "/v1/public/workspaces"), ("POST", "/v1/public/facts"), ("POST", "/v1/evidence"),
                          ("GET", "/v1/evidence/packets/{session_id}"), ("GET", "/v1/models"), ("GET", "/v1/status")]:
        assert (method, route) in seen, (method, route, sorted(seen))
        assert seen[(method, route)] < 400, (method, route, seen[(method, route)])
