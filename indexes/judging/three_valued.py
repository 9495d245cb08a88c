"""Three-valued evaluation of the enumeration's per-row SQL over NumPy arrays: the same text the SQL
path runs (relation_sql.py writes it), parsed once (`compile_sql`) and evaluated with TRUE, FALSE
and NULL kept apart (`Tri`), over an environment whose columns are spread to the rows on first use
(`Columns`). `combine` turns several per-row codes into one code per combination of them, so each
verdict is computed once per combination (in_memory.py) rather than once per row.
"""
from __future__ import annotations

import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .held_columns import Unsupported

DIRECT = 1 << 22   # combinations indexed directly up to this many; beyond, only those that occur


def combine(factors: list[tuple[np.ndarray, int]]) -> tuple[np.ndarray, list[np.ndarray], int]:
    """Per-row codes of several inputs (each with its number of values) as one code per row for
    their combination: (per-row combination code, per input its value at each combination, how
    many combinations). Mixed radix while the product of the sizes is small, else the combinations
    that occur, numbered by first appearance."""
    if not factors:
        return np.zeros(0, np.int32), [], 1
    n = len(factors[0][0])
    size = int(np.prod([card for _, card in factors], dtype=np.float64))
    if size == 0:     # an input with no values: no rows
        return np.zeros(0, np.int32), [np.zeros(0, np.int32) for _ in factors], 0
    if size <= DIRECT:
        dtype = np.int32 if size < 2**31 else np.int64
        key = np.zeros(n, dtype)
        levels, stride = [], size
        every = np.arange(size, dtype=dtype)
        for codes, card in factors:
            key *= card
            key += codes
            stride //= card
            levels.append((every // stride) % card)
        return key, levels, size
    key = factors[0][0].astype(np.int64)
    for codes, card in factors[1:]:
        key = key * card + codes
        key = pc.dictionary_encode(pa.array(key)).indices.to_numpy(zero_copy_only=False).astype(np.int64)
    if len(factors) == 1:
        key = pc.dictionary_encode(pa.array(key)).indices.to_numpy(zero_copy_only=False).astype(np.int64)
    running = np.maximum.accumulate(key) if n else key
    first = np.flatnonzero(np.r_[True, running[1:] > running[:-1]]) if n else np.zeros(0, np.int64)
    return key, [codes[first] for codes, _ in factors], len(first)


def tri(array: pa.Array, codes: np.ndarray) -> "Tri":
    """A boolean Arrow array over distinct values (NULL allowed), spread to the rows by their codes."""
    t = pc.fill_null(array, False).to_numpy(zero_copy_only=False)
    f = pc.fill_null(pc.invert(array), False).to_numpy(zero_copy_only=False)
    return Tri(t[codes], f[codes])


def floats(array: pa.Array, codes: np.ndarray) -> np.ndarray:
    """A numeric Arrow array over distinct values spread to the rows; NULL as NaN."""
    return pc.cast(array, pa.float64()).to_numpy(zero_copy_only=False)[codes]


# Three-valued evaluation of the enumeration's row-level SQL ------------------------------------------
class Tri:
    """A three-valued boolean: t where TRUE, f where FALSE, neither where NULL (arrays or scalars)."""
    __slots__ = ("t", "f")

    def __init__(self, t, f):
        self.t, self.f = t, f

    @property
    def known(self):
        return np.logical_or(self.t, self.f)


TRUE, FALSE = Tri(True, False), Tri(False, True)
_TOKEN = re.compile(r"\s*(?:(\()|(\))|(<>|=)|([A-Za-z_][A-Za-z0-9_]*)|(\d+))")
_KEYWORDS = {"AND", "OR", "NOT", "IS", "NULL", "TRUE", "FALSE"}


def _tokens(sql: str) -> list[str]:
    out, pos = [], 0
    sql = sql.rstrip()
    while pos < len(sql):
        m = _TOKEN.match(sql, pos)
        if m is None or m.end() == pos:
            raise Unsupported(f"cannot read {sql[pos:pos + 20]!r}")
        out.append(m.group(m.lastindex))
        pos = m.end()
    return out


def compile_sql(sql: str):
    """The SQL (identifiers, integers, TRUE/FALSE, NOT/AND/OR, IS [NOT] TRUE/FALSE/NULL, =, <>,
    parentheses; SQL's precedence) as a tree `evaluate` runs over an environment of named values."""
    return _Parser(sql).tree()


class _Parser:
    """Recursive descent over `_tokens(sql)`, one method per precedence level, loosest first."""

    def __init__(self, sql: str):
        self.sql, self.toks, self.pos = sql, _tokens(sql), 0

    def tree(self):
        node = self.disjunction()
        if self.pos != len(self.toks):
            raise Unsupported(f"trailing {self.toks[self.pos:]} in {self.sql!r}")
        return node

    def peek(self) -> str:
        return self.toks[self.pos] if self.pos < len(self.toks) else ""

    def take(self, expected: str | None = None) -> str:
        tok = self.peek()
        if not tok or (expected is not None and tok.upper() != expected):
            raise Unsupported(f"expected {expected} in {self.sql!r}")
        self.pos += 1
        return tok

    def _joined(self, word: str, kind: str, part):
        parts = [part()]
        while self.peek().upper() == word:
            self.take()
            parts.append(part())
        return parts[0] if len(parts) == 1 else (kind, parts)

    def disjunction(self):
        return self._joined("OR", "or", self.conjunction)

    def conjunction(self):
        return self._joined("AND", "and", self.negation)

    def negation(self):
        if self.peek().upper() == "NOT":
            self.take()
            return ("not", self.negation())
        return self.comparison()

    def comparison(self):
        left = self.postfix()
        if self.peek() in ("=", "<>"):
            op = self.take()
            return (op, left, self.postfix())
        return left

    def postfix(self):
        node = self.atom()
        while self.peek().upper() == "IS":
            self.take()
            negated = self.peek().upper() == "NOT"
            if negated:
                self.take()
            what = self.take().upper()
            if what not in ("TRUE", "FALSE", "NULL"):
                raise Unsupported(f"IS {what} in {self.sql!r}")
            node = ("is", what, node)
            if negated:
                node = ("not", node)
        return node

    def atom(self):
        tok = self.take()
        if tok == "(":
            node = self.disjunction()
            self.take(")")
            return node
        if tok.isdigit():
            return ("int", int(tok))
        up = tok.upper()
        if up in ("TRUE", "FALSE"):
            return ("const", TRUE if up == "TRUE" else FALSE)
        if up in _KEYWORDS or tok in ("(", ")", "=", "<>"):
            raise Unsupported(f"unexpected {tok} in {self.sql!r}")
        return ("name", tok)


def evaluate(tree, env: dict):
    kind = tree[0]
    if kind == "name":
        try:
            return env[tree[1]]
        except KeyError:
            raise Unsupported(f"unknown column {tree[1]}") from None
    if kind in ("const", "int"):
        return tree[1]
    if kind == "not":
        v = evaluate(tree[1], env)
        return Tri(v.f, v.t)
    if kind in ("and", "or"):
        vals = [evaluate(p, env) for p in tree[1]]
        t, f = vals[0].t, vals[0].f
        for v in vals[1:]:
            if kind == "and":
                t, f = np.logical_and(t, v.t), np.logical_or(f, v.f)
            else:
                t, f = np.logical_or(t, v.t), np.logical_and(f, v.f)
        return Tri(t, f)
    if kind == "is":
        v = evaluate(tree[2], env)
        if tree[1] == "TRUE":
            return Tri(v.t, np.logical_not(v.t))
        if tree[1] == "FALSE":
            return Tri(v.f, np.logical_not(v.f))
        unknown = np.logical_not(v.known)
        return Tri(unknown, np.logical_not(unknown))
    if kind in ("=", "<>"):
        a, b = evaluate(tree[1], env), evaluate(tree[2], env)
        if isinstance(a, Tri) or isinstance(b, Tri):
            raise Unsupported("a comparison of booleans")
        eq = np.equal(a, b)
        return Tri(eq, np.logical_not(eq)) if kind == "=" else Tri(np.logical_not(eq), eq)
    raise Unsupported(str(kind))


class Columns(dict):
    """An environment whose values are computed on first use (`later[name]()`), so a column the
    SQL never reads is never spread to the rows."""

    def __init__(self, later: dict):
        super().__init__()
        self.later = later

    def __missing__(self, name):
        value = self.later[name]()
        self[name] = value
        return value


_COMPILED: dict[str, tuple] = {}


def run_sql(sql: str, env: dict) -> Tri:
    """Evaluate one boolean SQL expression over the environment (parsed once per text)."""
    tree = _COMPILED.get(sql)
    if tree is None:
        tree = compile_sql(sql)
        if len(_COMPILED) < 4096:
            _COMPILED[sql] = tree
    out = evaluate(tree, env)
    if not isinstance(out, Tri):
        raise Unsupported(f"not a boolean: {sql!r}")
    return out
