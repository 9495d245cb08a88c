"""Cut a page's body into windows measured in the embedder's own tokens.

Cuts fall on heading boundaries first (a new section starts a new chunk), then on paragraph
boundaries, then on sentence boundaries, and only as a last resort inside a sentence. The number of
chunks follows the page's size, not its headings: a heading starts a new chunk only while the page's
chunks so far average at least a quarter of `max_tokens` (`min_tokens`), so a page of thousands of
one-line sections is cut into chunks of merged sections — a few chunks per thousand tokens — while
a page whose sections are of ordinary length is cut at every heading as before.
Windows that had to be cut inside a paragraph overlap the next one by `overlap` tokens; a cut at
a paragraph or heading is clean and needs no overlap. Chunk text is the body's own characters
between the chunk's offsets, verbatim.
"""
from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field

from engine.core.markdown import heading

_BLOCK_SPLIT = re.compile(r"\n[ \t]*\n+")
_SENTENCE = re.compile(r"(?<=[.!?;:])\s+(?=\S)|\n(?=\S)")

HEADING, PARAGRAPH, SENTENCE = 3, 2, 1


@dataclass(frozen=True)
class Chunk:
    ordinal: int
    text: str
    char_start: int
    char_end: int
    section_path: list[str] = field(default_factory=list)
    n_tokens: int = 0


@dataclass(frozen=True)
class _Block:
    start: int
    end: int
    heading_level: int  # 0 for a paragraph
    heading: str


def _blocks(body: str) -> list[_Block]:
    out: list[_Block] = []
    pos = 0
    for m in list(_BLOCK_SPLIT.finditer(body)) + [None]:
        end = m.start() if m else len(body)
        seg = body[pos:end]
        stripped = seg.strip()
        if stripped:
            lead = len(seg) - len(seg.lstrip())
            start = pos + lead
            h = heading(stripped) if "\n" not in stripped else None
            out.append(_Block(start, start + len(stripped), h[0] if h else 0, h[1] if h else ""))
        if m:
            pos = m.end()
    return out


def chunk_text(body: str, tokenizer, max_tokens: int = 256, overlap: int = 32) -> list[Chunk]:
    """Chunks of `body`, each at most `max_tokens` tokens of `tokenizer` (no special tokens)."""
    if not body.strip():
        return []
    if max_tokens < 8:
        raise ValueError("max_tokens must be at least 8")
    overlap = max(0, min(overlap, max_tokens // 2))
    enc = tokenizer(body, add_special_tokens=False, return_offsets_mapping=True, truncation=False, verbose=False)
    offsets = [(s, e) for s, e in enc["offset_mapping"] if e > s]
    n = len(offsets)
    if n == 0:
        return [Chunk(0, body.strip(), body.index(body.strip()), body.index(body.strip()) + len(body.strip()), [], 0)]
    tok_starts = [s for s, _ in offsets]

    def tok_at(char: int) -> int:
        return bisect.bisect_left(tok_starts, char)

    blocks = _blocks(body)
    strength, headings = _boundaries(body, blocks, tok_at, n)
    heading_starts = sorted(t for t, s in strength.items() if s == HEADING)
    # Token ranges covered by heading lines, to avoid emitting a chunk that is only headings: the
    # count of other tokens before each token, so "does [s, b) hold any" is one subtraction.
    in_heading = bytearray(n + 1)
    for b in blocks:
        if b.heading_level:
            in_heading[tok_at(b.start):tok_at(b.end)] = b"\x01" * (tok_at(b.end) - tok_at(b.start))
    body_before = [0] * (n + 1)
    for t in range(n):
        body_before[t + 1] = body_before[t] + (not in_heading[t])
    min_tokens = max(1, max_tokens // 4)
    sentence_starts = sorted(t for t, s in strength.items() if s >= SENTENCE)
    section_at = _sections(headings)

    chunks: list[Chunk] = []
    s = 0
    while s < n:
        limit = min(s + max_tokens, n)
        e = None
        i = bisect.bisect_right(heading_starts, s)
        while i < len(heading_starts) and heading_starts[i] < limit:
            b = heading_starts[i]
            # a section of its own when it holds more than headings and the chunks so far (this
            # one included) average at least min_tokens: the chunk budget of the page's size
            if body_before[b] > body_before[s] and len(chunks) * min_tokens <= b:
                e = b
                break
            i += 1
        if e is None:
            e = n if limit == n else _best_break(strength, s, limit, max_tokens)
        cs, ce = offsets[s][0], offsets[e - 1][1]
        chunks.append(Chunk(len(chunks), body[cs:ce], cs, ce, section_at(cs), e - s))
        if e >= n:
            break
        if strength.get(e, 0) >= PARAGRAPH:
            s = e
        else:
            lo = max(e - overlap, s + 1)
            j = bisect.bisect_left(sentence_starts, lo)
            s = sentence_starts[j] if j < len(sentence_starts) and sentence_starts[j] < e else lo
    return chunks


def _boundaries(body: str, blocks: list, tok_at, n: int) -> tuple[dict[int, int], list[tuple[int, int, str]]]:
    """Where a chunk may end, by token, with how strong a break it is (HEADING, PARAGRAPH, SENTENCE),
    and the headings (char start, level, text)."""
    strength: dict[int, int] = {}
    headings: list[tuple[int, int, str]] = []
    for b in blocks:
        t = tok_at(b.start)
        if b.heading_level:
            headings.append((b.start, b.heading_level, b.heading))
        if 0 < t < n:
            strength[t] = max(strength.get(t, 0), HEADING if b.heading_level else PARAGRAPH)
        if not b.heading_level:
            for m in _SENTENCE.finditer(body, b.start, b.end):
                ts = tok_at(m.end())
                if 0 < ts < n and ts not in strength:
                    strength[ts] = SENTENCE
    return strength, headings


def _sections(headings: list[tuple[int, int, str]]):
    """A chunk's section: the heading trail of the last heading at or before its start — the trail
    after each heading built once, so each chunk is one lookup, not a walk over every heading."""
    trails: list[list[str]] = []
    trail: list[tuple[int, str]] = []
    for _, level, text in headings:
        while trail and trail[-1][0] >= level:
            trail.pop()
        trail.append((level, text))
        trails.append([t for _, t in trail])
    heading_chars = [start for start, _, _ in headings]

    def section_at(char: int) -> list[str]:
        i = bisect.bisect_right(heading_chars, char)
        return list(trails[i - 1]) if i else []
    return section_at


def _best_break(strength: dict[int, int], s: int, limit: int, max_tokens: int) -> int:
    """The strongest break in the chunk's second half, the latest of equals (a paragraph or heading
    ends the search); none: the chunk ends at `limit`."""
    best, best_strength = None, 0
    for t in range(limit, s + max_tokens // 2, -1):
        st = strength.get(t, 0)
        if st > best_strength:
            best, best_strength = t, st
            if st >= PARAGRAPH:
                break
    return best if best is not None else limit
