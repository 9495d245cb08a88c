"""URL normalisation and the stable page id derived from it."""
from __future__ import annotations

import hashlib
from functools import lru_cache
import re
from urllib.parse import quote, unquote, urlsplit

_DEFAULT_PORTS = {"http": 80, "https": 443}
_BARE_DOMAIN = re.compile(r"^(?:www\.)?(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]{2,63}\.?$", re.I)


_HOST_PORT = re.compile(r"^[a-z0-9-]+:\d{1,5}(?:[/?#]|$)", re.I)
_NEVER_SCHEMES = {"javascript", "data", "vbscript", "blob", "about", "mailto", "tel"}


class InvalidURL(ValueError):
    pass


def normalize_url(url: str) -> str:
    """Canonical form used for identity. It ignores the scheme (http/https), the host's case, a
    "www." prefix, default ports, a trailing slash and the #fragment; it keeps the path's case
    and the query string as given.

    http://www.Example.com:80/a/b/?b=2&a=1#top  ->  example.com/a/b?b=2&a=1
    """
    raw = (url or "").strip()
    if not raw:
        raise InvalidURL("empty URL")
    if "://" not in raw:
        # "example.com/a" and "localhost:8080/a" are hosts; "javascript:1", "mailto:x" are schemes.
        m = re.match(r"^([a-z][a-z0-9+.-]*):", raw, re.I)
        if m and (m.group(1).lower() in _NEVER_SCHEMES or ("." not in m.group(1) and not _HOST_PORT.match(raw))):
            raise InvalidURL(f"unsupported URL scheme {m.group(1)!r}")
        raw = "http://" + raw
    parts = urlsplit(raw)
    if parts.scheme.lower() not in ("http", "https", "file"):
        raise InvalidURL(f"unsupported URL scheme {parts.scheme!r}")
    host = (parts.hostname or "").lower().rstrip(".")
    if not host and parts.scheme.lower() != "file":
        raise InvalidURL(f"URL has no host: {url!r}")
    if host.startswith("www."):
        host = host[4:]
    try:
        port = parts.port
    except ValueError as exc:
        raise InvalidURL(f"bad port in URL {url!r}") from exc
    if port and port != _DEFAULT_PORTS.get(parts.scheme.lower()):
        host = f"{host}:{port}"
    path = quote(unquote(parts.path or "/"), safe="/:@!$&'()*+,;=-._~%")
    path = re.sub(r"/{2,}", "/", path)
    if path != "/" and path.endswith("/"):
        path = path.rstrip("/")
    q = parts.query
    out = host + (path if path != "/" else "")
    return out + ("?" + q if q else "")


def domain_of(url: str) -> str:
    """Registered host of a URL, lower case, without "www." and port."""
    raw = url.strip()
    if "://" not in raw:
        raw = "http://" + raw
    host = (urlsplit(raw).hostname or "").lower().rstrip(".")
    return host[4:] if host.startswith("www.") else host


@lru_cache(maxsize=1)
def _psl():
    from publicsuffixlist import PublicSuffixList

    return PublicSuffixList()   # the list bundled with the package: nothing is fetched


def is_public_suffix(domain: str) -> bool:
    """Whether `domain` is a public suffix (com, co.uk, github.io): a place where anyone registers
    sites, not one site — its "subdomains" are unrelated sites."""
    return _psl().publicsuffix(domain.lower().rstrip(".")) == domain.lower().rstrip(".")


def registrable_domain(host: str) -> str | None:
    """The registrable domain of a host (``docs.python.org`` -> ``python.org``); None for a public
    suffix or a name outside the list's rules that has no registrable part (``localhost``)."""
    return _psl().privatesuffix(host.lower().rstrip("."))


def is_bare_domain(text: str) -> bool:
    return bool(_BARE_DOMAIN.match(text.strip()))


def page_id_for(workspace: str, url_norm: str) -> str:
    """Stable id: the same normalised URL in the same workspace always gets the same id."""
    digest = hashlib.sha1(f"{workspace}\x00{url_norm}".encode()).hexdigest()
    return "pg_" + digest[:20]
