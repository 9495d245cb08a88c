"""Parsers of a client's text with a budget: JSON and TOML read only when they nest at most
MAX_NESTING deep and write no number longer than MAX_NUMBER_DIGITS digits, so a text costs time
linear in its size and its refusal is a clear 422, never a RecursionError or ValueError from deep
inside a library (a 500).

Python's int() refuses a string of over 4,300 digits with a plain ValueError, which tomllib and the
MCP SDK's JSON reading let escape; tomllib recurses once per level of arrays and inline tables and
fails with RecursionError some hundreds of levels in. TOML's shape is checked by one linear scan
before tomllib reads it (`check_toml`); JSON's ints by json's own `parse_int` hook (`loads_json`).
"""
from __future__ import annotations

import json
import tomllib
from typing import Any

from engine.core.values import MAX_NESTING, TooDeep, check_nesting

# No quantity this engine reads (a count, a weight, an Int64, a date's year) needs more digits.
MAX_NUMBER_DIGITS = 100


class TextRefused(ValueError):
    """A JSON or TOML text over the budget, or not valid: `reason` is one of json_too_deep,
    number_too_long, toml_invalid, json_invalid."""

    def __init__(self, message: str, reason: str):
        super().__init__(message)
        self.reason = reason


def _number(text: str) -> int:
    if len(text.lstrip("-")) > MAX_NUMBER_DIGITS:
        raise TextRefused(f"a number of {len(text.lstrip('-'))} digits: at most {MAX_NUMBER_DIGITS} are read",
                          "number_too_long")
    return int(text)


def loads_json(text: str | bytes) -> Any:
    """json.loads within the budget: TextRefused (json_too_deep, number_too_long, json_invalid)."""
    try:
        data = json.loads(text, parse_int=_number)
    except TextRefused:
        raise
    except RecursionError:
        raise TextRefused(f"the JSON is nested more than {MAX_NESTING} levels deep", "json_too_deep") from None
    except ValueError as exc:
        raise TextRefused(f"not JSON: {exc}", "json_invalid") from None
    try:
        check_nesting(data)
    except TooDeep:
        raise TextRefused(f"the JSON is nested more than {MAX_NESTING} levels deep", "json_too_deep") from None
    return data


def check_toml(text: str) -> None:
    """TextRefused when `text` nests arrays and inline tables more than MAX_NESTING deep or holds a
    run of over MAX_NUMBER_DIGITS digits outside its strings. One pass, strings and comments
    skipped as TOML writes them; what else is wrong with the text is tomllib's to say."""
    depth, digits, i, n = 0, 0, 0, len(text)
    while i < n:
        ch = text[i]
        if ch == "#":
            j = text.find("\n", i)
            i = n if j < 0 else j
            continue
        if ch in "\"'":
            triple = text.startswith(ch * 3, i)
            quote = ch * 3 if triple else ch
            j = i + len(quote)
            while j < n:
                if ch == '"' and text[j] == "\\":
                    j += 2
                    continue
                if text.startswith(quote, j):
                    break
                if not triple and text[j] == "\n":
                    break
                j += 1
            i = j + len(quote)
            digits = 0
            continue
        if ch.isdigit() or (ch == "_" and digits):
            digits += 1
            if digits > MAX_NUMBER_DIGITS:
                raise TextRefused(f"a number of over {MAX_NUMBER_DIGITS} digits: at most {MAX_NUMBER_DIGITS} "
                                  "are read", "number_too_long")
        else:
            digits = 0
            if ch in "[{":
                depth += 1
                if depth > MAX_NESTING:
                    raise TextRefused(f"the TOML nests arrays or inline tables more than {MAX_NESTING} levels "
                                      "deep", "toml_too_deep")
            elif ch in "]}":
                depth = max(0, depth - 1)
        i += 1


def loads_toml(text: str) -> dict:
    """tomllib.loads within the budget: TextRefused (toml_too_deep, number_too_long, toml_invalid)."""
    check_toml(text)
    try:
        return tomllib.loads(text)
    except RecursionError:   # not reached past check_toml; kept so no path can raise it
        raise TextRefused(f"the TOML is nested more than {MAX_NESTING} levels deep", "toml_too_deep") from None
    except ValueError as exc:   # TOMLDecodeError, and int()'s own refusal
        raise TextRefused(f"not valid TOML: {exc}", "toml_invalid") from None
