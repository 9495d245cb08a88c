"""`refindery` command line: one small module per face — pages (ingest), serving (serve, mcp), search
(search, evidence, maps, dictionary, feedback, compare), relations, access (keys), operations
(reindex, models, clusters, log, status) — each a command that calls one Engine verb with the local
operator's grant. Here: the parser they make together, and the dispatch — while a server owns the data
dir, a command goes through it (server/remote.py) rather than opening the store."""
from __future__ import annotations

import argparse
import logging
import os
import sys
from importlib.metadata import entry_points

from pydantic import ValidationError

from engine.app import USER_ERRORS, DataDirBusy
from engine.core.private import tighten_umask
from engine.core.settings import ConfigFileError

from . import access, backups, imports, operations, pages, relations, search, serving
from .common import _settings
from .relations import relation_request
from .search import _evidence_request, _show_compare, _show_evidence, _show_maps, _show_search, dictionary_file, \
    search_request

__all__ = ["main", "build_parser", "relation_request", "search_request"]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="refindery", description="Refindery: a hybrid retrieval engine.")
    p.add_argument("--config", help="user config file (TOML) layered over configs/default.toml "
                                    "(also $REFINDERY_CONFIG)")
    p.add_argument("--profile", choices=["default", "quality"], default=None,
                   help="default (quick to ingest) or quality (the stronger embedder: `make models-mpnet` installs "
                        "it); also $REFINDERY_PROFILE or profile = \"quality\" in the config file")
    p.add_argument("-v", "--verbose", action="store_true")
    sub = p.add_subparsers(dest="command", required=True)
    pages.add(sub)                  # ingest, forget
    imports.add(sub)                # import
    serving.add_serve(sub)          # serve
    search.add(sub)                 # search, evidence, maps, dictionary, feedback, compare
    operations.add(sub)             # reindex, models, clusters, log
    relations.add(sub)              # relations
    access.add(sub)                 # keys
    serving.add_mcp(sub)            # mcp
    operations.add_status(sub)      # status
    backups.add(sub)                # backup, restore, export
    # Command groups other packages register (entry point group "refindery.cli", see pyproject.toml):
    # eval adds `eval` and `reranker`, so this face never imports eval (import-linter's layers).
    for ep in sorted(entry_points(group="refindery.cli"), key=lambda e: e.name):
        ep.load()(sub)
    return p


# Verbs that open the data dir of the settings: while a server owns it they go through the server.
OWNED = {"ingest", "forget", "import", "search", "evidence", "maps", "dictionary", "compare", "feedback", "reindex", "models", "clusters",
         "log", "relations", "keys", "mcp", "status", "backup", "export"}


def _verb(args) -> str:
    if args.command == "relations" and args.action in ("load", "sync", "demo", "demo-profiles"):
        return f"relations {args.action}"
    if args.command == "keys" and args.action == "open":
        return "keys open"
    if args.command == "import":
        return f"import {args.what}"
    return args.command


def _through(args, owner) -> int:
    """A verb of OWNED, sent to the server that owns the data dir (server/remote.py)."""
    from .. import remote

    verb = _verb(args)
    if verb in remote.NEEDS_THE_DATA_DIR:
        print(remote.refusal(verb, owner), file=sys.stderr)
        return 2
    asked = getattr(args, "profile", None)
    if asked is not None and (served := remote.profile_of(owner)) != asked:
        # the server answers with its own embedder: a --profile it does not run would be silently ignored
        print(f"error: the server holding the data dir ({owner.describe()}) runs the {served} profile, not "
              f"{asked}: run the command without --profile to have it answer, or restart the server with "
              f"--profile {asked}", file=sys.stderr)
        return 2
    if verb == "search":
        return remote.search(args, owner, search_request(args), _show_search)
    if verb == "evidence":
        req = _evidence_request(args)
        return 2 if req is None else remote.evidence(args, owner, req, _show_evidence)
    if verb == "keys" and args.action == "create" and not args.workspace:
        print("error: keys create needs --workspace W (repeat it, or '*' for every workspace)", file=sys.stderr)
        return 2
    if verb == "keys" and args.action == "revoke" and not args.key_id:
        print("error: keys revoke needs a KEY_ID", file=sys.stderr)
        return 2
    if verb == "ingest":
        batch = max(64 * 1024, int(_settings(args).server.max_body_bytes * 0.8))
        try:
            return remote.ingest(args, owner, batch)
        except FileNotFoundError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    if verb == "mcp":
        return remote.mcp_stdio(owner)
    if verb == "backup":
        return backups.through_server(args, owner)
    if verb == "export":
        return backups.export_through_server(args, owner)
    if verb.startswith("import "):
        return imports.through_server(args, owner)
    if verb == "compare":
        return remote.compare(args, owner, _show_compare)
    if verb == "maps":
        return remote.maps(args, owner, _show_maps)
    if verb == "dictionary":
        source = dictionary_file(args) if args.action == "set" else None
        return 2 if args.action == "set" and source is None else remote.dictionary(args, owner, source)
    if verb == "relations" and args.action == "search":
        req = relation_request(args)
        return 2 if req is None else remote.relations(args, owner, req)
    return getattr(remote, verb)(args, owner)


def _owner(args):
    """The server that owns the data dir this command would open, if one does."""
    from .. import owner as owners

    if args.command not in OWNED:
        return None
    return owners.find(_settings(args).data_dir)


def _busy(args) -> str | None:
    """A one-line account of why the data dir could not be opened, when another process holds it."""
    from .. import owner as owners

    settings = _settings(args)
    try:
        running = owners.find(settings.data_dir)
    except owners.Untrusted as exc:
        return f"error: {exc}"
    if running is not None:
        return (f"error: a server has just started on the data dir {settings.data_dir} ({running.describe()}); "
                "run the command again and it goes through the server")
    return None


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    tighten_umask()   # whatever this process writes in a data dir is its user's alone (engine/core/private.py)
    try:
        owner = _owner(args)
        return _through(args, owner) if owner is not None else args.func(args)
    except ConfigFileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # the reader went away (`refindery search ... | head -3`): stop quietly, as a Unix tool does,
        # and keep the interpreter's own flush at exit from raising again
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (AttributeError, OSError, ValueError):   # a stdout with no file behind it
            pass
        return 141   # 128 + SIGPIPE, what a shell reports for a writer whose pipe closed
    except Exception as exc:  # a clear one-line error for known failures
        if isinstance(exc, USER_ERRORS):
            busy = _busy(args) if isinstance(exc, DataDirBusy) else None
            print(busy or f"error: {exc}", file=sys.stderr)
            return 2
        if _is_client_error(exc):
            print(f"error: {_client_error_line(exc)}", file=sys.stderr)
            return 2
        from ..owner import ClientMissing, Untrusted

        if isinstance(exc, (ClientMissing, Untrusted)):
            print(f"error: {exc}", file=sys.stderr)
            return 2
        if isinstance(exc, ValidationError):   # a request the arguments make, refused before it is sent
            first = exc.errors()[0]
            print(f"error: {'.'.join(str(x) for x in first['loc'])}: {first['msg']}", file=sys.stderr)
            return 2
        if args.verbose:
            raise
        # anything else (a server's reply this command did not expect, say): one line, not a traceback
        where = "the server's reply was not what this command expected" if _went_through_server(args) else \
            "this command failed"
        print(f"error: {where}: {type(exc).__name__}: {exc} (refindery -v {args.command} ... shows the traceback)",
              file=sys.stderr)
        return 2


def _went_through_server(args) -> bool:
    try:
        return _owner(args) is not None
    except Exception:   # noqa: BLE001 — only for the wording of the error line
        return False


def _is_client_error(exc: Exception) -> bool:
    try:
        import httpx
        from refindery.client import RefinderyError
    except ImportError:   # the client package is not installed: no server could have been reached
        return False
    return isinstance(exc, (RefinderyError, httpx.TransportError))


def _client_error_line(exc: Exception) -> str:
    """A refusal from the server, as the local verb would have put it; or the server gone."""
    detail = getattr(exc, "detail", None)
    if isinstance(detail, dict) and detail.get("type") == "validation_error" and detail.get("errors"):
        first = detail["errors"][0]
        where = ".".join(str(x) for x in first.get("loc", ()) if x != "body")
        return f"{exc.status} validation_error: {where}: {first.get('msg')}"
    if hasattr(exc, "status"):
        return str(exc)
    return f"the server that holds the data dir stopped answering ({type(exc).__name__}: {exc})"
