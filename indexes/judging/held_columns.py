"""Each relation's current rows of a workspace, held in memory as NumPy columns at one workspace
version.

Why: the enumeration's cost at a million rows is judging every row in SQL (projections of the
conditions, bit masks, packed counters) and a hash GROUP BY per entity — ~100 ms for a plan never
asked for before. Held here, a relation's rows are sorted by entity number and every slot is
dictionary-coded: the codes of the tuple of the slot's columns (v_, t_, r_, n_, lo_, hi_) per row,
and the distinct tuples as a small Arrow table. A condition is then decided once per distinct value
by the enumeration's own predicate SQL (`RelationColumns.decide`: the same function, run over the
distinct values) and spread to the rows by indexing; the rest is in_memory.py's.

Built on a relation's first search at a workspace version (one read of its current rows), kept
within `[relations] columns_mb` by column_cache.py, dropped at the workspace's next write. Computed
length slots, and anything the evaluator does not parse, leave the search on SQL.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..relation_shapes import RelationShape



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




def rows_reader(cursor, table: str, rel: RelationShape, workspace_id: str):
    """How a relation's rows are read into columns, on a cursor of its own (`cursor()`) made when the
    read runs (on the column cache's thread; again after each write while the relation is held)."""
    def read() -> RelationColumns:
        con = cursor()
        try:
            return RelationColumns.read(con, table, rel, workspace_id)
        finally:
            con.close()
    return read
