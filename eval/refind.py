"""`refindery eval refind`: a known-item refind test — does the page you saw come back, by the words
you remember it by?

The corpus is the bundled demo pages (Python, PostgreSQL and SQLite documentation) plus versioned
copies of twelve of them (the same page under Python 3.12 / 3.13 or PostgreSQL 16 / 17, word for
word), visited over a simulated browsing history: each page is seen one to five times at seeded
random moments between 2025-06-01 and 2026-11-30, and the search runs at the history's end.

The queries were written by hand before anything was tuned, one known page each, in five kinds:
- vague: the user's own words, not the page's ("turn off automatic memory cleanup python");
- exact: a term the page is about, as written on it ("CREATE EVENT TRIGGER");
- url: the page's address as pasted back (scheme, case, www, a slash or a #fragment changed);
- site: a bare domain or a URL prefix — the page wanted is the most recently seen one under it;
- recent: words that match several versions of one page equally — the one wanted is the version
  seen most recently ("the page I was on the other day").
Reported per kind: success@1, success@10 and MRR@10, with recency off and on.
"""
from __future__ import annotations

import gzip
import json
import random
from datetime import datetime, timedelta
from pathlib import Path

from engine.app import Engine
from engine.core.urls import normalize_url
from engine.refind.search import SearchRequest

ROOT = Path(__file__).resolve().parent.parent
PAGES = ROOT / "demo" / "pages.jsonl.gz"
START, END = datetime(2025, 6, 1), datetime(2026, 11, 30, 23, 59)
WORKSPACE = "refind-bench"
KINDS = ("vague", "exact", "url", "site", "recent")

PY, PG, LITE = "https://docs.python.org/3.11/", "https://www.postgresql.org/docs/15/", "https://www.sqlite.org/"
# Pages that also exist in later versions, word for word (the "recent" kind asks for them).
VERSIONED = {PY + "library/asyncio-queue.html": ("3.12", "3.13"), PY + "library/unicodedata.html": ("3.12", "3.13"),
             PY + "library/plistlib.html": ("3.12", "3.13"), PY + "library/array.html": ("3.12", "3.13"),
             PY + "library/multiprocessing.shared_memory.html": ("3.12", "3.13"),
             PY + "library/reprlib.html": ("3.12", "3.13"),
             PG + "datatype-enum.html": ("16", "17"), PG + "datatype-money.html": ("16", "17"),
             PG + "sql-grant.html": ("16", "17"), PG + "sql-altersystem.html": ("16", "17"),
             PY + "library/copyreg.html": ("3.12", "3.13"), PG + "sql-createcast.html": ("16", "17")}

# (kind, query, the page meant: a URL, or for "site" the prefix/domain the most recent page is under,
# or for "recent" the 3.11 / 15 URL of the page whose most recent version is meant)
QUERIES: list[tuple[str, str, str]] = [
    ("vague", "change a setting for just my session in postgres", PG + "sql-set.html"),
    ("vague", "turn off automatic memory cleanup python", PY + "library/gc.html"),
    ("vague", "sample code sending mail with an attachment", PY + "library/email.examples.html"),
    ("vague", "run a function at a later time from an event queue", PY + "library/sched.html"),
    ("vague", "see how sqlite will execute my query", LITE + "eqp.html"),
    ("vague", "read a toml config file in python", PY + "library/tomllib.html"),
    ("vague", "ftp login credentials file in the home directory", PY + "library/netrc.html"),
    ("vague", "sqlite's own debugging checks for invariants in C", LITE + "assert.html"),
    ("vague", "how many copies of sqlite exist in the world", LITE + "mostdeployed.html"),
    ("vague", "store raw bytes in a postgres column", PG + "datatype-binary.html"),
    ("vague", "get the next number of an auto increment counter in postgres", PG + "functions-sequence.html"),
    ("vague", "print nested dictionaries nicely", PY + "library/pprint.html"),
    ("vague", "why learn python, the first chapter of the tutorial", PY + "tutorial/appetite.html"),
    ("vague", "lightweight xml document object model", PY + "library/xml.dom.minidom.html"),
    ("vague", "list of sqlite versions and their release dates", LITE + "chronology.html"),
    ("vague", "add a column to an existing sqlite table", LITE + "lang_altertable.html"),
    ("vague", "copy a live sqlite database while it is in use", LITE + "backup.html"),
    ("vague", "convert rgb colours to hsv", PY + "library/colorsys.html"),
    ("vague", "reclaim disk space from dead rows in postgres", PG + "sql-vacuum.html"),
    ("vague", "open a link in the user's browser from a script", PY + "library/webbrowser.html"),
    ("vague", "recommended books to learn sqlite", LITE + "books.html"),
    ("vague", "turn all the .py files of a folder into bytecode ahead of time", PY + "library/compileall.html"),
    ("vague", "parse and set cookie headers on the server side", PY + "library/http.cookies.html"),
    ("vague", "first phase of a two phase commit", PG + "sql-prepare-transaction.html"),
    ("vague", "tables that don't have the hidden integer row id", LITE + "withoutrowid.html"),
    ("vague", "old C style parsing of command line switches", PY + "library/getopt.html"),
    ("vague", "make an independent copy of a nested list", PY + "library/copy.html"),
    ("exact", "ALTER MATERIALIZED VIEW", PG + "sql-altermaterializedview.html"),
    ("exact", "CREATE TEXT SEARCH CONFIGURATION", PG + "sql-createtsconfig.html"),
    ("exact", "ALTER TRIGGER DEPENDS ON EXTENSION", PG + "sql-altertrigger.html"),
    ("exact", "CREATE PUBLICATION", PG + "sql-createpublication.html"),
    ("exact", "CREATE EVENT TRIGGER", PG + "sql-createeventtrigger.html"),
    ("exact", "ALTER COLLATION", PG + "sql-altercollation.html"),
    ("exact", "pickletools", PY + "library/pickletools.html"),
    ("exact", "winsound", PY + "library/winsound.html"),
    ("exact", "pydoc documentation generator", PY + "library/pydoc.html"),
    ("exact", "sndhdr", PY + "library/sndhdr.html"),
    ("exact", "tsvector tsquery", PG + "datatype-textsearch.html"),
    ("exact", "bytecode tables_used table-valued functions", LITE + "bytecodevtab.html"),
    ("url", "http://docs.python.org/3.11/library/gc.html", PY + "library/gc.html"),
    ("url", "DOCS.PYTHON.ORG/3.11/library/copy.html#copy.deepcopy", PY + "library/copy.html"),
    ("url", "https://www.sqlite.org/backup.html/", LITE + "backup.html"),
    ("url", "sqlite.org/withoutrowid.html", LITE + "withoutrowid.html"),
    ("url", "https://www.postgresql.org/docs/15/sql-vacuum.html#SQL-VACUUM-NOTES", PG + "sql-vacuum.html"),
    ("url", "www.postgresql.org/docs/15/sql-set.html", PG + "sql-set.html"),
    ("url", "https://docs.python.org/3.11/library/pprint.html", PY + "library/pprint.html"),
    ("url", "http://www.sqlite.org/eqp.html", LITE + "eqp.html"),
    ("site", "sqlite.org", "sqlite.org"),
    ("site", "postgresql.org", "postgresql.org"),
    ("site", "python.org", "python.org"),
    ("site", "docs.python.org/3.11/tutorial", "docs.python.org/3.11/tutorial"),
    ("site", "www.postgresql.org/docs/15", "postgresql.org/docs/15"),
    ("site", "https://docs.python.org/3.13/library/", "docs.python.org/3.13/library"),
    ("recent", "asyncio queue put and get between coroutines", PY + "library/asyncio-queue.html"),
    ("recent", "look up the unicode name of a character", PY + "library/unicodedata.html"),
    ("recent", "read and write apple plist files", PY + "library/plistlib.html"),
    ("recent", "compact arrays of numbers with a type code", PY + "library/array.html"),
    ("recent", "share memory between processes without pickling", PY + "library/multiprocessing.shared_memory.html"),
    ("recent", "shortened repr for big objects", PY + "library/reprlib.html"),
    ("recent", "enum types in postgres", PG + "datatype-enum.html"),
    ("recent", "currency column type postgres", PG + "datatype-money.html"),
    ("recent", "give a user permission on a table", PG + "sql-grant.html"),
    ("recent", "change the server configuration file from SQL", PG + "sql-altersystem.html"),
    ("recent", "register how my class is pickled", PY + "library/copyreg.html"),
    ("recent", "define a conversion between two data types", PG + "sql-createcast.html"),
]


def _version(url: str, v: str) -> str:
    return url.replace("/3.11/", f"/{v}/") if url.startswith(PY) else url.replace("/docs/15/", f"/docs/{v}/")


def history(seed: int = 7) -> list[dict]:
    """Every visit of the simulated history, oldest first: each demo page (and each version copy)
    seen one to five times at seeded random moments in [START, END]."""
    with gzip.open(PAGES, "rt", encoding="utf-8") as fh:
        pages: dict[str, dict] = {}
        for line in fh:
            r = json.loads(line)
            pages.setdefault(r["url"], r)
    for url, versions in VERSIONED.items():
        for v in versions:
            pages[_version(url, v)] = {**pages[url], "url": _version(url, v)}
    rng = random.Random(seed)
    span = (END - START).total_seconds()
    visits = []
    for url in sorted(pages):
        for _ in range(min(5, 1 + int(rng.expovariate(1.0)))):
            at = START + timedelta(seconds=rng.random() * span)
            visits.append({**pages[url], "seen_at": at.strftime("%Y-%m-%dT%H:%M:%SZ")})
    visits.sort(key=lambda r: (r["seen_at"], r["url"]))
    return visits


def _last_seen(visits: list[dict]) -> dict[str, str]:
    out: dict[str, str] = {}
    for r in visits:
        out[normalize_url(r["url"])] = max(out.get(normalize_url(r["url"]), ""), r["seen_at"])
    return out


def targets(visits: list[dict]) -> list[tuple[str, str, str]]:
    """(kind, query, the normalised URL of the page meant) for every query."""
    seen = _last_seen(visits)
    out = []
    for kind, query, meant in QUERIES:
        if kind == "site":
            def under(u: str, p: str = meant) -> bool:
                host = u.split("/", 1)[0]
                return (u.startswith(p + "/") if "/" in p else host == p or host.endswith("." + p))
            target = max((u for u in seen if under(u)), key=lambda u: (seen[u], u))
        elif kind == "recent":
            copies = [normalize_url(meant)] + [normalize_url(_version(meant, v)) for v in VERSIONED[meant]]
            target = max(copies, key=lambda u: (seen[u], u))
        else:
            target = normalize_url(meant)
        out.append((kind, query, target))
    return out


def prepare(engine: Engine, seed: int = 7) -> list[dict]:
    visits = history(seed)
    engine.ingest(((i, "refind-bench", r) for i, r in enumerate(visits, start=1)), WORKSPACE, progress=False)
    return visits


def evaluate(engine: Engine, visits: list[dict], settings: dict[str, dict]) -> dict:
    """Per setting (a name -> request overrides), per kind: success@1, success@10, MRR@10."""
    cases = targets(visits)
    now = END + timedelta(minutes=1)
    out: dict[str, dict] = {}
    for name, overrides in settings.items():
        per_kind: dict[str, list[int | None]] = {k: [] for k in KINDS}
        for kind, query, target in cases:
            res = engine.search(SearchRequest(query=query, k=10, workspace=WORKSPACE, **overrides), log=False, now=now)
            ranks = [i for i, h in enumerate(res.pages, start=1) if normalize_url(h.url) == target]
            per_kind[kind].append(ranks[0] if ranks else None)
        out[name] = {k: _figures(v) for k, v in per_kind.items()}
        out[name]["all"] = _figures([r for v in per_kind.values() for r in v])
    return {"queries": {k: sum(1 for c in cases if c[0] == k) for k in KINDS}, "pages": len(_last_seen(visits)),
            "visits": len(visits), "settings": settings, "results": out}


def _figures(ranks: list[int | None]) -> dict:
    n = len(ranks) or 1
    return {"success@1": round(sum(1 for r in ranks if r == 1) / n, 3),
            "success@10": round(sum(1 for r in ranks if r is not None) / n, 3),
            "mrr@10": round(sum(1 / r for r in ranks if r is not None) / n, 3)}


def markdown(result: dict) -> str:
    q = result["queries"]
    lines = [f"Known-item refind test: {result['pages']} pages, {result['visits']} visits over 18 months, "
             f"{sum(q.values())} hand-written queries ({', '.join(f'{k} {n}' for k, n in q.items())}); "
             "success@1 / success@10 / MRR@10.", "",
             "| setting | " + " | ".join(KINDS) + " | all |", "|---|" + "---|" * (len(KINDS) + 1)]
    for name, r in result["results"].items():
        cells = [f"{r[k]['success@1']:.2f} / {r[k]['success@10']:.2f} / {r[k]['mrr@10']:.2f}" for k in (*KINDS, "all")]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
