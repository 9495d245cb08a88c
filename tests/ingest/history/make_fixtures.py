"""Writes the history fixtures beside this file with real browsers (run it again to remake them):

    .venv/bin/python tests/ingest/history/make_fixtures.py

- chromium-History: Debian's Chromium (headless, Playwright, a fresh profile) visits the pages of
  history_site.py on 127.0.0.1:8765 — some twice, one through a redirect, the misbehaving paths too — then, the browser closed, its
  `Default/History` is copied.
"""
from __future__ import annotations

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


if __name__ == "__main__":
    chromium()
