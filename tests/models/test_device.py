"""A configured device this host has not got (`models.device = "cuda:99"`; here, with torch's CPU
build, plain "cuda" too): a typed 503 `device_unavailable` wherever a model is needed — search,
ingest, compare, evidence, a criterion — over HTTP and MCP, one line in the CLI; the server starts
and everything that needs no model answers; status and the models list say why. And bench/gpu.py,
on a host with no CUDA, says so and exits cleanly."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from fastapi.testclient import TestClient

ROOT = Path(__file__).resolve().parents[2]
MISSING = ["cuda:99"] + ([] if torch.cuda.is_available() else ["cuda"])


@pytest.fixture(scope="module", params=MISSING)
def on_missing_device(request, tmp_path_factory):
    from engine.core.corpus import open_corpus
    from engine.core.settings import load_settings
    from server.app import create_app

    settings = load_settings(data_dir=str(tmp_path_factory.mktemp("device")), models={"device": request.param})
    corpus = open_corpus(settings)                  # its own pool, on the device it is told
    with TestClient(create_app(settings, corpus)) as client:   # the lifespan loads the model: it must not fail
        client.corpus = corpus
        yield request.param, client
    corpus.close()


def refused(r, device):
    assert r.status_code == 503, r.text
    detail = r.json()["detail"]
    assert detail["type"] == "device_unavailable" and detail["device"] == device
    assert f"device {device!r} asked for" in detail["title"] and 'models.device = "auto" or "cpu"' in detail["title"]


def test_every_verb_that_needs_a_model_is_a_typed_503(on_missing_device):
    device, client = on_missing_device
    refused(client.post("/v1/search", json={"query": "herons"}), device)
    refused(client.post("/v1/pages", json={"pages": [{"url": "https://a.example/x", "body_text": "Herons wade."}]}),
            device)
    assert client.corpus.store.counts()["pages"] == 0            # refused before anything was written
    refused(client.post("/v1/compare", json={"query": "herons", "models": ["all-minilm-l6-v2", "all-minilm-l6-v2-int8"]}), device)
    refused(client.post("/v1/evidence", json={"query": "herons", "session_id": "s"}), device)


def test_what_needs_no_model_answers_and_status_says_why(on_missing_device):
    device, client = on_missing_device
    st = client.get("/v1/status").json()
    assert st["device"]["configured"] == device and st["device"]["available"] is False
    assert "torch sees" in st["device"]["reason"] and st["device"]["build"].startswith("torch ")
    models = {m["name"]: m for m in client.get("/v1/models").json()["models"]}
    assert "asked for, but torch sees" in models["all-minilm-l6-v2"]["device_unavailable"]
    assert "device_unavailable" not in models["all-minilm-l6-v2-int8"]    # ONNX runs on CPU: unaffected
    r = client.post("/v1/public/workspaces", json={"packs": ["expert_network"]})
    assert r.status_code == 201                                   # relation search needs no model


def test_mcp_gives_the_same_refusal(on_missing_device):
    from docs.examples.over_mcp import call_tool

    device, client = on_missing_device
    res = call_tool(client, "refind_search", {"query": "herons"})
    assert res.isError
    body = json.loads(res.content[0].text.split(": ", 1)[1])   # "Error executing tool …: {the HTTP body}"
    assert body["status"] == 503 and body["detail"]["type"] == "device_unavailable" and body["detail"]["device"] == device


def test_the_cli_says_it_in_one_line(tmp_path):
    import os

    env = {**os.environ, "REFINDERY_DATA_DIR": str(tmp_path / "cli"), "REFINDERY_MODELS__DEVICE": "cuda:99"}
    proc = subprocess.run([sys.executable, "-m", "server.cli", "search", "herons"],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and "device 'cuda:99' asked for" in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr


def test_an_unknown_device_is_named():
    from models.device import DeviceUnavailable, device_report, resolve_device

    with pytest.raises(DeviceUnavailable, match="unknown device 'tpu'"):
        resolve_device("tpu")
    assert device_report("cpu") == {"configured": "cpu", "build": device_report("cpu")["build"], "available": True,
                                    "resolved": "cpu"}


def test_bench_gpu_on_a_host_without_cuda_says_so_and_exits_cleanly():
    import os

    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}     # a GPU host, too, then has none to see
    proc = subprocess.run([sys.executable, "bench/gpu.py"], capture_output=True, text=True, cwd=ROOT, env=env,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "no CUDA device" in proc.stdout and "nothing measured" in proc.stdout
