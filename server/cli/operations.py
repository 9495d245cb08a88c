"""Operations from the command line: `reindex`, `models` (list, switch, drop, embed), `clusters`,
`log` and `status`."""
from __future__ import annotations

import sys
import time

from engine.app import Engine

from .common import _print, _settings


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


def cmd_status(args) -> int:
    with Engine(_settings(args)) as e:
        _print(e.status())
        return 0


def add(sub) -> None:
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


def add_status(sub) -> None:
    s = sub.add_parser("status", help="counts and index generations")
    s.set_defaults(func=cmd_status)
