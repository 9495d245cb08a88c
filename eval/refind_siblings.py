"""Recency among near-equals beyond our own benchmark (issue 54, item 6): the refind benchmark's
history with sessions over 24 more sibling groups (eval/refind_queries.py: SIBLINGS) — pages whose
titles all carry the query's words, read together minutes apart, as the benchmark's "recent" groups
are — and their queries (the most recently seen page of the group is wanted) beside the benchmark's
own. Written before any definition of "about as relevant" was tried on them; split in dev and test
halves by a hash of the query's text, as the benchmark's kinds are. The page wanted is the most recently
seen of the query's whole family — every page of the site it names whose title carries its other
words — not only of the pages read together.

    python -m eval.refind_siblings [--data-dir DIR] [--profile default]

writes eval/results/refind_siblings.{json,md}: success@1 per half for siblings, vague, recent and all
the benchmark's kinds, recency off, the band at several widths, and the bounded decay.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import random
import shutil
from datetime import timedelta
from pathlib import Path

from engine.app import Engine
from engine.core.settings import load_settings
from engine.core.urls import normalize_url
from engine.refind.search import SearchRequest

from eval import refind
from eval.refind_queries import SIBLINGS

ROOT = Path(__file__).resolve().parent.parent
KINDS = ("siblings", "vague", "recent", "exact", "url", "site")
SETTINGS = {"recency off": {"recency_half_life_days": 0.0}}
SETTINGS |= {f"band {b}": {"recency_half_life_days": 30.0, "recency_band": b} for b in (0.05, 0.07, 0.1, 0.15, 0.2, 0.3)}
SETTINGS["decay w 0.05"] = {"recency_half_life_days": 30.0, "recency_mode": "decay"}
# the title band (engine/refind/ranking.py: title siblings) beside the shipped band
SETTINGS |= {f"band 0.07, title band {t}": {"recency_half_life_days": 30.0, "recency_title_band": t}
             for t in (0.15, 0.3, 0.5, 1.0)}


def history(seed: int = 7, sibling_seed: int = 11) -> list[dict]:
    """The benchmark's history (its own seed, unchanged) and the sibling groups' sessions (their own seed)."""
    visits = refind.history(seed)
    pages = refind.corpus()
    rng = random.Random(sibling_seed)
    span = (refind.END - refind.START).total_seconds()
    extra = []
    for _, group in SIBLINGS:
        for _ in range(1 + int(rng.expovariate(1 / 1.5))):
            t = rng.random() * span
            for url in rng.sample(list(group), len(group)):
                if rng.random() < 0.75:
                    t = min(span, t + rng.uniform(30, 900))
                    extra.append({**pages[url], "seen_at": (refind.START + timedelta(seconds=t)).strftime(
                        "%Y-%m-%dT%H:%M:%SZ")})
    return sorted(visits + extra, key=lambda r: (r["seen_at"], r["url"]))


def half(query: str) -> str:
    ordered = sorted((q for q, _ in SIBLINGS), key=lambda q: hashlib.sha1(q.encode()).hexdigest())
    return "dev" if ordered.index(query) < math.ceil(len(ordered) / 2) else "test"


SITES = {"python": "docs.python.org", "sqlite": "sqlite.org", "postgres": "postgresql.org"}


def family(query: str, group: tuple[str, ...]) -> list[str]:
    """Every page the query fits about equally: the pages read together (`group`) and every page whose
    title carries all of the query's words but a site's name, on the site the query names (if it names
    one) — "postgres alter" fits every ALTER page of PostgreSQL's, not only the three read together."""
    from engine.refind.highlight import query_terms   # the BM25 arm's terms: stemmed, no stop words

    words = query.lower().split()
    hosts = [SITES[w] for w in words if w in SITES]
    terms = query_terms(" ".join(w for w in words if w not in SITES))
    out = {normalize_url(u) for u in group}
    for url, page in refind.corpus().items():
        norm = normalize_url(url)
        if (not hosts or any(norm.startswith(h + "/") for h in hosts)) and terms <= query_terms(page["title"] or ""):
            out.add(norm)
    return sorted(out)


def cases(visits: list[dict]) -> list[dict]:
    """The benchmark's cases on this history, and the sibling groups': the most recently seen page of
    the query's family is wanted."""
    seen = refind.last_seen(visits)
    out = [c for c in refind.cases(visits)]
    for query, group in SIBLINGS:
        target = max(family(query, group), key=lambda u: (seen[u], u))
        out.append({"kind": "siblings", "half": half(query), "query": query, "target": target})
    return out


def evaluate(engine: Engine, cs: list[dict]) -> dict:
    out = {}
    for name, over in SETTINGS.items():
        ranks = []
        for c in cs:
            res = engine.search(SearchRequest(query=c["query"], k=10, workspace=refind.WORKSPACE, **over), log=False,
                                now=refind.NOW)
            ranks.append(next((h.rank for h in res.pages if normalize_url(h.url) == c["target"]), None))
        out[name] = {"ranks": ranks, "s1": {h: {k: _s1([r for c, r in zip(cs, ranks) if c["half"] == h and
                                                           (k == "all" or c["kind"] == k)])
                                                for k in (*KINDS, "all")} for h in refind.HALVES}}
    return out


def _s1(ranks: list) -> list[int]:
    return [sum(1 for r in ranks if r == 1), len(ranks)]


def markdown(result: dict) -> str:
    lines = ["# Recency among near-equals: the sibling groups", "",
             "From `python -m eval.refind_siblings`, embedder `" + result["model"] + "`: the refind benchmark's "
             f"history plus sessions over {len(SIBLINGS)} sibling groups whose titles all carry the query's words "
             "(eval/refind_queries.py: SIBLINGS, written before any definition was tried on them), "
             f"{result['visits']} visits. success@1 (successes / queries) per half; the most recently seen page of "
             "the query's family is wanted (the pages read together, and every page of the site it names whose "
             "title carries its other words). The benchmark's own kinds are measured again on this history (a "
             "sibling session can make a page the most recent under a site). `title band`: recency_title_band "
             "(docs/search.md, Recency).", ""]
    for h in refind.HALVES:
        lines += [f"**{h}**", "", "| setting | " + " | ".join((*KINDS, "all")) + " |",
                  "|---|" + "---|" * (len(KINDS) + 1)]
        for name, r in result["results"].items():
            cells = [f"{a}/{n} = {a / n:.2f}" if n else "—" for a, n in (r["s1"][h][k] for k in (*KINDS, "all"))]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", default="data-profiles/siblings")
    ap.add_argument("--profile", default="default")
    args = ap.parse_args(argv)
    data = Path(args.data_dir).resolve()
    shutil.rmtree(data, ignore_errors=True)
    visits = history()
    with Engine(load_settings(profile=args.profile, data_dir=str(data))) as engine:
        engine.ingest(((i, "refind-bench", r) for i, r in enumerate(visits, start=1)), refind.WORKSPACE,
                      progress=False)
        cs = cases(visits)
        result = {"model": engine.settings.models.active, "visits": len(visits), "settings": SETTINGS,
                  "cases": cs, "results": evaluate(engine, cs)}
    text = markdown(result)
    out = ROOT / "eval" / "results"
    (out / "refind_siblings.md").write_text(text)
    (out / "refind_siblings.json").write_text(json.dumps(result, indent=1) + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
