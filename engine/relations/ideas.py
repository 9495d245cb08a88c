"""Ideas: "where do we discuss pricing risk?" is a question about an idea, not a thing. It is
answered over the parts of the workspace's documents: the hybrid search pipeline finds the
passages, and the reply groups them by document and by part (the section a passage sits in), each
with a quote and its location — not a closed set, so it carries no licence.
"""
from __future__ import annotations

import re
from collections import OrderedDict

from engine.core.markdown import LOOSE, headings, sentence_cuts
from engine.refind.search import SearchRequest, SearchService

QUOTE_MAX = 240
WORD = re.compile(r"\w+", re.UNICODE)


def part_at(section_path: list[str], text: str, at: int) -> list[str]:
    """The section a position of a passage sits in: the passage's own section path, moved on by
    every Markdown heading the passage holds before that position."""
    path = list(section_path)
    for _, _, level, title in headings(text, 0, at, spaces=None, closing=LOOSE):
        path = path[:level - 1] + [title]
    return path


def split_sentences(text: str) -> list[tuple[str, int]]:
    """The sentences of a passage (not its Markdown headings), each with its offset in the passage."""
    out, at = [], 0
    for s, e in sentence_cuts(text) + [(len(text), len(text))]:
        sentence = text[at:s]
        stripped = sentence.strip()
        if stripped and not stripped.startswith("#"):
            out.append((stripped, at + len(sentence) - len(sentence.lstrip())))
        at = e
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
