"""Decomposition of comparative and multi-part questions into 2–4 sub-queries (seed 002, Step 0).

Signals: "compare X and/with/to Y", "X vs Y" / "versus" / "compared to|with", "difference(s)
between X and Y", "how do X and Y differ", and "and" joining distinct questions. A plain "and" splits
only before a second question ("… and how/what/why …"), when each side carries at least two content
words and the embedder finds the sides apart (cosine below `distinct_max`): "salt and pepper" and
"observations of whistlers and lightning discharges" stay whole — on the development collections,
splitting coordinated phrases like the latter cut the precision of high-confidence sources in half.
A trailing scope shared by the parts ("... in Mixpeek", "... for children") is given to every part.
Simple lookups come back whole.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache
from typing import Callable

MAX_PARTS = 4
_LEAD = re.compile(
    r"^\s*(?:(?:please\s+)?(?:compare|contrast)(?:\s+and\s+contrast)?|"
    r"(?:what\s+(?:is|are)\s+|what's\s+)?(?:the\s+)?(?:main\s+|key\s+)?differences?\s+between|"
    r"how\s+(?:does|do|did)|what\s+distinguishes)\s+", re.I)
_TAIL = re.compile(r"\s+(?:differ|compare|contrast)(?:\s+from\s+each\s+other)?\s*\??\s*$", re.I)
_COMPARE_SEP = re.compile(r"\s+(?:vs\.?|versus|v\.|compared\s+(?:to|with)|as\s+opposed\s+to)\s+|"
                          r"\s*,\s*(?:and\s+)?|\s+and\s+|\s+with\s+|\s+to\s+|\s+from\s+", re.I)
_VS = re.compile(r"\s+(?:vs\.?|versus|compared\s+(?:to|with)|as\s+opposed\s+to)\s+", re.I)
_AND = re.compile(r"\s*,?\s+and\s+(?=(?:what|how|why|when|where|who|whom|which|whose|is|are|was|were|does|do|"
                  r"did|can|could|should|would|will|has|have)\b)", re.I)
_PREPOSITION = re.compile(r"\s+(?:in|on|for|within|among|at|during|under)\s+", re.I)


@dataclass(frozen=True)
class Scoped:
    head: str
    scope: str


def _scope(part: str) -> Scoped | None:
    r"""A trailing scope phrase: the first " in|on|for|… " after the part's last comma, and what
    follows it up to the closing spaces and ?.! marks. (What `^(.*?)(\s+(?:in|on|…)\s+[^,]+?)\s*[?.!]*\s*$`
    matched; found with one search, where that pattern's nested lazy parts took cubic time on a
    long question of repeated "in"s and question marks.)"""
    part = " ".join(part.split())   # the questions decompose sees are normalised already; this keeps it so
    m = _PREPOSITION.search(part, part.rfind(",") + 1)
    if m is None:
        return None
    rest = part[m.end():]
    if not rest:
        return None
    body = rest.rstrip().rstrip("?.!").rstrip() or rest[:1]
    return Scoped(part[:m.start()], part[m.start():m.end() + len(body)])


@dataclass
class Decomposition:
    query: str
    sub_queries: list[str]
    signal: str | None                  # compare | vs | difference | differ | and | None
    distinct: list[float] = field(default_factory=list)  # cosine between the parts, for "and"

    @property
    def decomposed(self) -> bool:
        return len(self.sub_queries) > 1


@cache
def stop_words() -> frozenset[str]:
    """scikit-learn's English stop words, and the verbs a question is asked with. Imported on first
    use: scikit-learn takes about a second to import, and every process that imports the engine (the
    server, each CLI command) would pay it for one word list."""
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    return ENGLISH_STOP_WORDS | {"does", "did", "doing", "done", "tell", "explain", "describe", "compare",
                                 "vs", "versus"}


def content_words(text: str) -> list[str]:
    stop = stop_words()
    return [w for w in re.findall(r"[^\W_]+", text.lower()) if w not in stop and len(w) > 1]


def _tidy(part: str) -> str:
    return part.strip(" \t,;:?.!").strip()


def _share_scope(parts: list[str]) -> list[str]:
    """A scope phrase on the last part only ("... document processing in Mixpeek") applies to all."""
    m = _scope(parts[-1])
    if not m or any(_scope(p) for p in parts[:-1]) or not content_words(m.head):
        return parts
    scope = m.scope.strip()
    return [f"{p} {scope}" for p in parts[:-1]] + [_tidy(m.head) + " " + scope]


def _share_head(parts: list[str]) -> list[str]:
    """"compare sqlite and postgresql transactions": one-word parts before a longer last part share
    its tail ("sqlite transactions", "postgresql transactions") — the distributive reading."""
    last = parts[-1].split()
    if len(last) >= 2 and all(len(p.split()) == 1 for p in parts[:-1]) and not _scope(parts[-1]):
        tail = " ".join(last[1:])
        return [f"{p} {tail}" for p in parts[:-1]] + [parts[-1]]
    return parts


def _cap(parts: list[str]) -> list[str]:
    parts = [p for p in (_tidy(p) for p in parts) if content_words(p)]
    if len(parts) > MAX_PARTS:
        parts = parts[:MAX_PARTS - 1] + [" and ".join(parts[MAX_PARTS - 1:])]
    return parts


def decompose(query: str, similarity: Callable[[list[str]], list[float]] | None = None,
              distinct_max: float = 0.6) -> Decomposition:
    """`similarity(parts)` returns the cosine of each consecutive pair of parts (the embedder)."""
    text = " ".join(query.split())
    lead = _LEAD.match(text)
    if lead and lead.group(0).lower().startswith("how") and not _TAIL.search(text):
        lead = None  # "how does X work with Y" is no comparison; "how do X and Y differ" is
    if lead:
        body = _TAIL.sub("", text[lead.end():])
        signal = "difference" if "differ" in lead.group(0).lower() else (
            "differ" if _TAIL.search(text) else "compare")
        if signal == "compare" and lead.group(0).lower().strip().startswith(("how", "what distinguishes")):
            signal = "differ"
        parts = _cap(_COMPARE_SEP.split(body))
        if len(parts) >= 2:
            return Decomposition(query, _share_scope(_share_head(parts)), signal)
    if _VS.search(text):
        parts = _cap(_VS.split(text))
        if len(parts) >= 2:
            return Decomposition(query, _share_scope(_share_head(parts)), "vs")
    parts = _cap(_AND.split(text))
    if len(parts) >= 2 and all(len(content_words(p)) >= 2 for p in parts):
        parts = _share_scope(parts)
        sims = similarity(parts) if similarity else []
        if similarity is None or all(s < distinct_max for s in sims):
            return Decomposition(query, parts, "and", [round(float(s), 4) for s in sims])
        return Decomposition(query, [query], None, [round(float(s), 4) for s in sims])
    return Decomposition(query, [query], None)
