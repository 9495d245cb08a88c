"""`refindery keys`: API keys — create (the token shown once), list, revoke, open."""
from __future__ import annotations

import sys

from engine.app import Engine
from engine.core.errors import InvalidRequest

from .common import _print, _settings


def cmd_keys(args) -> int:
    with Engine(_settings(args), repair=False) as e:
        if args.action == "create":
            if not args.workspace:
                print("error: keys create needs --workspace W (repeat it, or '*' for every workspace)",
                      file=sys.stderr)
                return 2
            try:
                _print(e.create_key(args.workspace, args.scope, args.read_only, args.name,
                                    pages_only=args.pages_only))
            except InvalidRequest as exc:
                print(f"error: {exc}", file=sys.stderr)
                return 2
        elif args.action == "list":
            _print({"keys": e.list_keys()})
        elif args.action == "open":
            if not args.yes:
                print("error: keys open lets every request in without a key (served on loopback only); "
                      "confirm with --yes", file=sys.stderr)
                return 2
            try:
                e.reopen_keys()
            except ValueError as exc:
                print(f"error: {exc}", file=sys.stderr)
                return 2
            _print({"open": True, "note": "requests need no key until the next key is created; "
                                          "`refindery serve` binds to loopback only meanwhile"})
        else:
            if not args.key_id:
                print("error: keys revoke needs a KEY_ID", file=sys.stderr)
                return 2
            _print(e.revoke_key(args.key_id))
        return 0


def add(sub) -> None:
    s = sub.add_parser("keys", help="API keys: create (the token is shown once), list, revoke; open (no key "
                                    "needed again, once every key is revoked: local and explicit)")
    s.add_argument("action", choices=["create", "list", "revoke", "open"])
    s.add_argument("--yes", action="store_true", help="open: confirm")
    s.add_argument("key_id", nargs="?", help="revoke: the key's id")
    s.add_argument("--workspace", action="append", help="create: a workspace it may use (repeat; '*' for all)")
    s.add_argument("--scope", action="append", default=[], help="create: a document scope it may read (repeat)")
    s.add_argument("--read-only", action="store_true", help="create: it may not write")
    s.add_argument("--pages-only", action="store_true",
                   help="create: it only adds pages (and visits) to its one workspace, and forgets them; "
                        "no search, no reads (the browser extension's key)")
    s.add_argument("--name", default=None, help="create: a label for it")
    s.set_defaults(func=cmd_keys)
