"""`refindery` command line: ingest, serve, search, reindex, models, status."""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from importlib.metadata import entry_points
from pathlib import Path

from pydantic import ValidationError

from engine.app import USER_ERRORS, DataDirBusy, Engine
from engine.core.access import is_loopback
from engine.core.private import tighten_umask
from engine.core.profile import missing as missing_model
from engine.core.settings import ConfigFileError, Settings, load_settings
from engine.evidence.search import EvidenceRequest
from engine.refind.search import SearchRequest
from engine.relations.search import RelationSearchRequest

from .flags import add_request_flags, request_values


def _settings(args: argparse.Namespace) -> Settings:
    profile = getattr(args, "profile", None)
    return load_settings(args.config, **({"profile": profile} if profile else {}))


def _print(obj) -> None:
    print(json.dumps(obj, indent=2, default=str))


def cmd_ingest(args) -> int:
    from engine.ingest.records import read_source

    with Engine(_settings(args)) as e:
        try:
            report = e.ingest(read_source(args.path, args.base_url), args.workspace, progress=not args.no_progress,
                              ray=args.ray, total=_count_records(args.path))
        except FileNotFoundError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        for err in report.errors:
            print(f"{err.source}:{err.line}: skipped: {err.error}", file=sys.stderr)
        summary = report.summary()
        summary["chunks_per_second"] = round(report.chunks_embedded / report.seconds, 1) if report.seconds else None
        _print(summary)
        late = e.settings.catch_up_model
        if late:   # the quality profile wrote its fast embedder only: say who embeds the rest, and when
            counts = e.corpus.store.counts()
            waiting = counts["chunks"] - counts["embeddings"].get(late, 0)
            if waiting:
                print(f"ingest: {waiting} chunks wait for {late}: `refindery serve` embeds them in its background "
                      f"(searchable meanwhile), or `refindery models --embed {late}` now", file=sys.stderr)
        return 1 if report.errors and not report.outcomes else 0


def _count_records(path: str) -> int | None:
    """Records in a JSONL file (for the progress line's total and time left); None for stdin or a folder."""
    import gzip

    p = Path(path)
    if path == "-" or not p.is_file():
        return None
    with (gzip.open(p, "rt", encoding="utf-8") if p.suffix == ".gz" else open(p, encoding="utf-8")) as fh:
        return sum(1 for line in fh if line.strip())


def cmd_serve(args) -> int:
    """Serve HTTP (host:port, or --uds) and, for every other process on this machine, the data dir's
    own socket (server/owner.py): server.json beside the store says where, once the app is up."""
    import uvicorn

    from . import owner as owners
    from .app import create_app

    settings = _settings(args)
    try:
        running = owners.find(settings.data_dir)
    except owners.Untrusted as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if running is not None:
        print(f"error: the data dir {settings.data_dir} is already served ({running.describe()}); other "
              "refindery commands go through that server. Stop it to serve this data dir again.", file=sys.stderr)
        return 2
    # the data dir's lock before any socket: a second serve is refused here, before it could take
    # (or unlink) the socket of a first that is still starting
    try:
        held = owners.lock(settings.data_dir)
    except owners.Busy as exc:
        print(f"error: {exc}; other refindery commands go through that server once it is up. Stop it to serve "
              "this data dir again.", file=sys.stderr)
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
        config = uvicorn.Config(app, uds=args.uds, log_level="info")
    else:
        host = args.host or settings.server.host
        port = settings.server.port if args.port is None else args.port
        if not is_loopback(host) and not _active_keys(settings):
            print(f"error: refusing to serve on {host} with no API key: anyone who can reach it could read and "
                  "write everything. Create one first (refindery keys create --workspace '*'), or serve on "
                  "127.0.0.1.", file=sys.stderr)
            return 2
        config = uvicorn.Config(app, host=host, port=port, log_level="info")
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


def cmd_keys(args) -> int:
    with Engine(_settings(args), repair=False) as e:
        if args.action == "create":
            if not args.workspace:
                print("error: keys create needs --workspace W (repeat it, or '*' for every workspace)",
                      file=sys.stderr)
                return 2
            _print(e.create_key(args.workspace, args.scope, args.read_only, args.name))
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


def cmd_search(args) -> int:
    with Engine(_settings(args)) as e:
        return _show_search(args, e.search(search_request(args)))


def search_request(args):
    """The search request the arguments make (the flags it was not given stay unset)."""
    return SearchRequest(query=args.query, **request_values(args, args.request_fields))


def _show_search(args, resp) -> int:
    if args.json:
        print(resp.model_dump_json(indent=2))
        return 0
    print(f"{resp.total} pages ranked; showing {len(resp.pages)} ({resp.timings_ms['total']:.0f} ms)")
    for hit in resp.pages:
        why = f"pinned: {hit.pinned}" if hit.pinned and not hit.score else f"score={hit.score:.4f}"
        print(f"{hit.rank:>3}. {hit.title or '(untitled)'}\n     {hit.url}   {why}")
        if hit.snippets:
            snip = " ".join(hit.snippets[0].text.split())
            print(f"     {snip[:160]}{'…' if len(snip) > 160 else ''}")
    return 0


def _evidence_request(args):
    """The evidence request the arguments make, or None (the error printed)."""
    values = request_values(args, args.request_fields)
    if args.map_write and "map_write" not in values.get("route_constraints", []):
        values["route_constraints"] = [*values.get("route_constraints", []), "map_write"]
    try:
        return EvidenceRequest(query=args.query, **values)
    except ValidationError as exc:
        print(f"error: {exc.errors()[0]['loc'][0]}: {exc.errors()[0]['msg']}", file=sys.stderr)
        return None


def cmd_evidence(args) -> int:
    req = _evidence_request(args)
    if req is None:
        return 2
    with Engine(_settings(args)) as e:
        return _show_evidence(args, e.evidence(req))


def _show_evidence(args, resp) -> int:
    if args.json:
        print(json.dumps(resp.model_dump(mode="json") | {"file": resp.file}, indent=2))
    else:   # the seed's return text names the packet relative to the data dir; say where it is on disk
        print(f"{resp.summary}\n- Open: {resp.file}")
    return 0


def dictionary_file(args) -> tuple[str, str] | None:
    """`dictionary set FILE`: (format, text), or None with the error printed."""
    if not args.file:
        print("error: dictionary set needs a FILE (.toml or .md)", file=sys.stderr)
        return None
    path = Path(args.file)
    return ("toml" if path.suffix.lower() == ".toml" else "markdown"), path.read_text(encoding="utf-8")


def cmd_dictionary(args) -> int:
    with Engine(_settings(args), repair=False) as e:
        if args.action == "set":
            source = dictionary_file(args)
            if source is None:
                return 2
            _print(e.set_dictionary(args.workspace, *source))
        else:
            _print(e.dictionary(args.workspace))
        return 0


def cmd_maps(args) -> int:
    with Engine(_settings(args), repair=False) as e:
        m = e.maps(args.workspace)
    return _show_maps(args, m)


def _show_maps(args, m: dict) -> int:
    if args.json:
        _print(m)
        return 0
    print(f"workspace {m['workspace']} · {m['pages']} pages · generation {m['generation']} · overview {m['overview']}")
    for g in m["groups"]:
        print(f"  {g['kind']:<8} {str(g['value']):<40} {g['pages']:>6} pages  {g['label']}  ({g['map']})")
    if not m["notes"]:
        print("no notes written by searches (grant map_write: --map-write, route_constraints [\"map_write\"])")
        return 0
    print(f"notes written by searches (version {m['notes_version']}):")
    for n in m["notes"]:
        print(f"  v{n['version']}  {n['group']:<32} \"{n['sub_query']}\" -> {n['title'] or n['url']} "
              f"({n['confidence']}, session {n['session_id']})")
    return 0


def cmd_compare(args) -> int:
    from engine.refind.compare import CompareRequest

    with Engine(_settings(args)) as e:
        return _show_compare(args, e.compare(CompareRequest(query=args.query, models=args.models.split(","),
                                                            k=args.k)))


def _show_compare(args, resp) -> int:
    if args.json:
        print(resp.model_dump_json(indent=2))
        return 0
    for run in resp.runs:
        print(f"{run.model}:")
        for h in run.pages:
            print(f"  {h.rank:>2}. {h.title or h.url}")
    for a in resp.agreement:
        tau = "n/a" if a.kendall_tau_b is None else f"{a.kendall_tau_b:.3f}"
        print(f"{a.model_a} vs {a.model_b} @{a.k}: Jaccard {a.jaccard:.3f}  RBO_EXT(p={a.rbo_p}) {a.rbo_ext:.3f}  "
              f"Kendall tau-b {tau} over {a.shared} shared")
    print(f"query_id {resp.query_id}")
    return 0


def cmd_reindex(args) -> int:
    with Engine(_settings(args), repair=False) as e:
        _print(e.reindex())
        return 0


def cmd_models(args) -> int:
    from engine.core.progress import Progress

    if args.action in ("switch", "drop") and not args.name:
        print(f"error: refindery models {args.action} NAME: name the embedder", file=sys.stderr)
        return 2
    with Engine(_settings(args), repair=args.action == "switch") as e:
        if args.action == "status":
            _print(e.switch_status())
        elif args.action == "drop":
            _print(e.drop_model(args.name))
        elif args.action == "switch":
            # no server: the switch runs here, in the foreground, and swaps when it is done
            state = e.switch_model(args.name)
            bar = Progress(f"switch to {args.name}", None, "chunks")
            while e.settings.switch_target == args.name:
                emb = e.embedding(args.name) or {}
                if emb.get("state") not in ("embedding", "ready"):
                    break
                bar.total = emb.get("total") or bar.total
                bar.update(max(0, emb.get("done", 0) - bar.done))
                time.sleep(0.5)
            bar.close()
            state = e.switch_status()
            if state["active"] != args.name:
                print(f"error: the switch to {args.name} did not finish: {e.embedding(args.name)}", file=sys.stderr)
                return 2
            _print(state)
        elif args.embed:
            bar = None

            def progress(done: int, total: int) -> None:
                nonlocal bar
                if bar is None:
                    bar = Progress(f"embed {args.embed}", total, "chunks")
                bar.update(done - bar.done)

            n = e.embed_model(args.embed, progress)
            if bar is not None:
                bar.close()
            _print({"model": args.embed, "embedded": n})
        else:
            _print(e.models())
        return 0


def cmd_clusters(args) -> int:
    with Engine(_settings(args)) as e:
        if args.action == "refit":
            live = e.clusters(args.workspace)
            if args.if_missing and live["clusters"]:
                _print({"workspace": live["workspace"], "skipped": True, "clusters": len(live["clusters"])})
            else:
                _print(e.refit_clusters(args.workspace, args.k))
        else:
            _print(e.clusters(args.workspace, include_tombstoned=True)["clusters"])
        return 0


def cmd_log(args) -> int:
    from datetime import datetime

    before = datetime.fromisoformat(args.before)
    with Engine(_settings(args), repair=False) as e:
        _print({"before": before.isoformat(), "deleted": e.prune_log(before)})
        return 0


def cmd_feedback(args) -> int:
    """Judgments on logged searches and the shortcuts they make: add one, list the choices, clear them."""
    if args.action == "add" and not (args.query_id and args.page_id):
        print("error: feedback add needs a QUERY_ID and a PAGE_ID", file=sys.stderr)
        return 2
    with Engine(_settings(args), repair=False) as e:
        if args.action == "add":
            _print(e.feedback(args.query_id, args.page_id, args.kind))
        elif args.action == "list":
            _print(e.choices(args.workspace))
        else:
            _print(e.clear_feedback(args.workspace, args.clear_query, args.clear_page))
        return 0


def cmd_relations(args) -> int:
    """Relation workspaces from the command line: create one, load SQL tables or a folder of
    documents into it (a re-load of a folder is a sync), search it."""
    from pydantic import ValidationError

    from engine.core.errors import EngineError
    from engine.relations.documents import DocumentLoadRequest
    from engine.relations.loads import LoadRequest
    from engine.relations.workspaces import WorkspaceCreate

    with Engine(_settings(args)) as e:
        try:
            if args.action == "demo":
                out = _relations_demo(e, args.workspace or "roster")
            elif args.action == "sync":   # local: as the load was given
                if not args.load:
                    _print({"detail": {"type": "validation_error", "message": "sync needs --load LOAD_ID"}})
                    return 2
                out = e.sync_load(args.workspace, args.load, confined=False)
            elif args.action == "demo-profiles":
                out = _profiles_demo(e, args.workspace or "profiles")
            elif args.action == "create":
                out = e.create_relation_workspace(WorkspaceCreate(
                    workspace_id=args.workspace, name=args.name, packs=args.packs or ["expert_network"]))
            elif args.action == "load":   # local: any path the user names
                spec = json.loads(Path(args.spec).read_text(encoding="utf-8"))
                try:
                    body = (DocumentLoadRequest if "documents" in spec else LoadRequest).model_validate(spec)
                except ValidationError as exc:
                    _print({"detail": {"type": "validation_error", "errors": json.loads(exc.json())}})
                    return 2
                out = e.load(args.workspace, body, confined=False)
            else:
                req = relation_request(args)
                if req is None:
                    return 2
                out = e.relation_search(req)
            _print(out)
            return 0
        except EngineError as exc:
            _print({"detail": exc.body()})
            return 2


def relation_request(args):
    """The relation search the arguments make, or None (the error printed): --constraints names a
    JSON file of them; every other field of POST /v1/public/search is a flag of its own (those not
    given stay unset)."""
    constraints = (json.loads(Path(args.constraints).read_text(encoding="utf-8"))
                   if args.constraints else None)
    try:
        return RelationSearchRequest(workspace_id=args.workspace, constraints=constraints,
                                     **request_values(args, args.request_fields))
    except ValidationError as exc:
        _print({"detail": {"type": "validation_error", "errors": json.loads(exc.json())}})
        return None


def _relations_demo(e: Engine, workspace: str) -> dict:
    """The seed's roster as a demo workspace: written as a DuckDB export under the data dir and
    loaded (again: a re-run supersedes the previous load of the same export)."""
    from demo.roster import LOAD, write_export
    from engine.relations.loads import LoadRequest
    from engine.relations.workspaces import WorkspaceCreate

    source = write_export(e.data_dir / "sources" / "roster-warehouse.duckdb")
    if not e.has_relation_workspace(workspace):
        e.create_relation_workspace(WorkspaceCreate(workspace_id=workspace, name="roster"))
    summary = e.load(workspace, LoadRequest(source=str(source), **LOAD), confined=False)
    return {"workspace_id": workspace, "load_id": summary["load_id"],
            "rows": {r["relation"]: r["rows"] for r in summary["relations"]}}


def _profiles_demo(e: Engine, workspace: str) -> dict:
    """The 30 invented profiles (demo/profiles/) as a document-loaded workspace (a re-run syncs)."""
    from demo.profiles import LOAD, copy_to
    from engine.relations.documents import DocumentLoadRequest
    from engine.relations.workspaces import WorkspaceCreate

    source = copy_to(e.data_dir / "sources" / workspace / "profiles")
    if not e.has_relation_workspace(workspace):
        e.create_relation_workspace(WorkspaceCreate(workspace_id=workspace, name="expert profiles"))
    summary = e.load(workspace, DocumentLoadRequest(source=str(source), **LOAD), confined=False)
    return {"workspace_id": workspace, "load_id": summary["load_id"], "documents": summary["documents"],
            "rows": {r["relation"]: r["rows"] for r in summary["relations"]}}


def cmd_mcp(args) -> int:
    """The MCP tools over stdio, for desktop agent clients (logs go to stderr: stdout is the protocol)."""
    from .app import create_app

    settings = _settings(args)
    with Engine(settings) as e:
        create_app(settings, engine=e).state.mcp.run("stdio")
        return 0


def cmd_status(args) -> int:
    with Engine(_settings(args)) as e:
        _print(e.status())
        return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="refindery", description="Refindery: a hybrid retrieval engine.")
    p.add_argument("--config", help="user config file (TOML) layered over configs/default.toml "
                                    "(also $REFINDERY_CONFIG)")
    p.add_argument("--profile", choices=["default", "quality"], default=None,
                   help="default (quick to ingest) or quality (the stronger embedder: `make models-mpnet` installs "
                        "it); also $REFINDERY_PROFILE or profile = \"quality\" in the config file")
    p.add_argument("-v", "--verbose", action="store_true")
    sub = p.add_subparsers(dest="command", required=True)
    _pages_commands(sub)
    _search_commands(sub)
    _operations_commands(sub)
    _relations_and_access_commands(sub)
    # Command groups other packages register (entry point group "refindery.cli", see pyproject.toml):
    # eval adds `eval` and `reranker`, so this face never imports eval (import-linter's layers).
    for ep in sorted(entry_points(group="refindery.cli"), key=lambda e: e.name):
        ep.load()(sub)
    return p


def _pages_commands(sub) -> None:
    """The commands that write and serve pages."""
    s = sub.add_parser("ingest", help="ingest a JSONL file (.jsonl or .jsonl.gz), a folder, or - for stdin")
    s.add_argument("path")
    s.add_argument("--workspace", default=None)
    s.add_argument("--base-url", default=None, help="for a folder: URL prefix for its files (default file://)")
    s.add_argument("--no-progress", action="store_true")
    s.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                   help="embed on Ray Data (a cluster's address; none: [ingest] ray_address, else a local Ray)")
    s.set_defaults(func=cmd_ingest)

    s = sub.add_parser("serve", help="serve the HTTP API")
    s.add_argument("--host", default=None)
    s.add_argument("--port", type=int, default=None)
    s.add_argument("--uds", default=None, help="serve on this Unix domain socket instead of host:port")
    s.add_argument("--check", action="store_true",
                   help="only say whether the data dir is free to serve (exit 0) or already served (exit 2)")
    s.add_argument("--embed", action="append", default=[], metavar="MODEL",
                   help="embed what MODEL lacks in the background once serving (repeatable; progress in GET /v1/models)")
    s.set_defaults(func=cmd_serve)


def _search_commands(sub) -> None:
    """The search faces: pages, evidence (and its maps and dictionary), compare."""
    s = sub.add_parser("search", help="search from the command line (every parameter of POST /v1/search but "
                                      "filters; unset ones take the [search] settings)")
    s.add_argument("query")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_search, request_fields=add_request_flags(s, SearchRequest, skip=("query",),
                                                                     names={"k": ["-k", "--k"]}))

    s = sub.add_parser("evidence", help="gather evidence for a question into an evidence packet (seed 002); every "
                                        "parameter of POST /v1/evidence but filters")
    s.add_argument("query")
    fields = add_request_flags(s, EvidenceRequest, skip=("query",),
                               names={"session_id": ["--session", "--session-id"], "pages": ["--page", "--pages"],
                                      "k": ["-k", "--k"], "route_constraints": ["--route-constraint"]})
    s.add_argument("--map-write", action="store_true",
                   help="grant map_write (--route-constraint map_write): what this call finds is written into the "
                        "workspace's group maps")
    s.add_argument("--json", action="store_true", help="the whole reply as JSON (default: the summary)")
    s.set_defaults(request_fields=fields)
    s.set_defaults(func=cmd_evidence)

    s = sub.add_parser("maps", help="a workspace's evidence maps: groups, and what searches wrote into them")
    s.add_argument("action", choices=["show"])
    s.add_argument("--workspace", default=None)
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_maps)

    s = sub.add_parser("dictionary", help="a workspace's evidence dictionary: show it, or set it from a file")
    s.add_argument("action", choices=["show", "set"])
    s.add_argument("file", nargs="?", help="set: a .toml or .md dictionary")
    s.add_argument("--workspace", default=None)
    s.set_defaults(func=cmd_dictionary)

    s = sub.add_parser("feedback", help="judgments on logged searches, and the shortcuts they make (the page "
                                        "chosen for a close query comes first): add, list, clear")
    s.add_argument("action", choices=["add", "list", "clear"])
    s.add_argument("query_id", nargs="?", help="add: the logged search (its query_id)")
    s.add_argument("page_id", nargs="?", help="add: the page judged")
    s.add_argument("--kind", choices=["found", "click", "irrelevant"], default="found", help="add: the judgment")
    s.add_argument("--workspace", default=None)
    s.add_argument("--query-id", dest="clear_query", default=None, help="clear: only this logged search's")
    s.add_argument("--page-id", dest="clear_page", default=None, help="clear: only those on this page")
    s.set_defaults(func=cmd_feedback)

    s = sub.add_parser("compare", help="A/B: the pipeline once per embedder, with agreement figures")
    s.add_argument("query")
    s.add_argument("--models", required=True, help="comma-separated embedders, e.g. all-minilm-l6-v2,all-mpnet-base-v2")
    s.add_argument("-k", type=int, default=10)
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_compare)


def _operations_commands(sub) -> None:
    """Operations: indexes, models, clusters, the query log."""
    s = sub.add_parser("reindex", help="rebuild every index from the store")
    s.set_defaults(func=cmd_reindex)

    s = sub.add_parser("models", help="list models (path, device, dimension, chunks embedded); switch the data "
                                      "dir's embedder live; drop a model's vectors")
    s.add_argument("action", nargs="?", choices=["list", "switch", "drop", "status"], default="list",
                   help="switch NAME: build NAME's index while the active embedder serves, then make it the "
                        "active one (a progress bar until it is); drop NAME: delete NAME's vectors; status: "
                        "the data dir's embedder and a switch under way")
    s.add_argument("name", nargs="?", help="the embedder to switch to or drop")
    s.add_argument("--embed", metavar="NAME", help="embed every chunk that lacks a vector of NAME")
    s.set_defaults(func=cmd_models)

    s = sub.add_parser("clusters", help="k-means clusters of pages: refit (new ids, old ones tombstoned) or list")
    s.add_argument("action", choices=["refit", "list"])
    s.add_argument("--k", type=int, default=None, help="number of clusters (default sqrt(pages / 2))")
    s.add_argument("--workspace", default=None)
    s.add_argument("--if-missing", action="store_true", help="refit: only when the workspace has no live clusters")
    s.set_defaults(func=cmd_clusters)

    s = sub.add_parser("log", help="query log maintenance")
    s.add_argument("action", choices=["prune"])
    s.add_argument("--before", required=True, help="delete executions logged before this date (ISO 8601)")
    s.set_defaults(func=cmd_log)


def _relations_and_access_commands(sub) -> None:
    """Relation workspaces, API keys, MCP, status."""
    s = sub.add_parser("relations", help="relation workspaces: create, load SQL tables, search with constraints")
    s.add_argument("action", choices=["create", "load", "sync", "search", "demo", "demo-profiles"],
                   help="demo: (re)load the seed's roster into workspace `roster`; demo-profiles: (re)load "
                        "the 30 invented profiles (documents) into workspace `profiles`")
    s.add_argument("workspace", nargs="?", default=None, help="workspace id (generated by create when absent)")
    s.add_argument("--packs", nargs="*", help="create: relation packs (default expert_network)")
    s.add_argument("--name", default=None, help="create: display name")
    s.add_argument("--spec", help="load: a JSON file with the load body: SQL (source, relations, entities, "
                                  "coverage) or documents (source, documents, readers, model_reader, coverage)")
    s.add_argument("--load", help="sync: the load to run again from its source (only what changed is re-read)")
    s.add_argument("--constraints", help="search: a JSON file with the list of constraints (or --brief, --idea)")
    s.set_defaults(func=cmd_relations, request_fields=add_request_flags(
        s, RelationSearchRequest, skip=("workspace_id", "constraints")))

    s = sub.add_parser("keys", help="API keys: create (the token is shown once), list, revoke; open (no key "
                                    "needed again, once every key is revoked: local and explicit)")
    s.add_argument("action", choices=["create", "list", "revoke", "open"])
    s.add_argument("--yes", action="store_true", help="open: confirm")
    s.add_argument("key_id", nargs="?", help="revoke: the key's id")
    s.add_argument("--workspace", action="append", help="create: a workspace it may use (repeat; '*' for all)")
    s.add_argument("--scope", action="append", default=[], help="create: a document scope it may read (repeat)")
    s.add_argument("--read-only", action="store_true", help="create: it may not write")
    s.add_argument("--name", default=None, help="create: a label for it")
    s.set_defaults(func=cmd_keys)

    s = sub.add_parser("mcp", help="serve the MCP tools over stdio (for desktop agent clients)")
    s.set_defaults(func=cmd_mcp)

    s = sub.add_parser("status", help="counts and index generations")
    s.set_defaults(func=cmd_status)


# Verbs that open the data dir of the settings: while a server owns it they go through the server.
OWNED = {"ingest", "search", "evidence", "maps", "dictionary", "compare", "feedback", "reindex", "models", "clusters",
         "log", "relations", "keys", "mcp", "status"}


def _verb(args) -> str:
    if args.command == "relations" and args.action in ("load", "sync", "demo", "demo-profiles"):
        return f"relations {args.action}"
    if args.command == "keys" and args.action == "open":
        return "keys open"
    return args.command


def _through(args, owner) -> int:
    """A verb of OWNED, sent to the server that owns the data dir (server/remote.py)."""
    from . import remote

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
    from . import owner as owners

    if args.command not in OWNED:
        return None
    return owners.find(_settings(args).data_dir)


def _busy(args) -> str | None:
    """A one-line account of why the data dir could not be opened, when another process holds it."""
    from . import owner as owners

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
        from .owner import ClientMissing, Untrusted

        if isinstance(exc, (ClientMissing, Untrusted)):
            print(f"error: {exc}", file=sys.stderr)
            return 2
        if isinstance(exc, ValidationError):   # a request the arguments make, refused before it is sent
            first = exc.errors()[0]
            print(f"error: {'.'.join(str(x) for x in first['loc'])}: {first['msg']}", file=sys.stderr)
            return 2
        raise


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


if __name__ == "__main__":
    sys.exit(main())
