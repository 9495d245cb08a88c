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

from engine.core.urls import InvalidURL, domain_of, is_bare_domain, normalize_url

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
