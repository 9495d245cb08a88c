"""The dictionary evidence search expands a question through: canonical terms with their aliases,
colloquial surfaces bridged to them, and related terms.

Two sources, merged: the workspace's own dictionary (``<dictionary_dir>/<workspace>.toml`` or
``.md``, the workspace's name as engine/core/identity.py's `workspace_folder` writes it) and the vocabularies of the relation packs (a term's synonyms are its aliases, the terms a
hierarchy puts under it its related terms).

TOML::

    [[terms]]
    term = "geomagnetic reversal"
    aliases = ["magnetic reversal", "polarity reversal"]
    colloquial = ["pole flip"]
    related = ["paleomagnetism"]

Markdown: one ``## canonical term`` heading per entry with ``- aliases: a, b`` / ``- colloquial:`` /
``- related:`` lines, and/or a table whose header names the columns (``term`` or ``canonical``,
``aliases``, ``colloquial``, ``related``; or the seed's ``colloquial | technical``, where the first
technical term is the canonical one and the rest are its aliases).

Matching is on the index's stems, so grammatical forms match ("pole flips" finds "pole flip");
a short all-capitals surface (an acronym such as ``VP``) matches only when written in capitals, and
never in a text written all in capitals (where "AT" is a word, not Austria).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Protocol

from indexes.sparse import stems

from engine.core.parsing import TextRefused, loads_toml
from engine.core.identity import workspace_folder
from engine.core.markdown import LOOSE, heading

KINDS = ("aliases", "colloquial", "related")
KIND = {"aliases": "alias", "colloquial": "colloquial", "related": "related"}
SUFFIXES = (".toml", ".md")
MAX_ENTRIES = 20_000


class DictionaryError(ValueError):
    """A dictionary that cannot be read as written; the message names the place."""


@dataclass
class Entry:
    term: str
    aliases: list[str] = field(default_factory=list)
    colloquial: list[str] = field(default_factory=list)
    related: list[str] = field(default_factory=list)
    source: str = ""

    def surfaces(self) -> list[tuple[str, str]]:
        """(surface, kind) for the term and everything that names it."""
        out = [(self.term, "term")]
        out += [(s, KIND[k]) for k in KINDS for s in getattr(self, k)]
        return out

    def as_dict(self) -> dict:
        return {"term": self.term, "aliases": self.aliases, "colloquial": self.colloquial,
                "related": self.related, "source": self.source}


@dataclass
class Match:
    surface: str        # the words of the question that matched
    start: int          # token span in the question
    end: int
    entry: Entry
    kind: str           # term | alias | colloquial | related


def _clean(values, where: str) -> list[str]:
    if values is None:
        return []
    if isinstance(values, str):
        values = [v for v in values.split(",")]
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise DictionaryError(f"{where} must be a list of strings")
    out = []
    for v in values:
        v = " ".join(v.split())
        if v and v not in out:
            out.append(v)
    return out


def _entry(term, spec: dict, source: str, where: str) -> Entry:
    if not isinstance(term, str) or not term.strip():
        raise DictionaryError(f"{where}: every entry needs a non-empty term")
    if not stems(term):
        raise DictionaryError(f"{where}: term {term!r} has no searchable words")
    return Entry(" ".join(term.split()), *(_clean(spec.get(k), f"{where}.{k}") for k in KINDS), source=source)


def parse_toml(text: str, source: str = "dictionary.toml") -> list[Entry]:
    try:
        data = loads_toml(text)   # bounded depth and digits (engine/core/parsing.py)
    except TextRefused as exc:
        raise DictionaryError(str(exc)) from exc
    unknown = set(data) - {"terms"}
    if unknown:
        raise DictionaryError(f"unknown top-level keys {sorted(unknown)}; write [[terms]] tables")
    terms = data.get("terms", [])
    if not isinstance(terms, list):
        raise DictionaryError("terms must be an array of tables ([[terms]])")
    out = []
    for i, t in enumerate(terms):
        if not isinstance(t, dict):
            raise DictionaryError(f"terms[{i}] must be a table")
        extra = set(t) - {"term", *KINDS}
        if extra:
            raise DictionaryError(f"terms[{i}]: unknown keys {sorted(extra)}")
        out.append(_entry(t.get("term"), t, source, f"terms[{i}]"))
    return out


_TOKEN = re.compile(r"[^\W_]+")
_FIELD = re.compile(r"^\s*[-*]\s*\**(aliases|alias|colloquial|related)\**\s*:\s*(.*)$", re.I)
_ROW = re.compile(r"^\s*\|(.+)\|\s*$")


def _cells(line: str) -> list[str]:
    return [c.strip().strip("`*\"'“”") for c in _ROW.match(line).group(1).split("|")]


def parse_markdown(text: str, source: str = "dictionary.md") -> list[Entry]:
    out: list[Entry] = []
    current: Entry | None = None
    header: list[str] | None = None
    for n, line in enumerate(text.splitlines(), start=1):
        if _ROW.match(line):
            cells = [c.lower() for c in _cells(line)]
            if header is None:
                header = cells
                known = {"term", "canonical", "aliases", "colloquial", "related", "technical"}
                if not (set(header) & {"term", "canonical", "technical"}) or set(header) - known:
                    raise DictionaryError(f"line {n}: a table's header names its columns: term (or canonical), "
                                          "aliases, colloquial, related — or colloquial | technical")
                continue
            if all(set(c) <= set("-: ") for c in cells):
                continue  # the |---| rule
            row = dict(zip(header, _cells(line)))
            if "technical" in row:
                tech = _clean(row.get("technical"), f"line {n}")
                if not tech:
                    continue
                spec = {"aliases": tech[1:] + _clean(row.get("aliases"), f"line {n}"),
                        "colloquial": row.get("colloquial"), "related": row.get("related")}
                out.append(_entry(tech[0], spec, source, f"line {n}"))
            else:
                term = row.get("term") or row.get("canonical")
                if term:
                    out.append(_entry(term, row, source, f"line {n}"))
            continue
        header = None
        h = heading(line, min_level=2, spaces=None, closing=LOOSE)
        if h:
            current = _entry(h[1].strip("`*"), {}, source, f"line {n}")
            out.append(current)
            continue
        f = _FIELD.match(line)
        if f:
            if current is None:
                raise DictionaryError(f"line {n}: a '- {f.group(1)}:' line must follow a '## term' heading")
            kind = f.group(1).lower()
            kind = "aliases" if kind.startswith("alias") else kind
            getattr(current, kind).extend(v for v in _clean(f.group(2), f"line {n}") if v not in getattr(current, kind))
    return out


def parse(text: str, fmt: str, source: str | None = None) -> list[Entry]:
    fmt = fmt.lower().lstrip(".")
    if fmt == "toml":
        entries = parse_toml(text, source or "dictionary.toml")
    elif fmt in ("md", "markdown"):
        entries = parse_markdown(text, source or "dictionary.md")
    else:
        raise DictionaryError(f"unknown dictionary format {fmt!r}; use toml or markdown")
    if len(entries) > MAX_ENTRIES:
        raise DictionaryError(f"{len(entries)} entries; at most {MAX_ENTRIES}")
    return entries


class VocabularyAxis(Protocol):
    """What a dictionary reads of one axis of a relation pack's vocabulary (engine/relations/packs.py
    `Axis`; the Engine hands them over, so this wing never imports the relations wing)."""
    name: str
    terms: list[str]
    synonyms: dict[str, list[str]]
    hierarchy: dict[str, list[str]]


def pack_entries(axes: Iterable[tuple[str, VocabularyAxis]]) -> list[Entry]:
    """Each term of the given (pack name, vocabulary axis) pairs as an entry: synonyms are aliases,
    the terms its hierarchy covers are related."""
    out = []
    for name, axis in axes:
        for term in axis.terms:
            if not stems(term):
                continue
            out.append(Entry(term, aliases=[s for s in axis.synonyms.get(term, []) if stems(s)],
                             related=[t for t in axis.hierarchy.get(term, []) if t != term],
                             source=f"pack:{name}/{axis.name}"))
    return out


def _acronym(surface: str) -> bool:
    letters = surface.replace("-", "").replace(" ", "")
    return letters.isalpha() and letters.isupper() and len(letters) <= 5


class Dictionary:
    def __init__(self, entries: list[Entry], sources: list[str] | None = None):
        self.entries = entries
        self.sources = sources or sorted({e.source for e in entries})
        # stems of a surface -> [(entry, kind, surface)], longest surfaces tried first
        self._index: dict[tuple[str, ...], list[tuple[Entry, str, str]]] = {}
        for e in entries:
            for surface, kind in e.surfaces():
                key = tuple(stems(surface))
                if key:
                    self._index.setdefault(key, []).append((e, kind, surface))
        self._lengths = sorted({len(k) for k in self._index}, reverse=True)

    def __len__(self) -> int:
        return len(self.entries)

    def lookup(self, text: str) -> list[Match]:
        """The dictionary surfaces in `text`, longest first and not overlapping, in text order."""
        toks = _TOKEN.findall(text)  # the simple tokenizer's split, in the writer's own case
        shouting = any(c.isalpha() for c in text) and text.upper() == text  # case says nothing then
        st = [(stems(t) or [t.lower()])[0] for t in toks]
        taken = [False] * len(st)
        found: list[Match] = []
        for n in self._lengths:
            for i in range(0, len(st) - n + 1):
                if any(taken[i:i + n]):
                    continue
                for entry, kind, surface in self._index.get(tuple(st[i:i + n]), []):
                    if _acronym(surface) and (shouting or _TOKEN.findall(surface) != toks[i:i + n]):
                        continue
                    found.append(Match(" ".join(toks[i:i + n]), i, i + n, entry, kind))
                    taken[i:i + n] = [True] * n
                    break
        return sorted(found, key=lambda m: m.start)


def dictionary_path(directory: Path, workspace: str) -> Path | None:
    """The workspace's dictionary file, if it has one. Its name is the workspace's escaped
    (`workspace_folder`), so no workspace name reaches a file outside the dictionary folder
    (``/etc/x``, ``../pyproject``) or another workspace's file (``Team A`` and ``team-a`` are two)."""
    stem = workspace_folder(workspace)
    found = [directory / f"{stem}{s}" for s in SUFFIXES if (directory / f"{stem}{s}").is_file()]
    if len(found) > 1:
        raise DictionaryError(f"workspace {workspace!r} has two dictionaries: {', '.join(p.name for p in found)}")
    return found[0] if found else None


def load_dictionary(directory: Path, workspace: str, pack_axes: Iterable[tuple[str, VocabularyAxis]] = ()
                    ) -> Dictionary:
    """The workspace's dictionary file's entries, then the packs' vocabulary terms."""
    entries: list[Entry] = []
    path = dictionary_path(directory, workspace)
    if path is not None:
        entries += parse(path.read_text(encoding="utf-8"), path.suffix, path.name)
    return Dictionary(entries + pack_entries(pack_axes))


def dictionary_file(directory: Path, workspace: str, fmt: str) -> Path:
    return directory / f"{workspace_folder(workspace)}{'.toml' if fmt.lower() == 'toml' else '.md'}"


def install_dictionary(directory: Path, workspace: str, fmt: str, text: str) -> dict:
    """Check `text` whole, then make it the workspace's dictionary (replacing one in the other
    format). Nothing is written when it does not parse."""
    entries = parse(text, fmt)
    target = dictionary_file(directory, workspace, fmt)
    directory.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(target)
    for other in SUFFIXES:
        p = directory / f"{workspace_folder(workspace)}{other}"
        if p != target and p.exists():
            p.unlink()
    return {"workspace": workspace, "file": target.name, "entries": len(entries)}


def describe(dictionary: Dictionary, workspace: str, limit: int = 1000) -> dict:
    return {"workspace": workspace, "entries": len(dictionary), "sources": dictionary.sources,
            "terms": [e.as_dict() for e in dictionary.entries[:limit]], "truncated": len(dictionary) > limit}
