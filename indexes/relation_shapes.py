"""The relation store's vocabulary: what a caller may see (`Sight`), a relation's table (`TableShape`),
and — as Protocols — what the store reads of a search's plan: a relation, a bound constraint, a
group, the plan.

The engine's relations wing builds these objects (engine/relations/: the pack's `Relation`, a
constraint's `Bound`, the `Plan`); the store judges rows by them. Declaring here only the attributes
the store reads keeps every import arrow pointing down (indexes/ names nothing of the engine), and
says in one place what a plan must offer to be judged — any object with these attributes will do.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from typing import Any, Mapping, Protocol, Sequence


def _literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


@dataclass(frozen=True)
class Sight:
    """What a caller may see of a workspace's relations: its key's document scopes (None: every
    document). Rows read from a document carry the document's scope; an entity is seen when a
    source the caller reads named it; a display name when the document it was read from is one
    the caller reads. SQL fragments (scopes inlined as quoted literals) for each."""
    scopes: tuple[str, ...] | None = None

    @classmethod
    def of(cls, scopes) -> "Sight":
        return cls(tuple(sorted(set(scopes))) if scopes else None)

    @property
    def everything(self) -> bool:
        return self.scopes is None

    def _list(self) -> str:
        return "[" + ", ".join(_literal(s) for s in self.scopes) + "]::VARCHAR[]"

    def row(self, alias: str = "") -> str:
        """SQL: the row (or coverage declaration) `alias` is readable."""
        a = f"{alias}." if alias else ""
        return "TRUE" if self.everything else f"({a}scope IS NULL OR list_contains({self._list()}, {a}scope))"

    def entity(self, alias: str = "") -> str:
        """SQL: the entity `alias` (a rel_entities row) is known to the caller."""
        a = f"{alias}." if alias else ""
        return "TRUE" if self.everything else f"({a}scopes IS NULL OR list_has_any({a}scopes, {self._list()}))"

    def name(self, alias: str = "") -> str:
        """SQL: the entity's display name as the caller may read it (NULL when it is not)."""
        a = f"{alias}." if alias else ""
        if self.everything:
            return f"{a}name"
        return f"CASE WHEN {a}name_scope IS NULL OR list_contains({self._list()}, {a}name_scope) THEN {a}name END"


EVERYTHING = Sight()


@dataclass(frozen=True)
class TableShape:
    """The physical shape of one relation's table: its name and typed slot columns."""
    pack: str
    relation: str
    slots: tuple[tuple[str, str], ...]     # (slot, type) in declaration order

    @property
    def name(self) -> str:
        return f"rel_{self.pack}__{self.relation}"

    def columns(self) -> list[tuple[str, str]]:
        cols = [("row_id", "VARCHAR"), ("workspace_id", "VARCHAR"), ("entity_id", "VARCHAR"), ("ent_no", "INTEGER"),
                ("load_id", "VARCHAR"), ("source_key", "VARCHAR"), ("db_table", "VARCHAR"),
                ("row_key", "VARCHAR"), ("vhash", "VARCHAR"), ("current", "BOOLEAN"),
                ("retired", "VARCHAR"), ("withheld", "VARCHAR"), ("scope", "VARCHAR")]
        for slot, kind in self.slots:
            cols.append((f"v_{slot}", "VARCHAR"))
            if kind == "term":
                cols += [(f"t_{slot}", "VARCHAR"), (f"r_{slot}", "INTEGER")]
            elif kind == "number":
                cols.append((f"n_{slot}", "DOUBLE"))
            elif kind in ("month", "date"):
                cols += [(f"lo_{slot}", "DATE"), (f"hi_{slot}", "DATE")]
        cols.append(("src_row", "BIGINT"))   # the row's ordinal in its SQL source (receipts seek it)
        return cols


class SlotShape(Protocol):
    name: str
    type: str                   # term | text | number | month | date | …
    computed: bool              # a length the store computes from the period, never stored


class RelationShape(Protocol):
    name: str
    slots: Mapping[str, SlotShape]
    period: tuple[str, str] | None      # (period_from slot, period_to slot)
    date_slot: str | None

    @property
    def length_slot(self) -> str | None: ...


class ConstraintShape(Protocol):
    index: int
    op: str                     # eq | ne | in | contains | gte | lte


class BoundShape(Protocol):
    """One constraint that runs: the slot it reads and what a row's value must be."""
    c: ConstraintShape
    rel: RelationShape
    slot: SlotShape
    kind: str                   # term | literal | text | number | span
    terms: list[str]
    literals: list[str]
    threshold: Any
    values: list[Any]

    @property
    def index(self) -> int: ...

    @property
    def is_period(self) -> bool: ...

    @property
    def is_span(self) -> bool: ...

    @property
    def thresholded(self) -> bool: ...

    def can_be_null(self, null_slots: set[str], withheld: bool) -> bool: ...


class GroupShape(Protocol):
    """Constraints that must hold on one and the same row."""
    index: int
    relation: RelationShape
    bound: list[BoundShape]
    required: bool


class SpaceShape(Protocol):
    workspace_id: str
    map_version: int
    sight: Sight

    def shape(self, relation: RelationShape) -> TableShape: ...


class PlanShape(Protocol):
    space: SpaceShape
    groups: Sequence[GroupShape]
    singles: Sequence[BoundShape]
    as_of: tuple[date, date] | None     # first and last day of the as_of month
    kinds: list[str]
    today: date

    @property
    def relations(self) -> list[RelationShape]: ...
