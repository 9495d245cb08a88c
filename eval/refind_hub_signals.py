"""Other page-level signals of how much of a page is about the query (issue 73), studied over the data
dirs eval/refind_hubs.py leaves: each query's candidate pages (the pipeline with focus off, k = 200,
recency off) re-scored offline, and the target's rank read from that order (pins kept first). Beside
focus's share form, as shipped:

- **coherence**, a page's own "lists everything" signal (what ingest could store): R, the length of
  the mean of its chunks' unit vectors — 1 when every chunk points the same way, low for a page of many
  unrelated sections; a page's value times R ** a;
- **page vector**, the page as a whole against the query: the cosine of the query with the mean of
  its chunks' vectors (engine/core/page_vectors.py's), added as one more RRF arm over the candidate
  pages (w / (60 + rank)) or as a factor exp(b · cosine);
- **length**: n ** -a (focus_form "length").

Only the dev half decides; the test half is reported. The quality profile's data dir needs
`make models-mpnet` and a run of eval/refind_hubs.py.

    python -m eval.refind_hub_signals [--data-root DIR] [--profiles default,quality]

writes eval/results/refind_hub_signals.{json,md}."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from engine.app import Engine
from engine.core.settings import load_settings
from engine.core.urls import normalize_url
from engine.refind.search import SearchRequest

from eval import refind

ROOT = Path(__file__).resolve().parent.parent


def candidates(engine: Engine) -> list[dict]:
    """Each case with its candidate pages: value (focus off), m, n, page-vector cosine, coherence R."""
    model = engine.settings.models.active
    store = engine.corpus.store
    ids, vecs = store.embeddings_for(model)
    page_of = dict(store.workspace_chunk_pages(refind.WORKSPACE))
    pids = sorted(set(page_of.values()))
    row = {p: i for i, p in enumerate(pids)}
    keep = np.array([int(c) in page_of for c in ids], dtype=bool)
    rows = np.array([row[page_of[int(c)]] for c in ids[keep]], dtype=np.int64)
    unit = vecs[keep] / np.linalg.norm(vecs[keep], axis=1, keepdims=True)
    total = np.zeros((len(pids), unit.shape[1]), dtype=np.float64)
    count = np.zeros(len(pids))
    np.add.at(total, rows, unit)
    np.add.at(count, rows, 1)
    norms = np.linalg.norm(total, axis=1)
    coherence = norms / np.maximum(count, 1)
    centroid = total / np.maximum(norms, 1e-12)[:, None]
    out = []
    for c in refind.cases(refind.history()):
        res = engine.search(SearchRequest(query=c["query"], k=200, workspace=refind.WORKSPACE, focus=0.0,
                                          explain=True), log=False, now=refind.NOW)
        q = np.asarray(engine.corpus.embedder(model).encode_query(c["query"]), dtype=np.float64).reshape(-1)
        q /= np.linalg.norm(q)
        pages = [{"url": normalize_url(h.url), "value": h.score, "pinned": bool(h.pinned),
                  "m": len(h.explain.chunks), "n": int(count[row[h.page_id]]),
                  "cos": float(centroid[row[h.page_id]] @ q), "R": float(coherence[row[h.page_id]])}
                 for h in res.pages]
        out.append({**c, "pages": pages})
    return out


def _ranks_of(values: list[float]) -> np.ndarray:
    order = np.argsort(-np.asarray(values), kind="stable")
    r = np.empty(len(values))
    r[order] = np.arange(1, len(values) + 1)
    return r


def signals() -> dict:
    v = {"focus off (before)": lambda P: [p["value"] for p in P],
         "focus as shipped (share 0.2, slack 2)": lambda P: [p["value"] * min(1.0, (p["m"] + 2) / p["n"]) ** 0.2
                                                            for p in P]}
    for a in (0.5, 1.0, 2.0):
        v[f"coherence R ** {a}"] = lambda P, a=a: [p["value"] * p["R"] ** a for p in P]
    for w in (0.25, 0.5, 1.0, 2.0):
        v[f"page vector as an RRF arm, w {w}"] = lambda P, w=w: list(
            np.array([p["value"] for p in P]) + w / (60 + _ranks_of([p["cos"] for p in P])))
    for b in (1.0, 2.0, 4.0):
        v[f"page vector factor exp({b} cos)"] = lambda P, b=b: [p["value"] * np.exp(b * p["cos"]) for p in P]
    for a in (0.05, 0.1):
        v[f"length n ** -{a}"] = lambda P, a=a: [p["value"] * p["n"] ** -a for p in P]
    return v


def rank(case: dict, score) -> int | None:
    pages = case["pages"]
    pinned = [p for p in pages if p["pinned"]]
    rest = [p for p in pages if not p["pinned"]]
    s = score(rest)
    order = pinned + [rest[i] for i in sorted(range(len(rest)), key=lambda i: (-s[i], i))]
    urls = [p["url"] for p in order[:10]]
    return urls.index(case["target"]) + 1 if case["target"] in urls else None


def evaluate(cases: list[dict]) -> dict:
    out = {}
    for name, score in signals().items():
        ranks = [rank(c, score) for c in cases]
        out[name] = {h: {**{k: refind._figures([r for c, r in zip(cases, ranks) if c["half"] == h and c["kind"] == k])
                            for k in refind.KINDS},
                         "all": refind._figures([r for c, r in zip(cases, ranks) if c["half"] == h])}
                     for h in refind.HALVES}
    return out


def markdown(by_profile: dict) -> str:
    kinds = (*refind.KINDS, "all")
    lines = ["# Pages that list everything: other page-level signals", "",
             "From `python -m eval.refind_hub_signals` over eval/refind_hubs.py's data dirs: each query's candidate "
             "pages (focus off, k = 200, recency off) re-scored offline; success@1 / MRR@10. ✗: loses a kind on "
             "the dev half against focus off. The dev half decides; the test half is only reported.", ""]
    for prof, res in by_profile.items():
        base = res["results"]["focus off (before)"]["dev"]
        for h in refind.HALVES:
            lines += [f"## {prof} profile (`{res['model']}`), {h} half", "",
                      "| signal | " + " | ".join(kinds) + " |", "|---|" + "---|" * len(kinds)]
            for name, r in res["results"].items():
                lost = any(r["dev"][k]["success@1"] < base[k]["success@1"] or r["dev"][k]["mrr@10"] < base[k]["mrr@10"]
                           for k in refind.KINDS)
                mark = " ✗" if lost and h == "dev" else ""
                lines.append(f"| {name}{mark} | " + " | ".join(
                    f"{r[h][k]['success@1']:.2f} / {r[h][k]['mrr@10']:.2f}" for k in kinds) + " |")
            lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-root", default="data-profiles")
    ap.add_argument("--profiles", default="default,quality")
    args = ap.parse_args(argv)
    by_profile = {}
    for prof in args.profiles.split(","):
        data = Path(args.data_root).resolve() / f"hubs-{prof}"
        if not (data / "refindery.duckdb").exists():
            raise SystemExit(f"{data}: no data dir; run python -m eval.refind_hubs --data-root {args.data_root} first")
        with Engine(load_settings(profile=prof, data_dir=str(data))) as engine:
            by_profile[prof] = {"model": engine.settings.models.active, "results": evaluate(candidates(engine))}
    out = ROOT / "eval" / "results"
    text = markdown(by_profile)
    (out / "refind_hub_signals.md").write_text(text)
    (out / "refind_hub_signals.json").write_text(json.dumps(by_profile, indent=1) + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
