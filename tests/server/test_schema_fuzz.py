"""Schemathesis against the app's own OpenAPI schema: generated requests for every operation (a
few examples each, to stay inside CI's budget) must get no 5xx and replies that match the schema
(status codes documented, bodies of the documented shape). The server runs with keys, as a shared
server would, and the fuzzer holds a key for every workspace."""
from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.specs.openapi.checks import (content_type_conformance, response_headers_conformance,
                                               response_schema_conformance, status_code_conformance)


CAPABILITY_REFUSALS = {"model_unavailable", "reranker_unavailable", "compile_unavailable"}


@schemathesis.check
def no_server_error(ctx, response, case):
    """No 5xx — but a 503 refusing a capability this server has not got (no reranker trained, no brief
    compiler configured) is the documented answer, not a server error."""
    if response.status_code < 500:
        return None
    try:
        body = response.json()
    except Exception:
        body = {}
    kind = (body.get("detail") if isinstance(body.get("detail"), dict) else body).get("type")
    assert response.status_code == 503 and kind in CAPABILITY_REFUSALS, \
        f"server error {response.status_code}: {response.text[:400]}"
    return None


# No 5xx (as above), documented status codes, bodies and headers of the documented shape, the
# documented content type. Not "schema-valid data is accepted": a well-formed request can still name
# a pack or a model that does not exist, which is a 404/422 refusal by design.
CHECKS = [no_server_error, status_code_conformance, response_schema_conformance, content_type_conformance,
          response_headers_conformance]


@pytest.fixture(scope="module")
def fuzz_client(pool, tmp_path_factory):
    from docs.examples import make_client
    from docs.examples.roster import roster
    from engine.core.access import create_key
    from engine.ingest.pipeline import Ingester
    from tests.conftest import demo_records

    client = make_client(tmp_path_factory.mktemp("fuzz") / "data", pool=pool)
    Ingester(client.corpus, "default", progress=False).ingest((i, "demo", r) for i, r in enumerate(demo_records(12), start=1))
    client.corpus.sync()
    roster(client)
    client.token = create_key(client.corpus.keys, ["*"], name="fuzzer")["token"]
    yield client
    client.corpus.close()


def test_no_server_error_and_replies_match_the_schema(fuzz_client):
    """Every operation of the schema, a few generated requests each (Hypothesis through schemathesis's
    strategies; driven by hand, as schemathesis's pytest plugin does not load under this pytest)."""
    schema = schemathesis.openapi.from_asgi("/openapi.json", fuzz_client.app)
    headers = {"Authorization": f"Bearer {fuzz_client.token}"}
    failures, ran = {}, []
    for result in schema.get_all_operations():
        op = result.ok()

        @given(case=op.as_strategy())
        @settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True,
                  database=None)
        def check(case):
            case.call_and_validate(headers=headers, checks=CHECKS)

        try:
            check()
        except BaseException as exc:  # noqa: B036 — one entry per failing operation: the list is the report
            if isinstance(exc, KeyboardInterrupt):
                raise
            failures[f"{op.method.upper()} {op.path}"] = str(exc).splitlines()[:30]
        ran.append(op.path)
    assert {"/v1/search", "/v1/compare", "/v1/pages", "/v1/public/search", "/v1/evidence", "/v1/keys"} <= set(ran)
    assert not failures, "\n\n".join(f"{k}:\n" + "\n".join(v) for k, v in failures.items())
