"""Ideas: "where do we discuss pricing risk?" is a question about an idea, not a thing. It is
answered over the parts of the workspace's documents: the hybrid search pipeline finds the
passages, and the reply groups them by document and by part (the section a passage sits in), each
with a quote and its location — not a closed set, so it carries no licence.
"""
from __future__ import annotations

import re
from collections import OrderedDict

from engine.refind.search import SearchRequest, SearchService

QUOTE_MAX = 240
WORD = re.compile(r"\w+", re.UNICODE)
SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\s*\n\s*\n\s*|\n(?=#)")
HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$", re.M)


def part_at(section_path: list[str], text: str, at: int) -> list[str]:
    """The section a position of a passage sits in: the passage's own section path, moved on by
    every Markdown heading the passage holds before that position."""
    path = list(section_path)
    for m in HEADING.finditer(text, 0, at):
        level = len(m.group(1))
        path = path[:level - 1] + [m.group(2)]
    return path


def split_sentences(text: str) -> list[tuple[str, int]]:
    """The sentences of a passage (not its Markdown headings), each with its offset in the passage."""
    out, at = [], 0
    for sentence in SENTENCE_END.split(text):
        offset = text.find(sentence, at)
        at = offset + len(sentence)
        stripped = sentence.strip()
        if stripped and not stripped.startswith("#"):
            out.append((stripped, offset + len(sentence) - len(sentence.lstrip())))
    return out


def best_quote(text: str, idea: str) -> tuple[str, int]:
    """The sentence of a passage sharing most words with the idea (the first on ties), cut to
    QUOTE_MAX characters at a word boundary, and its offset in the passage."""
    words = {w.lower() for w in WORD.findall(idea) if len(w) > 2}
    best, best_score, best_at = "", -1, 0
    for sentence, offset in split_sentences(text):
        score = len(words & {w.lower() for w in WORD.findall(sentence)})
        if score > best_score:
            best, best_score, best_at = sentence, score, offset
    if len(best) > QUOTE_MAX:
        best = best[:QUOTE_MAX].rsplit(" ", 1)[0] + "…"
    return best, best_at


def answer_idea(search: SearchService, workspace_id: str, idea: str, k: int, map_version: int,
                request_id: str, scopes: tuple[str, ...] | None = None) -> dict:
    res = search.search(SearchRequest(query=idea, workspace=workspace_id, k=k), scopes=scopes)
    documents = []
    for page in res.pages:
        parts: OrderedDict[str, list] = OrderedDict()
        for snip in page.snippets:
            quote, at = best_quote(snip.text, idea)
            section = " > ".join(part_at(snip.section_path, snip.text, at))
            parts.setdefault(section, []).append({
                "quote": quote,
                "location": {"chunk_id": snip.chunk_id, "char_start": snip.char_start + at,
                             "char_end": snip.char_start + at + len(quote.rstrip("…")),
                             "passage": [snip.char_start, snip.char_end]},
                "score": round(snip.score, 6)})
        documents.append({"page_id": page.page_id, "url": page.url, "title": page.title, "rank": page.rank,
                          "parts": [{"part": section or None, "passages": passages}
                                    for section, passages in parts.items()]})
    return {"request_id": request_id, "workspace_id": workspace_id, "idea": idea, "documents": documents,
            "total": res.total, "query_id": res.query_id, "map_version": map_version}
