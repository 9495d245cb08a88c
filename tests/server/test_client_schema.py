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


def test_every_client_model_is_compared():
    names = {c.__name__ for c in SCHEMA_MODELS}
    assert names | UNTYPED == {c.__name__ for _, c in inspect.getmembers(models, inspect.isclass)
                               if issubclass(c, (models.Request, models.Reply))} - {"Request", "Reply"}
    assert {"SearchRequest", "SearchResponse", "PageHit", "EvidenceRequest", "UpsertResponse"} <= names


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


def test_the_client_covers_the_routes_it_names(openapi):
    """Each path the client calls is one the server serves, with the method it uses."""
    from refindery.client.sync import _Operations

    src = inspect.getsource(_Operations)
    paths = openapi["paths"]
    for method, path in [("post", "/v1/search"), ("post", "/v1/compare"), ("post", "/v1/feedback"),
                         ("post", "/v1/pages"), ("get", "/v1/pages/{page_id}"), ("delete", "/v1/pages/{page_id}"),
                         ("get", "/v1/pages/{page_id}/similar"), ("post", "/v1/public/search"),
                         ("post", "/v1/public/facts"), ("post", "/v1/evidence"),
                         ("get", "/v1/evidence/packets/{session_id}"), ("get", "/v1/status"), ("get", "/healthz")]:
        assert method in paths[path], (method, path)
        assert f'"{method.upper()}", ' in src and path.split("{")[0].rstrip("/") in src, (method, path)
