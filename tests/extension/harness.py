"""What the extension's browser tests and its bench (bench/extension.py) drive: a local site of pages
that records every request it serves, a real `refindery serve` on a loopback port that can be stopped
and started again over its data dir, and Debian's Chromium (through Playwright, headless, a persistent
profile) with the unpacked extension loaded and Chromium's own network log written — the record of
every request the browser made and who made it."""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
from conftest import CHROMIUM_ARGS

ROOT = Path(__file__).resolve().parents[2]
EXTENSION = ROOT / "clients" / "extension"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def page_html(title: str, paragraphs: list[str]) -> str:
    body = "".join(f"<p>{p}</p>" for p in paragraphs)
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title></head><body>"
            f"<nav><a href='/'>Home</a></nav><main><article><h1>{title}</h1>{body}</article></main>"
            f"<footer>A test site</footer></body></html>")


class Site:
    """Pages on 127.0.0.1 by path; every request served is recorded (path, headers)."""

    def __init__(self):
        self.pages: dict[str, str] = {}
        self.requests: list[tuple[str, dict]] = []
        site = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):   # noqa: N802 (http.server's name)
                site.requests.append((self.path, dict(self.headers)))
                html = site.pages.get(self.path.split("?")[0])
                data = (html or "<html><body>not here</body></html>").encode()
                self.send_response(200 if html else 404)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def add(self, path: str, title: str, paragraphs: list[str]) -> str:
        self.pages[path] = page_html(title, paragraphs)
        return self.base + path

    def served(self, path: str) -> int:
        return sum(1 for p, _ in self.requests if p.split("?")[0] == path)

    def close(self) -> None:
        self.server.shutdown()


class Refindery:
    """`refindery serve --host 127.0.0.1 --port P` over `data`, in a child process."""

    def __init__(self, data: Path, models_cache: str, port: int | None = None, env: dict | None = None):
        self.data, self.models_cache, self.extra_env = data, models_cache, env or {}
        self.port = port or free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def start(self, timeout_s: float = 120) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("REFINDERY_")}
        env.update(REFINDERY_DATA_DIR=str(self.data), REFINDERY_MODELS__DEVICE="cpu",
                   REFINDERY_MODELS__CACHE_DIR=self.models_cache, **self.extra_env)
        self.log = open(self.data.parent / "serve.log", "ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "server.cli", "serve", "--host", "127.0.0.1",
                                      "--port", str(self.port)], cwd=ROOT, env=env, stdout=self.log,
                                     stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"refindery serve exited: see {self.data.parent / 'serve.log'}"
            try:
                if httpx.get(self.base + "/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"refindery serve did not answer on {self.base} within {timeout_s:g} s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


def create_keys(data: Path, pool) -> dict[str, str]:
    """An admin key, the extension's pages-only key and a read-only search key, made as `refindery keys
    create` makes them (before the server starts: the store is the CLI's then)."""
    from engine.app import Engine
    from engine.core.settings import load_settings

    with Engine(load_settings(data_dir=str(data)), pool) as e:
        return {"admin": e.create_key(["*"], name="admin")["token"],
                "capture": e.create_key(["default"], name="browser", pages_only=True)["token"],
                "search": e.create_key(["default"], read_only=True, name="browser-search")["token"]}


class Browser:
    """Chromium with the unpacked extension, over a persistent profile (a restart keeps the extension's
    storage, as a person's browser does). Each launch writes Chromium's network log to its own file."""

    def __init__(self, playwright, profile: Path, chromium: str, extension: Path = EXTENSION):
        self.pw, self.profile, self.chromium = playwright, profile, chromium
        self.extension = profile.parent / "extension"
        if not self.extension.exists():
            shutil.copytree(extension, self.extension)
        self.netlogs: list[Path] = []
        self.ctx = None

    def launch(self):
        installing = not self.profile.exists()
        netlog = self.profile.parent / f"netlog-{len(self.netlogs)}.json"
        self.netlogs.append(netlog)
        ext = str(self.extension)
        self.ctx = self.pw.chromium.launch_persistent_context(
            str(self.profile), executable_path=self.chromium, headless=True,
            args=[*CHROMIUM_ARGS, f"--disable-extensions-except={ext}", f"--load-extension={ext}",
                  f"--log-net-log={netlog}", "--net-log-capture-mode=Default"])
        self.sw = self.ctx.service_workers[0] if self.ctx.service_workers else \
            self.ctx.wait_for_event("serviceworker", timeout=30_000)
        self.id = self.sw.url.split("/")[2]
        if installing:   # the extension opens its settings page on install: let it, before anything else
            first = self.ctx.pages[0]   # (it may open in this empty first tab: waited on, not navigated)
            deadline = time.monotonic() + 60
            while not any(p.url.endswith("/options.html") for p in self.ctx.pages) and time.monotonic() < deadline:
                first.wait_for_timeout(100)
        # a tab kept open for pause, with a document of its own: an empty tab is where the browser would
        # open the settings page (and closing that would close this)
        self.blank = self.ctx.new_page()
        self.blank.goto("data:text/html,<title>test harness</title>")
        return self.ctx

    def pause(self, seconds: float) -> None:
        """Wait while Playwright goes on taking the browser's events (a time.sleep would not: new pages,
        workers and closes would not be seen until the next call)."""
        self.blank.wait_for_timeout(seconds * 1000)

    def worker(self):
        """The extension's service worker now (it may have been stopped and started again)."""
        workers = [w for w in self.ctx.service_workers if self.id in w.url]
        return workers[0] if workers else self.ctx.wait_for_event("serviceworker", timeout=30_000)

    def settings(self, **values) -> None:
        self.worker().evaluate("async (v) => { const s = (await chrome.storage.local.get('settings')).settings || {};"
                               " await chrome.storage.local.set({settings: {...s, ...v}}); }", values)

    def storage(self) -> dict:
        return self.worker().evaluate("() => chrome.storage.local.get(null)")

    def page(self, url: str):
        p = self.ctx.new_page()
        p.goto(url)
        return p

    def close(self) -> None:
        if self.ctx is not None:
            self.ctx.close()
            self.ctx = None


def netlog_requests(path: Path) -> list[dict]:
    """Every URL request in a Chromium network log: {url, method, initiator} (the initiator is the
    origin that made it: chrome-extension://<id> for the extension's own)."""
    text = path.read_text(encoding="utf-8", errors="replace").rstrip()
    if not text.endswith("}"):   # a log cut short: close its events array
        text = text.rstrip(",\n") + "]}"
    log = json.loads(text)
    start = log["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
    out = []
    for ev in log.get("events", []):
        if ev.get("type") == start and "url" in ev.get("params", {}):
            p = ev["params"]
            out.append({"url": p["url"], "method": p.get("method"), "initiator": p.get("initiator")})
    return out
