"""Where a query's terms occur in a snippet: the spans a page marks. Words are matched with the
BM25 index's own analyzer (a word is marked when its stem is one of the query's stems), so what is
marked is what the sparse arm matched: "transactions" marks "transaction" and "Transactional" alike."""
from __future__ import annotations

import re
from functools import lru_cache

from indexes.sparse import index_terms, stems

# tantivy's simple tokenizer splits on anything that is not alphanumeric; so does this.
_WORD = re.compile(r"[^\W_]+")


@lru_cache(maxsize=65536)
def _stem(word: str) -> str | None:
    s = stems(word)
    return s[0] if len(s) == 1 else None


def query_terms(query: str) -> frozenset[str]:
    """The terms the sparse arm searched for (no stop words): the words a snippet marks."""
    return frozenset(index_terms(query))


def highlight_spans(text: str, terms: frozenset[str]) -> list[tuple[int, int]]:
    """[start, end) character offsets of the words of `text` whose stem is in `terms`."""
    if not terms:
        return []
    return [(m.start(), m.end()) for m in _WORD.finditer(text) if _stem(m.group()) in terms]
