"""Markdown as the engine reads and writes it, in time linear in the text.

Reading: a heading line (`heading`) and the split of a passage at its sentence and paragraph ends
(`sentence_cuts`), both by one scan of the text instead of regular expressions whose backtracking
grows with the square (or the cube) of a run of spaces a client can send.

Writing: `inline` makes client text (a query, a page's title or URL) safe to put on one line of a
Markdown file an agent reads: line breaks become spaces and the characters that open a link, an HTML
tag, a code span or a table cell are escaped, so the text cannot add a heading, a list or a section.
"""
from __future__ import annotations

import re

# A heading's title ends where its closing run starts: spaces, tabs and '#'s (the ATX closing
# sequence), as `(.+?)[ \t#]*$` reads it ("tight"), or whitespace, '#'s, whitespace, as
# `(.+?)\s*#*\s*$` reads it ("loose").
TIGHT, LOOSE = "tight", "loose"


def _title(rest: str, closing: str) -> str:
    """`rest` without its closing run, and never empty (a title is at least one character)."""
    if closing == TIGHT:
        core = rest.rstrip(" \t#")
    else:
        core = rest.rstrip().rstrip("#").rstrip()
    return core or rest[:1]


def heading(line: str, min_level: int = 1, spaces: str = " \t", closing: str = TIGHT) -> tuple[int, str] | None:
    """(level, title) of an ATX heading line — 1 to 6 '#' (at least `min_level`), a run of `spaces`,
    then the title — or None. `spaces` None: any whitespace. The same as the regular expression
    `^(#{min_level,6})[ \\t]+(.+?)[ \\t#]*$` (TIGHT) or `^#{…}\\s+(.+?)\\s*#*\\s*$` (LOOSE) on one line."""
    n = len(line) - len(line.lstrip("#"))
    if not min_level <= n <= 6 or n == len(line):
        return None
    after = line[n:]
    title_from = len(after) - len(after.lstrip(spaces) if spaces is not None else after.lstrip())
    if title_from == 0:
        return None
    rest = after[title_from:]
    if not rest:   # only spaces after the '#'s: the title is the last of them
        rest = after[-1:]
    return n, _title(rest, closing)


def headings(text: str, start: int = 0, end: int | None = None, min_level: int = 1, spaces: str = " \t",
             closing: str = TIGHT):
    """Each heading line of text[start:end] as (line start, line end, level, title), in order."""
    end = len(text) if end is None else end
    pos = start
    while pos <= end:
        nl = text.find("\n", pos, end)
        stop = end if nl < 0 else nl
        if text.startswith("#", pos):
            h = heading(text[pos:stop], min_level, spaces, closing)
            if h is not None:
                yield pos, stop, h[0], h[1]
        if nl < 0:
            break
        pos = nl + 1


_RUNS = re.compile(r"\s+")


def sentence_cuts(text: str) -> list[tuple[int, int]]:
    """The [start, end) spans a passage is split at: a whitespace run after '.', '!' or '?'; a
    whitespace run holding a blank line (two line breaks); else a line break right before a '#'.
    (The split of `(?<=[.!?])\\s+|\\s*\\n\\s*\\n\\s*|\\n(?=#)`, found by one pass over the runs.)"""
    cuts = []
    for m in _RUNS.finditer(text):
        s, e = m.span()
        if s > 0 and text[s - 1] in ".!?":
            cuts.append((s, e))
        elif text.count("\n", s, e) >= 2:
            cuts.append((s, e))
        elif text[e - 1] == "\n" and text.startswith("#", e):
            cuts.append((e - 1, e))
    return cuts


_INLINE_ESCAPE = {c: "\\" + c for c in "\\`[]<>|"}
_LINE_BREAKS = re.compile(r"[\r\n\v\f\x1c-\x1e\x85\u2028\u2029]+")


def inline(text: str | None) -> str:
    """Client text as one line of Markdown that adds no structure (see the module's docstring)."""
    if not text:
        return ""
    one_line = _LINE_BREAKS.sub(" ", text)
    return "".join(_INLINE_ESCAPE.get(c, c) for c in one_line)
