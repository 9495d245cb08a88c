"""Pinning exact matches — the refind case of pasting the address back. A query that is:
- a stored page's URL pins that page ("url");
- else a URL prefix (a host and the path of one section of a site, `docs.python.org/3/library`)
  pins the pages under it, at a path-segment boundary ("prefix");
- a bare domain pins that domain's pages and its subdomains' (`python.org` covers `docs.python.org`;
  a public suffix such as `github.io` or `co.uk` is many sites, and pins nothing) ("domain").
Case, scheme, `www.`, a trailing slash and the #fragment do not matter; nor do tracking parameters
(`utm_*`, `fbclid`, `gclid`, ... — `without_tracking`) when the URL as pasted is no stored page's: a
link from a newsletter still finds the page it points to. Prefix and domain pins are most recently
seen first, at most `pin_domain_max`."""
from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import unquote_plus

import numpy as np

from engine.core.urls import InvalidURL, domain_of, is_bare_domain, is_public_suffix, normalize_url

_URLISH = re.compile(r"^(?:https?://)?(?:www\.)?[a-z0-9.-]+\.[a-z]{2,63}(?::\d+)?/\S*$", re.I)


# Query parameters that say where a link was shared, not which page it is (the ones browsers' "copy
# clean link" and link-cleaning extensions drop): utm_* and these.
TRACKING = frozenset({"fbclid", "gclid", "dclid", "gbraid", "wbraid", "msclkid", "yclid", "twclid", "igshid",
                      "mc_cid", "mc_eid", "_ga", "_gl", "mkt_tok", "oly_anon_id", "oly_enc_id", "vero_id"})


def without_tracking(url: str) -> str | None:
    """A normalised URL without its tracking parameters (the others kept as written, in order); None
    when it has none (nothing to try again)."""
    base, sep, query = url.partition("?")
    if not sep:
        return None
    parts = query.split("&")
    kept = [p for p in parts if not _tracking(unquote_plus(p.partition("=")[0]).lower())]
    if len(kept) == len(parts):
        return None
    return base + ("?" + "&".join(kept) if kept else "")


def _tracking(name: str) -> bool:
    return name.startswith("utm_") or name in TRACKING


@dataclass(frozen=True)
class PinIntent:
    kind: str  # "url" | "domain"
    value: str  # normalised URL or domain


def pin_intent(query: str) -> PinIntent | None:
    q = query.strip()
    if not q or " " in q:
        return None
    if q.lower().startswith(("http://", "https://")) or _URLISH.match(q):
        try:
            return PinIntent("url", normalize_url(q))
        except InvalidURL:
            return None
    if is_bare_domain(q):
        return PinIntent("domain", domain_of(q))
    return None


def pinned_pages(store, intent: PinIntent, workspace: str, allowed: set[str] | None, limit: int,
                 scopes: tuple[str, ...] | None = None) -> list[tuple[str, str]]:
    """The pinned pages of a pin intent, in order, with their kind (at most `limit` for a prefix or domain; only pages of `allowed`, None: any). Each
    lookup reads only the caller's document scopes, so which fallback applies (a URL, else its
    prefix or domain) never depends on what another scope holds."""
    within = list(scopes) if scopes is not None else None
    found: list[tuple[str, str]] = []
    domain = intent.value if intent.kind == "domain" else None
    if intent.kind == "url":
        url = intent.value
        found = [(pid, "url") for pid in store.pages_with_url(workspace, url, within)]
        if not found and (clean := without_tracking(url)) is not None:   # a shared link's utm_* and such
            url = clean
            found = [(pid, "url") for pid in store.pages_with_url(workspace, url, within)]
        host, _, path = url.split("?", 1)[0].partition("/")
        if not found and path:
            found = [(pid, "prefix") for pid in store.pages_under_prefix(workspace, url, limit, within)]
        elif not found:
            domain = host
    if not found and domain and not is_public_suffix(domain):
        found = [(pid, "domain") for pid in store.pages_of_domain(workspace, domain, limit, subdomains=True,
                                                                 scopes=within)]
    return [(pid, kind) for pid, kind in found if allowed is None or pid in allowed]


def lead_first(order: list[str], total: int, pinned: dict[str, str], shortcut_page: str | None, view,
               ranked_rows) -> tuple[list[str], int]:
    """The ranking with its leaders first: a page whose URL the query is, then the shortcut's page,
    then the other pins; `total` counts a pinned page once (`ranked_rows`: the view rows of the pages
    ranked, which may hold it already)."""
    lead = [pid for pid, kind in pinned.items() if kind == "url"]
    lead += [shortcut_page] if shortcut_page is not None and shortcut_page not in lead else []
    lead += [pid for pid in pinned if pid not in lead]
    first = set(lead)
    order = lead + [pid for pid in order if pid not in first]
    rows = np.fromiter((view.row_of[pid] for pid in pinned), dtype=np.int64, count=len(pinned))
    return order, total + len(pinned) - int(np.isin(rows, ranked_rows).sum())
