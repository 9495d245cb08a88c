"""Which URLs an import keeps: the skip and allow rules of the browser extension's settings
(clients/extension/rules.js), read the same way here. A rule is one of

    example.com             the host and every host under it (www.example.com, docs.example.com)
    https://example.com/a   a URL prefix (begins with http:// or https://, no "*"), case-insensitive
    *://*.example.com/*x*   a pattern over the whole URL: "*" is any run of characters
    /^https:\\/\\/x\\/\\d+/      a regular expression over the whole URL, between slashes (searched, as JS's test)

Lines that are empty or begin with "#" are comments. Both implementations are held to one table of
cases (clients/extension/rule_cases.json), run through Node for rules.js and here for this module.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable
from urllib.parse import urlsplit


class RuleError(ValueError):
    """A line that is none of the four kinds of rule."""


@dataclass(frozen=True)
class Rule:
    text: str
    test: Callable[[str], bool] = field(compare=False)


def _compile(line: str) -> Rule:
    if len(line) > 2 and line.startswith("/") and line.endswith("/"):
        try:
            rx = re.compile(line[1:-1])
        except re.error as exc:
            raise RuleError(f"not a regular expression: {exc}") from None
        return Rule(line, lambda url: rx.search(url) is not None)
    if "*" in line:
        rx = re.compile("^" + ".*".join(re.escape(p) for p in line.split("*")) + "$", re.DOTALL)
        return Rule(line, lambda url: rx.match(url) is not None)
    if re.match(r"^https?://", line, re.IGNORECASE):
        prefix = line.lower()
        return Rule(line, lambda url: url.lower().startswith(prefix))
    if re.search(r"[\s/:?#]", line):
        raise RuleError("not a domain, a URL prefix, a pattern with * or a /regex/")
    host = line.lower().lstrip(".")

    def on_host(url: str) -> bool:
        try:
            h = (urlsplit(url).hostname or "").lower()
        except ValueError:
            return False
        return bool(h) and (h == host or h.endswith("." + host))
    return Rule(line, on_host)


@dataclass(frozen=True)
class Rules:
    rules: tuple[Rule, ...] = ()
    errors: tuple[str, ...] = ()

    @classmethod
    def parse(cls, text: str | None) -> "Rules":
        rules, errors = [], []
        for raw in (text or "").split("\n"):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            try:
                rules.append(_compile(line))
            except RuleError as exc:
                errors.append(f"{line}: {exc}")
        return cls(tuple(rules), tuple(errors))

    def first_match(self, url: str) -> str | None:
        """The first rule naming `url` (its text), or None."""
        return next((r.text for r in self.rules if r.test(url)), None)

    def __bool__(self) -> bool:
        return bool(self.rules)


def decide(url: str, skip: Rules, allow: Rules | None = None) -> tuple[bool, str]:
    """(kept, why) for an imported URL: with allow rules, only what one names; else all but what a skip
    rule names. Only http(s) pages are ever kept (a browser's history also holds file:, chrome: ...)."""
    scheme = url.split(":", 1)[0].lower() if ":" in url else ""
    if scheme not in ("http", "https"):
        return False, f"a {scheme or 'schemeless'} URL"
    if allow:
        rule = allow.first_match(url)
        return (True, f"allowed by {rule}") if rule else (False, "no allow rule names it")
    rule = skip.first_match(url)
    return (False, f"skipped by {rule}") if rule else (True, "kept")
