"""The `refindery eval` and `refindery reranker` command groups: offline evaluation on test
collections (ir, run, replay, evidence) and training a cross-encoder on judgments, mined pairs and
feedback. Registered into the `refindery` parser through the "refindery.cli" entry point, so the
server's CLI never imports eval."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from engine.core.access import OPEN
from engine.core.settings import ModelsSettings, Settings, load_settings

from eval.paths import DEFAULT_SQUAD_PATH


def _settings(args: argparse.Namespace) -> Settings:
    profile = getattr(args, "profile", None)
    return load_settings(args.config, **({"profile": profile} if profile else {}))


def _print(obj) -> None:
    print(json.dumps(obj, indent=2, default=str))


def cmd_eval(args) -> int:
    from engine.app import Engine
    from eval.ir import DEFAULT_IR_DIR, evaluate, markdown, write_results

    settings = _settings(args)
    if args.suite == "run":
        return _eval_run(args, settings)
    if args.suite == "replay":
        return _eval_replay(args, settings)
    if args.suite == "evidence":
        return _eval_evidence(args, settings)
    if args.suite == "refind":
        return _eval_refind(args, settings)
    if args.suite == "stages":
        return _eval_stages(args, settings)
    ir_dir = Path(args.ir_dir) if args.ir_dir else DEFAULT_IR_DIR
    if not ir_dir.is_dir():
        print(f"error: no test collections at {ir_dir} (use --ir-dir)", file=sys.stderr)
        return 2
    # One data dir per collection: BM25's corpus statistics (idf, average length) are per tantivy
    # index, so collections sharing one index would change each other's scores.
    base = Path(args.data_dir).resolve() if args.data_dir else settings.data_dir / "ir"
    result = {"model": settings.models.active, "collections": {}}
    for name in args.collections:
        with Engine(settings.model_copy(update={"data_dir": base / name})) as engine:
            part = evaluate(engine, ir_dir, [name], progress=not args.no_progress)
        result["collections"].update(part["collections"])
    j, m = write_results(result)
    print(markdown(result))
    print(f"written: {j} and {m}")
    return 0


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


def _eval_run(args, settings) -> int:
    from engine.app import Engine
    from eval import collections, run

    if not args.collection:
        print("error: eval run needs --collection PATH", file=sys.stderr)
        return 2
    if args.data_dir:
        settings = settings.model_copy(update={"data_dir": Path(args.data_dir).resolve()})
    try:
        coll = collections.load(args.collection)
    except (collections.CollectionError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    models = args.models.split(",") if args.models else [settings.models.active]
    variants = args.variants.split(",")
    with Engine(settings) as engine:
        result = run.evaluate_run(engine, coll, models, variants, progress=not args.no_progress)
    paths = run.write_report(result, Path(args.reports))
    print(run.markdown(result))
    print("written: " + ", ".join(str(p) for p in paths.values()))
    return 0


def _eval_stages(args, settings) -> int:
    """Where each relevant page was lost: the collections' judged queries searched (logged) in each
    collection's own data dir, or the feedback-judged searches of this data dir's log."""
    from datetime import datetime

    from engine.app import Engine
    from eval import collections, stages
    from eval.ir import DEFAULT_IR_DIR

    since = datetime.fromisoformat(args.since) if args.since else datetime(1970, 1, 1)
    search = {"rerank": True} if args.rerank else {}
    reports, pairs = [], []
    try:
        if args.from_log:
            with Engine(settings.model_copy(update={"data_dir": Path(args.data_dir).resolve()})
                        if args.data_dir else settings) as engine:
                reports.append(stages.from_log(engine, since))
                pairs = stages.agreement(engine, since)
        else:
            ir_dir = Path(args.ir_dir) if args.ir_dir else DEFAULT_IR_DIR
            dirs = [Path(args.collection)] if args.collection else [ir_dir / n for n in args.collections]
            base = Path(args.data_dir).resolve() if args.data_dir else settings.data_dir / "ir"
            for d in dirs:   # each collection in its own data dir (BM25 statistics are per index), as `eval ir`
                with Engine(settings.model_copy(update={"data_dir": base / d.name})) as engine:
                    reports.append(stages.from_collection(engine, d, k=args.k, search=search,
                                                          progress=not args.no_progress))
                    pairs += stages.agreement(engine, since)
    except (collections.CollectionError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    result = {"when": datetime.now().isoformat(timespec="seconds"), "model": settings.models.active,
              "reports": reports, "agreement": pairs}
    paths = stages.write(result, Path(args.reports))
    if args.json:
        _print(result)
    else:
        print(stages.markdown(result))
    print("written: " + ", ".join(str(p) for p in paths), file=sys.stderr if args.json else sys.stdout)
    return 0


def _eval_evidence(args, settings) -> int:
    from engine.app import Engine
    from engine.evidence.confidence import CALIBRATION_FILE
    from eval import collections, evidence, run
    from eval.ir import DEFAULT_IR_DIR

    import tempfile

    if len(args.collections) < 2:
        print("error: eval evidence fits on some collections and checks on another: name at least two",
              file=sys.stderr)
        return 2
    ir_dir = Path(args.ir_dir) if args.ir_dir else DEFAULT_IR_DIR
    base = Path(args.data_dir).resolve() if args.data_dir else settings.data_dir / "ir"
    colls = {name: collections.load(ir_dir / name, name) for name in args.collections}
    parts = []
    for name, coll in colls.items():
        with Engine(settings.model_copy(update={"data_dir": base / name})) as engine:
            run.prepare(engine, coll, name, [settings.models.active], progress=not args.no_progress)
            parts.append(evidence.collect(engine, coll, name))
    result = evidence.evaluate(parts)
    result["packets"] = []
    for i, (name, coll) in enumerate(colls.items()):  # the whole verb, under the other collections' fit
        with Engine(settings.model_copy(update={"data_dir": base / name})) as engine:
            cal = evidence.fit(parts[:i] + parts[i + 1:])
            result["packets"].append(evidence.packets(engine, coll, name, cal, Path(tempfile.mkdtemp())))
    paths = evidence.write(result, Path("eval/results"), CALIBRATION_FILE if args.write_calibration
                           else Path("eval/results/evidence_calibration.json"))
    print(evidence.markdown(result))
    print("written: " + ", ".join(str(p) for p in paths))
    return 0


# What the refind benchmark compares: recency off (seed 001's default), recency on as the seed turns
# it on (REFINDERY_SEARCH__RECENCY_HALF_LIFE_DAYS=30: the band, as shipped), the bounded decay that
# was the default before (weight 0.05), and a full decay (what "recency" means in most engines); and
# linear fusion, which eval/fusion_loo.py chose on the test collections, beside RRF.
REFIND_SETTINGS = {"recency off": {"recency_half_life_days": 0.0},
                   "recency off, fusion linear (minmax)": {"recency_half_life_days": 0.0, "fusion": "linear"},
                   "recency on (band 0.07), half-life 30 d": {"recency_half_life_days": 30.0},
                   "bounded decay (w 0.05), half-life 30 d": {"recency_half_life_days": 30.0, "recency_mode": "decay",
                                                              "recency_weight": 0.05},
                   "full decay, half-life 30 d": {"recency_half_life_days": 30.0, "recency_mode": "decay",
                                                  "recency_weight": 1.0}}


def _eval_refind(args, settings) -> int:
    from engine.app import Engine
    from eval import refind

    base = Path(args.data_dir).resolve() if args.data_dir else settings.data_dir / "refind-bench"
    with Engine(settings.model_copy(update={"data_dir": base})) as engine:
        visits = refind.prepare(engine)
        result = refind.evaluate(engine, visits, REFIND_SETTINGS)
    # Another embedder than the shipped one (REFINDERY_MODELS__ACTIVE=...) writes beside, not over, the
    # shipped figures: refind_<model>.json / .md.
    model = settings.models.active
    name = "refind" if model == ModelsSettings().active else f"refind_{model}"
    result["model"] = model
    out = Path("eval/results")
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(result, indent=2) + "\n")
    (out / f"{name}.md").write_text(refind.markdown(result))
    print(refind.markdown(result))
    print(f"written: eval/results/{name}.json, eval/results/{name}.md")
    return 0


def _eval_replay(args, settings) -> int:
    from datetime import datetime

    from engine.app import Engine
    from eval.replay import replay

    if not args.since:
        print("error: eval replay needs --since DATE", file=sys.stderr)
        return 2
    other = load_settings(args.with_config) if args.with_config else settings
    other = other.model_copy(update={"data_dir": settings.data_dir})
    with Engine(settings) as engine:
        result = replay(engine, datetime.fromisoformat(args.since), other)
    if not args.per_query:
        result.pop("per_query")
    _print(result)
    return 0


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


def register(sub) -> None:
    """Add `eval`, `tune` and `reranker` to the `refindery` subcommands."""
    _eval_command(sub)
    _tune_command(sub)
    _reranker_command(sub)


def _eval_command(sub) -> None:
    s = sub.add_parser("eval", help="offline evaluation")
    s.add_argument("suite", choices=["ir", "run", "replay", "evidence", "refind", "stages"],
                   help="ir: nDCG@10 of sparse, dense and hybrid on ../shared/data/ir; "
                        "run: variants x embedders on one collection, with significance tests and a report; "
                        "evidence: fit and check evidence search's confidence levels on the collections; "
                        "refind: the refind benchmark (eval/refind.py), dev and test halves, recency off and on; "
                        "stages: where each relevant page was lost (arms, fusion, rerank, rollup, below k), read "
                        "from the query log, for the collections' judged queries or (--from-log) logged feedback, "
                        "and logged compares per pair of embedders")
    s.add_argument("--write-calibration", action="store_true",
                   help="evidence: also replace configs/evidence_calibration.json with the new fit")
    s.add_argument("--collection", help="run, stages: a collection folder (our format, BEIR, or TREC)")
    s.add_argument("--models", help="run: comma-separated embedders (default: the active one)")
    s.add_argument("--variants", default="sparse,dense,hybrid", help="run: any of sparse,dense,hybrid,rerank")
    s.add_argument("--reports", default="eval/reports", help="run, stages: folder for the report files")
    s.add_argument("--since", help="replay, stages: logged searches from this date (ISO 8601)")
    s.add_argument("--from-log", action="store_true",
                   help="stages: the searches of this data dir's log that got found / click feedback")
    s.add_argument("-k", type=int, default=10, help="stages: k of the collections' searches (the slice judged)")
    s.add_argument("--rerank", action="store_true", help="stages: search the collections with rerank on")
    s.add_argument("--json", action="store_true", help="stages: print the whole result as JSON")
    s.add_argument("--with", dest="with_config", help="replay: a config file whose [search]/[models] to replay under")
    s.add_argument("--per-query", action="store_true", help="replay: print every query's agreement")
    s.add_argument("--collections", nargs="+", default=["cisi", "med", "npl", "cacm"])
    s.add_argument("--ir-dir", default=None, help="folder with <collection>/docs.jsonl, queries.jsonl, qrels.tsv "
                                                  "(default ../shared/data/ir)")
    s.add_argument("--data-dir", default=None, help="data dir for the collections (default: the configured one)")
    s.add_argument("--no-progress", action="store_true")
    s.set_defaults(func=cmd_eval)


def _tune_command(sub) -> None:
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


def _reranker_command(sub) -> None:
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


