"""What the warrant reads off a search's statuses — its lists, the combinations it counts, the ranked
page, coverage rows — and the two writes that narrow the matched by criteria read from documents.

The statuses are one table on the enumeration's cursor: a temp table the SQL made, or an Arrow table
registered in place (made in NumPy, or a cached plan's). Where `final` made it (`held`), the lists,
ranking, page and combinations read NumPy arrays instead of running a query; a write first makes the
table this search's own copy (`own`), since a cached one is shared by every later search.

A list is named by a spec: ("status", s) every entity of overall status s; ("unit", u, s) every
entity whose group or lone constraint u (g0, s1, ...) has status s; ("absent", rel) entities looked
at for rel that hold no live row; ("uncovered", rel) never looked at.
"""
from __future__ import annotations

import secrets

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .relation_sql import RelationSql
from .row_sql import FIELD, MATCHED, NOT_RECORDED, STATUS, UNDETERMINED
from .statuses import Held, order_by, threshold_columns


class StatusTable:
    """A search's statuses on its cursor `con`: `name` is what the warrant reads (the temp table, or a
    registered Arrow table's view); `held` its arrays when `final` made it."""

    def __init__(self, con: duckdb.DuckDBPyConnection, rsql: RelationSql):
        self.con, self.rsql, self.plan = con, rsql, rsql.plan
        self.temp = f"_rsearch_{secrets.token_hex(6)}"
        self.name = self.temp
        self.held: Held | None = None
        self._registered: list[str] = []

    def register(self, table: pa.Table) -> str:
        """A name for an Arrow table on this cursor (unregistered by drop())."""
        name = f"_verdicts_{secrets.token_hex(6)}"
        self.con.complete()   # registering refuses while an earlier statement's result is unread
        self.con.register(name, table)
        self._registered.append(name)
        return name

    def own(self) -> None:
        """Before a write to the statuses: a cached plan's table becomes this search's own copy (the
        cache's Arrow table is shared by every later search and is never written)."""
        if self.name != self.temp:
            self.con.execute(f"CREATE TEMP TABLE {self.temp} AS SELECT * FROM {self.name}")
            self.name = self.temp

    def drop(self) -> None:
        try:
            self.con.execute(f"DROP TABLE IF EXISTS {self.temp}")
        except duckdb.Error:
            pass
        for name in self._registered:
            try:
                self.con.complete()
                self.con.unregister(name)
            except duckdb.Error:
                pass
        self._registered.clear()

    def _from_held(self, restrict: list[str] | None) -> bool:
        """Whether a read may use the held arrays: they exist, nothing restricts the read, and no write
        has made the statuses a table of this search's own."""
        return self.held is not None and restrict is None and self.name != self.temp

    def _where(self, spec: tuple) -> str:
        """SQL selecting a list's entities."""
        kind = spec[0]
        if kind == "status":
            return f"status = {STATUS[spec[1]]}"
        if kind == "unit":
            return f"{spec[1]} = {STATUS[spec[2]]}"
        if kind == "absent":
            return f"cov_{spec[1]} AND NOT live_{spec[1]}"
        if kind == "uncovered":
            return f"NOT cov_{spec[1]}"
        raise ValueError(spec)

    def _mask(self, spec: tuple) -> np.ndarray:
        """`_where` over the held arrays."""
        cols, kind = self.held.columns, spec[0]
        if kind == "status":
            return cols["status"] == STATUS[spec[1]]
        if kind == "unit":
            return cols[spec[1]] == STATUS[spec[2]]
        if kind == "absent":
            return cols[f"cov_{spec[1]}"] & ~cols[f"live_{spec[1]}"]
        if kind == "uncovered":
            return ~cols[f"cov_{spec[1]}"]
        raise ValueError(spec)

    def matched_ids(self, limit: int, restrict: list[str] | None = None) -> list[str]:
        """The matched entities' ids in ranking order, at most `limit`."""
        if self._from_held(restrict):
            return self.held.ids(self.held.ranked(threshold_columns(self.plan))[:int(limit)])
        where, params = f"status = {MATCHED}", []
        if restrict is not None:
            where, params = f"{where} AND list_contains(?, entity_id)", [restrict]
        return [r[0] for r in self.con.execute(
            f"SELECT entity_id FROM {self.name} WHERE {where} ORDER BY {order_by(self.plan)} LIMIT {int(limit)}",
            params).fetchall()]

    def lists(self, specs: dict[str, tuple], limit: int, restrict: list[str] | None = None
              ) -> dict[str, list[tuple[str, int]]]:
        """Every bounded list in one statement: per key up to `limit` (entity id, entity number), by id."""
        out: dict[str, list[tuple[str, int]]] = {k: [] for k in specs}
        if limit == 0 or not specs:
            return out
        if self._from_held(restrict):
            for key, spec in specs.items():
                at = np.flatnonzero(self._mask(spec))[:int(limit)]
                out[key] = list(zip(self.held.ids(at), self.held.numbers(at)))
            return out
        keys, parts, params = list(specs), [], []
        for i, key in enumerate(keys):
            where = self._where(specs[key])
            if restrict is not None:
                where = f"({where}) AND list_contains(?, entity_id)"
                params.append(restrict)
            parts.append(f"(SELECT {i} AS k, entity_id, ent_no FROM {self.name} WHERE {where} "
                         f"ORDER BY entity_id LIMIT {int(limit)})")
        for k, eid, number in self.con.execute(" UNION ALL ".join(parts), params).fetchall():
            out[keys[k]].append((eid, number))
        for pairs in out.values():
            pairs.sort()  # the byte order DuckDB sorts VARCHAR in is the code point order Python uses
        return out

    def combinations(self) -> tuple[list[str], list[tuple]]:
        """One GROUP BY over the status columns (the distinct combinations are few): the names of
        the dimensions, and per combination its dimension values, its entity count and the sums
        of every row counter (in `counter_sql()`'s order)."""
        rels, flags = self.plan.relations, self.rsql.flag_sets
        dims = ["status"] + [f"g{g.index}" for g in self.plan.groups] + [f"s{b.index}" for b in self.plan.singles]
        cols = list(dims)
        for r in rels:
            dims += [f"cov_{r.name}", f"live_{r.name}"]
            cols += [f"cov_{r.name}", f"live_{r.name}"]
            for k, bits in enumerate(flags[r.name].detail_masks()):
                if bits:
                    dims.append(f"dm_{r.name}_{k}")
                    cols.append(f"mask_{r.name}_{k} & {bits} AS dm_{r.name}_{k}")
        counter_sql = self.rsql.counter_sql()
        if self._from_held(None):
            return dims, self._held_combinations(dims)
        rows = self.con.execute(
            f"SELECT {', '.join(cols)}, count(*), {', '.join(f'sum({counter_sql[c]})' for c in counter_sql)} "
            f"FROM {self.name} GROUP BY ALL").fetchall()
        return dims, rows

    def _held_combinations(self, dims: list[str]) -> list[tuple]:
        """`combinations`' GROUP BY over the held statuses table, in NumPy: one key per entity from
        its dimensions' codes (mixed radix, re-numbered by a hash whenever it would grow past 62
        bits), entities counted and counters summed by bincount over the distinct keys, each
        combination's values read off one entity that has it. The same rows as the SQL's, in
        another order (a test compares them)."""
        t, flags = self.held.table, self.rsql.flag_sets
        n = len(t)
        if not n:
            return []
        detail = {f"dm_{r.name}_{k}": (f"mask_{r.name}_{k}", bits) for r in self.plan.relations
                  for k, bits in enumerate(flags[r.name].detail_masks()) if bits}
        key, room = np.zeros(n, np.int64), 1
        values: list[np.ndarray] = []
        for d in dims:
            if d in detail:
                column, bits = detail[d]
                v = t.column(column).to_numpy() & bits
            else:
                v = self.held.columns[d] if d in self.held.columns else t.column(d).to_numpy()
            values.append(v)
            if v.dtype == bool or (len(v) and 0 <= int(v.min()) and int(v.max()) < 256):
                codes, card = v.astype(np.int64), (2 if v.dtype == bool else int(v.max()) + 1)
            else:
                enc = pc.dictionary_encode(pa.array(v))
                codes, card = enc.indices.to_numpy(zero_copy_only=False).astype(np.int64), len(enc.dictionary)
            if room * card >= 2 ** 62:   # renumber the combinations so far: at most one per entity
                enc = pc.dictionary_encode(pa.array(key))
                key, room = enc.indices.to_numpy(zero_copy_only=False).astype(np.int64), len(enc.dictionary)
            key = key * card + codes
            room *= card
        enc = pc.dictionary_encode(pa.array(key))
        at, size = enc.indices.to_numpy(zero_copy_only=False).astype(np.int64), len(enc.dictionary)
        counts = np.bincount(at, minlength=size)
        one = np.empty(size, np.int64)          # an entity of each combination
        one[at] = np.arange(n)
        sums = []
        for rel in self.plan.relations:   # counter_sql()'s order
            if self.rsql.profiles[rel.name].rows >= 2 ** FIELD:
                sums += [t.column(f"n_{c}").to_numpy() for c in self.rsql.counters(rel)]
                continue
            for k, names in enumerate(self.rsql.packed(rel)):
                pk = t.column(f"pk_{rel.name}_{k}").to_numpy()
                sums += [(pk >> (FIELD * j)) & (2 ** FIELD - 1) for j in range(len(names))]
        # a counter is below 2**21 per entity: every sum is exact in a double
        totals = [np.bincount(at, weights=v.astype(np.float64), minlength=size).astype(np.int64) for v in sums]
        columns = [v[one].tolist() for v in values] + [counts.tolist()] + [x.tolist() for x in totals]
        return list(zip(*columns))

    def coverage(self, relation: str, numbers: list[int]) -> list[tuple]:
        """The current coverage rows of these entities for a relation: who looked, and when."""
        if not numbers:
            return []
        return self.con.execute(
            "SELECT entity_id, load_id, declared_by, declared_at FROM rel_coverage WHERE workspace_id = ? "
            f"AND relation = ? AND current AND {self.plan.space.sight.row()} AND ent_no = ANY(?::INTEGER[]) "
            "ORDER BY declared_at, load_id",
            [self.plan.space.workspace_id, relation, [int(n) for n in numbers]]).fetchall()

    def page(self, limit: int, offset: int, restrict: list[str] | None = None) -> list[tuple]:
        """One page of the matched, ranked: (entity_id, rank, opt, ent_no, name, *threshold distances)."""
        if self._from_held(restrict):
            held, dist = self.held, threshold_columns(self.plan)
            at = held.ranked(dist)[int(offset):int(offset) + int(limit)]
            if not len(at):
                return []
            t = held.table
            take = pa.array(at, pa.int64())
            columns = [t.column(c).take(take).to_pylist() for c in ("entity_id", "ent_no", "name", *dist)]
            ranks = range(int(offset) + 1, int(offset) + 1 + len(at))
            opts = held.columns["opt"][at].tolist()
            return [(eid, rank, opt, number, name, *rest)
                    for eid, rank, opt, number, name, *rest in zip(columns[0], ranks, opts, *columns[1:])]
        params: list = []
        where = ""
        if restrict is not None:
            where = "WHERE list_contains(?, entity_id)"
            params.append(restrict)
        sel = ", ".join(["entity_id", "rank", "opt", "ent_no", "name", *threshold_columns(self.plan)])
        return self.con.execute(
            f"SELECT {sel} FROM (SELECT *, row_number() OVER (ORDER BY {order_by(self.plan)}) AS rank FROM {self.name} "
            f"WHERE status = {MATCHED}) {where} ORDER BY rank LIMIT ? OFFSET ?",
            params + [limit, offset]).fetchall()

    def matched(self) -> list[tuple[str, int, str | None]]:
        """The matched entities (entity_id, ent_no, name), by id."""
        return self.con.execute(f"SELECT entity_id, ent_no, name FROM {self.name} WHERE status = {MATCHED} "
                                "ORDER BY entity_id").fetchall()

    def set_codes(self, column: str, codes: dict[int, int]) -> None:
        """Add a TINYINT column to the temp table and set it per entity number (others NULL)."""
        if not column.isidentifier():
            raise ValueError(column)
        self.own()
        self.con.execute(f"ALTER TABLE {self.name} ADD COLUMN {column} TINYINT")
        if not codes:
            return
        self.con.register("crit_codes", pa.table({"ent_no": pa.array(list(codes), pa.int32()),
                                                  "code": pa.array(list(codes.values()), pa.int8())}))
        try:
            self.con.execute(f"UPDATE {self.name} SET {column} = c.code FROM crit_codes c "
                             f"WHERE {self.name}.ent_no = c.ent_no")
        finally:
            self.con.unregister("crit_codes")

    def demote_matched(self, columns: list[str], unrecorded_from: int, unproved: tuple[int, ...]) -> None:
        """Move a matched entity to not_recorded when a code column holds `unrecorded_from` or more,
        else to undetermined when one holds a code in `unproved`."""
        if not columns:
            return
        self.own()
        unrecorded = " OR ".join(f"{c} >= {int(unrecorded_from)}" for c in columns)
        codes = ", ".join(str(int(u)) for u in unproved)
        unproved_sql = " OR ".join(f"{c} IN ({codes})" for c in columns)
        self.con.execute(f"UPDATE {self.name} SET status = CASE WHEN {unrecorded} THEN {NOT_RECORDED} "
                         f"WHEN {unproved_sql} THEN {UNDETERMINED} ELSE status END WHERE status = {MATCHED}")
