"""Writes the history fixtures beside this file with real browsers (run it again to remake them):

    .venv/bin/python tests/ingest/history/make_fixtures.py

- chromium-History: Debian's Chromium (headless, Playwright, a fresh profile) visits the pages of
  history_site.py on 127.0.0.1:8765 — some twice, one through a redirect, the misbehaving paths too — then, the browser closed, its
  `Default/History` is copied.
- firefox-places.sqlite and firefox-bookmarks.html: Debian's Firefox ESR (`apt-get install firefox-esr`),
  headless, one fresh profile, visits the same pages (one `--screenshot` run per visit); its
  places.sqlite is copied with its write-ahead log (sqlite's backup), and the bookmarks it exports on
  exit (browser.bookmarks.autoExportHTML) are its own default ones, in folders.
"""
from __future__ import annotations

import shutil
import sqlite3
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from history_site import PORT, Site  # noqa: E402

VISITS = ["/tides", "/nets", "/lamps", "/tides", "/ferry", "/gulls", "/docs/intro", "/old-charts",
          "/plain.txt", "/loop-a", "/big", "/slow", "/report.pdf", "/nets", "/tides", "file:///etc/hostname"]


def chromium() -> None:
    from playwright.sync_api import sync_playwright

    site = Site(PORT, hostile=False)
    with tempfile.TemporaryDirectory() as profile, sync_playwright() as pw:
        ctx = pw.chromium.launch_persistent_context(profile, executable_path="/usr/bin/chromium", headless=True,
                                                    args=["--no-sandbox"])
        page = ctx.new_page()
        for path in VISITS:
            try:
                page.goto(path if ":" in path else site.base + path, timeout=5000)
            except Exception as exc:   # the redirect loop: the browser gives up, the visit is recorded
                print(f"{path}: {type(exc).__name__}", file=sys.stderr)
            page.wait_for_timeout(300)
        page.wait_for_timeout(1500)
        ctx.close()   # the browser writes its history out and lets go of the file
        src = sqlite3.connect(Path(profile) / "Default" / "History")
        out = HERE / "chromium-History"
        out.unlink(missing_ok=True)
        dst = sqlite3.connect(out)
        src.backup(dst)
        dst.execute("VACUUM")
        dst.close()
        src.close()
    site.close()
    print(f"wrote {out} ({out.stat().st_size} bytes)")


def firefox() -> None:
    import subprocess

    site = Site(PORT, hostile=False)
    with tempfile.TemporaryDirectory() as profile:
        (Path(profile) / "user.js").write_text(
            'user_pref("browser.bookmarks.autoExportHTML", true);\n'
            'user_pref("browser.shell.checkDefaultBrowser", false);\n'
            'user_pref("datareporting.policy.dataSubmissionEnabled", false);\n')
        for path in VISITS:
            url = path if ":" in path else site.base + path
            try:
                subprocess.run(["firefox-esr", "--headless", "--no-remote", "--profile", profile, "--screenshot",
                                str(Path(profile) / "shot.png"), url], capture_output=True, timeout=30)
            except subprocess.TimeoutExpired:   # the redirect loop: never done loading
                print(f"{path}: gave up", file=sys.stderr)
        src = sqlite3.connect(Path(profile) / "places.sqlite")
        out = HERE / "firefox-places.sqlite"
        out.unlink(missing_ok=True)
        dst = sqlite3.connect(out)
        src.backup(dst)
        dst.execute("PRAGMA journal_mode = DELETE")
        dst.execute("PRAGMA page_size = 4096")   # Firefox writes 32 KB pages: the same rows, a tenth of the file
        dst.execute("VACUUM")
        dst.close()
        src.close()
        shutil.copy(Path(profile) / "bookmarks.html", HERE / "firefox-bookmarks.html")
    site.close()
    print(f"wrote {out} ({out.stat().st_size} bytes) and firefox-bookmarks.html")


if __name__ == "__main__":
    chromium()
    firefox()
