"""The budget on a client's TOML (engine/core/parsing.py): its depth is refused by the linear scan
alone — at depths tomllib would read without complaint, far below the RecursionError some thousands
of levels in that a fallback also turns into the same refusal (issue 70, row 8: that fallback hid
the scan from every test)."""
from __future__ import annotations

import tomllib

import pytest

from engine.core.parsing import MAX_NUMBER_DIGITS, TextRefused, loads_toml
from engine.core.values import MAX_NESTING


def arrays(depth: int) -> str:
    return "x = " + "[" * depth + "1" + "]" * depth + "\n"


def tables(depth: int) -> str:
    return "x = " + "{a = " * depth + "1" + "}" * depth + "\n"


@pytest.mark.parametrize("make", [arrays, tables])
def test_a_toml_one_level_past_the_limit_is_refused_by_the_scan(make):
    assert loads_toml(make(MAX_NESTING))["x"]                       # at the limit: read
    for depth in (MAX_NESTING + 1, 2 * MAX_NESTING):
        text = make(depth)
        assert tomllib.loads(text)["x"]   # tomllib itself reads it: only the scan refuses it
        with pytest.raises(TextRefused) as err:
            loads_toml(text)
        assert err.value.reason == "toml_too_deep"


def test_brackets_inside_strings_and_comments_do_not_count():
    deep = "[" * (MAX_NESTING + 5)
    text = f'a = "{deep}"\nb = \'{deep}\'\nc = """\n{deep}\n"""\n# {deep}\nd = [[1]]\n'
    assert loads_toml(text)["d"] == [[1]]


def test_a_number_over_the_digits_budget_is_refused():
    with pytest.raises(TextRefused) as err:
        loads_toml(f"n = {'9' * (MAX_NUMBER_DIGITS + 1)}\n")
    assert err.value.reason == "number_too_long"
    assert loads_toml(f"n = {'9' * MAX_NUMBER_DIGITS}\n")["n"] > 0
