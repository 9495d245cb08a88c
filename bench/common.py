"""What every bench script shares: the results folder, JSON + Markdown writing, medians and
percentiles, matplotlib set up for files, and the development collections prepared once."""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def write(name: str, result: dict, md: str) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(result, indent=2) + "\n")
    (RESULTS / f"{name}.md").write_text(md)
    print(md, flush=True)


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(fig, name: str) -> str:
    RESULTS.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(RESULTS / f"{name}.png", dpi=110)
    pyplot().close(fig)
    return f"{name}.png"


def median(values) -> float:
    return float(statistics.median(values))


def pct(values, q) -> float:
    return float(np.percentile(values, q))


def p50_p95(values) -> dict:
    return {"p50": round(pct(values, 50), 3), "p95": round(pct(values, 95), 3)}


def ir_engine(data_dir: Path, name: str, models: list[str], search: dict | None = None):
    """An Engine over one development collection in its own data dir `<data_dir>/<name>` (workspace
    `name`), ingested and embedded with `models` where it is not yet — the layout `make eval` uses
    (`refindery eval ir --data-dir data-ir`), so BM25's statistics are the collection's own and a data
    dir is shared with it. `search`: [search] settings to override. Returns (engine, collection); the
    caller closes the engine."""
    from engine.app import Engine
    from engine.core.settings import load_settings
    from eval import collections, run
    from eval.ir import DEFAULT_IR_DIR

    base = load_settings()
    settings = load_settings(data_dir=str(Path(data_dir) / name),
                             models={"active": base.models.active,
                                     "also_embed": [m for m in models if m != base.models.active]},
                             **({"search": search} if search else {}))
    engine = Engine(settings)
    try:
        coll = collections.load(DEFAULT_IR_DIR / name)
        run.prepare(engine, coll, name, models, progress=False)
    except BaseException:
        engine.close()
        raise
    return engine, coll


def serve_uds(data_dir: Path, sock: Path, env: dict[str, str]):
    """A real `refindery serve` on a Unix socket over `data_dir`, with the caller's REFINDERY_* settings
    only (none inherited from this shell); its output discarded. Returns the Popen."""
    import os
    import subprocess

    full = {k: v for k, v in os.environ.items() if not k.startswith("REFINDERY_")}
    full.update(REFINDERY_DATA_DIR=str(data_dir), **env)
    sock.unlink(missing_ok=True)
    return subprocess.Popen([sys.executable, "-m", "server.cli", "serve", "--uds", str(sock)], cwd=ROOT, env=full,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def uds_client(sock: Path, wait_s: float = 300):
    """An httpx client of the server on `sock`, once its /healthz answers (within `wait_s`)."""
    import time

    import httpx

    c = httpx.Client(transport=httpx.HTTPTransport(uds=str(sock)), base_url="http://refindery", timeout=120)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            if c.get("/healthz", timeout=2).status_code == 200:
                return c
        except httpx.HTTPError:
            time.sleep(0.2)
    raise RuntimeError("the server did not start")


def stop_server(proc) -> None:
    """SIGTERM, then a minute to finish its requests and close its store, then SIGKILL."""
    import signal
    import subprocess

    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
