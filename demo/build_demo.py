"""Build demo/pages.jsonl.gz from documentation shipped by Debian packages (run once; output committed).

    apt-get install python3.11-doc postgresql-doc-15 sqlite3-doc
    .venv/bin/python demo/build_demo.py

Pages: docs.python.org (PSF licence), www.postgresql.org/docs/15 (PostgreSQL licence),
www.sqlite.org (public domain) - every URL is the page's real public address. The visit history
(seen_at) is simulated with a fixed seed, because no real browsing history can be redistributed:
each page is first visited between 2026-05-01 and 2026-11-20, and about a third are visited
again later (the same content, a later seen_at), which exercises re-visit handling.
"""
from __future__ import annotations

import gzip
import json
import random
import sys
from datetime import datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from engine.ingest.extract import ExtractionFailed, html_to_text  # noqa: E402

OUT = Path(__file__).with_name("pages.jsonl.gz")
MIN_CHARS, MAX_CHARS = 1500, 16000

SOURCES = [
    # (folder, glob, url prefix, entity, aliases, how many)
    ("/usr/share/doc/python3.11/html/library", "*.html", "https://docs.python.org/3.11/library/",
     "Python", ["CPython", "python3"], 150),
    ("/usr/share/doc/python3.11/html/tutorial", "*.html", "https://docs.python.org/3.11/tutorial/",
     "Python", ["CPython", "python3"], 12),
    ("/usr/share/doc/python3.11/html/howto", "*.html", "https://docs.python.org/3.11/howto/",
     "Python", ["CPython", "python3"], 10),
    ("/usr/share/doc/postgresql-doc-15/html", "sql-*.html", "https://www.postgresql.org/docs/15/",
     "PostgreSQL", ["Postgres", "psql"], 70),
    ("/usr/share/doc/postgresql-doc-15/html", "functions-*.html", "https://www.postgresql.org/docs/15/",
     "PostgreSQL", ["Postgres", "psql"], 25),
    ("/usr/share/doc/postgresql-doc-15/html", "datatype-*.html", "https://www.postgresql.org/docs/15/",
     "PostgreSQL", ["Postgres", "psql"], 15),
    ("/usr/share/doc/sqlite3", "*.html", "https://www.sqlite.org/", "SQLite", ["sqlite3"], 70),
]


def main() -> None:
    rng = random.Random(20261129)
    start = datetime(2026, 5, 1)
    span = (datetime(2026, 11, 20) - start).total_seconds()
    records = []
    for folder, pattern, prefix, entity, aliases, want in SOURCES:
        files = sorted(Path(folder).glob(pattern))
        rng.shuffle(files)
        taken = 0
        for f in files:
            if taken >= want:
                break
            try:
                body, title = html_to_text(f.read_text(encoding="utf-8", errors="replace"))
            except ExtractionFailed:
                continue
            if not (MIN_CHARS <= len(body) <= MAX_CHARS) or not title:
                continue
            seen = start + timedelta(seconds=rng.uniform(0, span))
            rec = {"url": prefix + f.name, "title": title, "body_text": body,
                   "seen_at": seen.isoformat(timespec="seconds") + "Z",
                   "entities": [{"canonical": entity, "aliases": aliases}]}
            records.append(rec)
            if rng.random() < 0.33:
                again = seen + timedelta(days=rng.uniform(1, 30))
                if again < datetime(2026, 11, 28):
                    records.append({**rec, "seen_at": again.isoformat(timespec="seconds") + "Z"})
            taken += 1
    records.sort(key=lambda r: r["seen_at"])
    with gzip.open(OUT, "wt", encoding="utf-8", compresslevel=9) as fh:
        for r in records:
            fh.write(json.dumps(r, ensure_ascii=False) + "\n")
    pages = len({r["url"] for r in records})
    chars = sum(len(r["body_text"]) for r in records)
    print(f"{OUT}: {len(records)} records, {pages} pages, {chars} chars, {OUT.stat().st_size} bytes")


if __name__ == "__main__":
    main()
