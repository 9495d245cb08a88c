"""`refindery tune`: choose fusion settings (and whether to rerank) by cross-validation."""
from __future__ import annotations

import sys
from pathlib import Path

from eval.cli_common import _print, _settings


def cmd_tune(args) -> int:
    """`refindery tune`: fusion settings chosen by k-fold cross-validation on judged queries."""
    from datetime import datetime

    from engine.app import Engine
    from eval import collections, tune

    settings = _settings(args)
    if (args.collection is None) == (not args.from_log):
        print("error: tune needs judged queries: --collection DIR or --from-log", file=sys.stderr)
        return 2
    if args.data_dir:
        settings = settings.model_copy(update={"data_dir": Path(args.data_dir).resolve()})
    with Engine(settings) as engine:
        try:
            if args.collection is not None:
                judged = tune.from_collection(engine, Path(args.collection), args.workspace,
                                              progress=not args.no_progress)
            else:
                since = datetime.fromisoformat(args.since) if args.since else datetime(1970, 1, 1)
                judged = tune.from_log(engine, since, args.workspace)
            result = tune.tune(engine, judged, folds=args.folds, seed=args.seed, quick=args.quick,
                               rerank=not args.no_rerank)
        except (collections.CollectionError, FileNotFoundError, ValueError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        out = Path(args.out) if args.out else engine.data_dir / "tuned.toml"
    try:
        written = tune.write_config(out, result, force=args.force)
    except FileExistsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        _print({**result, "written": str(written)})
    else:
        print(tune.markdown(result))
        print(f"written: {written} (serve with REFINDERY_CONFIG={written})")
    return 0


def add(sub) -> None:
    s = sub.add_parser("tune", help="choose fusion settings (and whether to rerank, when a reranker is present) "
                                    "from judged queries by k-fold cross-validation")
    s.add_argument("--collection", default=None, help="a test collection folder whose qrels judge the queries "
                                                      "(ingested into --workspace, default its name)")
    s.add_argument("--from-log", action="store_true", help="judge by the query log's found / click / irrelevant")
    s.add_argument("--since", default=None, help="--from-log: logged searches from this date (ISO 8601)")
    s.add_argument("--workspace", default=None)
    s.add_argument("--folds", type=int, default=5)
    s.add_argument("--seed", type=int, default=13)
    s.add_argument("--quick", action="store_true",
                   help="a small grid (4 configurations, and 2 with rerank when a reranker is present)")
    s.add_argument("--no-rerank", action="store_true",
                   help="leave rerank out of the grid even when a reranker is configured and present "
                        "(it scores every judged query once per rerank configuration: slow on CPU)")
    s.add_argument("--out", default=None, help="config file to write (default <data_dir>/tuned.toml)")
    s.add_argument("--force", action="store_true", help="overwrite --out even if tune did not write it")
    s.add_argument("--data-dir", default=None)
    s.add_argument("--json", action="store_true")
    s.add_argument("--no-progress", action="store_true")
    s.set_defaults(func=cmd_tune)
