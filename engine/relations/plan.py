"""What a constraints search asks of the stored rows: its groups (conditions that must hold on one
row of one relation) and the plan the enumeration (`indexes/judging/`) turns into SQL."""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date

from engine.core.clock import utcnow
from engine.relations.packs import Relation
from engine.relations.constraints import Bound
from engine.relations.workspaces import Space


@dataclass
class Group:
    """Conditions on one relation that must hold on ONE row (required ones; preferences apart)."""
    index: int
    relation: Relation
    required: bool
    bound: list[Bound]

    @property
    def constraints(self) -> list[int]:
        return [b.index for b in self.bound]


def make_groups(bound: list[Bound]) -> list[Group]:
    groups: dict[tuple[str, bool], Group] = {}
    for b in bound:
        key = (b.rel.name, b.c.required)
        if key not in groups:
            groups[key] = Group(len(groups), b.rel, b.c.required, [])
        groups[key].bound.append(b)
    return list(groups.values())


@dataclass
class Plan:
    space: Space
    groups: list[Group]
    singles: list[Bound]
    as_of: tuple[date, date] | None          # first and last day of the as_of month
    kinds: list[str]
    params: list = field(default_factory=list)
    today: date = field(default_factory=lambda: utcnow().date())   # where an open period's length ends

    @property
    def relations(self) -> list[Relation]:
        seen: dict[str, Relation] = {}
        for b in self.singles:
            seen.setdefault(b.rel.name, b.rel)
        return list(seen.values())
