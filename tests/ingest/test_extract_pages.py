"""Extraction of saved real pages (tests/ingest/pages/): what reaches the chunks, and so the snippets,
reads as the page does. Sphinx renders a function's signature as a definition list whose parameters are
emphasis: joining their pieces with a separator turned `bisect_left(a, x, lo=0, …)` into
`bisect_left( | a | , | x | , | lo=0 | …)¶` (issue 71)."""
from pathlib import Path

import pytest

from engine.ingest.extract import html_to_text

PAGES = Path(__file__).parent / "pages"


@pytest.fixture(scope="module")
def bisect():
    return html_to_text((PAGES / "bisect.html").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def operator():
    return html_to_text((PAGES / "operator.html").read_text(encoding="utf-8"))


def test_a_signature_reads_as_written(bisect):
    body, title = bisect
    lines = body.splitlines()
    assert title == "bisect — Array bisection algorithm"
    assert "bisect.bisect_left(a, x, lo=0, hi=len(a), *, key=None)" in lines
    assert "bisect.insort(a, x, lo=0, hi=len(a), *, key=None)" in lines
    assert " | " not in body and "¶" not in body   # no separator between inline pieces, no permalink mark


def test_inline_code_and_emphasis_stay_in_their_sentence(bisect):
    body, _ = bisect
    lines = body.splitlines()
    # a definition's paragraphs: each a line of its own, inline code and emphasis where they stood
    assert "Changed in version 3.10: Added the key parameter." in lines
    assert ("The return value is suitable for use as the first parameter to list.insert() assuming that a "
            "is already sorted.") in body
    assert "If key is None, the elements are compared directly with no intervening function call." in lines


def test_a_table_keeps_its_cells_apart_and_a_nested_list_its_items(operator):
    body, _ = operator
    lines = body.splitlines()
    assert "Operation | Syntax | Function" in lines
    assert "Addition | a + b | add(a, b)" in lines
    assert "Indexed Assignment | obj[k] = v | setitem(obj, k, v)" in lines
    assert "  - After f = methodcaller('name'), the call f(b) returns b.name()." in lines
    assert "operator.methodcaller(name, /, *args, **kwargs)" in lines
