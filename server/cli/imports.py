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


def _read(args):
    """(entries, source path, skip rules, allow rules) of the file the arguments name; None: said why."""
    from engine.ingest.history import locate, read_history
    from engine.ingest.rules import Rules

    skip, allow = _rules(args.skip, args.skip_file), _rules(args.allow, args.allow_file)
    bad = list(Rules.parse(skip).errors + Rules.parse(allow).errors)
    if bad:
        print("error: not a rule: " + "; ".join(bad), file=sys.stderr)
        return None
    path = Path(args.path) if args.path else locate(args.browser or "firefox", args.browser_profile)
    if args.what == "bookmarks":
        from engine.ingest.bookmarks import read_bookmarks, to_entries

        entries = to_entries(read_bookmarks(path if args.path else path.parent))
    else:
        entries = read_history(path, since=args.since)
    return entries, path.resolve(), skip, allow


def cmd_import(args) -> int:
    if args.what == "status":
        with Engine(_settings(args)) as e:
            _print(e.import_status(args.path) if args.path else e.imports())
        return 0
    read = _read(args)
    if read is None:
        return 2
    entries, path, skip, allow = read
    with Engine(_settings(args)) as e:
        shown = not args.no_progress
        written = Progress("import: pages and visits", len(entries), enabled=shown)
        fetching = Progress("import: texts fetched", None, enabled=shown)
        out = e.import_visits(entries, args.what, str(path), args.workspace, fetch=not args.no_fetch,
                              skip=skip, allow=allow, since=args.since, tick=written.update,
                              fetch_tick=fetching.update)
        written.close()
        fetching.close()
    _print(out)
    return 0


def through_server(args, owner, poll_s: float = 1.0) -> int:
    """The same import beside a server that holds the data dir: the file is read here and sent to
    POST /v1/imports in batches; the server writes them and fetches the texts, and this follows
    GET /v1/imports/{id} until nothing is queued (Ctrl-C stops following, not the fetch)."""
    import json
    import time

    from ..remote import _call

    if args.what == "status":
        _print(_call(owner, "GET", f"/v1/imports/{args.path}" if args.path else "/v1/imports"))
        return 0
    read = _read(args)
    if read is None:
        return 2
    entries, path, skip, allow = read
    budget = max(64 * 1024, int(_settings(args).server.max_body_bytes * 0.8))
    head = {"kind": args.what, "source": str(path), "fetch": not args.no_fetch, "skip": skip, "allow": allow,
            **({"since": args.since.isoformat()} if args.since else {}),
            **({"workspace": args.workspace} if args.workspace else {})}
    written: dict[str, int] = {}
    batch, size, reply = [], 0, None

    def post() -> None:
        nonlocal batch, size, reply
        if batch:
            reply = _call(owner, "POST", "/v1/imports", head | {"entries": batch})
            for k, v in reply["written"].items():
                written[k] = written.get(k, 0) + v
            batch, size = [], 0

    for e in entries:
        item = {"url": e.url, "title": e.title, "visits": [v.isoformat() for v in e.visits],
                "entities": [x.model_dump(exclude_none=True) for x in e.entities],
                **({"first_seen": e.first_seen.isoformat()} if e.first_seen else {})}
        n = len(json.dumps(item))
        if batch and (len(batch) >= 5000 or size + n > budget):
            post()
        batch.append(item)
        size += n
    post()
    if reply is None:
        _print({"written": written, "through": owner.describe()})
        return 0
    import_id = reply["import_id"]
    status = reply["status"]
    try:
        while not args.no_fetch and not status["done"]:
            if not args.no_progress:
                c = status["counts"]
                print(f"import: {c['queued']} texts to fetch, {c['fetched']} fetched, {c['failed']} failed, "
                      f"{c['skipped']} skipped", file=sys.stderr, flush=True)
            time.sleep(poll_s)
            status = _call(owner, "GET", f"/v1/imports/{import_id}")
    except KeyboardInterrupt:
        print(f"import: the server goes on fetching; `refindery import status {import_id}` follows it",
              file=sys.stderr)
    _print({"import_id": import_id, "written": written, "status": status, "through": owner.describe()})
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
