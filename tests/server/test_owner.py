"""One process owns a data dir (server/owner.py): with `refindery serve` holding it, the other verbs
and `refindery mcp` go through the server's own socket instead of dying on DuckDB's lock; with no
server they open the data dir themselves, as before.

Everything real: `refindery serve` and every verb are subprocesses of the installed command line; the
MCP session is the SDK's stdio client talking to `refindery mcp`. The server listens on Unix sockets
only (`serve --uds`), because the suite must pass under `unshare -n`.
"""
from __future__ import annotations

import contextlib
import json
import os
import stat
import subprocess
import sys
import time

import anyio
import httpx
import pytest
from conftest import ROOT, serving_on
from test_mcp_transports import env_for, served

PAGES = [
    {"url": "https://notes.example/json", "title": "JSON notes",
     "body_text": "Pretty printing with the json module: indent, sort_keys and separators."},
    {"url": "https://notes.example/csv", "title": "CSV notes",
     "body_text": "Reading comma separated values with the csv module, dialects and quoting."},
]


def cli(data, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "server.cli", *args], cwd=ROOT, env=env_for(data), input=stdin,
                          capture_output=True, text=True, timeout=300)


@contextlib.contextmanager
def owned(data, sock):
    """`refindery serve --uds sock` over `data`, once it has said it owns the data dir."""
    with served(data, sock) as proc:
        serving_on(sock)
        deadline = time.monotonic() + 60   # server.json is written once the app accepts connections
        while not (data / "server.json").exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
        yield proc


async def mcp_session(data, query: str) -> tuple[set[str], dict]:
    """A real MCP client session with `refindery mcp` over stdio: its tools, and one search."""
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(command=sys.executable, args=["-m", "server.cli", "mcp"], env=env_for(data),
                                   cwd=str(ROOT))
    async with stdio_client(params) as (r, w), ClientSession(r, w) as session:
        await session.initialize()
        tools = {t.name for t in (await session.list_tools()).tools}
        found = await session.call_tool("refind_search", {"query": query})
        assert found.isError is False, found.content[0].text
        return tools, json.loads(found.content[0].text)


def the_verbs(data, tag: str, every: bool = True) -> dict:
    """search, status, evidence, keys create, ingest and mcp, each checked; what they answered. Without
    `every`, search, status and ingest only (each verb's own run without a server is tested with the verb:
    test_cli.py, test_mcp_transports.py, test_local_trust.py)."""
    out = {}
    r = cli(data, "search", "pretty printing json indent", "-k", "1")
    assert r.returncode == 0, r.stderr
    assert "JSON notes" in r.stdout and "https://notes.example/json" in r.stdout
    r = cli(data, "status")
    assert r.returncode == 0, r.stderr
    out["status"] = json.loads(r.stdout)
    if every:
        out |= _evidence_and_keys(data, tag)
    new = {"url": f"https://notes.example/{tag}", "title": f"Zeppelin {tag} notes",
           "body_text": f"Airships and zeppelins, written down in the {tag} run."}
    r = cli(data, "ingest", "-", "--no-progress", stdin=json.dumps(new) + "\n")
    assert r.returncode == 0, r.stderr
    out["ingest"] = json.loads(r.stdout)
    assert out["ingest"]["created"] == 1
    if every:
        tools, found = anyio.run(mcp_session, data, f"zeppelin airships {tag}")
        assert {"refind_search", "limma_search", "evidence_search"} <= tools
        assert found["pages"][0]["url"] == new["url"]          # the page the CLI just ingested, found over MCP
    return out


def _evidence_and_keys(data, tag: str) -> dict:
    r = cli(data, "evidence", "csv dialects and quoting", "--session", f"s-{tag}")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"Evidence written to agent_reports/default/evidence_packet_s-{tag}.md")
    opened = r.stdout.split("- Open: ")[1].strip()          # where the packet is on this machine
    assert os.path.isabs(opened) and "CSV notes" in open(opened, encoding="utf-8").read()
    r = cli(data, "keys", "create", "--workspace", "*", "--name", f"key-{tag}")
    assert r.returncode == 0, r.stderr
    return {"token": json.loads(r.stdout)["token"]}


def test_a_running_server_owns_the_data_dir_and_every_verb_goes_through_it(tmp_path):
    data, sock = tmp_path / "data", tmp_path / "http.sock"
    r = cli(data, "ingest", "-", "--no-progress", stdin="".join(json.dumps(p) + "\n" for p in PAGES))
    assert r.returncode == 0, r.stderr

    with owned(data, sock) as proc:
        owner = json.loads((data / "server.json").read_text())
        assert owner["pid"] == proc.pid
        assert stat.S_IMODE(os.stat(owner["socket"]).st_mode) == 0o600   # only this user may connect

        got = the_verbs(data, "served")
        assert got["status"]["served_by"]["pid"] == proc.pid     # it went through the server ...
        assert got["status"]["counts"]["pages"] == 2
        assert "through" in got["ingest"]
        # ... whose own store now holds the key the CLI made: the API asks for it at once
        over_http = serving_on(sock)
        assert over_http.get("/v1/status").status_code == 401
        assert over_http.get("/v1/status", headers={"Authorization": f"Bearer {got['token']}"}).status_code == 200
        # the owner's socket carries every grant without a key (its file mode is the check)
        local = httpx.Client(transport=httpx.HTTPTransport(uds=owner["socket"]), base_url="http://localhost:0")
        assert local.get("/v1/status").json()["counts"]["pages"] == 3
        assert local.get("/metrics").status_code == 200   # its metrics too (never open on the API's address)
        # a model's embedding runs in the server's background; the command follows it to the end
        r = cli(data, "models", "--embed", "all-minilm-l6-v2-int8")
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["embedded"] == 3 and "through" in r.stdout
        assert "embed all-minilm-l6-v2-int8 (in the server): 3/3 chunks" in r.stderr   # the last progress line
        r = cli(data, "compare", "zeppelin airships", "--models", "all-minilm-l6-v2,all-minilm-l6-v2-int8", "--json")
        assert r.returncode == 0, r.stderr
        runs = json.loads(r.stdout)["runs"]
        assert [run["pages"][0]["url"] for run in runs] == ["https://notes.example/served"] * 2
        # a relation search's flags reach the server's route (compact: the agent's reply shape)
        assert cli(data, "relations", "create", "crew").returncode == 0
        constraints = tmp_path / "c.json"
        constraints.write_text(json.dumps([{"relation": "held_role", "slot": "function", "op": "eq", "value": "Sales"}]))
        r = cli(data, "relations", "search", "crew", "--constraints", str(constraints), "--detail", "compact")
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["matched"]["total"] == 0 and "groups" not in json.loads(r.stdout)
        # a --profile the server does not run is refused, not silently answered with the server's embedder
        r = cli(data, "--profile", "quality", "search", "zeppelin airships")
        assert r.returncode == 2 and r.stdout == "" and "runs the default profile, not quality" in r.stderr
        assert cli(data, "--profile", "default", "search", "zeppelin airships").returncode == 0
        # the shortcuts' choices through the server
        r = cli(data, "feedback", "list")
        assert r.returncode == 0 and json.loads(r.stdout) == {"workspace": "default", "choices": []}, r.stderr
        # a backup while it serves: the server writes it where the operator says (the owner's socket) ...
        r = cli(data, "backup", str(tmp_path / "bk"))
        assert r.returncode == 0 and json.loads(r.stdout)["counts"]["pages"] == 3, r.stderr
        assert (tmp_path / "bk" / "manifest.json").is_file() and not (tmp_path / "bk" / "BACKUP-IN-PROGRESS").exists()
        # ... and, for a key, only by name, into its backup folder: a key never names a path
        admin = {"Authorization": f"Bearer {got['token']}"}
        refused = over_http.post("/v1/backup", json={"path": str(tmp_path / "elsewhere")}, headers=admin)
        assert refused.status_code == 403 and not (tmp_path / "elsewhere").exists()
        made = over_http.post("/v1/backup", json={"name": "nightly"}, headers=admin)
        assert made.status_code == 200 and made.json()["backup"] == "nightly", made.text
        assert (data / "backups" / "nightly" / "manifest.json").is_file()
        assert over_http.post("/v1/backup", json={"name": "../up"}, headers=admin).status_code == 422
        # an export while it serves: the pages streamed to the CLI, written here
        r = cli(data, "export", "pages", str(tmp_path / "pages.jsonl"))
        assert r.returncode == 0 and json.loads(r.stdout)["pages"] == 3, r.stderr
        assert len((tmp_path / "pages.jsonl").read_text().splitlines()) == 3
        # a verb that needs the data dir to itself says so in one line, and what to do
        r = cli(data, "reindex")
        assert r.returncode == 2 and r.stdout == ""
        assert len(r.stderr.strip().splitlines()) == 1 and "Stop the server" in r.stderr
        # a second server on the same data dir is refused, naming the first (--check: only that; make demo)
        r = cli(data, "serve", "--uds", str(tmp_path / "second.sock"))
        assert r.returncode == 2 and f"pid {proc.pid}" in r.stderr
        r = cli(data, "serve", "--check")
        assert r.returncode == 2 and f"pid {proc.pid}" in r.stderr and "already served" in r.stderr

    assert not (data / "server.json").exists() and not os.path.exists(owner["socket"])   # withdrawn on stop
    assert cli(data, "serve", "--check").returncode == 0
    got = the_verbs(data, "alone", every=False)
    assert "served_by" not in got["status"] and got["status"]["counts"]["pages"] == 3   # before its ingest
    assert "through" not in got["ingest"]


def test_a_stale_owner_file_is_ignored_and_a_busy_store_is_named_in_one_line(tmp_path):
    data = tmp_path / "data"
    r = cli(data, "ingest", "-", "--no-progress", stdin=json.dumps(PAGES[0]) + "\n")
    assert r.returncode == 0, r.stderr
    # a server that died without cleaning up (SIGKILL): its file names a process that is gone
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (data / "server.json").write_text(json.dumps({"pid": dead.pid, "socket": str(data / "refindery.sock"),
                                                  "http": None, "data_dir": str(data), "started": ""}))
    r = cli(data, "search", "json module", "-k", "1")
    assert r.returncode == 0 and "JSON notes" in r.stdout, r.stderr
    # another process (not a server) holds the store: one line naming it, no DuckDB traceback
    holder = subprocess.Popen([sys.executable, "-c", "import duckdb, sys, time; c = duckdb.connect(sys.argv[1]); "
                               "print('held', flush=True); time.sleep(120)", str(data / "refindery.duckdb")],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        r = cli(data, "search", "json module")
        assert r.returncode == 2
        assert r.stderr.count("\n") == 1 and f"process {holder.pid}" in r.stderr and "Traceback" not in r.stderr
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.parametrize("argv,name", [(["reindex"], "reindex"), (["log", "prune", "--before", "2026-01-01"], "log"),
                                       (["keys", "open", "--yes"], "keys open"),
                                       (["relations", "demo"], "relations demo")])
def test_verbs_that_need_the_data_dir_name_themselves_and_what_to_do(argv, name):
    """The refusal's text (checked without a server; the served test runs one of them for real)."""
    from server.cli import _verb, build_parser
    from server.owner import Owner
    from server.remote import refusal

    line = refusal(_verb(build_parser().parse_args(argv)), Owner(42, "/d/refindery.sock", "http://127.0.0.1:8000",
                                                                 "/d", ""))
    assert line.startswith(f"error: `refindery {name}` cannot run while a server holds the data dir (pid 42")
    assert "Stop the server" in line and "\n" not in line


def test_without_the_client_package_a_served_data_dir_is_named_with_the_fix(monkeypatch):
    from server.owner import ClientMissing, Owner

    monkeypatch.setitem(sys.modules, "refindery.client", None)   # as if only the engine were installed
    with pytest.raises(ClientMissing, match="pip install -e clients/python"):
        Owner(42, "/d/refindery.sock", None, "/d", "").client()
