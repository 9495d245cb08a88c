"""Bookmarks, read: the HTML file every browser exports (the Netscape bookmark format), Chromium's
`Bookmarks` (JSON) and Firefox's places.sqlite (copied first, as a history is). Each bookmark has its
URL, title, folder path ("Bookmarks Menu / Mozilla Firefox") and the time it was added."""
from __future__ import annotations

import json
import sqlite3
import tempfile
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from html.parser import HTMLParser
from pathlib import Path

from engine.ingest.history import HistoryError, history_file
from engine.ingest.imports import Entry
from engine.ingest.records import EntityInput

SEP = " / "
FIREFOX_ROOTS = {"menu": "Bookmarks Menu", "toolbar": "Bookmarks Toolbar", "unfiled": "Other Bookmarks",
                 "mobile": "Mobile Bookmarks"}
CHROMIUM_ROOTS = {"bookmark_bar": "Bookmarks bar", "other": "Other bookmarks", "synced": "Mobile bookmarks"}


@dataclass
class Bookmark:
    url: str
    title: str | None
    folder: str          # the folder path, SEP between levels ("" at the top)
    added: datetime | None


def _from_unix(v) -> datetime | None:
    try:
        return datetime.fromtimestamp(int(v), tz=timezone.utc).replace(tzinfo=None)
    except (TypeError, ValueError, OverflowError, OSError):
        return None


class _Netscape(HTMLParser):
    """<DL> opens the folder whose <H3> came just before; <DT><A HREF ADD_DATE>title</A> is a bookmark."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.out: list[Bookmark] = []
        self.path: list[str] = []
        self.pending: str | None = None   # the last <H3>'s name, until its <DL>
        self._text: list[str] | None = None
        self._link: dict | None = None
        self._depth_named: list[bool] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag in ("h1", "h3"):   # h1: the file's top folder ("Bookmarks Menu" in Firefox's export)
            self._text = []
        elif tag == "a":
            self._link, self._text = a, []
        elif tag == "dl":
            named = self.pending is not None
            if named:
                self.path.append(self.pending)
            self._depth_named.append(named)
            self.pending = None

    def handle_endtag(self, tag):
        if tag in ("h1", "h3") and self._text is not None:
            self.pending, self._text = " ".join("".join(self._text).split()), None
        elif tag == "a" and self._link is not None:
            href = (self._link.get("href") or "").strip()
            if href:
                title = " ".join("".join(self._text or []).split()) or None
                self.out.append(Bookmark(href, title, SEP.join(self.path), _from_unix(self._link.get("add_date"))))
            self._link, self._text = None, None
        elif tag == "dl" and self._depth_named:
            if self._depth_named.pop():
                self.path.pop()

    def handle_data(self, data):
        if self._text is not None:
            self._text.append(data)


def _netscape(text: str) -> list[Bookmark]:
    p = _Netscape()
    p.feed(text)
    p.close()
    return p.out


def _chromium(data: dict) -> list[Bookmark]:
    out: list[Bookmark] = []
    epoch = datetime(1601, 1, 1)

    def walk(node: dict, path: list[str]) -> None:
        if node.get("type") == "url":
            try:
                added = epoch + timedelta(microseconds=int(node.get("date_added", 0)))
            except (TypeError, ValueError, OverflowError):
                added = None
            out.append(Bookmark(node.get("url", ""), (node.get("name") or "").strip() or None, SEP.join(path),
                                added if added and added.year > 1970 else None))
        for child in node.get("children", []) or []:
            walk(child, path + [child.get("name", "")] if child.get("type") == "folder" else path)

    for key, root in (data.get("roots") or {}).items():
        if isinstance(root, dict):
            walk(root, [CHROMIUM_ROOTS.get(key, root.get("name") or key)])
    return out


def _firefox(db: sqlite3.Connection) -> list[Bookmark]:
    rows = db.execute("""SELECT b.id, b.type, b.parent, b.title, b.dateAdded, p.url, b.guid
                         FROM moz_bookmarks b LEFT JOIN moz_places p ON p.id = b.fk""").fetchall()
    nodes = {r[0]: r for r in rows}
    roots = {"root________": None, "menu________": "menu", "toolbar_____": "toolbar", "unfiled_____": "unfiled",
             "mobile______": "mobile", "tags________": "tags"}

    def path(fid: int) -> list[str] | None:
        out, seen = [], set()
        while fid in nodes and fid not in seen:
            seen.add(fid)
            _, _, parent, title, _, _, guid = nodes[fid]
            if guid in roots:
                if roots[guid] == "tags":
                    return None   # a tag's entry, not a bookmark in a folder
                if roots[guid]:
                    out.append(FIREFOX_ROOTS[roots[guid]])
                break
            out.append(title or "")
            fid = parent
        return list(reversed(out))

    out = []
    for _, kind, parent, title, added, url, _ in rows:
        if kind != 1 or not url:
            continue
        folder = path(parent)
        if folder is None:
            continue
        out.append(Bookmark(url, (title or "").strip() or None, SEP.join(folder),
                            _from_unix(added // 1_000_000) if added else None))
    return out


def read_bookmarks(path: Path) -> list[Bookmark]:
    """The bookmarks of an exported HTML file, a Chromium `Bookmarks` file or a Firefox places.sqlite
    (a profile folder: its Bookmarks or places.sqlite). Anything else is a HistoryError."""
    if path.is_dir():
        path = next((path / n for n in ("Bookmarks", "places.sqlite") if (path / n).is_file()), path)
    src = history_file(path)
    head = src.read_bytes()[:4096]
    if head.startswith(b"SQLite format 3"):
        from sqlite_backup import sqlite_backup

        with tempfile.TemporaryDirectory(prefix="refindery-bookmarks-") as tmp:
            copy = Path(tmp) / src.name
            try:
                sqlite_backup(src, copy, copy_use_tempdir=True)
                with sqlite3.connect(f"file:{copy}?immutable=1", uri=True) as db:
                    return _firefox(db)
            except sqlite3.DatabaseError as exc:
                raise HistoryError(f"{src} holds no bookmarks this can read ({exc})") from None
    text = src.read_text(encoding="utf-8", errors="replace")
    if text.lstrip().startswith("{"):
        try:
            return _chromium(json.loads(text))
        except (ValueError, AttributeError, TypeError) as exc:
            raise HistoryError(f"{src} is not a Chromium bookmarks file ({exc})") from None
    if "NETSCAPE-Bookmark-file" in text[:1000] or "<dl" in text[:5000].lower():
        return _netscape(text)
    raise HistoryError(f"{src} is not a bookmarks file this can read (an exported HTML file, Chromium's "
                       "Bookmarks, or Firefox's places.sqlite)")


BOOKMARKED = EntityInput(canonical="bookmarked", id="bookmarked")


def folder_entity(folder: str) -> EntityInput:
    """A bookmark folder as an entity pages link to: filter a search by it (`filters.entity`)."""
    name = folder or "Bookmarks"
    return EntityInput(canonical=name[:300], id=f"bookmark-folder:{name}"[:200])


def to_entries(bookmarks: list[Bookmark]) -> list[Entry]:
    """One entry per URL: linked to "bookmarked" and to each folder holding it; first known when first added."""
    by_url: dict[str, Entry] = {}
    for b in bookmarks:
        e = by_url.setdefault(b.url, Entry(b.url, b.title, [], [BOOKMARKED]))
        e.title = e.title or b.title
        folder = folder_entity(b.folder)
        if folder.id not in {x.id for x in e.entities}:
            e.entities.append(folder)
        if b.added and (e.first_seen is None or b.added < e.first_seen):
            e.first_seen = b.added
    return list(by_url.values())
