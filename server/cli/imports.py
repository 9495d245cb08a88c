"""`refindery import history|bookmarks|status`: a browser's history or bookmarks in, the pages' texts fetched politely, and
where an import stands (engine/verbs/imports.py)."""
from __future__ import annotations

import sys
from pathlib import Path

from engine.app import Engine
from engine.core.progress import Progress

from .common import _print, _settings
from .pages import when


def _rules(inline: list[str], files: list[str]) -> str:
    lines = list(inline)
    for f in files:
        lines += Path(f).read_text(encoding="utf-8").splitlines()
    return "\n".join(lines)


def cmd_import(args) -> int:
    if args.what == "status":
        with Engine(_settings(args)) as e:
            _print(e.import_status(args.path) if args.path else e.imports())
        return 0
    from engine.ingest.history import locate, read_history
    from engine.ingest.rules import Rules

    skip, allow = _rules(args.skip, args.skip_file), _rules(args.allow, args.allow_file)
    bad = list(Rules.parse(skip).errors + Rules.parse(allow).errors)
    if bad:
        print("error: not a rule: " + "; ".join(bad), file=sys.stderr)
        return 2
    path = Path(args.path) if args.path else locate(args.browser or "firefox", args.browser_profile)
    if args.what == "bookmarks":
        from engine.ingest.bookmarks import read_bookmarks, to_entries

        entries = to_entries(read_bookmarks(path if args.path else path.parent))
    else:
        entries = read_history(path, since=args.since)
    with Engine(_settings(args)) as e:
        shown = not args.no_progress
        written = Progress("import: pages and visits", len(entries), enabled=shown)
        fetching = Progress("import: texts fetched", None, enabled=shown)
        out = e.import_visits(entries, args.what, str(path.resolve()), args.workspace, fetch=not args.no_fetch,
                              skip=skip, allow=allow, since=args.since, tick=written.update,
                              fetch_tick=fetching.update)
        written.close()
        fetching.close()
    _print(out)
    return 0


def add(sub) -> None:
    s = sub.add_parser("import", help="import a browser's history or bookmarks: their pages (and visits) at once, "
                                      "their texts fetched politely; `import status [ID]` says where an import stands")
    s.add_argument("what", choices=["history", "bookmarks", "status"])
    s.add_argument("path", nargs="?", default=None,
                   help="history: the history file (History, places.sqlite, History.db) or a profile folder "
                        "(default: the browser's, found on this machine); bookmarks: an exported bookmarks "
                        "HTML file, Chromium's Bookmarks, Firefox's places.sqlite or a profile folder; "
                        "status: an import's id (none: all)")
    s.add_argument("--browser", default=None, help="whose history to find when no path is given (default firefox): "
                                                   "chrome, chromium, firefox, brave, edge, vivaldi, opera, safari, ...")
    s.add_argument("--browser-profile", default="*", help="which of the browser's profiles (a folder name)")
    s.add_argument("--since", type=when, default=None, help="only visits since this date or time (UTC)")
    s.add_argument("--no-fetch", action="store_true", help="titles and URLs only: fetch no page's text")
    s.add_argument("--skip", action="append", default=[], metavar="RULE",
                   help="a rule as the extension's settings take them (example.com, a URL prefix, a *pattern*, "
                        "a /regex/): what it names is not imported (repeat it)")
    s.add_argument("--skip-file", action="append", default=[], metavar="FILE", help="skip rules, one per line")
    s.add_argument("--allow", action="append", default=[], metavar="RULE",
                   help="with allow rules, only what one names is imported (repeat it)")
    s.add_argument("--allow-file", action="append", default=[], metavar="FILE", help="allow rules, one per line")
    s.add_argument("--workspace", default=None)
    s.add_argument("--no-progress", action="store_true")
    s.set_defaults(func=cmd_import)
