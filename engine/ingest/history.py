"""A browser's history, read: Firefox, Chromium, Chrome, Edge, Brave, Vivaldi, Opera, Safari and their
kin, through `browserexport` (which knows each one's schema). The database is copied first
(`sqlite_backup`, WAL included): a running browser holds a lock on it, and a copy is a consistent
snapshot. Visits are grouped by URL, oldest first; each entry is one page's title and visit times."""
from __future__ import annotations

import logging
import sqlite3
import tempfile
from datetime import datetime
from pathlib import Path

from engine.core.errors import InvalidRequest
from engine.core.values import utc_naive
from engine.ingest.imports import Entry

# Names a person types, and the file each browser keeps its history in (a profile folder given).
HISTORY_FILES = ("History", "places.sqlite", "History.db")


class HistoryError(InvalidRequest):
    """A history that cannot be read: none found, several profiles, a file that is not one."""
    type = "history_unreadable"


def _browsers() -> dict[str, type]:
    from browserexport.browsers.all import DEFAULT_BROWSERS

    return {b.__name__.lower(): b for b in DEFAULT_BROWSERS}


def browser_names() -> list[str]:
    return sorted(_browsers())


def locate(browser: str, profile: str = "*") -> Path:
    """The history database of `browser`'s profile on this machine (browserexport's search of the
    usual folders). Several profiles: name one (`profile`), or give the file's path."""
    from browserexport.common import BrowserexportError

    kind = _browsers().get(browser.lower())
    if kind is None:
        raise HistoryError(f"unknown browser {browser!r}: one of {', '.join(browser_names())}")
    try:
        return Path(kind.locate_database(profile))
    except BrowserexportError as exc:
        raise HistoryError(f"no {browser} history found: {' '.join(str(exc).split())}") from None


def history_file(path: Path) -> Path:
    """The database itself: `path`, or the history file inside a profile folder."""
    if path.is_dir():
        found = [path / n for n in HISTORY_FILES if (path / n).is_file()]
        if not found:
            raise HistoryError(f"{path} is a folder with no browser history in it (looked for "
                               f"{', '.join(HISTORY_FILES)}): give a profile folder or the file itself")
        return found[0]
    if not path.exists():
        raise HistoryError(f"{path}: no such file")
    return path


def read_history(path: Path, since: datetime | None = None) -> list[Entry]:
    """Every URL of the history at `path` with its visits (since `since`, naive UTC), in the order of
    each one's first visit. A file that is not a browser history is a HistoryError, never a crash."""
    from browserexport.common import BrowserexportError
    from browserexport.parse import read_visits
    from sqlite_backup import sqlite_backup

    src = history_file(path)
    logging.getLogger("browserexport").setLevel(logging.WARNING)   # it logs each file it reads at INFO
    with tempfile.TemporaryDirectory(prefix="refindery-history-") as tmp:
        copy = Path(tmp) / src.name
        try:
            sqlite_backup(src, copy, copy_use_tempdir=True)
            by_url: dict[str, Entry] = {}
            for v in read_visits(copy):
                when = utc_naive(v.dt)
                if since is not None and when < since:
                    continue
                entry = by_url.setdefault(v.url, Entry(v.url, None, []))
                entry.visits.append(when)
                title = v.metadata.title if v.metadata else None
                if title and title.strip():
                    entry.title = title.strip()
        except (sqlite3.DatabaseError, BrowserexportError) as exc:
            raise HistoryError(f"{src} is not a browser history this can read ({' '.join(str(exc).split())})") \
                from None
        except OSError as exc:
            raise HistoryError(f"{src}: {exc.strerror or exc}") from None
    for e in by_url.values():
        e.visits.sort()
    return sorted(by_url.values(), key=lambda e: (e.visits[0], e.url))
