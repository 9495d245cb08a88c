"""Pages that list everything (issue 73): the refind benchmark (eval/refind.py, its hub kind included)
under both profiles with each form of focus (engine/refind/focus.py) over a range of strengths, and the
rollups already offered; how many misses have a page that lists everything ranked first
(eval/refind_queries.py: HUB_PAGES, labelled by hand); and the development IR collections' BM25 arm
and hybrid with the chosen focus on and off.

The dev half decides: a setting is safe on a profile when no kind loses on its dev half (success@1 and
MRR@10 of each kind at least the shipped setting's); the setting shipped is the safe one in both
profiles with the best dev success@1 over all kinds (mean of the two profiles; then MRR@10; then the
smaller strength). The test half is only reported.

    python -m eval.refind_hubs [--data-root DIR] [--reuse] [--profiles default,quality] [--no-ir]

writes eval/results/refind_hubs.{json,md}. The quality profile needs `make models-mpnet`. With --reuse,
the data dirs a previous run left (`<data-root>/hubs-<profile>`, `<data-root>/hubs-ir`) are searched
again as they are.
"""
from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

from engine.app import Engine
from engine.core.settings import load_settings
from engine.core.urls import normalize_url
from engine.refind.search import SearchRequest

from eval import refind
from eval.refind_queries import HUB_PAGES

ROOT = Path(__file__).resolve().parent.parent
BASE = {"focus": 0.0, "rollup": "max", "focus_slack": 0.0}
STRENGTHS = (0.1, 0.2, 0.3, 0.5, 1.0)
SLACKS = (0.0, 2.0, 4.0)
LENGTH = (0.05, 0.1, 0.2)
GRID: dict[str, dict] = {"focus off (before)": BASE, "rollup mean_top2": {**BASE, "rollup": "mean_top2"},
                         **{f"share {a}, slack {c:g}": {**BASE, "focus": a, "focus_form": "share", "focus_slack": c}
                            for c in SLACKS for a in STRENGTHS},
                         **{f"length {a}": {**BASE, "focus": a, "focus_form": "length"} for a in LENGTH}}
BEFORE = "focus off (before)"
RECENCY_ON = {"recency_half_life_days": 30.0, "recency_mode": "band", "recency_band": 0.07}
HUBS = {normalize_url(u) for u in HUB_PAGES}


def build(profile: str, data_dir: Path, reuse: bool) -> Engine:
    """The benchmark's history in a data dir of `profile` (the quality profile's embedder caught up)."""
    settings = load_settings(profile=profile, data_dir=str(data_dir))
    if reuse and (data_dir / "refindery.duckdb").exists():
        return Engine(settings)
    shutil.rmtree(data_dir, ignore_errors=True)
    engine = Engine(settings)
    refind.prepare(engine)
    if settings.catch_up_model:
        engine.embed_model(settings.models.active)
    return engine


def runs(engine: Engine, cases: list[dict], overrides: dict) -> list[dict]:
    """Each case's rank of its page (None past 10) and the page ranked first."""
    out = []
    for c in cases:
        res = engine.search(SearchRequest(query=c["query"], k=10, workspace=refind.WORKSPACE, **overrides),
                            log=False, now=refind.NOW)
        urls = [normalize_url(h.url) for h in res.pages]
        out.append({"rank": urls.index(c["target"]) + 1 if c["target"] in urls else None,
                    "first": urls[0] if urls else None})
    return out


def figures(cases: list[dict], got: list[dict]) -> dict:
    out = {}
    for h in refind.HALVES:
        mine = [(c, g) for c, g in zip(cases, got) if c["half"] == h]
        misses = [(c, g) for c, g in mine if g["rank"] != 1]
        out[h] = {**{k: refind._figures([g["rank"] for c, g in mine if c["kind"] == k]) for k in refind.KINDS},
                  "all": refind._figures([g["rank"] for _, g in mine]),
                  "misses": len(misses), "hub_first": sum(1 for _, g in misses if g["first"] in HUBS)}
    return out


def study(engine: Engine) -> dict:
    cases = refind.cases(refind.history())
    results, per_query = {}, {}
    for name, overrides in GRID.items():
        got = runs(engine, cases, overrides)
        results[name], per_query[name] = figures(cases, got), got
    return {"model": engine.settings.models.active, "results": results, "per_query": per_query}


def safe(result: dict, name: str) -> bool:
    base, r = result["results"][BEFORE]["dev"], result["results"][name]["dev"]
    return all(r[k]["success@1"] >= base[k]["success@1"] and r[k]["mrr@10"] >= base[k]["mrr@10"] for k in refind.KINDS)


def decide(by_profile: dict[str, dict]) -> dict:
    def key(n):
        rs = [p["results"][n]["dev"]["all"] for p in by_profile.values()]
        return (sum(r["success@1"] for r in rs), sum(r["mrr@10"] for r in rs), -GRID[n].get("focus", 0.0),
                -GRID[n].get("focus_slack", 0.0))

    fine = [n for n in GRID if all(safe(p, n) for p in by_profile.values())]
    shipped = max(fine, key=key)
    return {"safe": {prof: [n for n in GRID if safe(p, n)] for prof, p in by_profile.items()},
            "safe_in_all": fine, "shipped": shipped}


def with_recency(engine: Engine, shipped: str) -> dict:
    """Before and the shipped setting with recency's band on (half-life 30 d, band 0.07)."""
    cases = refind.cases(refind.history())
    return {n: figures(cases, runs(engine, cases, {**GRID[n], **RECENCY_ON})) for n in (BEFORE, shipped)}


def ir_table(data_root: Path, reuse: bool, shipped: dict, peers: bool = True) -> dict:
    """The development collections, each in a data dir of its own (BM25's statistics the collection's,
    as bench/peers.py and the peers have them): nDCG@10 of our BM25 arm and hybrid with focus off and as
    shipped, and beside them bm25s (whole documents) and txtai's hybrid when installed (the `bench`
    extra) — as bench/peers.py runs them."""
    import ir_measures

    from eval import collections
    from eval.ir import COLLECTIONS, DEFAULT_IR_DIR
    from eval.run import VARIANTS, prepare

    out = {}
    for name in COLLECTIONS:
        data_dir = data_root / name
        if not reuse:
            shutil.rmtree(data_dir, ignore_errors=True)
        coll = collections.load(DEFAULT_IR_DIR / name)

        def ndcg(ranked: dict[str, list[tuple[str, float]]]) -> float:
            run = [ir_measures.ScoredDoc(q, d, sc) for q, hits in ranked.items() for d, sc in hits]
            return round(float(ir_measures.calc_aggregate([ir_measures.nDCG @ 10], coll.qrels, run)[
                ir_measures.nDCG @ 10]), 4)

        row = {}
        with Engine(load_settings(data_dir=str(data_dir))) as engine:
            model = engine.settings.models.active
            prepare(engine, coll, name, [model])
            for mode in ("sparse", "hybrid"):
                for label, extra in (("before", BASE), ("after", shipped)):
                    ranked = {}
                    for qid, text in coll.queries.items():
                        req = SearchRequest(query=text[:2000], k=100, workspace=name, pin=False, shortcuts=False,
                                            **VARIANTS[mode], **extra)
                        ranked[qid] = [(h.url.rsplit("/", 1)[1], float(h.score))
                                       for h in engine.search(req, model=model, log=False).pages]
                    row[f"{mode} {label}"] = ndcg(ranked)
            model_path = str(engine.corpus.embedder().path)
            (short,), = engine.corpus.store.sql().rows(
                "SELECT avg(CASE WHEN n <= 3 THEN 1.0 ELSE 0.0 END) FROM "
                "(SELECT page_id, count(*) AS n FROM chunks GROUP BY page_id) AS t")
            row["short_share"] = round(float(short), 4)
        if peers:
            row |= _peers(coll, model_path, ndcg)
        out[name] = row
        print(name, row, flush=True)
    return out


def _peers(coll, model_path: str, ndcg) -> dict:
    """bm25s and txtai's hybrid over the collection (title + text per document), k = 100; {} when the
    `bench` extra is not installed."""
    try:
        import bm25s
        import Stemmer
        from txtai import Embeddings
    except ImportError:
        return {}
    texts = [" ".join(x for x in (d.get("title"), d.get("text")) if x) or "(empty)" for d in coll.docs]
    ids = [d["id"] for d in coll.docs]
    stem = Stemmer.Stemmer("english")
    bm = bm25s.BM25()
    bm.index(bm25s.tokenize(texts, stopwords="en", stemmer=stem, show_progress=False), show_progress=False)
    ranked = {}
    for qid, text in coll.queries.items():
        docs, scores = bm.retrieve(bm25s.tokenize([text], stopwords="en", stemmer=stem, show_progress=False),
                                   k=min(100, len(ids)), show_progress=False, n_threads=1)
        ranked[qid] = [(ids[int(i)], float(x)) for i, x in zip(docs[0], scores[0]) if x > 0]
    emb = Embeddings(path=model_path, method="sentence-transformers", content=False, hybrid=True)
    emb.index([(i, t, None) for i, t in zip(ids, texts)])
    hybrid = {qid: [(str(i), float(x)) for i, x in emb.search(text[:2000], 100)] for qid, text in coll.queries.items()}
    emb.close()
    return {"bm25s": ndcg(ranked), "txtai": ndcg(hybrid)}


def _cell(r: dict) -> str:
    return f"{r['success@1']:.2f} / {r['mrr@10']:.2f}"


def markdown(by_profile: dict[str, dict], decision: dict, recency: dict, ir: dict | None) -> str:
    kinds = (*refind.KINDS, "all")
    lines = ["# Pages that list everything: focus (issue 73)", "",
             "From `python -m eval.refind_hubs`. The refind benchmark (eval/refind.py) with its hub kind: "
             "success@1 / MRR@10 per kind; *hub first*: of the queries whose page is not first, how many have a "
             "page that lists everything (eval/refind_queries.py: HUB_PAGES, labelled by hand) ranked first. "
             "Recency off (the shipped default). The dev half decides (no kind may lose on dev, in either "
             "profile); the test half is only reported.", ""]
    for prof, res in by_profile.items():
        for h in refind.HALVES:
            lines += [f"## {prof} profile (`{res['model']}`), {h} half", "",
                      "| setting | " + " | ".join(kinds) + " | misses | hub first |",
                      "|---|" + "---|" * (len(kinds) + 2)]
            for name, r in res["results"].items():
                mark = " **(shipped)**" if name == decision["shipped"] else ""
                ok = "" if h == "test" or name in decision["safe"][prof] else " ✗"
                lines.append(f"| {name}{mark}{ok} | " + " | ".join(_cell(r[h][k]) for k in kinds) +
                             f" | {r[h]['misses']} | {r[h]['hub_first']} |")
            lines.append("")
    lines += ["✗: loses a kind on this profile's dev half.", "",
              f"**Decision (dev half):** safe in both profiles: {', '.join(decision['safe_in_all'])}. "
              f"Shipped: `{decision['shipped']}`.", ""]
    if recency:
        lines += ["## With recency's band on (half-life 30 d, band 0.07)", "",
                  "| profile | setting | half | " + " | ".join(kinds) + " | hub first |",
                  "|---|---|---|" + "---|" * (len(kinds) + 1)]
        for prof, rows in recency.items():
            for name, r in rows.items():
                for h in refind.HALVES:
                    lines.append(f"| {prof} | {name} | {h} | " + " | ".join(_cell(r[h][k]) for k in kinds) +
                                 f" | {r[h]['hub_first']} of {r[h]['misses']} |")
        lines.append("")
    if ir:
        lines += ["## Development IR collections (default profile), nDCG@10", "",
                  "Each collection in a data dir of its own; bm25s scores whole documents, txtai's hybrid is its "
                  "BM25 + the same MiniLM (as bench/peers.py runs them).", "",
                  "| collection | BM25 arm before | BM25 arm after | bm25s | hybrid before | hybrid after | txtai hybrid |",
                  "|---|---|---|---|---|---|---|"]
        for name, row in ir.items():
            lines.append(f"| {name} | {row['sparse before']:.4f} | {row['sparse after']:.4f} | "
                         f"{row.get('bm25s', float('nan')):.4f} | {row['hybrid before']:.4f} | "
                         f"{row['hybrid after']:.4f} | {row.get('txtai', float('nan')):.4f} |")
        lines += ["", "Their documents are abstracts: " + ", ".join(
            f"{name} {100 * row.get('short_share', float('nan')):.1f} %" for name, row in ir.items()) +
            " of them are at most 3 chunks, which focus's slack leaves as they are whenever one chunk matched. "
            "These collections cannot show the gap to bm25s on long documents that issue 73 names: the BM25 "
            "arm is level with bm25s here before and after.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-root", default="data-profiles")
    ap.add_argument("--profiles", default="default,quality")
    ap.add_argument("--reuse", action="store_true")
    ap.add_argument("--no-ir", action="store_true")
    args = ap.parse_args(argv)
    root = Path(args.data_root).resolve()
    by_profile, engines = {}, {}
    for prof in args.profiles.split(","):
        t = time.perf_counter()
        engine = engines[prof] = build(prof, root / f"hubs-{prof}", args.reuse)
        by_profile[prof] = study(engine)
        print(f"{prof}: {time.perf_counter() - t:.0f} s", flush=True)
    decision = decide(by_profile)
    recency = {prof: with_recency(engines[prof], decision["shipped"]) for prof in by_profile}
    for e in engines.values():
        e.close()
    ir = None if args.no_ir else ir_table(root / "hubs-ir", args.reuse, GRID[decision["shipped"]])
    result = {"profiles": by_profile, "decision": decision, "recency_on": recency, "ir": ir, "grid": GRID}
    out = ROOT / "eval" / "results"
    text = markdown(by_profile, decision, recency, ir)
    (out / "refind_hubs.md").write_text(text)
    (out / "refind_hubs.json").write_text(json.dumps(result, indent=1, default=str) + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
