"""`refindery ingest`: pages in, from a JSONL file, a folder or stdin; `refindery forget`: pages out, by URL,
domain or time range."""
from __future__ import annotations

import argparse
import re
import sys
from datetime import datetime, timedelta
from pathlib import Path

from engine.app import Engine
from engine.core.clock import utcnow
from engine.core.values import utc_naive

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


def forget_request(args) -> dict:
    """What to forget, as POST /v1/forget's body: times as ISO strings in UTC."""
    since, until = args.since, args.until
    if args.last is not None:
        since = utcnow() - args.last
    body = {"url": args.url, "domain": args.domain, "since": since, "until": until, "workspace": args.workspace}
    return {k: v.isoformat() if isinstance(v, datetime) else v for k, v in body.items() if v is not None}


def cmd_forget(args) -> int:
    body = forget_request(args)
    if not any(k in body for k in ("url", "domain", "since", "until")):
        print("error: say what to forget: a URL, --domain D, --last 1h, or --since/--until", file=sys.stderr)
        return 2
    with Engine(_settings(args)) as e:
        _print(e.forget(body.get("url"), body.get("workspace"), domain=body.get("domain"),
                        since=utc_naive(datetime.fromisoformat(body["since"])) if "since" in body else None,
                        until=utc_naive(datetime.fromisoformat(body["until"])) if "until" in body else None))
    return 0


_SPAN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(m|min|h|d|w)\s*$")


def span(text: str) -> timedelta:
    """`--last`'s value: 15m, 1h, 24h, 7d, 4w."""
    m = _SPAN.match(text)
    if not m:
        raise argparse.ArgumentTypeError(f"not a span of time: {text!r} (say 15m, 1h, 7d or 4w)")
    n, unit = float(m[1]), m[2]
    return timedelta(minutes=n) if unit in ("m", "min") else timedelta(hours=n) if unit == "h" else \
        timedelta(days=n) if unit == "d" else timedelta(weeks=n)


def when(text: str) -> datetime:
    """`--since`/`--until`: an ISO date or time; without a zone, UTC."""
    try:
        return utc_naive(datetime.fromisoformat(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a date or time: {text!r} (say 2026-12-01 or 2026-12-01T09:30)") from None


def add(sub) -> None:
    s = sub.add_parser("ingest", help="ingest a JSONL file (.jsonl or .jsonl.gz), a folder, or - for stdin")
    s.add_argument("path")
    s.add_argument("--workspace", default=None)
    s.add_argument("--base-url", default=None, help="for a folder: URL prefix for its files (default file://)")
    s.add_argument("--no-progress", action="store_true")
    s.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                   help="embed on Ray Data (a cluster's address; none: [ingest] ray_address, else a local Ray)")
    s.set_defaults(func=cmd_ingest)

    s = sub.add_parser("forget", help="forget pages: at a URL, of a domain (and its subdomains), or seen in a time "
                                      "range — from the store, every index and the query log")
    s.add_argument("url", nargs="?", default=None, help="the page's URL")
    s.add_argument("--domain", default=None, help="every page of this domain and its subdomains")
    s.add_argument("--last", type=span, default=None, metavar="SPAN",
                   help="the pages seen in the last SPAN (15m, 1h, 24h, 7d, 4w), as a browser's 'clear the last hour'")
    s.add_argument("--since", type=when, default=None, help="the pages seen since this date or time (UTC)")
    s.add_argument("--until", type=when, default=None, help="... and until this one (default: now)")
    s.add_argument("--workspace", default=None)
    s.set_defaults(func=cmd_forget)
