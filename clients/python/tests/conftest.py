"""The client's suite runs in a venv of its own (the client and its extras, no engine parts) against a
real `refindery serve` from the repository's venv (REFINDERY_SERVER_BIN: that venv's bin folder, as
`make test` sets it), on a Unix socket, over a temporary data dir: ~30 demo pages, the int8 embedder's
vectors too (compare), the relation-search roster, and two keys (read-write, read-only)."""
from __future__ import annotations

import gzip
import json
import os
import subprocess
import time
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[3]
PAGES = 30
BASE_URL = "http://refindery"   # the host is only a name on a Unix socket


class Server:
    def __init__(self, uds: str, token: str, read_only: str, data_dir: Path):
        self.uds, self.token, self.read_only, self.data_dir = uds, token, read_only, data_dir

    def client(self, **kw):
        from refindery.client import Client

        return Client(BASE_URL, api_key=kw.pop("api_key", self.token), uds=self.uds, **kw)

    def aclient(self, **kw):
        from refindery.client import AsyncClient

        return AsyncClient(BASE_URL, api_key=kw.pop("api_key", self.token), uds=self.uds, **kw)


def _cli(bin_dir: Path, env: dict, *args: str) -> str:
    out = subprocess.run([str(bin_dir / "refindery"), *args], env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, f"refindery {' '.join(args)}: {out.stderr[-2000:]}"
    return out.stdout


@pytest.fixture(scope="session")
def server(tmp_path_factory) -> Server:
    bin_dir = Path(os.environ.get("REFINDERY_SERVER_BIN", ROOT / ".venv" / "bin"))
    assert (bin_dir / "refindery").exists(), f"no refindery server at {bin_dir} (REFINDERY_SERVER_BIN)"
    tmp = tmp_path_factory.mktemp("client-server")
    env = {k: v for k, v in os.environ.items() if not k.startswith("REFINDERY_")}
    # the engine suite's models cache (the default data dir's, which `make test` fills first): the int8
    # embedder and the ONNX query path exported once, not again in this server's data dir
    env.update(REFINDERY_DATA_DIR=str(tmp / "data"), REFINDERY_MODELS__DEVICE="cpu",
               REFINDERY_MODELS__CACHE_DIR=str(ROOT / "data" / "models"))
    records, seen = [], set()
    with gzip.open(ROOT / "demo" / "pages.jsonl.gz", "rt", encoding="utf-8") as fh:
        for line in fh:
            rec = json.loads(line)
            if rec["url"] not in seen:
                seen.add(rec["url"])
                records.append(rec)
            if len(records) >= PAGES:
                break
    source = tmp / "pages.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in records))
    _cli(bin_dir, env, "ingest", str(source), "--no-progress")
    _cli(bin_dir, env, "models", "--embed", "all-minilm-l6-v2-int8")
    _cli(bin_dir, env, "relations", "demo")
    token = json.loads(_cli(bin_dir, env, "keys", "create", "--workspace", "*", "--name", "client-tests"))["token"]
    read_only = json.loads(_cli(bin_dir, env, "keys", "create", "--workspace", "*", "--read-only"))["token"]
    uds = str(tmp / "refindery.sock")
    proc = subprocess.Popen([str(bin_dir / "refindery"), "serve", "--uds", uds], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        with httpx.Client(base_url=BASE_URL, transport=httpx.HTTPTransport(uds=uds)) as probe:
            for _ in range(600):
                if proc.poll() is not None:
                    raise RuntimeError(f"the server exited: {proc.stderr.read().decode()[-2000:]}")
                try:
                    if probe.get("/healthz").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                time.sleep(0.1)
            else:
                raise RuntimeError("the server did not answer /healthz within 60 s")
        yield Server(uds, token, read_only, tmp / "data")
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
