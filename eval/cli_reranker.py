"""`refindery reranker`: train a cross-encoder reranker (from the bundled encoder) on a collection's
judgments, pairs mined from a workspace, or the query log's feedback; package it; its status."""
from __future__ import annotations

import sys
from pathlib import Path

from engine.core.access import OPEN

from eval.cli_common import _print, _settings
from eval.paths import DEFAULT_SQUAD_PATH


def cmd_reranker(args) -> int:
    """`refindery reranker train`: a cross-encoder from the bundled encoder, on judgments, mined
    pairs and logged feedback; saved as a CrossEncoder folder and registered by name."""
    from engine.app import Engine
    from engine.refind.rerank_pairs import NegativePlan
    from engine.refind.reranker_training import DeviceUnavailable, TrainConfig

    if args.action == "package":  # files only: no data dir is opened
        return _reranker_package(args)
    settings = _settings(args)
    with Engine(settings) as engine:
        if args.action == "status":
            return _reranker_status(engine, args.brief)
        name = args.name
        declared = engine.declared_reranker(name)
        out = Path(args.out) if args.out else (declared or settings.data_dir / "rerankers" / name)
        if args.if_missing and (out / "config.json").exists():
            _print({"name": name, "out_dir": str(out.resolve()), "trained": False,
                    "reason": "a reranker is already there (--if-missing)"})
            return 0
        plan = NegativePlan(hard=args.hard_negatives, random=args.random_negatives)
        got = _training_pairs(args, settings, engine, plan)
        if got is None:
            return 2
        pairs, sources = got
        config = TrainConfig(steps=args.steps, batch_size=args.batch_size, lr=args.lr, max_length=args.max_length,
                             seed=args.seed, layers=args.layers, loss=args.loss,
                             device=args.device or settings.models.device,
                             eval_every=args.eval_every or max(1, min(100, args.steps // 4)),
                             val_max_groups=args.val_queries, progress=not args.no_progress)
        try:
            result = engine.train_reranker(pairs, out, name=name, base=args.base, config=config,
                                           sources=sources, register=not args.no_register and declared is None,
                                           onnx=args.onnx)
        except (ValueError, DeviceUnavailable) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        if declared is not None:
            result["registered"] = {"name": name, "registry": str(settings.registry_path), "changed": False,
                                    "note": "already declared there"}
        result["use"] = (f"set models.reranker = \"{name}\" (or REFINDERY_MODELS__RERANKER={name}), then learn "
                         "whether it helps on your judged queries with `refindery tune --collection DIR` or "
                         "`--from-log` before asking for \"rerank\": true (or search.rerank = true)")
        _print(result)
        return 0


def _reranker_package(args) -> int:
    """`refindery reranker package`: a trained folder's int8 ONNX deployment, copied alone."""
    from engine.refind.reranker_training import package_onnx

    if not args.out or not args.to:
        print("error: reranker package needs --out (the trained folder) and --to (where the ONNX "
              "deployment goes)", file=sys.stderr)
        return 2
    try:
        _print(package_onnx(Path(args.out), Path(args.to)))
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


def _reranker_status(engine, brief: bool) -> int:
    st = engine.reranker_status()
    if not brief:
        _print(st)
    elif st["available"]:
        print(f"Reranker {st['name']} is trained ({st['path']}); rerank is "
              f"{'on' if st['rerank_by_default'] else 'off'} by default. Learn whether it helps on your data "
              "before turning it on: `refindery tune --collection DIR` (judgments) or `refindery tune "
              "--from-log` (logged feedback) put rerank on/off and its fusion in the grid, held out.")
    else:
        print("Rerank is off: no trained reranker here (none trained here yet, on this corpus or on SQuAD, "
              "beat hybrid search on held-out collections; docs/reranker.md). To try one: `make reranker`, "
              "then `refindery tune --collection DIR` or `--from-log` says, held out, whether it helps on "
              "your data; \"rerank\": true adds it as one more arm in the fusion (rerank_fusion rrf, which "
              "measured best).")
    return 0


def _training_pairs(args, settings, engine, plan) -> tuple[list, dict] | None:
    """The pairs the arguments name — test collections' judgments, pairs mined from the workspace,
    SQuAD, logged feedback — and where each came from; None (the error printed) when there are none."""
    from engine.refind.rerank_pairs import describe

    workspace = engine.workspace_for(OPEN, args.workspace)
    pairs, sources = [], {}
    if args.qrels:
        from eval.rerank import collection_pairs

        base = Path(args.ir_data_dir) if args.ir_data_dir else settings.data_dir / "ir"
        for d in args.qrels:
            got = collection_pairs(settings, Path(d), base, plan, seed=args.seed)
            sources.setdefault("judgments", []).append({"collection": str(d), **describe(got)})
            pairs += got
    if args.mined > 0:
        got = engine.training_pairs("mined", workspace, plan, n=args.mined, seed=args.seed)
        sources["mined"] = {"workspace": workspace, **describe(got)}
        pairs += got
    if args.squad:
        from eval.squad import squad_pairs

        try:
            got = squad_pairs(args.squad, args.squad_questions, negatives=args.squad_negatives, seed=args.seed)
        except (FileNotFoundError, ValueError) as exc:
            print(f"error: --squad: {exc}", file=sys.stderr)
            return None
        sources["squad"] = {"file": str(args.squad), **describe(got)}
        pairs += got
    if args.from_log:
        got = engine.training_pairs("feedback", workspace, plan, seed=args.seed)
        sources["feedback"] = {"workspace": workspace, **describe(got)}
        pairs += got
    if not pairs or not any(p.label > 0.5 for p in pairs):
        print(f"error: no training pairs: workspace {workspace!r} gave none (is it ingested?); "
              "add --qrels DIR, --squad or --from-log", file=sys.stderr)
        return None
    return pairs, sources


def add(sub) -> None:
    s = sub.add_parser("reranker", help="train a cross-encoder reranker (from the bundled encoder)")
    s.add_argument("action", choices=["train", "status", "package"],
                   help="train: train and register one; status: the configured reranker and whether it is there; "
                        "package: copy a trained folder's int8 ONNX deployment (--out) to --to")
    s.add_argument("--to", default=None, help="package: the folder to write (replaced)")
    s.add_argument("--brief", action="store_true", help="status: one sentence")
    s.add_argument("--from", dest="base", default="all-minilm-l6-v2",
                   help="encoder to start from (registry name): all-minilm-l6-v2 or all-mpnet-base-v2")
    s.add_argument("--name", default="refindery-local",
                   help="registry name of the result (default refindery-local: declared in configs/models.toml "
                        "at <data_dir>/rerankers/refindery-local, the reranker of this data dir's own corpus)")
    s.add_argument("--out", default=None, help="output folder (default: the name's declared path, "
                                               "else <data_dir>/rerankers/<name>)")
    s.add_argument("--qrels", nargs="*", default=[], help="test collection folders whose judgments to train on")
    s.add_argument("--ir-data-dir", default=None, help="data dirs for --qrels collections (default <data_dir>/ir)")
    s.add_argument("--workspace", default=None, help="workspace to mine pairs (and feedback) from")
    s.add_argument("--mined", type=int, default=400, help="queries to mine from the workspace (0: none)")
    s.add_argument("--from-log", action="store_true", help="add found/click feedback from the query log")
    s.add_argument("--squad", nargs="?", const=str(DEFAULT_SQUAD_PATH), default=None, metavar="FILE",
                   help="add SQuAD question -> paragraph pairs (default file: ../shared/data/train/"
                        "squad-v1.1-train.jsonl.gz); negatives are same-article paragraphs without the answer")
    s.add_argument("--squad-questions", type=int, default=None, help="SQuAD questions to draw (default all)")
    s.add_argument("--squad-negatives", type=int, default=3, help="negatives per SQuAD question")
    s.add_argument("--eval-every", type=int, default=None, help="validate every N steps (default steps/4, <= 100)")
    s.add_argument("--val-queries", type=int, default=150, help="held-out training queries for validation")
    s.add_argument("--hard-negatives", type=int, default=2, help="hard negatives per positive (hybrid search)")
    s.add_argument("--random-negatives", type=int, default=1, help="random in-corpus negatives per positive")
    s.add_argument("--steps", type=int, default=150)
    s.add_argument("--batch-size", type=int, default=16, help="sequences per step")
    s.add_argument("--lr", type=float, default=1e-4)
    s.add_argument("--loss", choices=["listwise", "bce"], default="listwise")
    s.add_argument("--max-length", type=int, default=192, help="tokens of query + passage")
    s.add_argument("--layers", type=int, default=None,
                   help="keep only the encoder's first N layers (faster scoring, usually weaker)")
    s.add_argument("--seed", type=int, default=13)
    s.add_argument("--device", default=None, help="auto, cpu or cuda (default: models.device)")
    s.add_argument("--onnx", action="store_true", help="also export onnx/model.onnx")
    s.add_argument("--no-register", action="store_true", help="do not add the model to the registry file")
    s.add_argument("--if-missing", action="store_true", help="do nothing when the output folder has a model")
    s.add_argument("--no-progress", action="store_true")
    s.set_defaults(func=cmd_reranker)
