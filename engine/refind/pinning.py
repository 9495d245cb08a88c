"""Pinning exact matches: a query that is a stored page's URL, or a bare domain (the refind case
of pasting the address back)."""
from __future__ import annotations

import re
from dataclasses import dataclass

from engine.core.urls import InvalidURL, domain_of, is_bare_domain, normalize_url

_URLISH = re.compile(r"^(?:https?://)?(?:www\.)?[a-z0-9.-]+\.[a-z]{2,63}(?::\d+)?/\S*$", re.I)


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
