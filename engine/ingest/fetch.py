"""The imports' fetcher: a page a history or bookmarks point to, fetched politely and safely.

Politely: the URLs are grouped by host; `workers` hosts are fetched at once, one request at a time per
host, `host_interval_s` apart; a host that cannot be reached `host_failures` times is given up for the
run. Safely: only http(s); every address a host resolves to (each redirect's too) must be public
unless `allow_private` (no SSRF through an imported URL); redirects followed by hand, at most
`max_redirects`, a loop named as one; a body read in a stream and stopped at `max_bytes`; only
text/html, application/xhtml+xml and text/plain kept; no cookie ever sent or kept.

Each URL ends as one `Fetched`: `ok` with its body, or a reason in words. Names resolved here are
resolved again by the connection (a rebinding DNS could differ between the two: a limitation named in
docs/import.md)."""
from __future__ import annotations

import ipaddress
import queue
import socket
import threading
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator
from urllib.parse import urljoin, urlsplit

import httpx

from engine.core.settings_sections import ImportSettings

KEPT_TYPES = ("text/html", "application/xhtml+xml", "text/plain")


@dataclass
class Fetched:
    url: str                      # as asked
    ok: bool
    reason: str = ""              # why not, in words (ok: "")
    final_url: str | None = None  # after redirects
    content_type: str = ""
    body: str = ""
    skipped: bool = False         # refused by what it is (a type, a scheme), not a failure to reach it


class Refused(Exception):
    """A URL this fetcher will not fetch, and why (`skipped`: by what it is, not a failure)."""

    def __init__(self, reason: str, skipped: bool = False, unreachable: bool = False):
        super().__init__(reason)
        self.skipped, self.unreachable = skipped, unreachable


def _public(host: str, port: int) -> None:
    """Every address `host` resolves to is public, or Refused."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise Refused(f"the host {host} does not resolve ({exc.strerror})", unreachable=True) from None
    for info in infos:
        addr = ipaddress.ip_address(info[4][0].split("%")[0])
        if not addr.is_global or addr.is_multicast:
            raise Refused(f"{host} is a private, loopback or link-local address ({addr}): not fetched "
                          "([imports] allow_private = true allows it)")


class Fetcher:
    def __init__(self, settings: ImportSettings):
        self.s = settings
        self._client = httpx.Client(
            follow_redirects=False, trust_env=False,   # no proxy from the environment, no .netrc
            timeout=httpx.Timeout(settings.read_timeout_s, connect=settings.connect_timeout_s),
            headers={"User-Agent": settings.user_agent, "Accept": "text/html, application/xhtml+xml, text/plain;q=0.9"},
            limits=httpx.Limits(max_connections=settings.workers * 2, max_keepalive_connections=settings.workers))

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> "Fetcher":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # One URL -------------------------------------------------------------------------------------
    def fetch(self, url: str) -> Fetched:
        try:
            return self._fetch(url)
        except Refused as exc:
            return Fetched(url, False, str(exc), skipped=exc.skipped)

    def _check(self, url: str) -> tuple[str, int]:
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError as exc:
            raise Refused(f"not a URL: {exc}", skipped=True) from None
        if parts.scheme not in ("http", "https"):
            raise Refused(f"a {parts.scheme or 'schemeless'} URL is not fetched", skipped=True)
        host = parts.hostname
        if not host:
            raise Refused("a URL with no host", skipped=True)
        port = port or (443 if parts.scheme == "https" else 80)
        if not self.s.allow_private:
            _public(host, port)
        return host, port

    def _fetch(self, url: str) -> Fetched:
        deadline = time.monotonic() + self.s.total_timeout_s
        seen, current = [url], url
        for _ in range(self.s.max_redirects + 1):
            self._check(current)
            self._client.cookies.clear()   # none kept from an earlier answer
            try:
                with self._client.stream("GET", current) as resp:
                    if resp.is_redirect:
                        target = urljoin(current, resp.headers.get("location", ""))
                        if target in seen:
                            raise Refused(f"a redirect loop ({' -> '.join(seen + [target])})")
                        seen.append(target)
                        current = target
                        continue
                    if resp.status_code >= 400:
                        raise Refused(f"HTTP {resp.status_code}", unreachable=resp.status_code >= 500)
                    kind = resp.headers.get("content-type", "").split(";")[0].strip().lower()
                    if kind not in KEPT_TYPES:
                        raise Refused(f"not a page this keeps: {kind or 'no content type'}", skipped=True)
                    declared = resp.headers.get("content-length")
                    if declared and declared.isdigit() and int(declared) > self.s.max_bytes:
                        raise Refused(f"over {self.s.max_bytes:,} bytes ({int(declared):,} declared)", skipped=True)
                    data = bytearray()
                    for chunk in resp.iter_bytes():
                        data += chunk
                        if len(data) > self.s.max_bytes:
                            raise Refused(f"over {self.s.max_bytes:,} bytes: the read was stopped", skipped=True)
                        if time.monotonic() > deadline:
                            raise Refused(f"took over {self.s.total_timeout_s:g} s", unreachable=True)
                    text = bytes(data).decode(resp.encoding or "utf-8", errors="replace")
                    return Fetched(url, True, final_url=current, content_type=kind, body=text)
            except httpx.TimeoutException as exc:
                raise Refused(f"no answer in time ({type(exc).__name__})", unreachable=True) from None
            except httpx.TransportError as exc:
                raise Refused(f"could not connect ({type(exc).__name__}: {exc})", unreachable=True) from None
        raise Refused(f"more than {self.s.max_redirects} redirects")

    # Many URLs -----------------------------------------------------------------------------------
    def fetch_all(self, urls: Iterable[str], stop: threading.Event | None = None,
                  sleep: Callable[[float], None] = time.sleep) -> Iterator[Fetched]:
        """Every URL's Fetched, as they come: `workers` hosts at once, each host's URLs one after the
        other. `stop` set: no new request starts; those under way finish."""
        stop = stop or threading.Event()
        by_host: dict[str, list[str]] = defaultdict(list)
        for u in urls:
            try:
                by_host[(urlsplit(u).hostname or "").lower()].append(u)
            except ValueError:
                by_host[""].append(u)
        hosts: queue.Queue = queue.Queue()
        for h in sorted(by_host, key=lambda h: -len(by_host[h])):   # the longest queues first
            hosts.put(h)
        out: queue.Queue = queue.Queue(maxsize=self.s.workers * 4)
        DONE = object()

        def work() -> None:
            try:
                while not stop.is_set():
                    try:
                        host = hosts.get_nowait()
                    except queue.Empty:
                        return
                    failures = 0
                    for i, u in enumerate(by_host[host]):
                        if stop.is_set():
                            return
                        if failures >= self.s.host_failures:
                            out.put(Fetched(u, False, f"not tried: the host {host} failed {failures} times this run"))
                            continue
                        if i:
                            sleep(self.s.host_interval_s)
                        try:
                            f = self._fetch(u)
                        except Refused as exc:
                            failures += exc.unreachable
                            f = Fetched(u, False, str(exc), skipped=exc.skipped)
                        out.put(f)
            finally:
                out.put(DONE)

        threads = [threading.Thread(target=work, name=f"import-fetch-{i}", daemon=True)
                   for i in range(min(self.s.workers, max(1, len(by_host))))]
        for t in threads:
            t.start()
        running = len(threads)
        while running:
            item = out.get()
            if item is DONE:
                running -= 1
            else:
                yield item
