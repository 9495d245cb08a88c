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

Local trust, since another user of the machine may be hostile:
  - a starting server takes the data dir's lock (`serve.lock`, flock) before it touches a socket,
    so a second `serve` is refused before it can unlink the first's socket, bound or listening;
  - the socket lives in the data dir (0700) when its path fits in a sockaddr_un, else in a fresh
    private directory (mkdtemp: 0700, owned by the user, a name no one can guess or take first) —
    never under a predictable name in a shared /tmp;
  - before it sends a byte the CLI checks that server.json, the socket and the socket's folder are
    the user's own (or, for root, the data dir owner's) and no one else may write them.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import stat
import tempfile
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

from engine.core.private import UntrustedDataDir, check_data_dir, make_private, open_private
from engine.core.private import trusted_uids as _trusted

OWNER_FILE = "server.json"
SOCKET_NAME = "refindery.sock"
LOCK_FILE = "serve.lock"
# sockaddr_un holds 108 bytes on Linux (104 on macOS): a longer path is bound in a private folder
# made for it instead (PRIVATE_PREFIX + random), and server.json says where.
MAX_SOCKET_PATH = 100
PRIVATE_PREFIX = "refindery-"


class Untrusted(OSError):
    """server.json or the socket it names is not the user's own: nothing is sent to it."""


class Busy(OSError):
    """Another process holds the data dir's serve lock (a server serving or starting)."""

    def __init__(self, message: str, pid: int | None):
        super().__init__(message)
        self.pid = pid


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
    """Where the data dir's socket is bound: in the data dir when the path fits, else in a fresh
    private folder (made here, 0700)."""
    path = Path(data_dir).resolve() / SOCKET_NAME
    if len(str(path).encode()) <= MAX_SOCKET_PATH:
        return path
    return Path(tempfile.mkdtemp(prefix=PRIVATE_PREFIX)).resolve() / SOCKET_NAME


def _private_folder(path: Path) -> bool:
    """Whether `path` is a folder this module made for a socket (a long data dir's)."""
    return path.name.startswith(PRIVATE_PREFIX) and path.parent == Path(tempfile.gettempdir()).resolve()


def trusted_uids(data_dir: Path | str) -> set[int]:
    """Whose files the CLI trusts: its own user's and root's — never the data dir's owner's merely for
    owning it (root would then send its pages, queries and new keys to another user's server)."""
    return _trusted()


def check_trust(path: Path | str, uids: set[int], kind: str) -> None:
    """Untrusted unless `path` (not a symlink) is owned by one of `uids` and no one else may write
    it — for a socket, nor connect to it — and (for a socket) its folder is the same."""
    path = Path(path)
    try:
        st = os.lstat(path)
    except OSError as exc:
        raise Untrusted(f"{kind} {path} cannot be checked: {exc.strerror}") from exc
    if kind == "socket":
        if not stat.S_ISSOCK(st.st_mode):
            raise Untrusted(f"{path} is not a socket")
        bad = stat.S_IMODE(st.st_mode) & 0o077
    else:
        if not stat.S_ISREG(st.st_mode):
            raise Untrusted(f"{kind} {path} is not a plain file")
        bad = stat.S_IMODE(st.st_mode) & 0o022
    if st.st_uid not in uids:
        raise Untrusted(f"{kind} {path} belongs to uid {st.st_uid}, not to this user: refusing to talk to it")
    if bad:
        raise Untrusted(f"{kind} {path} has mode {stat.S_IMODE(st.st_mode):04o}: other users could "
                        + ("connect to it" if kind == "socket" else "change it") + "; refusing to trust it")
    if kind == "socket":
        folder = os.stat(path.parent)
        if folder.st_uid not in uids or stat.S_IMODE(folder.st_mode) & 0o022:
            raise Untrusted(f"the socket's folder {path.parent} is not this user's alone (uid {folder.st_uid}, "
                            f"mode {stat.S_IMODE(folder.st_mode):04o}): refusing to talk to {path}")


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
    """The server that owns `data_dir` now, or None (no file; its process gone; its socket silent).
    Untrusted when server.json or its socket is not this user's own (check_trust): checked before
    anything is sent."""
    try:
        data_dir = check_data_dir(data_dir)   # another user's data dir: refused before anything is read
    except UntrustedDataDir as exc:
        raise Untrusted(str(exc)) from exc
    target = Path(data_dir) / OWNER_FILE
    if not os.path.lexists(target):
        return None
    uids = trusted_uids(data_dir)
    check_trust(target, uids, "server.json")
    try:
        raw = json.loads(target.read_text(encoding="utf-8"))
        owner = Owner(int(raw["pid"]), str(raw["socket"]), raw.get("http"), str(raw.get("data_dir", data_dir)),
                      str(raw.get("started", "")))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not _alive(owner.pid) or not os.path.lexists(owner.socket):
        return None
    check_trust(owner.socket, uids, "socket")
    if not _answers(owner.socket):
        return None
    return owner


def lock(data_dir: Path | str) -> int:
    """Take the data dir's serve lock (held until this process exits; the descriptor is returned):
    Busy when another process holds it, naming that process. The data dir is made private first."""
    make_private(data_dir)
    fd = open_private(Path(data_dir) / LOCK_FILE, os.O_RDWR | os.O_CREAT)   # a link there: refused, not followed
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        try:
            pid = int(os.pread(fd, 32, 0).decode().strip() or 0) or None
        except ValueError:
            pid = None
        os.close(fd)
        raise Busy(f"another process{f' (pid {pid})' if pid else ''} is serving or starting to serve the data "
                   f"dir {data_dir}", pid) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def clear_stale(path: Path | str) -> None:
    """Remove a socket file a dead server left behind (asyncio's own Unix server does the same); a
    socket that answers is someone's: OSError."""
    path = Path(path)
    if path.is_socket() or path.is_symlink():
        if _answers(str(path)):
            raise OSError(f"{path} is in use by a running server")
        path.unlink()


def _clear_previous(data_dir: Path | str) -> None:
    """What a server that died without withdrawing (SIGKILL) left: its private socket folder.
    Called with the lock held, so that server is gone."""
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        old = Path(json.loads((Path(data_dir) / OWNER_FILE).read_text(encoding="utf-8"))["socket"])
        if _private_folder(old.parent) and os.lstat(old.parent).st_uid == os.geteuid():
            with contextlib.suppress(OSError):
                old.unlink()
            old.parent.rmdir()


def bind(data_dir: Path | str) -> socket.socket:
    """The data dir's socket, bound with mode 0600 in a folder only this user may enter. Call with
    the data dir's lock held (`lock`): no live server then holds the socket, so a file left at its
    path is stale."""
    make_private(data_dir)
    _clear_previous(data_dir)
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
    fd = open_private(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(json.dumps(asdict(owner), indent=2) + "\n")
    os.chmod(tmp, 0o600)
    os.replace(tmp, target)
    return owner


def withdraw(data_dir: Path | str, sock_path: str | None) -> None:
    """Remove server.json (only if it is this process's), the socket file and, for a long data dir,
    the private folder made for it."""
    target = Path(data_dir) / OWNER_FILE
    with contextlib.suppress(OSError, ValueError):
        if int(json.loads(target.read_text(encoding="utf-8")).get("pid", -1)) == os.getpid():
            target.unlink()
    if sock_path:
        with contextlib.suppress(OSError):
            os.unlink(sock_path)
        folder = Path(sock_path).parent
        if _private_folder(folder):
            with contextlib.suppress(OSError):
                folder.rmdir()
