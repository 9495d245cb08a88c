"""Issue 57's local findings (#2-#5), each against real processes: `refindery serve` and the CLI are
subprocesses of the installed command line, and the other local user is a real one — `nobody`
(uid 65534), run with subprocess's `user=` — who binds sockets, reads files and takes names in the
shared /tmp. Each test failed on the code before the fix. Running as another user needs root, as
the suite runs here and in CI.

The data dirs sit under a folder every user may enter (0755), so that only the data dir's own
permissions stand between the other user and its files.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from conftest import ROOT
from test_mcp_transports import env_for

NOBODY = 65534
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="running a second, unprivileged user needs root")

PAGE = {"url": "https://notes.example/json", "title": "JSON notes",
        "body_text": "Pretty printing with the json module: indent, sort_keys and separators."}


def other_python() -> str:
    """A Python the other user may run (the suite's venv may sit in a folder it cannot enter)."""
    for cand in ("/usr/bin/python3", "/usr/local/bin/python3", os.path.realpath(sys.executable)):
        r = subprocess.run([cand, "-c", "pass"], user=NOBODY, group=NOBODY, capture_output=True)
        if r.returncode == 0:
            return cand
    pytest.fail("no Python that user nobody may run")


def as_nobody(code: str, *args: str, timeout: float = 60, **kw):
    return subprocess.run([other_python(), "-c", code, *args], user=NOBODY, group=NOBODY, extra_groups=[],
                          capture_output=True, text=True, timeout=timeout, cwd="/", **kw)


def cli(data, *args: str, stdin: str | None = None, umask: int | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "server.cli", *args], cwd=ROOT, env=env_for(data), input=stdin,
                          capture_output=True, text=True, timeout=300,
                          umask=-1 if umask is None else umask)


@pytest.fixture
def base():
    """A folder every user may enter (0755); removed afterwards."""
    folder = Path(tempfile.mkdtemp(prefix="rf-trust-"))
    os.chmod(folder, 0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def serve(data, sock, umask: int = 0o022) -> subprocess.Popen:
    # Popen's umask, not a preexec_fn: with gRPC loaded in this test process (pymilvus, by the Milvus
    # tests of the same worker), a child running Python between fork and exec died twice in full runs
    # with gRPC's "epoll_wait error: Bad file descriptor" before it became the server
    return subprocess.Popen([sys.executable, "-m", "server.cli", "serve", "--uds", str(sock)], cwd=ROOT,
                            env=env_for(data), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            umask=umask)   # set by the C child code: no Python runs between fork and exec


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGCONT)
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def published(data, proc, timeout: float = 120) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        with contextlib.suppress(OSError, ValueError):
            owner = json.loads((data / "server.json").read_text())
            if owner["pid"] == proc.pid:
                return owner
        time.sleep(0.1)
    pytest.fail(f"the server did not publish server.json (exit {proc.poll()}): "
                f"{proc.stderr.read() if proc.poll() is not None else ''}")


# The other user's listener: binds PATH (made connectable by anyone), answers every request with a
# forged key, and prints how many bytes it was sent when interrupted or its time is up (or it could
# not bind).
ATTACKER = r"""
import os, socket, sys, time
path, seconds = sys.argv[1], float(sys.argv[2])
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    s.bind(path)
except OSError as exc:
    print(f"bind refused: {exc.strerror}", flush=True)
    sys.exit(0)
os.chmod(path, 0o777)
s.listen(16)
print("listening", flush=True)
got, end = 0, time.monotonic() + seconds
s.settimeout(0.2)
body = b'{"token": "rf_attacker_token", "key_id": "k_attacker", "workspaces": ["*"]}'
try:
    while time.monotonic() < end:
        try:
            c, _ = s.accept()
        except socket.timeout:
            continue
        c.settimeout(1)
        try:
            data = c.recv(65536)
            got += len(data)
            c.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: "
                      + str(len(body)).encode() + b"\r\n\r\n" + body)
        except OSError:
            pass
        c.close()
except KeyboardInterrupt:
    pass
print(f"received {got}", flush=True)
"""


@contextlib.contextmanager
def attacker(path: str, seconds: float = 40):
    """The other user's listener on `path`; yields a function that stops it and returns its lines."""
    proc = subprocess.Popen([other_python(), "-c", ATTACKER, path, str(seconds)], user=NOBODY, group=NOBODY,
                            extra_groups=[], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd="/")
    first = proc.stdout.readline().strip()

    def finish() -> list[str]:   # interrupted: it says how much it was sent
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        out = proc.communicate(timeout=seconds + 30)[0]
        return [first, *out.split("\n")]

    try:
        yield proc, first, finish
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        with contextlib.suppress(OSError):
            os.unlink(path)


def old_socket_name(data: Path) -> str:
    """The name the code before the fix bound a long data dir's socket under: predictable by anyone."""
    digest = hashlib.sha1(str(data.resolve()).encode()).hexdigest()[:16]
    return str(Path(tempfile.gettempdir()) / f"refindery-{digest}.sock")


def long_data_dir(base: Path) -> Path:
    data = base / ("long-" + "d" * 90) / "data"
    assert len(str((data / "refindery.sock").resolve())) > 100
    return data


# 2. The CLI trusted whatever socket server.json names ---------------------------------------------

def test_2_the_cli_sends_nothing_to_a_socket_that_is_not_its_users_own(base, tmp_path):
    data = long_data_dir(base)
    data.mkdir(parents=True)

    # a server.json naming the other user's socket (as one left behind could): refused before a byte
    squat = str(Path(tempfile.gettempdir()) / f"rf-squat-{os.getpid()}.sock")   # the other user may write there
    with attacker(squat, seconds=15) as (victim, first, finish):
        assert first == "listening", first
        (data / "server.json").write_text(json.dumps({"pid": victim.pid, "socket": squat, "http": None,
                                                      "data_dir": str(data), "started": ""}))
        os.chmod(data / "server.json", 0o600)
        for verb in (["keys", "create", "--workspace", "*"], ["ingest", "-", "--no-progress"]):
            r = cli(data, *verb, stdin=json.dumps(PAGE) + "\n")
            assert r.returncode == 2 and "rf_attacker" not in r.stdout, (verb, r.stdout, r.stderr)
            assert f"belongs to uid {NOBODY}" in r.stderr, r.stderr
        lines = finish()
    assert "received 0" in lines, lines
    # and one writable by others is not trusted either, whoever owns it
    os.chmod(data / "server.json", 0o666)
    r = cli(data, "status")
    assert r.returncode == 2 and "server.json" in r.stderr and "0666" in r.stderr, r.stderr
    (data / "server.json").unlink()

    proc = serve(data, tmp_path / "http.sock")
    try:
        owner = published(data, proc)
        sock = owner["socket"]
        # the socket is in a folder only this user may enter, under no name anyone could have guessed
        folder = os.stat(Path(sock).parent)
        assert folder.st_uid == os.geteuid() and stat.S_IMODE(folder.st_mode) & 0o077 == 0
        assert sock != old_socket_name(data)
        # the loser of #3 unlinked it: the other user now tries to take the path over
        os.unlink(sock)
        with attacker(sock, seconds=20) as (_, first, finish):
            assert first.startswith("bind refused"), first
        r = cli(data, "keys", "create", "--workspace", "*")
        assert r.returncode == 2 and "rf_attacker" not in r.stdout, r.stdout + r.stderr
    finally:
        stop(proc)


# 3. Two `serve` on one data dir: the loser deleted the winner's socket -----------------------------

def test_3_a_second_serve_is_refused_before_it_touches_the_first_ones_socket(tmp_path):
    data = tmp_path / "data"
    first = serve(data, tmp_path / "a.sock")
    second = None
    try:
        # the first has bound the data dir's socket and is still starting (not yet listening): freeze it there
        deadline = time.monotonic() + 120
        while not (data / "refindery.sock").exists() and time.monotonic() < deadline and first.poll() is None:
            time.sleep(0.005)
        os.kill(first.pid, signal.SIGSTOP)
        assert (data / "refindery.sock").exists()
        second = serve(data, tmp_path / "b.sock")
        try:
            rc = second.wait(timeout=90)
        except subprocess.TimeoutExpired:
            rc = None
        err = second.stderr.read() if rc is not None else ""
        assert rc == 2 and "serving or starting to serve" in err, (rc, err)
        os.kill(first.pid, signal.SIGCONT)
        owner = published(data, first)
        assert os.path.exists(owner["socket"])
        r = cli(data, "status")
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["served_by"]["pid"] == first.pid
    finally:
        stop(first)
        if second is not None:
            stop(second)


# 4. Any local user could keep the server from starting on a long-path data dir --------------------

def test_4_a_name_taken_in_tmp_does_not_keep_a_long_data_dir_from_being_served(base, tmp_path):
    data = long_data_dir(base)
    taken = old_socket_name(data)
    r = as_nobody("import sys; open(sys.argv[1], 'w').close()", taken)
    assert r.returncode == 0, r.stderr
    try:
        proc = serve(data, tmp_path / "http.sock")
        try:
            owner = published(data, proc)
            assert owner["socket"] != taken
            r = cli(data, "status")
            assert r.returncode == 0 and json.loads(r.stdout)["served_by"]["pid"] == proc.pid, r.stderr
        finally:
            stop(proc)
        # stopped: its private folder is gone with it
        assert not os.path.exists(Path(owner["socket"]).parent)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(taken)


# 5. The data dir was world-readable ------------------------------------------------------------------

def loose(data: Path) -> list[str]:
    """Everything under `data` (and itself) that the group or others may read, write or enter."""
    out = []
    for p in [data, *data.rglob("*")]:
        st = os.lstat(p)
        if not stat.S_ISLNK(st.st_mode) and stat.S_IMODE(st.st_mode) & 0o077:
            out.append(f"{p.relative_to(data.parent)} {stat.S_IMODE(st.st_mode):04o}")
    return out


READ = r"""
import sys
for p in sys.argv[1:]:
    try:
        with open(p, "rb") as fh:
            print("read", p, len(fh.read(64)))
    except OSError as exc:
        print("refused", p, exc.strerror)
"""


def test_5_the_data_dir_and_everything_in_it_are_its_owners_alone_whatever_the_umask(base, tmp_path):
    data = base / "data"
    r = cli(data, "ingest", "-", "--no-progress", stdin=json.dumps(PAGE) + "\n", umask=0o022)
    assert r.returncode == 0, r.stderr
    proc = serve(data, tmp_path / "http.sock", umask=0o022)
    try:
        published(data, proc)
        r = cli(data, "evidence", "json module indent", "--session", "trust", umask=0o022)
        assert r.returncode == 0, r.stderr
        packet = r.stdout.split("- Open: ")[1].strip()
        assert loose(data) == []
        store, owner_file = data / "refindery.duckdb", data / "server.json"
        r = as_nobody(READ, str(store), str(owner_file), packet)
        assert r.stdout.split("\n")[:3] == [f"refused {store} Permission denied",
                                           f"refused {owner_file} Permission denied",
                                           f"refused {packet} Permission denied"], r.stdout + r.stderr
    finally:
        stop(proc)
    # a data dir an older release left open (0755, files 0644) is closed the next time it is opened
    for p in [data, *data.rglob("*")]:
        if not p.is_symlink():
            os.chmod(p, 0o755 if p.is_dir() else 0o644)
    assert as_nobody(READ, str(data / "refindery.duckdb")).stdout.startswith("read")
    r = cli(data, "status", umask=0o022)
    assert r.returncode == 0, r.stderr
    assert loose(data) == []
    assert as_nobody(READ, str(data / "refindery.duckdb")).stdout.startswith("refused")
