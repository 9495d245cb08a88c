"""Backups from the command line: `backup DEST` (while a server holds the data dir, it writes the
backup: the CLI asks it over the owner's socket), `backup --verify SRC`, `restore SRC --data-dir NEW`,
and `export pages|relations|log DEST`."""
from __future__ import annotations

import sys
from pathlib import Path

from engine.app import Engine
from engine.core import backup

from engine.core.settings import load_settings

from .common import _print, _settings


def cmd_backup(args) -> int:
    if args.verify:
        report = backup.verify(args.verify)
        _print(report)
        return 0 if report["complete"] else 1
    if not args.dest:
        print("error: refindery backup DEST (a new or empty folder), or --verify SRC", file=sys.stderr)
        return 2
    with Engine(_settings(args), repair=False) as e:
        _print(e.backup(Path(args.dest).resolve()))
    return 0


def cmd_restore(args) -> int:
    overrides = {"data_dir": str(Path(args.data_dir).resolve())}
    if args.store_url:
        overrides["store"] = {"url": args.store_url}
    settings = load_settings(args.config, **({"profile": args.profile} if args.profile else {}), **overrides)
    _print(backup.restore(args.src, settings))
    return 0


def cmd_export(args) -> int:
    with Engine(_settings(args), repair=False) as e:
        _print(e.export(args.what, Path(args.dest).resolve(), args.workspace))
    return 0


def export_through_server(args, owner) -> int:
    """`export` while a server holds the data dir: pages streamed from GET /v1/export/pages and written
    here; relation tables and the log written by the server where the operator says (the owner's socket)."""
    from engine.core import export

    from .. import remote

    dest = Path(args.dest).resolve()
    if args.what != "pages":
        _print(remote._call(owner, "POST", "/v1/export", {"what": args.what, "path": str(dest),
                                                         "workspace": args.workspace}))
        return 0
    with owner.client() as client:
        n = export.write_pages(client.export_pages(args.workspace), dest)
    _print({"what": "pages", "dest": str(dest), "pages": n, "through": owner.describe()})
    return 0


def through_server(args, owner) -> int:
    """`backup DEST` while a server holds the data dir: the server writes it (the owner's socket may
    name a path; a key may not)."""
    from .. import remote

    if args.verify or not args.dest:
        return cmd_backup(args)
    _print(remote._call(owner, "POST", "/v1/backup", {"path": str(Path(args.dest).resolve())}))
    return 0


def add(sub) -> None:
    s = sub.add_parser("backup", help="a consistent copy of the data dir while it serves (store tables, keys, log, "
                                      "files; indexes are rebuilt on restore), or --verify one")
    s.add_argument("dest", nargs="?", help="a new or empty folder to write the backup into")
    s.add_argument("--verify", metavar="SRC", help="check the backup at SRC is whole (manifest, sizes, SHA-256s): "
                                                  "exit 0 if it is, 1 if not")
    s.set_defaults(func=cmd_backup)

    s = sub.add_parser("restore", help="a new data dir from a backup: its store written, its indexes built")
    s.add_argument("src", help="the backup's folder")
    s.add_argument("--data-dir", required=True, help="the new data dir (must not exist, or be empty)")
    s.add_argument("--store-url", default=None, help="a PostgreSQL backup: the empty database to restore into "
                                                     "(else [store] url of the settings)")
    s.set_defaults(func=cmd_restore)

    s = sub.add_parser("export", help="the way out in open formats: pages as JSONL (what ingest reads back), the "
                                      "relation tables or the query log as Parquet, one file per table")
    s.add_argument("what", choices=["pages", "relations", "log"])
    s.add_argument("dest", help="pages: a new .jsonl (or .jsonl.gz) file; relations, log: a new or empty folder")
    s.add_argument("--workspace", default=None, help="one workspace (pages: default the default workspace; "
                                                     "relations, log: default every workspace)")
    s.set_defaults(func=cmd_export)
