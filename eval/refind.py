"""`refindery eval refind`: the known-item refind benchmark — does the page you saw come back first,
by the words you remember it by?

The corpus is the bundled demo pages (334 pages of the Python, PostgreSQL and SQLite documentation),
visited over a simulated 18 months of browsing (`history`), seeded:
- how often a page is seen is heavy-tailed: about half are seen once, one in sixteen ten times or
  more (up to 40), drawn independently of whether a query asks for the page;
- a page is read within a period of interest (a few days to months) around a moment of the span,
  a few pages throughout it;
- sibling pages (each "recent" group of eval/refind_queries.py) are also read together, in sessions
  minutes apart, so the most recent of a group is often seen only minutes after the others.
The search runs at the history's end.

The 128 queries (eval/refind_queries.py) were written before any ranking change was tried on them:
vague, exact, url, site and recent (several *different* pages fit about equally; the most recently
seen is wanted). Each kind is split in two halves by a hash of the query's text — `dev`, which
settings may be tuned on, and `test`, which is only reported. Per half and kind: success@1,
success@10 and MRR@10, for each setting compared.
"""
from __future__ import annotations

import gzip
import hashlib
import json
import math
import random
from datetime import datetime, timedelta
from pathlib import Path

from engine.app import Engine
from engine.core.urls import normalize_url
from engine.refind.search import SearchRequest

from eval.refind_queries import EXACT, HUB, KINDS, RECENT, SITE, URL, VAGUE

ROOT = Path(__file__).resolve().parent.parent
PAGES = ROOT / "demo" / "pages.jsonl.gz"
START, END = datetime(2025, 6, 1), datetime(2026, 11, 30, 23, 59)
NOW = END + timedelta(minutes=1)
WORKSPACE = "refind-bench"
HALVES = ("dev", "test")
MAX_VISITS = 40


def corpus() -> dict[str, dict]:
    """The demo pages, one record per URL (its first)."""
    pages: dict[str, dict] = {}
    with gzip.open(PAGES, "rt", encoding="utf-8") as fh:
        for line in fh:
            r = json.loads(line)
            pages.setdefault(r["url"], {k: r[k] for k in ("url", "title", "body_text")})
    return pages


def history(seed: int = 7) -> list[dict]:
    """Every visit of the simulated history, oldest first (see the module's docstring)."""
    pages = corpus()
    rng = random.Random(seed)
    span = (END - START).total_seconds()
    day = 86400.0
    times: dict[str, list[float]] = {u: [] for u in pages}
    for url in sorted(pages):
        n = min(MAX_VISITS, int(rng.paretovariate(1.2)))
        if rng.random() < 0.1:                      # a reference page, read throughout
            lo, hi = 0.0, span
        else:                                       # read during a period of interest
            centre, width = rng.random() * span, min(span, rng.expovariate(1 / (45 * day)) + day)
            lo, hi = max(0.0, centre - width / 2), min(span, centre + width / 2)
        times[url] += [lo + rng.random() * (hi - lo) for _ in range(n)]
    for _, group in RECENT:                         # siblings read together, minutes apart
        for _ in range(1 + int(rng.expovariate(1 / 1.5))):
            t = rng.random() * span
            for url in rng.sample(list(group), len(group)):
                if rng.random() < 0.75:
                    t = min(span, t + rng.uniform(30, 900))
                    times[url].append(t)
    visits = [{**pages[u], "seen_at": (START + timedelta(seconds=t)).strftime("%Y-%m-%dT%H:%M:%SZ")}
              for u in sorted(pages) for t in times[u]]
    visits.sort(key=lambda r: (r["seen_at"], r["url"]))
    return visits


def last_seen(visits: list[dict]) -> dict[str, str]:
    out: dict[str, str] = {}
    for r in visits:
        u = normalize_url(r["url"])
        out[u] = max(out.get(u, ""), r["seen_at"])
    return out


def half(kind: str, query: str) -> str:
    """Which half a query is in: within its kind, the first half by the SHA-1 of its text is `dev`."""
    mine = [q for q, _ in _queries(kind)]
    ordered = sorted(mine, key=lambda q: hashlib.sha1(q.encode()).hexdigest())
    return "dev" if ordered.index(query) < math.ceil(len(ordered) / 2) else "test"


def _queries(kind: str) -> list[tuple[str, object]]:
    return {"vague": VAGUE, "exact": EXACT, "url": URL, "site": SITE, "recent": RECENT, "hub": HUB}[kind]


def _under(url: str, prefix: str) -> bool:
    host = url.split("/", 1)[0]
    return url.startswith(prefix + "/") if "/" in prefix else host == prefix or host.endswith("." + prefix)


def cases(visits: list[dict]) -> list[dict]:
    """Every query with its kind, half and the normalised URL of the one page meant."""
    seen = last_seen(visits)
    out = []
    for kind in KINDS:
        for query, meant in _queries(kind):
            if kind == "site":
                target = max((u for u in seen if _under(u, meant)), key=lambda u: (seen[u], u))
            elif kind == "recent":
                target = max((normalize_url(u) for u in meant), key=lambda u: (seen[u], u))
            else:
                target = normalize_url(meant)
            out.append({"kind": kind, "half": half(kind, query), "query": query, "target": target})
    return out


def prepare(engine: Engine, seed: int = 7) -> list[dict]:
    visits = history(seed)
    engine.ingest(((i, "refind-bench", r) for i, r in enumerate(visits, start=1)), WORKSPACE, progress=False)
    return visits


def ranks(engine: Engine, visits: list[dict], overrides: dict) -> list[int | None]:
    """The target's rank (1–10, None past 10) for every case, under one setting's request overrides."""
    out = []
    for c in cases(visits):
        res = engine.search(SearchRequest(query=c["query"], k=10, workspace=WORKSPACE, **overrides), log=False, now=NOW)
        found = [h.rank for h in res.pages if normalize_url(h.url) == c["target"]]
        out.append(found[0] if found else None)
    return out


def evaluate(engine: Engine, visits: list[dict], settings: dict[str, dict]) -> dict:
    """Per setting (a name -> request overrides), per half and kind: success@1, success@10, MRR@10;
    and every query's rank, for paired comparisons."""
    cs = cases(visits)
    out: dict[str, dict] = {}
    per_query: dict[str, list[int | None]] = {}
    for name, overrides in settings.items():
        rs = per_query[name] = ranks(engine, visits, overrides)
        out[name] = {h: {**{k: _figures([r for c, r in zip(cs, rs) if c["half"] == h and c["kind"] == k])
                            for k in KINDS},
                         "all": _figures([r for c, r in zip(cs, rs) if c["half"] == h])} for h in HALVES}
    counts = {h: {k: sum(1 for c in cs if c["half"] == h and c["kind"] == k) for k in KINDS} for h in HALVES}
    visits_per_page = sorted(_visit_counts(visits).values())
    return {"queries": counts, "pages": len(visits_per_page), "visits": len(visits),
            "seen_once": sum(1 for n in visits_per_page if n == 1), "seen_10_or_more": sum(1 for n in visits_per_page if n >= 10),
            "settings": settings, "results": out,
            "per_query": [{**c, "ranks": {n: per_query[n][i] for n in settings}} for i, c in enumerate(cs)]}


def _visit_counts(visits: list[dict]) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in visits:
        out[r["url"]] = out.get(r["url"], 0) + 1
    return out


def _figures(ranks: list[int | None]) -> dict:
    n = len(ranks) or 1
    return {"success@1": round(sum(1 for r in ranks if r == 1) / n, 3),
            "success@10": round(sum(1 for r in ranks if r is not None) / n, 3),
            "mrr@10": round(sum(1 / r for r in ranks if r is not None) / n, 3)}


def markdown(result: dict) -> str:
    q = result["queries"]
    lines = [f"Known-item refind benchmark: {result['pages']} pages, {result['visits']} visits over 18 months "
             f"({result['seen_once']} pages seen once, {result['seen_10_or_more']} ten times or more); "
             f"{sum(sum(v.values()) for v in q.values())} queries written before tuning, in two halves by a hash "
             "of their text: dev (tuning allowed) and test (reported only). success@1 / success@10 / MRR@10."
             + (f" Embedder: `{result['model']}`." if result.get("model") else ""), ""]
    for h in HALVES:
        lines += [f"**{h}** ({', '.join(f'{k} {n}' for k, n in q[h].items())})", "",
                  "| setting | " + " | ".join(KINDS) + " | all |", "|---|" + "---|" * (len(KINDS) + 1)]
        for name, r in result["results"].items():
            cells = [f"{r[h][k]['success@1']:.2f} / {r[h][k]['success@10']:.2f} / {r[h][k]['mrr@10']:.2f}"
                     for k in (*KINDS, "all")]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)
