"""The `refindery` command, run in-process (the model is the session's, from the process cache)."""
from __future__ import annotations

import json

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
