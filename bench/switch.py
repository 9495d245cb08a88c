"""A live switch of the embedder at 10k chunks (issue 54, item 4): search latency before, during and
after `POST /v1/models/{name}/switch` on a real `refindery serve`, and whether any search fails.

The corpus is the NPL development collection (11,429 documents, one chunk each), written with the
default embedder (all-MiniLM-L6-v2, torch) into `<data-root>/npl` once; each round copies it afresh
and starts a server over the copy. In one server, with the query-vector cache off (each query is
encoded): the collection's 93 queries are searched one at a time, back to back, for `--seconds`
(idle); then the switch to `--target` is posted and, once its background embedding is under way,
the same for `--seconds` (during the switch); then one search every half second until the swap
(the switch's remaining time at a light load; every reply's model noted); then `--seconds` after
the swap. Figures: the ratio of the p50s during / idle (median of the rounds), failed searches
(any reply not 200, any exception), the seconds to the swap.

    .venv/bin/python bench/switch.py [--rounds 2] [--seconds 60] [--target all-minilm-l6-v2-int8]

Writes bench/results/switch.{json,md}. The target is the int8 MiniLM, whose 11k chunks the switch
embeds in minutes here; the quality embedder (all-mpnet-base-v2-int8, `--target`) would take about
20 minutes alone, its searched-window load being the same niced background threads.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import RESULTS, ir_engine, serve_uds, stop_server, uds_client, write  # noqa: E402

WORKSPACE = "npl"


def build(root: Path) -> dict:
    """The pristine data dir: NPL written with the default embedder (kept between runs)."""
    t = time.perf_counter()
    engine, coll = ir_engine(root, WORKSPACE, [])
    try:
        counts = engine.corpus.store.counts()
        model = engine.settings.models.active
        queries = [q[:500] for q in coll.queries.values()]
    finally:
        engine.close()
    return {"chunks": counts["chunks"], "pages": counts["pages"], "model": model, "queries": queries,
            "build_s": round(time.perf_counter() - t, 1)}


def serve(data_dir: Path, sock: Path):
    return serve_uds(data_dir, sock, {"REFINDERY_MODELS__DEVICE": "cpu", "REFINDERY_SEARCH__QUERY_CACHE_SIZE": "0",
                                      "REFINDERY_LOG__ENABLED": "false"})


class Searcher:
    def __init__(self, c, queries: list[str]):
        self.c, self.queries, self.n = c, queries, 0
        self.failed: list[str] = []

    def one(self) -> tuple[float, str | None]:
        q = self.queries[self.n % len(self.queries)]
        self.n += 1
        t = time.perf_counter()
        try:
            r = self.c.post("/v1/search", json={"query": q, "k": 10, "workspace": WORKSPACE, "shortcuts": False})
        except Exception as exc:   # noqa: BLE001 — counted
            self.failed.append(repr(exc))
            return (time.perf_counter() - t) * 1000, None
        ms = (time.perf_counter() - t) * 1000
        if r.status_code != 200 or not r.json()["pages"]:
            self.failed.append(f"{r.status_code} {r.text[:200]}")
            return ms, None
        return ms, r.json()["model"]

    def window(self, seconds: float) -> dict:
        t0, times, models = time.monotonic(), [], set()
        while time.monotonic() - t0 < seconds:
            ms, model = self.one()
            times.append(ms)
            models.add(model)
        return {"searches": len(times), "p50_ms": round(statistics.median(times), 2),
                "p95_ms": round(sorted(times)[int(0.95 * (len(times) - 1))], 2), "models": sorted(filter(None, models))}


def switch_state(c) -> dict:
    return c.get("/v1/models/switch").json()


def one_round(pristine: Path, work: Path, sock: Path, target: str, queries: list[str], seconds: float,
              window_only: bool = False) -> dict:
    """`window_only`: cancel the switch after the window during it (no swap awaited)."""
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(pristine, work)
    proc = serve(work, sock)
    try:
        c = uds_client(sock)
        s = Searcher(c, queries)
        for _ in range(40):   # warm up: the query encoder, the indexes' pages
            s.one()
        idle = s.window(seconds)
        r = c.post(f"/v1/models/{target}/switch")
        assert r.status_code == 202, r.text
        started = time.monotonic()
        while (switch_state(c).get("embedding") or {}).get("done", 0) < 16:   # the background work under way
            time.sleep(0.2)
        done0 = switch_state(c)["embedding"]["done"]
        during = s.window(seconds)
        state = switch_state(c)
        during["switch_chunks_per_s"] = round((state["embedding"]["done"] - done0) / seconds, 1)
        during["done_at_end"] = state["embedding"]["done"]
        if window_only:
            cancelled = c.post(f"/v1/models/{state['active']}/switch")
            assert cancelled.status_code == 202, cancelled.text
            return {"target": target, "idle": idle, "during": during, "failed": s.failed, "searches": s.n}
        # the rest of the switch at a light load: a search every half second, until the swap
        light, models_seen, t1 = [], [], time.monotonic()
        done1 = last = state["embedding"]["done"]
        while (state := switch_state(c))["active"] != target:
            last = (state.get("embedding") or {}).get("done", last)
            if time.monotonic() - started > 3600:
                raise RuntimeError("no swap within an hour")
            ms, model = s.one()
            light.append(ms)
            models_seen.append(model)
            time.sleep(0.5)
        swapped = time.monotonic()
        total = state
        after = s.window(seconds)
        return {"idle": idle, "during": during,
                "light": {"searches": len(light), "p50_ms": round(statistics.median(light), 2) if light else None,
                          "models": sorted(set(filter(None, models_seen))),
                          "switch_chunks_per_s": round((last - done1) / max(swapped - t1, 1e-9), 1)},
                "after": after, "seconds_to_swap": round(swapped - started, 1), "failed": s.failed,
                "searches": s.n, "final": {k: total.get(k) for k in ("active", "switching_to", "switched_from")}}
    finally:
        stop_server(proc)


def markdown(res: dict) -> str:
    c = res["corpus"]
    lines = ["# A live switch of the embedder at 10k chunks", "",
             f"From `python bench/switch.py` on this machine ({res['machine']}). The NPL collection ({c['pages']:,} pages, "
             f"{c['chunks']:,} chunks) written with `{c['model']}`; a real `refindery serve` over a fresh copy each round, "
             f"the query-vector cache off; its {len(c['queries'])} queries searched one at a time, back to back, "
             f"{res['seconds']:.0f} s idle, then {res['seconds']:.0f} s once the switch to `{res['target']}` is under way, "
             "then one search every 0.5 s until the swap, then "
             f"{res['seconds']:.0f} s after it.", "",
             "| round | idle p50 / p95 ms | during p50 / p95 ms | during / idle | switch chunks/s searched back to back "
             "| light-load p50 ms (searches) | seconds to swap | after p50 ms (model) | searches | failed |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for i, r in enumerate(res["rounds"], start=1):
        lines.append(f"| {i} | {r['idle']['p50_ms']} / {r['idle']['p95_ms']} | {r['during']['p50_ms']} / "
                     f"{r['during']['p95_ms']} | {r['during']['p50_ms'] / r['idle']['p50_ms']:.2f}× | "
                     f"{r['during']['switch_chunks_per_s']} | {r['light']['p50_ms']} ({r['light']['searches']}) | "
                     f"{r['seconds_to_swap']} | {r['after']['p50_ms']} ({', '.join(r['after']['models'])}) | "
                     f"{r['searches']} | {len(r['failed'])} |")
    w = res.get("window")
    if w:
        lines += ["", f"The same windows with a switch to `{w['target']}` (the quality embedder), cancelled after its "
                  f"window: idle p50 / p95 {w['idle']['p50_ms']} / {w['idle']['p95_ms']} ms, during "
                  f"{w['during']['p50_ms']} / {w['during']['p95_ms']} ms (**{w['during']['p50_ms'] / w['idle']['p50_ms']:.2f}×**), "
                  f"{w['during']['switch_chunks_per_s']} chunks/s embedded meanwhile, {len(w['failed'])} failed of "
                  f"{w['searches']}."]
    s = res["summary"]
    lines += ["", f"Search p50 during the switch / idle, median of the rounds' ratios: **{s['p50_ratio']:.2f}×** "
              f"(target ≤ 2×); failed searches: **{s['failed']}** of {s['searches']}. Models that answered: idle and "
              f"during {s['models_before']}, after the swap {s['models_after']}.", "",
              "At a light load (a search every 0.5 s) the background embedding runs flat out between searches, and "
              "a search's p50 is " + " and ".join(f"{r['light']['p50_ms'] / r['idle']['p50_ms']:.2f}×" for r in res["rounds"])
              + " the idle back-to-back p50. The same light load without a switch is not measured, so how much of "
              "that is the background's threads on both cores (niced, which does not give the cores back at once) "
              "and how much the pause between searches (cold caches) is not known. The switch embeds meanwhile "
              "several times faster than under back-to-back searches.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--target", default="all-minilm-l6-v2-int8")
    ap.add_argument("--data-root", default="data-switch")
    ap.add_argument("--window", default="all-mpnet-base-v2-int8",
                    help="then one round's idle and during windows with a switch to this model, cancelled after "
                         "(its whole switch would take about 20 minutes here); '' skips it")
    ap.add_argument("--reuse", action="store_true", help="keep the rounds of bench/results/switch.json; run the window")
    args = ap.parse_args(argv)
    root = Path(args.data_root).resolve()
    previous = json.loads((RESULTS / "switch.json").read_text()) if args.reuse else None
    corpus = build(root)
    print("corpus", {k: v for k, v in corpus.items() if k != "queries"}, flush=True)
    sock = Path("/tmp") / f"refindery-switch-{os.getpid()}.sock"
    res = {"machine": f"{os.cpu_count()} cores", "corpus": corpus, "target": args.target, "seconds": args.seconds,
           "rounds": []}
    if previous is not None:
        res["rounds"] = previous["rounds"]
    for _ in range(0 if previous is not None else args.rounds):
        res["rounds"].append(one_round(root / WORKSPACE, root / "round", sock, args.target, corpus["queries"],
                                       args.seconds))
        print({k: v for k, v in res["rounds"][-1].items() if k != "failed"}, flush=True)
    if args.window:
        res["window"] = one_round(root / WORKSPACE, root / "round", sock, args.window, corpus["queries"],
                                  args.seconds, window_only=True)
        print(res["window"], flush=True)
    shutil.rmtree(root / "round", ignore_errors=True)
    ratios = [r["during"]["p50_ms"] / r["idle"]["p50_ms"] for r in res["rounds"]]
    failed = sum(len(r["failed"]) for r in res["rounds"] + [res.get("window") or {"failed": []}])
    res["summary"] = {"p50_ratio": round(statistics.median(ratios), 3), "p50_ratios": [round(x, 3) for x in ratios],
                      "failed": failed,
                      "searches": sum(r.get("searches", 0) for r in res["rounds"] + [res.get("window") or {}]),
                      "models_before": sorted({m for r in res["rounds"] for w in ("idle", "during") for m in r[w]["models"]}),
                      "models_after": sorted({m for r in res["rounds"] for m in r["after"]["models"]})}
    write("switch", res, markdown(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
