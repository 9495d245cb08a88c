"""The `refindery` command, run in-process (the model is the session's, from the process cache)."""
from __future__ import annotations

import json

import pytest

from conftest import page

from server.cli import main


def run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_ingest_status_models_search_reindex(capsys, tmp_path, monkeypatch, pool):
    monkeypatch.setenv("REFINDERY_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("REFINDERY_MODELS__DEVICE", "cpu")
    src = tmp_path / "p.jsonl"
    src.write_text("\n".join(json.dumps(r) for r in [
        page("https://example.org/owls", "Owls hunt at night and see well in the dark."),
        page("https://example.org/larks", "Larks sing at dawn over open fields."),
        "oops",
    ]) + "\n")

    code, out, err = run(capsys, "ingest", str(src), "--no-progress")
    assert code == 0
    summary = json.loads(out)
    assert summary["created"] == 2 and summary["errors"] == 1 and summary["records"] == 3
    assert f"{src}:3: skipped" in err

    code, out, _ = run(capsys, "status")
    st = json.loads(out)
    assert st["counts"]["pages"] == 2 and st["generations"]["consistent"]

    code, out, _ = run(capsys, "models")
    rows = {r["name"]: r for r in json.loads(out)}
    mini = rows["all-minilm-l6-v2"]
    assert mini["active"] and mini["installed"] and mini["dim"] == 384 and mini["chunks_embedded"] == 2
    assert mini["device"] == "cpu" and mini["path"]

    code, out, _ = run(capsys, "search", "birds that hunt in the dark", "--json")
    assert json.loads(out)["pages"][0]["url"] == "https://example.org/owls"

    code, out, _ = run(capsys, "reindex")
    assert json.loads(out)["consistency"]["consistent"]


def test_folder_ingest_and_clear_errors(capsys, tmp_path, monkeypatch, pool):
    monkeypatch.setenv("REFINDERY_DATA_DIR", str(tmp_path / "data"))
    docs = tmp_path / "docs"
    (docs / "sub").mkdir(parents=True)
    (docs / "a.md").write_text("# Alpha\n\nThe alpha document mentions comets.")
    (docs / "sub" / "b.txt").write_text("Plain text about meteors.")
    (docs / "c.html").write_text("<html><head><title>Gamma</title></head><body><article><h1>Gamma</h1>"
                                 "<p>Gamma rays come from very energetic astronomical events far away.</p>"
                                 "</article></body></html>")
    (docs / "ignored.bin").write_bytes(b"\x00\x01")
    code, out, _ = run(capsys, "ingest", str(docs), "--base-url", "https://notes.example", "--no-progress")
    assert code == 0 and json.loads(out)["created"] == 3
    code, out, _ = run(capsys, "search", "comets", "--json")
    top = json.loads(out)["pages"][0]
    assert top["url"] == "https://notes.example/a.md" and top["title"] == "Alpha"

    assert run(capsys, "ingest", str(tmp_path / "missing.jsonl"))[0] == 2
    code, _, err = run(capsys, "--config", str(tmp_path / "nope.toml"), "status")
    assert code == 2 and "config file not found" in err


def test_progress_reaches_a_log_file_as_lines_and_a_model_is_embedded_in_a_servers_background(capsys, tmp_path,
                                                                                              monkeypatch, pool,
                                                                                              int8_pool):
    """With stderr not a terminal (a log file), ingest and `models --embed` print plain progress lines
    — counts of a total, rate, time left, then the totals — instead of nothing; and an Engine embeds
    a model in a thread of its own, its state readable as it goes (the server's GET /v1/models)."""
    import time

    from engine.app import Engine
    from engine.core.progress import Progress
    from engine.core.settings import load_settings

    monkeypatch.setenv("REFINDERY_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("REFINDERY_MODELS__DEVICE", "cpu")
    src = tmp_path / "p.jsonl"
    src.write_text("".join(json.dumps(page(f"https://example.org/{i}", f"Page {i} about owls and larks.")) + "\n"
                           for i in range(5)))
    code, out, err = run(capsys, "ingest", str(src))
    assert code == 0, err
    assert err.strip().splitlines()[-1].startswith("ingest: 5/5 pages, 5 chunks embedded, in ")

    import io
    log = io.StringIO()
    p = Progress("embed x", 10, "chunks", every=0, stream=log)
    p.update(4)
    p.close()
    first, last = log.getvalue().splitlines()
    assert first.startswith("embed x: 4/10 chunks, ") and "left" in first
    assert last.startswith("embed x: 4/10 chunks, in ")

    int8 = "all-minilm-l6-v2-int8"
    with Engine(load_settings(), int8_pool) as e:
        assert e.embedding(int8) is None
        state = e.embed_model_in_background(int8)
        assert state["state"] == "embedding" and state["model"] == int8
        deadline = time.monotonic() + 300
        while e.embedding(int8)["state"] == "embedding" and time.monotonic() < deadline:
            time.sleep(0.05)
        done = e.embedding(int8)
        assert done["state"] == "ready" and done["done"] == done["total"] == 5 and done["percent"] == 100
        row = next(m for m in e.models() if m["name"] == int8)
        assert row["embedding"]["state"] == "ready" and row["chunks_embedded"] == 5
        e.embed_model_in_background(int8)                         # again: nothing left to embed
        while e.embedding(int8)["state"] == "embedding" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert e.embedding(int8)["state"] == "ready" and e.embedding(int8)["done"] == 0


class _ClosedPipe:
    """A stdout whose reader has gone: `refindery search ... | head -1` once head has exited."""
    def write(self, s):
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self):
        pass


def test_a_closed_pipe_ends_the_command_quietly(capsys, tmp_path, monkeypatch, pool):
    monkeypatch.setenv("REFINDERY_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setattr("sys.stdout", _ClosedPipe())
    assert main(["status"]) == 141        # no traceback: the exit status a shell gives such a writer
    assert capsys.readouterr().err == ""


def _subparser(verb):
    from server.cli import build_parser

    parser = build_parser()
    subcommands = next(a for a in parser._actions if isinstance(getattr(a, "choices", None), dict) and verb in a.choices)
    return subcommands.choices[verb]


def test_search_evidence_and_relations_take_every_parameter_their_routes_take():
    """The flags are derived from the request models: a field added to a route reaches the CLI too."""
    from engine.evidence.search import EvidenceRequest
    from engine.refind.search import SearchRequest
    from engine.relations.search import RelationSearchRequest

    # (verb, request, fields the command line carries otherwise: the query and workspace as arguments,
    # constraints as a JSON file)
    for verb, model, apart in (("search", SearchRequest, {"query", "filters"}),
                               ("evidence", EvidenceRequest, {"query", "filters"}),
                               ("relations", RelationSearchRequest, {"workspace_id", "constraints"})):
        dests = {a.dest for a in _subparser(verb)._actions}
        missing = set(model.model_fields) - apart - dests
        assert not missing, f"refindery {verb} has no flag for {sorted(missing)}"


def test_relations_search_flags_make_the_request(tmp_path):
    from server.cli import build_parser, relation_request

    constraints = tmp_path / "c.json"
    constraints.write_text('[{"relation": "held_role", "slot": "function", "op": "eq", "value": "Sales"}]')
    args = build_parser().parse_args(["relations", "search", "roster", "--constraints", str(constraints),
                                      "--detail", "compact", "--offset", "25", "--as-of", "2024-05",
                                      "--criteria", "speaks Dutch", "--criteria", "has led a team"])
    req = relation_request(args)
    assert (req.workspace_id, req.detail, req.offset, req.as_of, req.criteria) == \
        ("roster", "compact", 25, "2024-05", ["speaks Dutch", "has led a team"])
    assert req.constraints[0]["value"] == "Sales"
    assert req.model_fields_set == {"workspace_id", "constraints", "detail", "offset", "as_of", "criteria"}
    args = build_parser().parse_args(["relations", "search", "roster", "--brief", "sales people", "--as-of", "May"])
    assert relation_request(args) is None          # the model refuses the month: a JSON error, no traceback


def test_flags_make_the_request_and_leave_the_rest_unset():
    from server.cli import _evidence_request, build_parser, search_request

    args = build_parser().parse_args(["search", "owls at night", "-k", "3", "--rrf-k", "10", "--fusion", "linear",
                                      "--no-pin", "--recency-half-life-days", "30", "--workspace", "w"])
    req = search_request(args)
    assert (req.k, req.rrf_k, req.fusion, req.pin, req.recency_half_life_days, req.workspace) == \
        (3, 10, "linear", False, 30, "w")
    assert req.model_fields_set == {"query", "k", "rrf_k", "fusion", "pin", "recency_half_life_days", "workspace"}

    args = build_parser().parse_args(["evidence", "csv quoting", "--session", "s1", "--page", "a", "--page", "b",
                                      "--map-write", "--max-rounds", "2", "--no-decompose", "--topic", "dialects"])
    req = _evidence_request(args)
    assert (req.session_id, req.pages, req.route_constraints, req.max_rounds, req.decompose, req.topic) == \
        ("s1", ["a", "b"], ["map_write"], 2, False, "dialects")
    assert req.siblings is True and req.k is None           # unset: the model's and the settings' defaults

    assert search_request(build_parser().parse_args(["search", "x"])).model_fields_set == {"query"}
    with pytest.raises(SystemExit):          # a value the model does not take is refused by the parser
        build_parser().parse_args(["search", "x", "--fusion", "nope"])


def test_an_unexpected_reply_from_the_server_is_one_line_and_exit_2(tmp_path):
    """Issue 70, row 5: the CLI printed a traceback when the server that holds the data dir answered
    something the command did not expect. A stand-in server of this user's own (its socket 0600 in
    the data dir, server.json naming it) answers every request with JSON of another shape."""
    import json as _json
    import os
    import socket
    import subprocess
    import sys
    import threading

    from conftest import ROOT
    from test_mcp_transports import env_for

    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    path = data / "refindery.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    os.chmod(path, 0o600)
    listener.listen(8)
    body = b'{"surprise": [1, 2, 3]}'
    stop = threading.Event()

    def answer():
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                c, _ = listener.accept()
            except (socket.timeout, OSError):
                continue
            with c:
                c.settimeout(5)
                try:
                    c.recv(65536)
                    c.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: "
                              + str(len(body)).encode() + b"\r\nconnection: close\r\n\r\n" + body)
                except OSError:
                    pass

    t = threading.Thread(target=answer, daemon=True)
    t.start()
    (data / "server.json").write_text(_json.dumps({"pid": os.getpid(), "socket": str(path), "http": None,
                                                   "data_dir": str(data), "started": ""}))
    os.chmod(data / "server.json", 0o600)
    try:
        for verb in (["search", "gannets"], ["maps", "show"],
                     ["evidence", "gannets"]):
            r = subprocess.run([sys.executable, "-m", "server.cli", *verb], cwd=ROOT, env=env_for(data),
                               capture_output=True, text=True, timeout=120)
            assert r.returncode == 2, (verb, r.returncode, r.stdout, r.stderr)
            assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, (verb, r.stderr)
            assert r.stderr.startswith("error: "), r.stderr
    finally:
        stop.set()
        t.join(5)
        listener.close()
