"""Does the trained reranker earn its place? Leave-one-collection-out on the development collections.

For each held-out collection H of ../shared/data/ir (CISI, MED, NPL, CACM):
- `judgments+mined`: train on the other three collections' relevance judgments plus pairs mined
  from H's corpus (no judgment of H is seen);
- `mined`: train on pairs mined from H's corpus alone, the setting a real user starts from;
then evaluate on H's judgments: nDCG@10 of hybrid vs hybrid + rerank, with a paired t-test.

    python -m eval.rerank [--collections cisi med npl cacm] [--steps 200] [--data-dir DIR]

Each collection is ingested into its own data dir (as `refindery eval ir` does; an existing one is
reused). Writes eval/results/rerank_loco.{json,md}, after every fold so a long run keeps its progress.
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from engine.app import Engine
from engine.core.settings import Settings, load_settings
from engine.refind.rerank_pairs import NegativePlan
from engine.refind.reranker_training import Pair, TrainConfig, register_reranker

from . import collections, run
from .ir import COLLECTIONS, DEFAULT_IR_DIR, ROOT

SETTINGS = ("judgments+mined", "mined")


def collection_engine(settings: Settings, coll_dir: Path, base: Path) -> tuple[Engine, collections.Collection]:
    """An Engine over the collection's own data dir `base/<name>`, ingested if needed; the workspace
    is the collection's name. The caller closes it."""
    coll = collections.load(coll_dir)
    engine = Engine(settings.model_copy(update={"data_dir": Path(base) / coll.name}))
    try:
        run.prepare(engine, coll, coll.name, [settings.models.active])
    except BaseException:
        engine.close()
        raise
    return engine, coll


def collection_pairs(settings: Settings, coll_dir: Path, base: Path, plan: NegativePlan | None = None,
                     seed: int = 13) -> list[Pair]:
    """Judgment pairs of a test collection, hard negatives from hybrid search over its own corpus."""
    engine, coll = collection_engine(settings, coll_dir, base)
    with engine:
        return engine.training_pairs("judgments", coll.name, plan, seed=seed, collection=coll)


def _with_reranker(settings: Settings, out_dir: Path, name: str, max_length: int, tmp: Path) -> Settings:
    """Settings whose registry (a copy of the configured one) names the trained model: its torch
    weights, or, for a packaged ONNX deployment (no weights beside it), its int8 graph."""
    reg = tmp / f"models-{name}.toml"
    reg.write_text(settings.registry_path.read_text())
    onnx_only = not any((Path(out_dir) / f).exists() for f in ("model.safetensors", "pytorch_model.bin"))
    register_reranker(reg, name, out_dir, max_length,
                      extra={"backend": "onnx", "onnx_file": "onnx/model_qint8.onnx"} if onnx_only else None)
    return settings.model_copy(update={"models": settings.models.model_copy(
        update={"registry": str(reg), "reranker": name})})


def loco(settings: Settings, names=COLLECTIONS, ir_dir: Path = DEFAULT_IR_DIR, base: Path | None = None,
         config: TrainConfig | None = None, mined_n: int = 400, setups=SETTINGS, work: Path | None = None,
         results: Path = ROOT / "eval" / "results", progress: bool = True) -> dict:
    config = config or TrainConfig(steps=150, batch_size=16, max_length=192)
    base = Path(base or settings.data_dir / "ir")
    work = Path(work or settings.data_dir / "rerankers" / "loco")
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    judged = {n: collection_pairs(settings, Path(ir_dir) / n, base, seed=config.seed) for n in names}
    out = {"model": settings.models.active, "config": {k: v for k, v in vars(config).items() if k != "progress"},
           "mined_queries": mined_n, "folds": {}}
    for held in names:
        engine, coll = collection_engine(settings, Path(ir_dir) / held, base)
        with engine:
            mined = engine.training_pairs("mined", held, n=mined_n, seed=config.seed)
        fold = {"queries": len(coll.queries)}
        for setup in setups:
            pairs = mined + ([p for n in names if n != held for p in judged[n]] if setup == "judgments+mined" else [])
            name = f"loco-{held}-{setup.replace('+', '-')}"
            if progress:
                print(f"[{held}] training {name} on {len(pairs)} pairs", flush=True)
            with Engine(settings.model_copy(update={"data_dir": base / held})) as engine:
                trained = engine.train_reranker(
                    pairs, work / name, name=None, base=settings.models.active, config=config,
                    sources={"judgments": [n for n in names if n != held] if setup == "judgments+mined" else [],
                             "mined_from": held}, register=False)
            s2 = _with_reranker(settings.model_copy(update={"data_dir": base / held}), work / name, name,
                                config.max_length, work)
            with Engine(s2) as engine:
                res = run.evaluate_run(engine, coll, [settings.models.active], ["hybrid", "rerank", "rerank-rrf"],
                                       workspace=held)
            m = settings.models.active
            def sig(b):
                return next(x["p_value"] for x in res["significance"] if x["a"] == f"hybrid/{m}" and x["b"] == b)

            hyb = res["metrics"][f"hybrid/{m}"]
            fold[setup] = {"pairs": trained["data"], "train_seconds": trained["seconds"],
                           "validation": trained["validation"], "hybrid": hyb,
                           "per_query": {"hybrid": res["per_query"][f"hybrid/{m}"]}}
            for v in ("rerank", "rerank-rrf"):
                got = res["metrics"][f"{v}/{m}"]
                fold[setup][v] = {**got, "delta_ndcg10": round(got["nDCG@10"] - hyb["nDCG@10"], 4),
                                  "p_value": sig(f"{v}/{m}")}
                fold[setup]["per_query"][v] = res["per_query"][f"{v}/{m}"]
            if progress:
                print(f"[{held}] {setup}: hybrid nDCG@10 {hyb['nDCG@10']:.3f} -> rerank "
                      f"{fold[setup]['rerank']['nDCG@10']:.3f} (p={fold[setup]['rerank']['p_value']}), "
                      f"rerank-rrf {fold[setup]['rerank-rrf']['nDCG@10']:.3f} "
                      f"(p={fold[setup]['rerank-rrf']['p_value']})", flush=True)
            out["folds"][held] = fold
            out["seconds"] = round(time.perf_counter() - t0, 1)
            write(out, results)
    return out


TRAINED_VARIANTS = ("hybrid", "rerank", "rerank-rrf", "hybrid-linear", "rerank-linear")


def evaluate_model(settings: Settings, model_dir: Path, names=COLLECTIONS, ir_dir: Path = DEFAULT_IR_DIR,
                   base: Path | None = None, max_length: int | None = None, rerank_n: int | None = None,
                   results: Path | None = ROOT / "eval" / "results", stem: str = "rerank_squad",
                   progress: bool = True) -> dict:
    """A reranker trained elsewhere (SQuAD: none of these collections' documents or judgments), so
    every collection is held out: hybrid vs hybrid + rerank on each, in both fusions (RRF and
    linear), the reranker replacing the fused order or as one more arm, with paired t-tests."""
    model_dir = Path(model_dir)
    card_path = model_dir / "refindery_training.json"
    card = json.loads(card_path.read_text()) if card_path.exists() else {}
    max_length = max_length or card.get("config", {}).get("max_length")
    base = Path(base or settings.data_dir / "ir")
    m = settings.models.active
    out = {"model": str(model_dir), "embedder": m, "max_length": max_length, "training": card, "collections": {}}
    with tempfile.TemporaryDirectory(prefix="refindery-rerank-") as tmp:
        for name in names:
            engine, coll = collection_engine(settings, Path(ir_dir) / name, base)
            engine.close()
            s2 = _with_reranker(settings.model_copy(update={"data_dir": base / name}), model_dir, "under-test",
                                max_length, Path(tmp))
            if rerank_n:
                s2 = s2.model_copy(update={"search": s2.search.model_copy(update={"rerank_n": rerank_n})})
            t0 = time.perf_counter()
            with Engine(s2) as engine:
                res = run.evaluate_run(engine, coll, [m], list(TRAINED_VARIANTS), workspace=name)
            sig = {(x["a"], x["b"]): x["p_value"] for x in res["significance"]}
            row = {"queries": len(coll.queries), "seconds": round(time.perf_counter() - t0, 1)}
            for v in TRAINED_VARIANTS:
                got = res["metrics"][f"{v}/{m}"]
                row[v] = {**got}
                ref = "hybrid-linear" if v == "rerank-linear" else "hybrid"
                if v != ref and v.startswith("rerank"):
                    row[v]["vs"] = ref
                    row[v]["delta_ndcg10"] = round(got["nDCG@10"] - res["metrics"][f"{ref}/{m}"]["nDCG@10"], 4)
                    row[v]["p_value"] = sig.get((f"{ref}/{m}", f"{v}/{m}"), sig.get((f"{v}/{m}", f"{ref}/{m}")))
            row["per_query"] = {v: res["per_query"][f"{v}/{m}"] for v in TRAINED_VARIANTS}
            out["collections"][name] = row
            if progress:
                print(f"[{name}] hybrid {row['hybrid']['nDCG@10']:.3f}; rerank {row['rerank']['nDCG@10']:.3f} "
                      f"(p {row['rerank']['p_value']}), rerank-rrf {row['rerank-rrf']['nDCG@10']:.3f} "
                      f"(p {row['rerank-rrf']['p_value']}); linear {row['hybrid-linear']['nDCG@10']:.3f} -> "
                      f"{row['rerank-linear']['nDCG@10']:.3f} (p {row['rerank-linear']['p_value']})", flush=True)
    if results is not None:
        results.mkdir(parents=True, exist_ok=True)
        (results / f"{stem}.json").write_text(json.dumps(out, indent=2) + "\n")
        (results / f"{stem}.md").write_text(markdown_model(out))
    return out


def markdown_model(result: dict) -> str:
    card = result.get("training") or {}
    cfg, res = card.get("config", {}), card.get("result", {})
    n = len(result["collections"])
    if card:
        trained = (f"trained from `{card.get('base_model')}`"
                   + (f", its first {cfg['layers']} layers" if cfg.get("layers") else "")
                   + (f"; {res['steps']} steps of {cfg['batch_size']} sequences: {res['steps'] * cfg['batch_size']} "
                      f"pairs drawn from {res.get('train_pairs')}" if res.get("steps") else ""))
    else:
        trained = "no refindery_training.json beside it: how it was trained is not known here"
    lines = [f"Reranker `{Path(result['model']).name}` on {n} collection{'s' if n != 1 else ''}, none of which it "
             f"was trained on ({trained}"
             + f"); max length {result['max_length']} tokens; the top "
             "`rerank_n` fused chunks reranked. nDCG@10; in brackets the difference to the same fusion without "
             "the reranker and the p of a paired t-test on per-query nDCG@10 (* < 0.05). `replace`: ranked by "
             "the reranker alone; `arm`: the reranker as one more arm of the fusion.", "",
             "| collection | queries | RRF hybrid | + rerank (replace) | + rerank (RRF arm) | linear hybrid | "
             "+ rerank (linear arm) |", "|---|---|---|---|---|---|---|"]

    def cell(r):
        p = r.get("p_value")
        ps = "–" if p is None else f"{p:.3f}" + ("*" if p < 0.05 else "")
        return f"{r['nDCG@10']:.3f} ({r['delta_ndcg10']:+.3f}, p {ps})"

    for name, row in result["collections"].items():
        lines.append(f"| {name} | {row['queries']} | {row['hybrid']['nDCG@10']:.3f} | {cell(row['rerank'])} | "
                     f"{cell(row['rerank-rrf'])} | {row['hybrid-linear']['nDCG@10']:.3f} | "
                     f"{cell(row['rerank-linear'])} |")
    if res.get("validation"):
        lines += ["", f"Training: {res.get('steps')} steps of {cfg.get('batch_size')} sequences ({cfg.get('loss')} "
                  f"loss, {cfg.get('negatives')} negatives per positive, lr {cfg.get('lr')}, max length "
                  f"{cfg.get('max_length')}, seed {cfg.get('seed')}) on {res.get('device')} in {res.get('seconds')} s; "
                  f"{res.get('train_pairs')} training pairs over {res.get('train_groups')} questions, validation on "
                  f"{res.get('val_groups')} held-out questions:", "",
                  "| step | MRR | pairwise accuracy | BCE loss |", "|---|---|---|---|"]
        lines += [f"| {v['step']} | {v.get('mrr')} | {v.get('pairwise_accuracy')} | {v.get('loss')} |"
                  for v in res["validation"]]
        if cfg.get("loss") == "listwise":
            lines += ["", "(Trained listwise, the logits' scale is free: BCE on the raw logit is shown for "
                      "completeness; MRR and pairwise accuracy are the figures that matter.)"]
    return "\n".join(lines) + "\n"


def markdown(result: dict) -> str:
    cfg = result["config"]
    lines = [f"Leave-one-collection-out, reranker trained from `{result['model']}` ({cfg['steps']} steps of "
             f"{cfg['batch_size']} sequences, {cfg['loss']} loss, lr {cfg['lr']}, max length {cfg['max_length']}, "
             f"seed {cfg['seed']}); nDCG@10 on the held-out collection's judgments; the top 50 fused chunks "
             "reranked, by the reranker's score alone (`replace`) or with its rank as one more RRF arm (`rrf`); "
             "in brackets the difference to hybrid and the p of a paired t-test on per-query nDCG@10 (* < 0.05).",
             "", "| held out | queries | hybrid | judgments of the other three + mined: replace | rrf | "
             "mined pairs only: replace | rrf |", "|---|---|---|---|---|---|---|"]

    def cell(r):
        if not r:
            return "–"
        p = r["p_value"]
        ps = "–" if p is None else f"{p:.3f}" + ("*" if p < 0.05 else "")
        return f"{r['nDCG@10']:.3f} ({r['delta_ndcg10']:+.3f}, p {ps})"

    for held, f in result["folds"].items():
        hyb = (f.get("judgments+mined") or f.get("mined") or {}).get("hybrid", {}).get("nDCG@10")
        cells = [cell((f.get(setup) or {}).get(v)) for setup in SETTINGS for v in ("rerank", "rerank-rrf")]
        lines.append(f"| {held} | {f['queries']} | {hyb:.3f} | " + " | ".join(cells) + " |")
    lines += ["", "| held out | setup | training pairs (queries) | validation MRR before -> after | train s |",
              "|---|---|---|---|---|"]
    for held, f in result["folds"].items():
        for setup in SETTINGS:
            r = f.get(setup)
            if r:
                v = r["validation"] or [{}]
                lines.append(f"| {held} | {setup} | {r['pairs']['pairs']} ({r['pairs']['queries']}) | "
                             f"{v[0].get('mrr')} -> {v[-1].get('mrr')} | {r['train_seconds']} |")
    return "\n".join(lines) + "\n"


def write(result: dict, out_dir: Path) -> tuple[Path, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    j, m = out_dir / "rerank_loco.json", out_dir / "rerank_loco.md"
    j.write_text(json.dumps(result, indent=2) + "\n")
    m.write_text(markdown(result))
    return j, m


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m eval.rerank", description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default=None)
    ap.add_argument("--collections", nargs="+", default=list(COLLECTIONS))
    ap.add_argument("--ir-dir", default=str(DEFAULT_IR_DIR))
    ap.add_argument("--data-dir", default=None, help="per-collection data dirs (default <data_dir>/ir)")
    ap.add_argument("--work", default=None, help="where the trained models go (default <data_dir>/rerankers/loco)")
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--max-length", type=int, default=192)
    ap.add_argument("--mined", type=int, default=400, help="queries mined from the held-out corpus")
    ap.add_argument("--setups", default=",".join(SETTINGS))
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--model", default=None, help="evaluate this trained reranker folder on every collection "
                                                   "(no training; for a model that saw none of them)")
    ap.add_argument("--rerank-n", type=int, default=None, help="with --model: chunks reranked (default: settings)")
    args = ap.parse_args(argv)
    settings = load_settings(args.config)
    if args.model:
        res = evaluate_model(settings, Path(args.model), args.collections, Path(args.ir_dir),
                             args.data_dir and Path(args.data_dir), args.max_length if args.max_length != 192 else None,
                             args.rerank_n)
        print(markdown_model(res))
        return 0
    cfg = TrainConfig(steps=args.steps, batch_size=args.batch_size, lr=args.lr, max_length=args.max_length,
                      seed=args.seed, device=args.device)
    res = loco(settings, args.collections, Path(args.ir_dir), args.data_dir and Path(args.data_dir), cfg,
               args.mined, tuple(args.setups.split(",")), args.work and Path(args.work))
    print(markdown(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
