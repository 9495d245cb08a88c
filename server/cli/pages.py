"""`refindery ingest`: pages in, from a JSONL file, a folder or stdin."""
from __future__ import annotations

import sys
from pathlib import Path

from engine.app import Engine

from .common import _print, _settings


def cmd_ingest(args) -> int:
    from engine.ingest.records import read_source

    with Engine(_settings(args)) as e:
        try:
            report = e.ingest(read_source(args.path, args.base_url), args.workspace, progress=not args.no_progress,
                              ray=args.ray, total=_count_records(args.path))
        except FileNotFoundError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        for err in report.errors:
            print(f"{err.source}:{err.line}: skipped: {err.error}", file=sys.stderr)
        summary = report.summary()
        summary["chunks_per_second"] = round(report.chunks_embedded / report.seconds, 1) if report.seconds else None
        _print(summary)
        late = e.settings.catch_up_model
        if late:   # the quality profile wrote its fast embedder only: say who embeds the rest, and when
            counts = e.counts()
            waiting = counts["chunks"] - counts["embeddings"].get(late, 0)
            if waiting:
                print(f"ingest: {waiting} chunks wait for {late}: `refindery serve` embeds them in its background "
                      f"(searchable meanwhile), or `refindery models --embed {late}` now", file=sys.stderr)
        return 1 if report.errors and not report.outcomes else 0


def _count_records(path: str) -> int | None:
    """Records in a JSONL file (for the progress line's total and time left); None for stdin or a folder."""
    import gzip

    p = Path(path)
    if path == "-" or not p.is_file():
        return None
    with (gzip.open(p, "rt", encoding="utf-8") if p.suffix == ".gz" else open(p, encoding="utf-8")) as fh:
        return sum(1 for line in fh if line.strip())


def add(sub) -> None:
    s = sub.add_parser("ingest", help="ingest a JSONL file (.jsonl or .jsonl.gz), a folder, or - for stdin")
    s.add_argument("path")
    s.add_argument("--workspace", default=None)
    s.add_argument("--base-url", default=None, help="for a folder: URL prefix for its files (default file://)")
    s.add_argument("--no-progress", action="store_true")
    s.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                   help="embed on Ray Data (a cluster's address; none: [ingest] ray_address, else a local Ray)")
    s.set_defaults(func=cmd_ingest)
