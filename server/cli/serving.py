"""`refindery serve` and `refindery mcp`: the HTTP API (and the data dir's own socket, through which
every other command on this machine reaches a served data dir), and the MCP tools over stdio."""
from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

from engine.app import Engine
from engine.core.access import is_loopback
from engine.core.profile import missing as missing_model

from .common import _settings


def cmd_serve(args) -> int:
    """Serve HTTP (host:port, or --uds) and, for every other process on this machine, the data dir's
    own socket (server/owner.py): server.json beside the store says where, once the app is up."""
    import uvicorn

    from .. import owner as owners
    from ..app import create_app

    settings = _settings(args)
    held = _claim(settings)
    if held is None:
        return 2
    if args.check:
        os.close(held)
        return 0
    problem = missing_model(settings)
    if problem is not None:
        os.close(held)
        print(f"error: {problem}", file=sys.stderr)
        return 2
    embed = list(args.embed)
    if settings.profile != "default" and settings.models.catch_up and settings.models.active not in embed:
        # a data dir first ingested under another profile: what the profile's embedder lacks is embedded
        # in the background while the server serves (BM25 answers for every page meanwhile)
        embed.insert(0, settings.models.active)
    app = create_app(settings, freeze_heap=True, embed=embed)
    if args.uds:
        config = uvicorn.Config(app, uds=args.uds, **_log_options(settings))
    else:
        host = args.host or settings.server.host
        port = settings.server.port if args.port is None else args.port
        if not is_loopback(host) and not _active_keys(settings):
            print(f"error: refusing to serve on {host} with no API key: anyone who can reach it could read and "
                  "write everything. Create one first (refindery keys create --workspace '*'), or serve on "
                  "127.0.0.1.", file=sys.stderr)
            return 2
        config = uvicorn.Config(app, host=host, port=port, **_log_options(settings))
    from ..request_log import configure
    configure(settings.server.log_format)   # (after uvicorn's Config: it has set up its own loggers by then)
    try:
        if args.uds:
            owners.clear_stale(args.uds)
        own = owners.bind(settings.data_dir)   # under the lock: a file at its path is a dead server's
    except OSError as exc:
        print(f"error: cannot listen on a Unix socket: {exc}", file=sys.stderr)
        return 2
    own_path = own.getsockname()
    app.state.owner_socket = own_path
    try:
        listener = config.bind_socket()
        if args.uds:
            http = None
        else:
            bound_host, bound_port = listener.getsockname()[:2]
            http = f"http://{'[' + bound_host + ']' if ':' in bound_host else bound_host}:{bound_port}"
        server = _OwningServer(config, lambda: _announce(owners.publish(settings.data_dir, own_path, http)),
                               lambda: owners.withdraw(settings.data_dir, own_path))
        server.run(sockets=[listener, own])
    finally:
        owners.withdraw(settings.data_dir, own_path)
    return 0


def _claim(settings) -> int | None:
    """The data dir's lock, taken before any socket (a second serve is refused here, before it could
    take — or unlink — the socket of a first that is still starting); None, with the error printed,
    when a server holds the data dir or is starting on it."""
    from .. import owner as owners

    try:
        running = owners.find(settings.data_dir)
    except owners.Untrusted as exc:
        print(f"error: {exc}", file=sys.stderr)
        return None
    if running is not None:
        print(f"error: the data dir {settings.data_dir} is already served ({running.describe()}); other "
              "refindery commands go through that server. Stop it to serve this data dir again.", file=sys.stderr)
        return None
    try:
        return owners.lock(settings.data_dir)
    except owners.Busy as exc:
        print(f"error: {exc}; other refindery commands go through that server once it is up. Stop it to serve "
              "this data dir again.", file=sys.stderr)
        return None


def _log_options(settings) -> dict:
    """uvicorn's logging: its access log off (the app logs one line per request, server/request_log.py);
    in JSON, none of its own configuration (its records go through the root's JSON handler)."""
    json_log = settings.server.log_format == "json"
    return {"log_level": "info", "access_log": False, **({"log_config": None} if json_log else {})}


def _announce(owner) -> None:
    logging.getLogger("uvicorn.error").info(
        "Other refindery commands on this machine (search, ingest, mcp, keys, status ...) reach this data dir "
        "through %s (%s)", owner.socket, Path(owner.data_dir) / "server.json")


def _OwningServer(config, on_started, on_stopping):
    import uvicorn

    class OwningServer(uvicorn.Server):
        """uvicorn's server, which says it owns the data dir once it accepts connections (not before:
        a client that found server.json must find it listening), and stops saying so first thing
        when it shuts down (uvicorn re-raises SIGTERM/SIGINT after its shutdown, so nothing after
        `run` would run)."""

        async def startup(self, sockets=None) -> None:
            await super().startup(sockets)
            if self.started:
                on_started()

        async def shutdown(self, sockets=None) -> None:
            on_stopping()
            await super().shutdown(sockets)

    return OwningServer(config)


def _active_keys(settings) -> int:
    with Engine(settings, repair=False) as e:
        return e.active_keys


def cmd_mcp(args) -> int:
    """The MCP tools over stdio, for desktop agent clients (logs go to stderr: stdout is the protocol)."""
    from ..app import create_app

    settings = _settings(args)
    with Engine(settings) as e:
        create_app(settings, engine=e).state.mcp.run("stdio")
        return 0


def add_serve(sub) -> None:
    s = sub.add_parser("serve", help="serve the HTTP API")
    s.add_argument("--host", default=None)
    s.add_argument("--port", type=int, default=None)
    s.add_argument("--uds", default=None, help="serve on this Unix domain socket instead of host:port")
    s.add_argument("--check", action="store_true",
                   help="only say whether the data dir is free to serve (exit 0) or already served (exit 2)")
    s.add_argument("--embed", action="append", default=[], metavar="MODEL",
                   help="embed what MODEL lacks in the background once serving (repeatable; progress in GET /v1/models)")
    s.set_defaults(func=cmd_serve)


def add_mcp(sub) -> None:
    s = sub.add_parser("mcp", help="serve the MCP tools over stdio (for desktop agent clients)")
    s.set_defaults(func=cmd_mcp)
