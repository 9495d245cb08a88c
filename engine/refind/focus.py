"""Focus: how much of a page is about the query (issue 73) — the stage after the rollup.

The rollup gives a page the score of its best chunk: a page that lists everything (a library's
table of contents, an API index, a changelog, a front page) holds one passage that touches nearly
any query and wins a vague one against the page that is about it from top to bottom. Focus
multiplies each rolled-up page's value by a factor from what the candidates say of the whole page:

    "share"   min(1, (m + slack) / n) ** strength
              — m of its n chunks among the candidates: a page of at most m + slack chunks keeps its
              value (a short page of which one passage matched is not "unfocused"), a long page of which
              a few passages matched falls; both a mass (m) and a length (n) term;
    "length"  n ** -strength — the length term alone (what a page is, whatever the query);

and `strength` 0 is off. A search engine's results page (`is_results_page`: a search path with a
query parameter — google.com/search?q=…, duckduckgo.com/?q=…, a site's own search.html?q=…) lists
results by construction and is short: the share cannot tell it from a page about the query, and it
carries the very words that were searched. With focus on, its factor is also multiplied by
`results_page` (0.5 by default): it no longer outranks, on the query that found it, the page it led to
(tests/refind/test_focus.py). The form and strength shipped were chosen on the refind benchmark's dev half
(eval/refind_hubs.py; eval/results/refind_hubs.md). A factor only reorders: it is in (0, 1], the
same for every chunk of a page, so the chunks' order and the page's chunks are unchanged; `explain`
reports it per page (m, n, the factor, the value before).

A page's chunk count is counted once per view (its chunks in the hot view), m from the rollup's
groups: the stage costs one multiply per candidate page.
"""
from __future__ import annotations

from dataclasses import replace
from urllib.parse import parse_qsl, urlsplit

import numpy as np

from indexes.hot import HotView

from engine.refind.rollup import Rolled

FORMS = ("share", "length")
# Where a search engine, or a site's own search, puts its results: the path's last segment, and the
# parameters that carry the query. Hosts whose results are served at their root with ?q=.
_RESULTS_PATHS = frozenset({"search", "search.html", "search.php", "search.aspx", "s", "results", "html", "sp",
                            "web", "find"})
_QUERY_PARAMS = frozenset({"q", "query", "s", "search", "term", "p", "text", "wd", "k", "keywords", "search_query"})
_ROOT_SEARCH_HOSTS = ("duckduckgo.com", "qwant.com", "startpage.com", "ecosia.org", "search.brave.com")


def is_results_page(url: str) -> bool:
    """Whether `url` is a search results page: a search path (or the root of a search engine that serves
    results there) with a non-empty query parameter."""
    try:
        parts = urlsplit(url if "://" in url else "https://" + url)
    except ValueError:
        return False
    if not parts.query:
        return False
    if not any(k.lower() in _QUERY_PARAMS and v.strip() for k, v in parse_qsl(parts.query, keep_blank_values=True)):
        return False
    last = parts.path.rstrip("/").rsplit("/", 1)[-1].lower()
    host = (parts.hostname or "").lower()
    return last in _RESULTS_PATHS or (last == "" and any(host == h or host.endswith("." + h)
                                                         for h in _ROOT_SEARCH_HOSTS))


def results_pages(view: HotView, rows: np.ndarray) -> np.ndarray:
    """Whether each page row is a search results page, looked at once per row and view."""
    memo = view._memo.setdefault("results_page", {})
    urls = view.cols["url"]
    out = np.empty(len(rows), dtype=bool)
    for i, r in enumerate(rows.tolist()):
        got = memo.get(r)
        if got is None:
            got = memo[r] = is_results_page(urls[r] or "")
        out[i] = got
    return out


def page_chunk_counts(view: HotView) -> np.ndarray:
    """Each page row's chunk count in `view`, counted once per view."""
    memo = view._memo
    got = memo.get("page_chunks")
    if got is None:
        got = memo["page_chunks"] = np.bincount(view.chunk_row, minlength=len(view.cols["page_id"])).astype(np.float64)
    return got


def focus(rolled: Rolled, view: HotView, strength: float, form: str = "share", slack: float = 0.0,
          results_page: float = 1.0) -> Rolled:
    """`rolled` with each page's value times its focus factor (`Rolled.focus` holds the factors and
    `Rolled.before` the values they multiplied); unchanged at strength 0."""
    if strength <= 0 or not len(rolled.pages):
        return rolled
    if form not in FORMS:
        raise ValueError(f"unknown focus form {form!r}; use one of {', '.join(FORMS)}")
    n = np.maximum(page_chunk_counts(view)[rolled.pages], 1.0)
    if form == "share":
        factors = np.power(np.minimum((rolled.counts + slack) / n, 1.0), strength)
    else:
        factors = np.power(n, -strength)
    if results_page < 1.0:
        factors = np.where(results_pages(view, rolled.pages), factors * results_page, factors)
    return replace(rolled, values=rolled.values * factors, focus=factors, before=rolled.values,
                   chunks=n)

