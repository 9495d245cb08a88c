"""The `refindery eval`, `tune` and `reranker` command groups, registered into the `refindery` parser
through the "refindery.cli" entry point, so the server's CLI never imports eval: here `eval` (offline
evaluation on test collections: ir, run, stages, evidence, refind, replay); `tune` in cli_tune.py;
`reranker` (training a cross-encoder on judgments, mined pairs and feedback) in cli_reranker.py."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from engine.core.settings import ModelsSettings, load_settings

from eval import cli_reranker, cli_tune
from eval.cli_common import _print, _settings


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


def register(sub) -> None:
    """Add `eval`, `tune` and `reranker` to the `refindery` subcommands."""
    _eval_command(sub)
    cli_tune.add(sub)
    cli_reranker.add(sub)


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
