"""One process owns a data dir: the server. Every other `refindery` process goes through it.

DuckDB lets one process open a database file for writing, so while `refindery serve` holds a data
dir nothing else may open it. The server therefore says it is there: beside the store it listens on
a Unix socket (`refindery.sock`, mode 0600) and writes `server.json` (its pid, that socket, its HTTP
address). The CLI and `refindery mcp` find that file, check the process is alive and the socket
answers, and send their request over the socket with the Python client instead of opening DuckDB.

A request that arrives on that socket is the data dir's owner's own (the file's permissions let only
its user, and root, connect), so it carries every grant, as a local socket does for Docker's or
PostgreSQL's administration: keys, status, reindex. Requests over TCP, or over a socket given with
`serve --uds`, still need a key once one exists.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import tempfile
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

OWNER_FILE = "server.json"
SOCKET_NAME = "refindery.sock"
# sockaddr_un holds 108 bytes on Linux (104 on macOS): a longer path is bound in the temp folder
# instead, under a name derived from the data dir, and server.json says where.
MAX_SOCKET_PATH = 100


class ClientMissing(RuntimeError):
    """The `refindery-client` package is not installed beside the engine."""


@dataclass
class Owner:
    pid: int
    socket: str
    http: str | None
    data_dir: str
    started: str

    def client(self, timeout: float = 600.0, max_retries: int = 0):
        """A client of the package `refindery-client`, over the owner's socket."""
        try:
            from refindery.client import Client
        except ImportError as exc:   # the engine installed without its client: say how to fix it
            raise ClientMissing(f"a server holds this data dir ({self.describe()}) and reaching it needs the Python "
                                "client: pip install -e clients/python (make install does)") from exc

        return Client(self.base_url, uds=self.socket, timeout=timeout, max_retries=max_retries)

    @property
    def base_url(self) -> str:
        """The URL the socket's requests name. Over a Unix socket the host is only a name, but MCP's
        DNS-rebinding check wants a loopback host with a port: localhost and the server's port (0
        when it serves HTTP on a socket of its own, `serve --uds`)."""
        port = self.http.rsplit(":", 1)[-1] if self.http else "0"
        return f"http://localhost:{port}"

    def describe(self) -> str:
        return f"pid {self.pid}" + (f", {self.http}" if self.http else "") + f", socket {self.socket}"


def socket_path(data_dir: Path | str) -> Path:
    path = Path(data_dir).resolve() / SOCKET_NAME
    if len(str(path).encode()) <= MAX_SOCKET_PATH:
        return path
    digest = hashlib.sha1(str(Path(data_dir).resolve()).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"refindery-{digest}.sock"


def _answers(path: str, timeout: float = 2.0) -> bool:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(path)
        return True
    except OSError:
        return False
    finally:
        s.close()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:   # another user's process: alive
        return True
    return True


def find(data_dir: Path | str) -> Owner | None:
    """The server that owns `data_dir` now, or None (no file; its process gone; its socket silent)."""
    try:
        raw = json.loads((Path(data_dir) / OWNER_FILE).read_text(encoding="utf-8"))
        owner = Owner(int(raw["pid"]), str(raw["socket"]), raw.get("http"), str(raw.get("data_dir", data_dir)),
                      str(raw.get("started", "")))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not _alive(owner.pid) or not _answers(owner.socket):
        return None
    return owner


def clear_stale(path: Path | str) -> None:
    """Remove a socket file a dead server left behind (asyncio's own Unix server does the same); a
    socket that answers is someone's: OSError."""
    path = Path(path)
    if path.is_socket() or path.is_symlink():
        if _answers(str(path)):
            raise OSError(f"{path} is in use by a running server")
        path.unlink()


def bind(data_dir: Path | str) -> socket.socket:
    """The data dir's socket, bound with mode 0600 (a stale file from a server that died is replaced;
    a live one is not: OSError)."""
    Path(data_dir).mkdir(parents=True, exist_ok=True)
    path = socket_path(data_dir)
    clear_stale(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)   # created 0600: no moment when another user could connect
    try:
        sock.bind(str(path))
    finally:
        os.umask(old)
    os.chmod(path, 0o600)
    sock.set_inheritable(True)
    return sock


def publish(data_dir: Path | str, sock_path: str, http: str | None) -> Owner:
    """Write server.json (atomically: a reader sees the old file or the new one)."""
    owner = Owner(os.getpid(), sock_path, http, str(Path(data_dir).resolve()),
                  datetime.now(timezone.utc).isoformat(timespec="seconds"))
    target = Path(data_dir) / OWNER_FILE
    tmp = target.with_name(f".{OWNER_FILE}.{os.getpid()}")
    tmp.write_text(json.dumps(asdict(owner), indent=2) + "\n", encoding="utf-8")
    os.chmod(tmp, 0o600)
    os.replace(tmp, target)
    return owner


def withdraw(data_dir: Path | str, sock_path: str | None) -> None:
    """Remove server.json (only if it is this process's) and the socket file."""
    target = Path(data_dir) / OWNER_FILE
    with contextlib.suppress(OSError, ValueError):
        if int(json.loads(target.read_text(encoding="utf-8")).get("pid", -1)) == os.getpid():
            target.unlink()
    if sock_path:
        with contextlib.suppress(OSError):
            os.unlink(sock_path)
