"""Each relation's current rows of a workspace, held in memory as NumPy columns at one workspace
version, and a three-valued evaluator of the enumeration's row-level SQL over them.

Why: the enumeration's cost at a million rows is judging every row in SQL (projections of the
conditions, bit masks, packed counters) and a hash GROUP BY per entity — ~100 ms for a plan never
asked for before. Held here, a relation's rows are sorted by entity number and every slot is
dictionary-coded: the codes of the tuple of the slot's columns (v_, t_, r_, n_, lo_, hi_) per row,
and the distinct tuples as a small Arrow table. A condition is then decided once per distinct value
by the enumeration's own predicate SQL (the same function, run over the distinct values) and spread
to the rows by indexing; the rest — groups, flags, counters — is the enumeration's own SQL text
evaluated here in three-valued logic over NumPy arrays (`evaluate`), and the per-entity aggregate is
a `reduceat` over the entity runs. The result is exactly the table `Enumerator._aggregate`'s SQL
yields (a test compares them), so everything downstream is unchanged.

Built on a relation's first search at a workspace version (one read of its current rows), kept
within `[relations] columns_mb` (least recently used first out), dropped at the workspace's next
write. Computed length slots, and anything the evaluator does not parse, leave the search on SQL.
"""
from __future__ import annotations

import re
import threading
from collections import OrderedDict
from dataclasses import dataclass, field

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .relation_shapes import RelationShape



class Unsupported(Exception):
    """What the in-memory judging does not handle: the caller takes the SQL path."""


# Slot columns --------------------------------------------------------------------------------------
def slot_columns(slot: str, kind: str) -> list[str]:
    """The stored columns of one slot (indexes/relations.TableShape.columns)."""
    cols = [f"v_{slot}"]
    if kind == "term":
        cols += [f"t_{slot}", f"r_{slot}"]
    elif kind == "number":
        cols.append(f"n_{slot}")
    elif kind in ("month", "date"):
        cols += [f"lo_{slot}", f"hi_{slot}"]
    return cols


def _smallest(codes: np.ndarray, n: int) -> np.ndarray:
    for dtype in (np.int8, np.int16, np.int32):
        if n <= np.iinfo(dtype).max:
            return codes.astype(dtype, copy=False)
    return codes.astype(np.int64, copy=False)


@dataclass
class Coded:
    """One slot (or the row scope) dictionary-coded: per row the code of its tuple of columns, and
    the distinct tuples as an Arrow table with a `code` column (0..k-1)."""
    codes: np.ndarray
    values: pa.Table

    @classmethod
    def of(cls, table: pa.Table) -> "Coded":
        n = table.num_rows
        combined: np.ndarray | None = None
        for name in table.column_names:
            enc = pc.dictionary_encode(table.column(name).combine_chunks(), null_encoding="encode")
            ind = enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)
            combined = ind if combined is None else combined * len(enc.dictionary) + ind
            # re-coded after each column: codes stay below n, and come in first-appearance order
            combined = pc.dictionary_encode(pa.array(combined)).indices.to_numpy(zero_copy_only=False).astype(np.int64)
        if combined is None or n == 0:
            combined = np.zeros(n, np.int64)
        running = np.maximum.accumulate(combined) if n else combined
        first = np.flatnonzero(np.r_[True, running[1:] > running[:-1]]) if n else np.zeros(0, np.int64)
        values = table.take(pa.array(first)).append_column("code", pa.array(np.arange(len(first), dtype=np.int64)))
        return cls(_smallest(combined, len(first)), values)

    @property
    def nbytes(self) -> int:
        return self.codes.nbytes + self.values.nbytes


@dataclass
class RelationColumns:
    """One relation's current, attributed rows of one workspace (sorted by entity number) and its
    current coverage rows, as NumPy arrays and coded slots."""
    ent_no: np.ndarray                  # per row, int32, ascending
    starts: np.ndarray                  # where each entity's run of rows starts
    entities: np.ndarray                # the entity number of each run
    retired: np.ndarray                 # per row: retired IS NOT NULL
    withheld: np.ndarray                # per row: withheld IS NOT NULL
    scope: Coded                        # per row: its document scope
    slots: dict[str, Coded]
    cov_ent_no: np.ndarray              # the coverage rows' entity numbers
    cov_scope: Coded
    luts: OrderedDict = field(default_factory=OrderedDict)   # decided conditions, per SQL and parameters
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def rows(self) -> int:
        return len(self.ent_no)

    @property
    def nbytes(self) -> int:
        arrays = (self.ent_no, self.starts, self.entities, self.retired, self.withheld, self.cov_ent_no)
        return (sum(a.nbytes for a in arrays) + self.scope.nbytes + self.cov_scope.nbytes
                + sum(c.nbytes for c in self.slots.values()))

    @classmethod
    def read(cls, con: duckdb.DuckDBPyConnection, table: str, relation: RelationShape, workspace_id: str
             ) -> "RelationColumns":
        """One read of the relation's current rows and one of its coverage rows. (A write between
        the two moves the workspace's version, and what was read here is never used after it.)"""
        slots = {name: slot_columns(name, s.type) for name, s in relation.slots.items() if not s.computed}
        cols = [c for cs in slots.values() for c in cs]
        con.complete()   # a relation (con.sql) refuses while an earlier statement's result is unread
        rows = con.sql(
            f"SELECT ent_no, retired IS NOT NULL AS retired_, withheld IS NOT NULL AS withheld_, scope"
            f"{''.join(', ' + c for c in cols)} FROM {table} WHERE workspace_id = ? AND current "
            f"AND ent_no IS NOT NULL ORDER BY ent_no", params=[workspace_id]).to_arrow_table()
        cov = con.sql(
            "SELECT ent_no, scope FROM rel_coverage WHERE workspace_id = ? AND relation = ? AND current "
            "AND ent_no IS NOT NULL", params=[workspace_id, relation.name]).to_arrow_table()
        ent = rows.column("ent_no").to_numpy().astype(np.int32)
        starts = np.flatnonzero(np.r_[True, ent[1:] != ent[:-1]]) if len(ent) else np.zeros(0, np.int64)
        return cls(
            ent_no=ent, starts=starts, entities=ent[starts],
            retired=rows.column("retired_").to_numpy(zero_copy_only=False).astype(bool),
            withheld=rows.column("withheld_").to_numpy(zero_copy_only=False).astype(bool),
            scope=Coded.of(rows.select(["scope"])),
            slots={name: Coded.of(rows.select(cs)) for name, cs in slots.items()},
            cov_ent_no=cov.column("ent_no").to_numpy().astype(np.int32),
            cov_scope=Coded.of(cov.select(["scope"])))

    def decide(self, con: duckdb.DuckDBPyConnection, coded: Coded, exprs: list[tuple[str, list]]
               ) -> list[pa.Array]:
        """Evaluate SQL expressions over a coded slot's distinct tuples (aliased r): one Arrow array
        per expression, indexed by code. Remembered per expression and parameters."""
        key = (id(coded), tuple((sql, repr(params)) for sql, params in exprs))
        with self.lock:
            hit = self.luts.get(key)
            if hit is not None:
                self.luts.move_to_end(key)
                return hit
        name = f"_codes_{id(coded)}_{threading.get_ident()}"
        params = [p for _, ps in exprs for p in ps]
        con.complete()
        con.register(name, coded.values)
        try:
            out = con.sql(f"SELECT code, {', '.join(f'{sql} AS x{i}' for i, (sql, _) in enumerate(exprs))} "
                          f"FROM {name} r ORDER BY code", params=params).to_arrow_table()
        finally:
            con.unregister(name)
        arrays = [out.column(f"x{i}").combine_chunks() for i in range(len(exprs))]
        with self.lock:
            self.luts[key] = arrays
            while len(self.luts) > 256:
                self.luts.popitem(last=False)
        return arrays


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


class ColumnCache:
    """RelationColumns (and other per-version tables) per (workspace, version, ...) within a byte
    budget (0: off). `background` (the default): a missing entry is read on a thread of its own and
    the asking search goes on without it (judged in SQL), so the first search after a write never
    waits for the read; `background=False` reads it in the asking search."""

    def __init__(self, budget_mb: float, background: bool = True):
        self.budget = int(budget_mb * 2**20)
        self.background = background
        self._items: OrderedDict[tuple, object] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self._building: dict[tuple, threading.Thread | None] = {}
        self._epoch: dict[str, int] = {}   # per workspace, moved by forget: a read begun before is not kept
        self._reads: dict[tuple, object] = {}   # how each held relation's rows were read (forget reads again)
        self.builds = 0

    def get(self, key: tuple, build, later: list | None = None):
        """The entry under `key`, or None while it is being read (or when off, or over the budget).
        In the background, a missing entry's read starts now — or, given `later`, is appended
        there for the caller to `start` once it is done (so the read does not slow that caller)."""
        if self.budget <= 0:
            return None
        with self._lock:
            hit = self._items.get(key)
            if hit is not None:
                self._items.move_to_end(key)
                return hit
            if key in self._building:
                return None if self.background else self._wait(key)
            if self.background:
                if later is not None:
                    if all(k != key for k, _ in later):
                        later.append((key, build))
                    return None
                self._start(key, build)
                return None
            self._building[key] = None
            epoch = self._epoch.get(key[0], 0)
        self._build(key, build, epoch)
        with self._lock:
            return self._items.get(key)

    def start(self, reads: list) -> None:
        """Start the background reads a caller deferred (`get(..., later=)`), unless begun or held."""
        with self._lock:
            for key, build in reads:
                if key not in self._building and key not in self._items:
                    self._start(key, build)

    def _start(self, key: tuple, build) -> None:
        thread = threading.Thread(target=self._build, args=(key, build, self._epoch.get(key[0], 0)), daemon=True,
                                  name="relation-columns")
        self._building[key] = thread
        thread.start()

    def _wait(self, key: tuple):
        thread = self._building.get(key)
        self._lock.release()
        try:
            if thread is not None:
                thread.join()
        finally:
            self._lock.acquire()
        return self._items.get(key)

    def _build(self, key: tuple, build, epoch: int) -> None:
        try:
            value = build()
        except Exception:   # a read that fails (a store closing under it): the searches stay in SQL
            value = None
        with self._lock:
            self._building.pop(key, None)
            if value is None or self._epoch.get(key[0], 0) != epoch:   # the workspace was written meanwhile
                return
            self.builds += 1
            size = value.nbytes
            if size > self.budget:
                return
            self._items[key] = value
            if isinstance(value, RelationColumns):
                self._reads[key] = build
            self._bytes += size
            while self._bytes > self.budget:
                gone_key, gone = self._items.popitem(last=False)
                self._reads.pop(gone_key, None)
                self._bytes -= gone.nbytes

    def settle(self) -> None:
        """Wait for every read in progress (tests, benches, closing)."""
        while True:
            with self._lock:
                threads = [t for t in self._building.values() if t is not None]
            if not threads:
                return
            for t in threads:
                t.join()

    def forget(self, workspace_id: str, version: int | None = None) -> None:
        """Drop a workspace's entries (a write moved it on). Given the workspace's new `version`, the
        rows of every relation that was held are read again at once, each on a thread of its own
        (in the background mode): a workspace being searched has them back a read's time after the
        write, instead of after the next search has run in SQL."""
        with self._lock:
            self._epoch[workspace_id] = self._epoch.get(workspace_id, 0) + 1
            again = []
            for key in [k for k in self._items if k[0] == workspace_id]:
                self._bytes -= self._items.pop(key).nbytes
                build = self._reads.pop(key, None)
                if build is not None:
                    again.append(((workspace_id, version, *key[2:]), build))
            if version is None or not self.background or self.budget <= 0:
                return
            for key, build in again:
                if key not in self._building and key not in self._items:
                    self._start(key, build)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._reads.clear()
            self._bytes = 0


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
    parentheses; SQL's precedence) as a function of an environment of named values."""
    toks = _tokens(sql)
    pos = 0

    def peek():
        return toks[pos] if pos < len(toks) else None

    def take(expected=None):
        nonlocal pos
        tok = peek()
        if tok is None or (expected is not None and tok.upper() != expected):
            raise Unsupported(f"expected {expected} in {sql!r}")
        pos += 1
        return tok

    def disjunction():
        parts = [conjunction()]
        while (peek() or "").upper() == "OR":
            take()
            parts.append(conjunction())
        return parts[0] if len(parts) == 1 else ("or", parts)

    def conjunction():
        parts = [negation()]
        while (peek() or "").upper() == "AND":
            take()
            parts.append(negation())
        return parts[0] if len(parts) == 1 else ("and", parts)

    def negation():
        if (peek() or "").upper() == "NOT":
            take()
            return ("not", negation())
        return comparison()

    def comparison():
        left = postfix()
        if peek() in ("=", "<>"):
            op = take()
            return (op, left, postfix())
        return left

    def postfix():
        node = atom()
        while (peek() or "").upper() == "IS":
            take()
            negated = (peek() or "").upper() == "NOT"
            if negated:
                take()
            what = take().upper()
            if what not in ("TRUE", "FALSE", "NULL"):
                raise Unsupported(f"IS {what} in {sql!r}")
            node = ("is", what, node)
            if negated:
                node = ("not", node)
        return node

    def atom():
        tok = take()
        if tok == "(":
            node = disjunction()
            take(")")
            return node
        if tok.isdigit():
            return ("int", int(tok))
        up = tok.upper()
        if up in ("TRUE", "FALSE"):
            return ("const", TRUE if up == "TRUE" else FALSE)
        if up in _KEYWORDS or tok in ("(", ")", "=", "<>"):
            raise Unsupported(f"unexpected {tok} in {sql!r}")
        return ("name", tok)

    tree = disjunction()
    if pos != len(toks):
        raise Unsupported(f"trailing {toks[pos:]} in {sql!r}")
    return tree


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
