"""The server's log (server/request_log.py): one line per request, under the id its reply carries as
X-Request-Id; JSON when asked; a failure's traceback under that id; an API key never written."""
from __future__ import annotations

import json
import logging

from conftest import page
from fastapi.testclient import TestClient

from engine.core.access import create_key
from server.app import create_app
from server.request_log import JsonFormatter, TextFormatter


def test_each_request_is_one_line_under_its_id_and_no_key_or_text_is_written(make_corpus, caplog):
    corpus = make_corpus()
    key = create_key(corpus.keys, ["*"])
    token = key["token"]
    caplog.set_level(logging.INFO, logger="refindery.requests")
    with TestClient(create_app(corpus.settings, corpus)) as c:
        r = c.post("/v1/pages", json={"pages": [page("https://l.example/a", "Secret zeppelin minutes.")]},
                   headers={"Authorization": f"Bearer {token}"})
        assert r.status_code == 200
        bad = c.post("/v1/search", json={"query": "zeppelin minutes"}, headers={"Authorization": f"Bearer {token}x"})
        health = c.get("/healthz")
    lines = [rec for rec in caplog.records if rec.name == "refindery.requests"]
    assert [(rec.request["method"], rec.request["route"], rec.request["status"]) for rec in lines] == [
        ("POST", "/v1/pages", 200), ("POST", "/v1/search", 401), ("GET", "/healthz", 200)]
    assert [rec.request["request_id"] for rec in lines] == [r.headers["x-request-id"], bad.headers["x-request-id"],
                                                          health.headers["x-request-id"]]
    assert lines[0].request["key_id"] == key["key_id"] and lines[1].request["key_id"] is None
    as_json = [json.loads(JsonFormatter().format(rec)) for rec in lines]
    assert as_json[1]["status"] == 401 and as_json[1]["route"] == "/v1/search" and as_json[1]["level"] == "info"
    written = "\n".join(TextFormatter().format(rec) for rec in lines) + json.dumps(as_json)
    assert "zeppelin" not in written.lower() and token not in written


def test_a_failure_is_logged_with_its_traceback_and_a_quoted_key_is_blanked():
    token = "rfy_0123456789ab_" + "K" * 43
    try:
        raise RuntimeError(f"the store refused {token}")
    except RuntimeError:
        import sys
        rec = logging.LogRecord("refindery.server", logging.ERROR, __file__, 1, "internal error in %s (request %s)",
                                ("POST /v1/search", "req_00ff"), sys.exc_info())
    out = json.loads(JsonFormatter().format(rec))
    assert out["message"] == "internal error in POST /v1/search (request req_00ff)"
    assert "RuntimeError" in out["traceback"] and "Traceback" in out["traceback"]
    assert token not in json.dumps(out) and "rfy_<key>" in out["traceback"]
    assert token not in TextFormatter().format(rec)
