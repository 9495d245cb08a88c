"""The refind benchmark (eval/refind.py) under both profiles, in one run on the same pages: per half
and kind, success@1 / success@10 / MRR@10 with recency off and on; each profile's ingest rate
(chunks/s, the benchmark's 1,069 visits of 334 pages) and search latency (p50 / p95 over the
benchmark's searches, one at a time, on a warm process).

    python -m eval.refind_profiles [--profiles default,quality] [--data-root DIR]

writes eval/results/refind_quality.{json,md} (quality figures) and bench/results/profiles.{json,md}
(ingest and search cost); `--sweep-band` then sweeps recency's band over the data dirs it left
(eval/results/refind_quality_band.{json,md}). The quality profile needs `make models-mpnet`. Only the test half is a
figure to quote: the quality profile's settings (RRF as the default, the same band) were chosen on
the dev half (issue 54: RRF 0.78 against linear fusion's 0.75 on dev with fp32 mpnet, recency off).
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import threading
import time
from pathlib import Path

from engine.app import Engine
from engine.core.settings import load_settings
from engine.refind.search import SearchRequest

from eval import refind

ROOT = Path(__file__).resolve().parent.parent
SETTINGS = {"recency off": {"recency_half_life_days": 0.0},
            "recency on (band 0.07), half-life 30 d": {"recency_half_life_days": 30.0}}


def run_profile(profile: str, data_dir: Path) -> dict:
    """Ingest the benchmark's history into a fresh data dir under `profile`, then evaluate it. The
    quality profile writes with its fast embedder and its own catches up after (timed apart, as a
    server's background would do it, but in the foreground at full speed); it is evaluated half
    caught up too (the chunks it covers by it, the rest by the fast one) and then wholly."""
    shutil.rmtree(data_dir, ignore_errors=True)
    settings = load_settings(profile=profile, data_dir=str(data_dir))
    model = settings.models.active
    half = None
    catch_up_s = 0.0
    with Engine(settings) as engine:
        for m in settings.embedder_names:   # loading (and a first export) not timed
            engine.corpus.embedder(m).encode_documents(["warm up"])
        t = time.perf_counter()
        visits = refind.prepare(engine)
        ingest_s = time.perf_counter() - t
        chunks = engine.counts()["chunks"]
        if settings.catch_up_model:
            stop = threading.Event()
            t = time.perf_counter()
            engine.corpus.embed_missing(model, progress=lambda done, total: done >= chunks // 2 and stop.set(),
                                        stop=stop)
            catch_up_s = time.perf_counter() - t
            covered = engine.counts()["embeddings"].get(model, 0)
            half = {"covered": round(covered / chunks, 3),
                    "result": refind.evaluate(engine, visits, {"recency off": SETTINGS["recency off"]})}
            t = time.perf_counter()
            engine.embed_model(model)
            catch_up_s += time.perf_counter() - t
        result = refind.evaluate(engine, visits, SETTINGS)
        latencies = []
        for c in refind.cases(visits):
            t = time.perf_counter()
            engine.search(SearchRequest(query=c["query"], k=10, workspace=refind.WORKSPACE), log=False, now=refind.NOW)
            latencies.append((time.perf_counter() - t) * 1000)
    latencies.sort()
    return {"profile": profile, "model": model, "written_with": settings.write_models, "ingest_s": round(ingest_s, 1),
            "chunks": chunks, "chunks_per_s": round(chunks / ingest_s, 2), "catch_up_s": round(catch_up_s, 1),
            "embedded_chunks_per_s": round(chunks / (ingest_s + catch_up_s), 2),
            "search_ms_p50": round(statistics.median(latencies), 2),
            "search_ms_p95": round(latencies[int(0.95 * (len(latencies) - 1))], 2), "result": result, "half": half}


BANDS = (0.05, 0.07, 0.1, 0.15, 0.2, 0.3)


def sweep_band(profile: str, data_dir: Path) -> dict:
    """Recency's band (what counts as "about as relevant") swept on a data dir `run_profile` left: the
    dev half chooses (success@1 over all kinds), the test half is reported beside it."""
    settings = {f"band {b}": {"recency_half_life_days": 30.0, "recency_band": b} for b in BANDS}
    settings["recency off"] = {"recency_half_life_days": 0.0}
    with Engine(load_settings(profile=profile, data_dir=str(data_dir))) as engine:
        result = refind.evaluate(engine, refind.history(), settings)
    rows = {name: {h: {k: res[h][k]["success@1"] for k in ("vague", "recent", "all")} for h in refind.HALVES}
            for name, res in result["results"].items()}
    chosen = max((f"band {b}" for b in BANDS), key=lambda n: (rows[n]["dev"]["all"], -abs(float(n[5:]) - 0.07)))
    return {"profile": profile, "rows": rows, "dev_choice": chosen}


def sweep_markdown(sweeps: list[dict]) -> str:
    lines = ["# Refind benchmark: recency's band swept per profile", "",
             "From `python -m eval.refind_profiles --sweep-band` over the data dirs `make eval` left. success@1; "
             "the dev half chooses a band (best over all kinds; ties to the shipped 0.07), the test half is "
             "only reported.", "",
             "| profile | setting | dev vague | dev recent | dev all | test vague | test recent | test all |",
             "|---|---|---|---|---|---|---|---|"]
    for sw in sweeps:
        for name, r in sw["rows"].items():
            mark = " (dev's choice)" if name == sw["dev_choice"] else ""
            lines.append(f"| {sw['profile']} | {name}{mark} | {r['dev']['vague']:.2f} | {r['dev']['recent']:.2f} | "
                         f"{r['dev']['all']:.2f} | {r['test']['vague']:.2f} | {r['test']['recent']:.2f} | "
                         f"{r['test']['all']:.2f} |")
    return "\n".join(lines) + "\n"


def markdown(runs: list[dict]) -> tuple[str, str]:
    """(the quality figures, the cost table)."""
    kinds = (*refind.KINDS, "all")
    q = runs[0]["result"]["queries"]
    lines = ["# Refind benchmark: default and quality profiles", "",
             "From `python -m eval.refind_profiles` (also `make eval`). " + ", ".join(
                 f"**{r['profile']}**: `{r['model']}`" for r in runs) + ". success@1 / success@10 / MRR@10; "
             "the test half is never tuned on. Ingest and search cost: bench/results/profiles.md.", ""]
    for h in refind.HALVES:
        lines += [f"**{h}** ({', '.join(f'{k} {n}' for k, n in q[h].items())})", "",
                  "| profile | setting | " + " | ".join(kinds) + " |", "|---|---|" + "---|" * len(kinds)]
        for r in runs:
            for name, res in r["result"]["results"].items():
                cells = [f"{res[h][k]['success@1']:.2f} / {res[h][k]['success@10']:.2f} / {res[h][k]['mrr@10']:.2f}"
                         for k in kinds]
                lines.append(f"| {r['profile']} | {name} | " + " | ".join(cells) + " |")
        lines.append("")
    for r in runs:
        if r.get("half"):
            res = r["half"]["result"]["results"]["recency off"]
            lines += [f"**{r['profile']}, half caught up** ({r['half']['covered']:.0%} of the chunks embedded by "
                      f"`{r['model']}`, the rest ranked by `{r['written_with'][0]}`; recency off)", "",
                      "| half | " + " | ".join(kinds) + " |", "|---|" + "---|" * len(kinds)]
            for h in refind.HALVES:
                lines.append(f"| {h} | " + " | ".join(
                    f"{res[h][k]['success@1']:.2f} / {res[h][k]['success@10']:.2f} / {res[h][k]['mrr@10']:.2f}"
                    for k in kinds) + " |")
            lines.append("")
    cost = ["# Profiles: ingest and search cost", "",
            "From `python -m eval.refind_profiles`: the refind benchmark's history (1,069 visits of 334 pages) "
            "ingested into a fresh data dir by each profile in one run, on this machine; search latency over "
            "its 128 queries, one at a time, recency off. *Ingest* is the write path (what a write waits for: "
            "the quality profile encodes its fast embedder there); *catch-up* is the quality embedder's own "
            "pass over the same chunks, run here in the foreground at full speed after the ingest (a server runs "
            "it in its background, niced: bench/results/catch_up.md).", "",
            "| profile | embedder | written with | chunks | ingest s | chunks/s | x default | catch-up s | "
            "chunks/s, both | search p50 ms | p95 ms | x default p50 |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    base = runs[0]
    for r in runs:
        cost.append(f"| {r['profile']} | `{r['model']}` | {', '.join(r.get('written_with', [r['model']]))} | "
                    f"{r['chunks']} | {r['ingest_s']} | {r['chunks_per_s']} | "
                    f"{r['chunks_per_s'] / base['chunks_per_s']:.2f} | {r.get('catch_up_s', 0)} | "
                    f"{r.get('embedded_chunks_per_s', r['chunks_per_s'])} | {r['search_ms_p50']} | {r['search_ms_p95']} | "
                    f"{r['search_ms_p50'] / base['search_ms_p50']:.2f} |")
    return "\n".join(lines) + "\n", "\n".join(cost) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profiles", default="default,quality")
    ap.add_argument("--data-root", default="data-profiles", help="one fresh data dir per profile under it")
    ap.add_argument("--sweep-band", action="store_true",
                    help="sweep recency's band over the data dirs a run left (eval/results/refind_quality_band.md)")
    args = ap.parse_args(argv)
    if args.sweep_band:
        sweeps = [sweep_band(p, Path(args.data_root).resolve() / p) for p in args.profiles.split(",")]
        text = sweep_markdown(sweeps)
        (ROOT / "eval" / "results" / "refind_quality_band.md").write_text(text)
        (ROOT / "eval" / "results" / "refind_quality_band.json").write_text(json.dumps(sweeps, indent=1) + "\n")
        print(text)
        return 0
    runs = []
    for profile in args.profiles.split(","):
        r = run_profile(profile, Path(args.data_root).resolve() / profile)
        print(f"{profile}: {r['model']} {r['chunks']} chunks in {r['ingest_s']} s ({r['chunks_per_s']}/s), "
              f"search p50 {r['search_ms_p50']} ms", flush=True)
        runs.append(r)
    figures, cost = markdown(runs)
    (ROOT / "eval" / "results" / "refind_quality.json").write_text(json.dumps(runs, indent=1) + "\n")
    (ROOT / "eval" / "results" / "refind_quality.md").write_text(figures)
    (ROOT / "bench" / "results" / "profiles.json").write_text(json.dumps(
        [{k: v for k, v in r.items() if k not in ("result", "half")} for r in runs], indent=1) + "\n")
    (ROOT / "bench" / "results" / "profiles.md").write_text(cost)
    print(figures + "\n" + cost)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
