"""Where a query's terms occur in a snippet: the spans a page marks. Words are matched with the
BM25 index's own analyzer (a word is marked when its stem is one of the query's stems), so what is
marked is what the sparse arm matched: "transactions" marks "transaction" and "Transactional" alike."""
from __future__ import annotations

import re
from bisect import bisect_right
from functools import lru_cache

from indexes.sparse import index_terms, stems

# tantivy's simple tokenizer splits on anything that is not alphanumeric; so does this.
_WORD = re.compile(r"[^\W_]+")
# ... which, in ASCII, is every character but a letter or a digit: each of them as a space.
_ASCII_GAPS = str.maketrans({chr(i): " " for i in range(128) if not chr(i).isalnum()})


@lru_cache(maxsize=65536)
def _stem(word: str) -> str | None:
    s = stems(word)
    return s[0] if len(s) == 1 else None


def query_terms(query: str) -> frozenset[str]:
    """The terms the sparse arm searched for (no stop words): the words a snippet marks."""
    return frozenset(index_terms(query))


@lru_cache(maxsize=4096)
def _first_letters(terms: frozenset[str]) -> str:
    # a stem keeps its word's first letter (Snowball strips suffixes only)
    return "".join(sorted({t[0] for t in terms}))


@lru_cache(maxsize=4096)
def _words_from(first: str) -> re.Pattern:
    """The words (_WORD's runs) that start with one of these letters: the only ones that can match."""
    return re.compile(r"(?<![^\W_])[" + "".join(re.escape(c) for c in first) + r"][^\W_]*")


def _other_spans(text: str, terms: frozenset[str]) -> list[tuple[int, int]]:
    """highlight_all's spans of a text that is not ASCII: the words that can match (their first letter is
    a query stem's) found by a regular expression, stemmed once each, found again with str.find."""
    low = text.lower()
    if len(low) != len(text):   # a character whose lower case is longer: offsets would shift
        return word_spans(text, terms)
    spans = []
    for w in [w for w in set(_words_from(_first_letters(terms)).findall(low)) if _stem(w) in terms]:
        n, i = len(w), low.find(w)
        while i >= 0:
            j = i + n
            if (i == 0 or not low[i - 1].isalnum()) and (j == len(low) or not low[j].isalnum()):
                spans.append((i, j))
            i = low.find(w, i + 1)
    spans.sort()
    return spans


def highlight_all(texts: list[str], terms: frozenset[str]) -> list[list[tuple[int, int]]]:
    """For each text (the snippets of one response), the [start, end) character offsets of its
    words whose stem is in `terms` — exactly the words word_spans finds (tests hold them equal).

    The ASCII texts in one pass: lower-cased, joined by spaces, every other character made a space
    with str.translate, split; each distinct word that could match (its first letter is a stem's: a
    Snowball stem keeps its word's first letter) stemmed once, and the few that match found with
    str.find between spaces and handed back to their texts. Stemming every word of every snippet
    cost ~0.1 ms a snippet; a regular expression over each text, ~2× this. Other texts: _other_spans."""
    if not terms:
        return [[] for _ in texts]
    out: list[list[tuple[int, int]]] = []
    joined, mine, starts, at = [], [], [], 1
    for i, text in enumerate(texts):
        if text.isascii():
            joined.append(text.lower())
            mine.append(i)
            starts.append(at)          # where it starts in `spaced` below
            at += len(text) + 1
            out.append([])
        else:
            out.append(_other_spans(text, terms))
    if joined:
        spaced = " " + " ".join(joined).translate(_ASCII_GAPS) + " "
        first = _first_letters(terms)
        for w in [w for w in set(spaced.split()) if w[0] in first and _stem(w) in terms]:
            n, word = len(w), " " + w + " "
            i = spaced.find(word)
            while i >= 0:
                j = bisect_right(starts, i + 1) - 1
                out[mine[j]].append((i + 1 - starts[j], i + 1 - starts[j] + n))
                i = spaced.find(word, i + n + 1)
        for i in mine:
            out[i].sort()
    return out


def word_spans(text: str, terms: frozenset[str]) -> list[tuple[int, int]]:
    """One text's spans word by word (the reference highlight_all is tested against)."""
    return [(m.start(), m.end()) for m in _WORD.finditer(text) if _stem(m.group()) in terms]
