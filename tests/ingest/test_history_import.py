"""Importing a browser's history (issue 72): a history file written by a real Chromium
(tests/ingest/history/chromium-History, made by make_fixtures.py over history_site.py's pages) is
read, every visit lands on its page, titles and URLs are found at once, and the texts are fetched
from a local server that misbehaves as the web does. On both stores."""
from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine.app import Engine
from engine.core.urls import normalize_url
from engine.ingest.history import HistoryError, read_history

HERE = Path(__file__).resolve().parent / "history"
sys.path.insert(0, str(HERE))
from history_site import PAGES, PORT, Site  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
FAST = {"allow_private": True, "host_interval_s": 0.05, "connect_timeout_s": 1.0, "read_timeout_s": 1.5,
        "total_timeout_s": 4.0, "max_bytes": 1_000_000, "workers": 4}


def repointed(tmp_path: Path, port: int) -> Path:
    """The real browser's history, its URLs pointed at this test's server (their port only)."""
    out = tmp_path / "History"
    shutil.copy(HERE / "chromium-History", out)
    with sqlite3.connect(out) as db:
        db.execute("UPDATE urls SET url = replace(url, ?, ?)", [f":{PORT}/", f":{port}/"])
    return out


@pytest.fixture
def site():
    from conftest import loopback_up

    loopback_up()   # the offline check (`unshare -n`) starts with its loopback down
    s = Site()
    yield s
    s.close()


def urls_found(e: Engine, query: str, k: int = 3) -> list[str]:
    from engine.refind.schema import SearchRequest

    return [p.url for p in e.search(SearchRequest(query=query, k=k)).pages]


@pytest.mark.parametrize("store_backend", ["duckdb", "postgres"], indirect=True)
def test_a_real_chromium_history_imports_then_fetches_and_a_second_run_adds_nothing(make_corpus, tmp_path, site):
    history = repointed(tmp_path, site.port)
    entries = read_history(history)
    by_url = {e.url.removeprefix(site.base): e for e in entries}
    assert len(by_url["/tides"].visits) == 3 and len(by_url["/nets"].visits) == 2   # every visit, as the browser kept it
    assert by_url["/tides"].title == "Harbour tide tables" and "file:///etc/hostname" in by_url
    e = Engine(corpus=make_corpus(imports=FAST))
    out = e.import_visits(entries, "history", str(history), fetch=False)
    assert out["written"]["skipped"] == 1   # the file: URL
    assert out["status"]["counts"]["titles"] == len(entries) - 1
    tides = e.store.pages_with_url("default", normalize_url(site.base + "/tides"))
    assert e.page(tides[0])["visit_count"] == 3
    assert urls_found(e, "Harbour tide tables", 1) == [site.base + "/tides"]   # by its title, before any fetch
    assert site.requests == []   # --no-fetch fetched nothing
    # the fetch: texts found by their own words; the web's misbehaviour, each a status with its reason
    out = e.import_visits(entries, "history", str(history), fetch=True)
    st = out["status"]
    assert st["done"] and st["counts"]["queued"] == 0
    assert urls_found(e, "quillmoss pilot", 1) == [site.base + "/tides"]
    assert urls_found(e, "plimsnort buoy colours", 1) == [site.base + "/plain.txt"]
    assert urls_found(e, "corvastle charts harbour office", 2)[0] in (site.base + "/old-charts", site.base + "/moved")
    reasons = {p["url"].removeprefix(site.base): (p["status"], p["reason"]) for p in st["problems"]}
    assert reasons["/gulls"][0] == "failed" and "redirect loop" in reasons["/gulls"][1]
    assert reasons["/big"] == ("skipped", "over 1,000,000 bytes: the read was stopped")
    assert reasons["/report.pdf"] == ("skipped", "not a page this keeps: application/pdf")
    assert reasons["/slow"][0] == "failed" and "no answer in time" in reasons["/slow"][1]
    assert reasons["file:///etc/hostname"][0] == "skipped"
    assert st["counts"]["fetched"] == 8   # tides nets lamps ferry docs/intro old-charts moved plain.txt
    assert e.page(tides[0])["visit_count"] == 3   # the text came; the visits did not change
    assert not any("cookie" in {k.lower() for k in h} for _, h in site.requests)   # none sent (one was set)
    # again: nothing added, nothing fetched
    before, served = e.counts()["pages"], len(site.requests)
    again = e.import_visits(read_history(repointed(tmp_path, site.port)), "history", str(history), fetch=True)
    assert again["written"]["new_pages"] == 0 and e.counts()["pages"] == before
    assert e.page(tides[0])["visit_count"] == 3
    assert again["fetched"] == {"fetched": 0, "failed": 0, "skipped": 0, "present": 0} and len(site.requests) == served
    assert e.import_status(out["import_id"])["counts"] == st["counts"]


def run_import(history: Path, data: Path, *extra: str, crash_at: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REFINDERY_")}
    env.update(REFINDERY_DATA_DIR=str(data), REFINDERY_MODELS__DEVICE="cpu", REFINDERY_IMPORTS__WORKERS="1",
               REFINDERY_IMPORTS__WRITE_BATCH="1", **{f"REFINDERY_IMPORTS__{k.upper()}": str(v).lower()
                                                      for k, v in FAST.items() if k != "workers"})
    if crash_at:
        env["REFINDERY_TEST_CRASH_AT"] = crash_at
    return subprocess.run([sys.executable, "-m", "server.cli", "import", "history", str(history), "--no-progress",
                           *extra], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_killed_midway_the_next_run_goes_on_and_fetches_no_kept_text_again(tmp_path, site, pool):
    from engine.core.settings import load_settings

    history, data = repointed(tmp_path, site.port), tmp_path / "data"
    killed = run_import(history, data, "--skip", "*/slow", "--skip", "*/big", crash_at="import:texts-written")
    assert killed.returncode == -9, killed.stderr[-2000:]
    with Engine(load_settings(data_dir=str(data)), pool) as e:
        (st,) = e.imports()
        assert st["counts"]["fetched"] == 0 and st["counts"]["queued"] > 0   # killed before it said so
        kept = {p: e.page(pid)["body_text"] for p in PAGES
                for pid in e.store.pages_with_url("default", normalize_url(site.base + p))}
    written = [p for p, body in kept.items() if PAGES[p][1] in body]
    assert len(written) == 1   # one text written (write_batch 1) before the kill
    again = run_import(history, data, "--skip", "*/slow", "--skip", "*/big")
    assert again.returncode == 0, again.stderr[-2000:]
    out = json.loads(again.stdout)
    assert out["status"]["done"] and out["fetched"]["present"] >= 1
    assert site.served(written[0]) == 1   # its text was kept: not fetched again
    with Engine(load_settings(data_dir=str(data)), pool) as e:
        for p, (title, text) in PAGES.items():
            (pid,) = e.store.pages_with_url("default", normalize_url(site.base + p))
            body = e.page(pid)["body_text"]
            assert (text not in body) if p == "/gulls" else (text in body), p   # nothing lost (gulls: a loop now)
        assert e.counts()["pages"] == 12 - 2   # the skipped two are not pages; no page twice


def test_bad_histories_are_a_clear_error(tmp_path):
    truncated = tmp_path / "History"
    truncated.write_bytes((HERE / "chromium-History").read_bytes()[:5000])
    garbage = tmp_path / "places.sqlite"
    garbage.write_bytes(b"this is not a database at all" * 100)
    empty = tmp_path / "profile"
    empty.mkdir()
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE t (x)")
    for path, words in ((truncated, "is not a browser history"), (garbage, "is not a browser history"),
                        (empty, "no browser history in it"), (tmp_path / "nothing", "no such file"),
                        (other, "is not a browser history")):
        with pytest.raises(HistoryError) as err:
            read_history(path)
        assert words in str(err.value), (path, str(err.value))
    proc = run_import(garbage, tmp_path / "data")
    assert proc.returncode == 2 and proc.stderr.startswith("error: ") and "Traceback" not in proc.stderr


def test_firefox_history_and_bookmarks_written_by_a_real_firefox_are_read():
    from engine.ingest.bookmarks import read_bookmarks

    entries = {e.url: e for e in read_history(HERE / "firefox-places.sqlite")}
    tides = entries[f"http://127.0.0.1:{PORT}/tides"]
    assert tides.title == "Harbour tide tables" and len(tides.visits) == 3
    assert len(entries[f"http://127.0.0.1:{PORT}/nets"].visits) == 2
    from_html = read_bookmarks(HERE / "firefox-bookmarks.html")
    from_places = read_bookmarks(HERE / "firefox-places.sqlite")
    assert [(b.url, b.title, b.folder) for b in from_html] == [(b.url, b.title, b.folder) for b in from_places]
    assert {b.folder for b in from_html} == {"Bookmarks Menu / Mozilla Firefox"} and len(from_html) == 4
    assert all(b.added is not None for b in from_html)


CHROMIUM_BOOKMARKS = {   # the shape of Chromium's Bookmarks file (Chromium writes none for a profile with no bookmark)
    "checksum": "0", "version": 1, "roots": {
        "bookmark_bar": {"type": "folder", "name": "Bookmarks bar", "children": [
            {"type": "url", "name": "Harbour tide tables", "url": "URL/tides", "date_added": "13400000000000000"},
            {"type": "folder", "name": "Sea", "children": [
                {"type": "url", "name": "Mending nets", "url": "URL/nets", "date_added": "13400000000000000"}]}]},
        "other": {"type": "folder", "name": "Other bookmarks", "children": [
            {"type": "url", "name": "", "url": "URL/lamps", "date_added": "13400000000000000"}]},
        "synced": {"type": "folder", "name": "Mobile bookmarks", "children": []}}}


@pytest.mark.parametrize("store_backend", ["duckdb", "postgres"], indirect=True)
def test_bookmarks_are_pages_known_as_bookmarked_filtered_by_folder_and_their_texts_fetched(make_corpus, tmp_path, site):
    from engine.ingest.bookmarks import read_bookmarks, to_entries
    from engine.refind.schema import SearchRequest

    path = tmp_path / "Bookmarks"
    path.write_text(json.dumps(CHROMIUM_BOOKMARKS).replace("URL/", site.base + "/"))
    marks = read_bookmarks(path)
    assert [(b.url.removeprefix(site.base), b.folder) for b in marks] == [
        ("/tides", "Bookmarks bar"), ("/nets", "Bookmarks bar / Sea"), ("/lamps", "Other bookmarks")]
    e = Engine(corpus=make_corpus(imports=FAST))
    # a page the person already has, with its own text: linked, never overwritten
    e.ingest([(0, "t", {"url": site.base + "/nets", "body_text": "Brantwick nets, as the extension kept them."})])
    out = e.import_visits(to_entries(marks), "bookmarks", str(path), fetch=True)
    assert out["status"]["counts"] | {} == {"queued": 0, "fetched": 2, "present": 1, "titles": 0, "skipped": 0, "failed": 0}
    assert site.served("/nets") == 0

    def urls(query, **filters):
        return [p.url.removeprefix(site.base) for p in e.search(SearchRequest(query=query, k=5, filters=filters)).pages]
    assert sorted(urls("harbour nets lamp", entity=["bookmarked"])) == ["/lamps", "/nets", "/tides"]
    assert urls("harbour nets lamp", entity=["Bookmarks bar / Sea"]) == ["/nets"]
    assert urls("quillmoss pilot", entity=["Bookmarks bar"])[:1] == ["/tides"]   # the fetched text, still linked
    (nets,) = e.store.pages_with_url("default", normalize_url(site.base + "/nets"))
    assert e.page(nets)["body_text"] == "Brantwick nets, as the extension kept them."


def _served_env(data: Path) -> dict:
    from conftest import MODELS_CACHE

    env = {k: v for k, v in os.environ.items() if not k.startswith("REFINDERY_")}
    env.update(REFINDERY_DATA_DIR=str(data), REFINDERY_MODELS__DEVICE="cpu", REFINDERY_MODELS__CACHE_DIR=MODELS_CACHE,
               **{f"REFINDERY_IMPORTS__{k.upper()}": str(v).lower() for k, v in FAST.items()})
    return env


def test_beside_a_running_server_the_import_goes_through_it_and_the_server_fetches(tmp_path, site):
    from conftest import serving_on

    history, data, sock = repointed(tmp_path, site.port), tmp_path / "data", tmp_path / "http.sock"
    env = _served_env(data)
    proc = subprocess.Popen([sys.executable, "-m", "server.cli", "serve", "--uds", str(sock)], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        serving_on(sock)
        while not (data / "server.json").exists() and proc.poll() is None:
            time.sleep(0.1)
        cli = [sys.executable, "-m", "server.cli", "import"]
        r = subprocess.run(cli + ["history", str(history), "--no-progress"], cwd=ROOT, env=env, capture_output=True,
                           text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        out = json.loads(r.stdout)
        assert "through" in out and out["status"]["done"] and out["status"]["counts"]["fetched"] == 8
        assert site.served("/tides") == 1   # fetched by the server, once
        r = subprocess.run(cli + ["status", out["import_id"]], cwd=ROOT, env=env, capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0 and json.loads(r.stdout)["counts"] == out["status"]["counts"], r.stderr
        found = serving_on(sock).post("/v1/search", json={"query": "quillmoss pilot", "k": 1}).json()["pages"]
        assert found[0]["url"] == site.base + "/tides"
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def test_imports_over_http_stay_in_their_walls_and_refuse_bad_input(pool, tmp_path, site):
    from docs.examples import make_client
    from engine.core.access import create_key

    client = make_client(tmp_path / "data", pool=pool, server={"rate_limit_per_minute": 0}, imports=FAST)
    try:
        keys = client.corpus.keys
        home = {"Authorization": f"Bearer {create_key(keys, ['home'])['token']}"}
        other = {"Authorization": f"Bearer {create_key(keys, ['work'])['token']}"}
        reader = {"Authorization": f"Bearer {create_key(keys, ['home'], read_only=True)['token']}"}
        capture = {"Authorization": f"Bearer {create_key(keys, ['home'], pages_only=True)['token']}"}
        body = {"kind": "history", "source": "/home/me/History", "workspace": "home", "entries": [
            {"url": site.base + "/tides", "title": "Harbour tide tables", "visits": ["2026-11-01T10:00:00Z"]},
            {"url": site.base + "/nets", "title": "Mending nets", "visits": ["2026-11-02T10:00:00+01:00"]}]}
        for headers, status in ((reader, 403), (capture, 403), (other, 404)):
            assert client.post("/v1/imports", headers=headers, json=body).status_code == status
        for bad in ({**body, "entries": []}, {**body, "kind": "cookies"},
                    {**body, "entries": [{"url": "x", "visits": ["not a time"]}]}, {**body, "extra": 1}):
            r = client.post("/v1/imports", headers=home, json=bad)
            assert r.status_code == 422 and r.json()["detail"]["type"] == "validation_error", r.text
        r = client.post("/v1/imports", headers=home, json=body)
        assert r.status_code == 202, r.text
        import_id = r.json()["import_id"]
        hits = client.post("/v1/search", headers=home, json={"workspace": "home", "query": "Mending nets"}).json()
        assert hits["pages"][0]["url"] == site.base + "/nets"   # by its title, on the reply
        deadline = time.monotonic() + 60
        while not (st := client.get(f"/v1/imports/{import_id}", headers=home).json())["done"]:
            assert time.monotonic() < deadline, st
            time.sleep(0.2)
        assert st["counts"]["fetched"] == 2 and st["workspace"] == "home"
        assert client.get(f"/v1/imports/{import_id}", headers=other).status_code == 404   # as if absent
        assert client.get("/v1/imports", headers=other).json() == {"imports": []}
        assert [i["import_id"] for i in client.get("/v1/imports", headers=reader).json()["imports"]] == [import_id]
        # a key scoped to one document scope: the unscoped import is absent to it, and the same file
        # imported through it is an import of its own, in its scope
        scoped = {"Authorization": f"Bearer {create_key(keys, ['home'], scopes=['hr'])['token']}"}
        assert client.get(f"/v1/imports/{import_id}", headers=scoped).status_code == 404
        assert client.get("/v1/imports", headers=scoped).json() == {"imports": []}
        mine = client.post("/v1/imports", headers=scoped, json={**body, "fetch": False}).json()
        assert mine["import_id"] != import_id and mine["status"]["counts"]["titles"] == 2
        assert mine["status"]["options"]["scope"] == "hr"
        assert [i["import_id"] for i in client.get("/v1/imports", headers=scoped).json()["imports"]] == [mine["import_id"]]
    finally:
        client.corpus.close()


def test_a_history_locked_by_its_running_browser_is_read_through_a_copy(tmp_path):
    """A running Chromium holds its History with an exclusive lock (locking_mode EXCLUSIVE): nothing else
    can read it in place; the read copies the file first, and gets what was committed."""
    path = tmp_path / "History"
    shutil.copy(HERE / "chromium-History", path)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("PRAGMA locking_mode = EXCLUSIVE")
    holder.execute("UPDATE urls SET visit_count = visit_count WHERE id = 1")   # takes the lock, kept until close
    try:
        with pytest.raises(sqlite3.OperationalError, match="locked"):   # the lock is real
            sqlite3.connect(path, timeout=0.1).execute("SELECT count(*) FROM urls").fetchall()
        entries = {e.url.rsplit("/", 1)[1]: e for e in read_history(path)}
    finally:
        holder.close()
    assert entries["tides"].title == "Harbour tide tables" and len(entries["tides"].visits) == 3


def test_visits_still_in_the_write_ahead_log_of_a_running_browser_are_read():
    """Firefox keeps places.sqlite in WAL mode: what it wrote last may be only in places.sqlite-wal while it
    runs. The copy takes the log with the file (read in place as immutable, those visits would be missed)."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "places.sqlite"
        shutil.copy(HERE / "firefox-places.sqlite", path)
        browser = sqlite3.connect(path, isolation_level=None)
        browser.execute("PRAGMA journal_mode = WAL")
        browser.execute("PRAGMA wal_autocheckpoint = 0")
        browser.execute("UPDATE moz_places SET title = 'Tide tables, read again' WHERE url LIKE '%/tides'")
        try:
            assert (Path(tmp) / "places.sqlite-wal").stat().st_size > 0   # committed, in the log only
            entries = {e.url.rsplit("/", 1)[1]: e for e in read_history(path)}
        finally:
            browser.close()
    assert entries["tides"].title == "Tide tables, read again"
