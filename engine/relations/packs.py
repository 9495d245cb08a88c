"""Relation packs: typed relations over subject kinds, and the vocabulary their term slots read.

A pack is a TOML or YAML file in configs/packs/ (see expert_network.toml for the format; a YAML
pack has the same keys). `load_pack(name)`
returns a `Pack` with `.schema` (relations and their slots) and `.vocabulary` (one axis per term
slot family: terms, synonyms, a hierarchy and an optional order).
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from engine.core.parsing import loads_toml

PACK_DIR = Path(__file__).resolve().parents[2] / "configs" / "packs"
NAME = re.compile(r"^[a-z][a-z0-9_]{0,62}$")
SLOT_TYPES = ("term", "text", "number", "month", "date")
OPS = ("eq", "ne", "in", "gte", "lte", "contains")


class PackError(ValueError):
    """A pack file that cannot be used as written."""


class PackNotFound(PackError):
    pass


def norm(surface: str) -> str:
    """How surfaces are compared: case- and outer-space-insensitive, inner runs of space as one."""
    return " ".join(str(surface).split()).lower()


@dataclass(frozen=True)
class Slot:
    name: str
    type: str
    axis: str | None = None          # term slots: the vocabulary axis; None with no_vocabulary
    no_vocabulary: bool = False
    computed: bool = False           # a length computed from the period's dates (no source column)

    def ops(self, vocabulary: "Vocabulary") -> tuple[str, ...]:
        """The ops this slot's type can answer."""
        if self.type == "term":
            ordered = self.axis is not None and vocabulary.axis(self.axis).ordered
            return ("eq", "ne", "in", "gte", "lte") if ordered else ("eq", "ne", "in")
        if self.type == "text":
            return ("eq", "ne", "in", "contains")
        return ("eq", "ne", "in", "gte", "lte")


@dataclass(frozen=True)
class Relation:
    name: str
    subject: str
    slots: dict[str, Slot]
    description: str = ""
    period: tuple[str, str] | None = None     # (period_from slot, period_to slot)
    date_slot: str | None = None
    pack: str = ""

    @functools.cached_property
    def value_slots(self) -> list[str]:
        """The slots a row reads out as its values (the tenure is read out as the period; a
        computed length is not a value the row states)."""
        skip = set(self.period or ())
        return [s for s, slot in self.slots.items() if s not in skip and not slot.computed]

    @property
    def stored_slots(self) -> list[str]:
        """The slots a load or a reader fills (every slot but a computed length)."""
        return [s for s, slot in self.slots.items() if not slot.computed]

    @property
    def length_slot(self) -> str | None:
        """The computed length slot (years from period_from to period_to, or to the reference
        date while the period is open), when the pack declares one."""
        return next((s for s, slot in self.slots.items() if slot.computed), None)


@dataclass(frozen=True)
class Schema:
    relations: dict[str, Relation]

    def relation(self, name: str) -> Relation | None:
        return self.relations.get(name)


@dataclass
class Axis:
    name: str
    terms: list[str]
    order: list[str] | None = None
    hierarchy: dict[str, list[str]] = field(default_factory=dict)
    synonyms: dict[str, list[str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._by_surface: dict[str, str] = {norm(t): t for t in self.terms}
        for term, surfaces in self.synonyms.items():
            for s in surfaces:
                prior = self._by_surface.get(norm(s))
                if prior is not None and prior != term:
                    raise PackError(f"axis {self.name}: surface {s!r} is both {prior!r} and {term!r}")
                self._by_surface[norm(s)] = term
        self._rung = {t: i for i, t in enumerate(self.order or [])}

    @property
    def ordered(self) -> bool:
        return bool(self.order)

    def surfaces(self) -> dict[str, str]:
        """Every normalised surface (terms and synonyms) -> its term."""
        return dict(self._by_surface)

    def resolve(self, surface: str) -> str | None:
        return self._by_surface.get(norm(surface))

    def is_synonym(self, surface: str) -> bool:
        term = self.resolve(surface)
        return term is not None and norm(term) != norm(surface)

    def rung(self, term: str) -> int | None:
        return self._rung.get(term)

    def covered(self, term: str) -> list[str]:
        """The term and every term its hierarchy puts under it, depth first, in declaration order."""
        out: list[str] = []

        def walk(t: str) -> None:
            if t in out:
                return
            out.append(t)
            for child in self.hierarchy.get(t, ()):
                walk(child)

        walk(term)
        return out


@dataclass
class Vocabulary:
    axes: dict[str, Axis]

    def axis(self, name: str) -> Axis:
        return self.axes[name]


@dataclass
class Pack:
    name: str
    description: str
    schema: Schema
    vocabulary: Vocabulary
    path: Path | None = None
    readers: tuple[dict, ...] = ()      # document readers ([[readers]]), checked by the load that uses them


def _ident(value, what: str) -> str:
    if not isinstance(value, str) or not NAME.match(value):
        raise PackError(f"{what} must be a lower-case identifier, got {value!r}")
    return value


def _axis(name: str, spec: dict) -> Axis:
    terms = spec.get("terms")
    if not isinstance(terms, list) or not terms or not all(isinstance(t, str) and t.strip() for t in terms):
        raise PackError(f"vocabulary.{name}.terms must be a non-empty list of strings")
    known = set(terms)
    order = spec.get("order")
    if order is not None and (not isinstance(order, list) or set(order) - known or len(set(order)) != len(order)):
        raise PackError(f"vocabulary.{name}.order must list distinct terms of the axis")
    hierarchy = spec.get("hierarchy", {})
    for group, children in hierarchy.items():
        if group not in known or not isinstance(children, list) or set(children) - known:
            raise PackError(f"vocabulary.{name}.hierarchy.{group} must map a term to terms of the axis")
    synonyms = spec.get("synonyms", {})
    for term, surfaces in synonyms.items():
        if term not in known or not isinstance(surfaces, list):
            raise PackError(f"vocabulary.{name}.synonyms.{term} must map a term to a list of surfaces")
    return Axis(name, list(terms), list(order) if order else None, dict(hierarchy), dict(synonyms))


def parse_pack(data: dict, path: Path | None = None) -> Pack:
    name = _ident(data.get("name"), "pack name")
    axes = {_ident(a, "axis name"): _axis(a, spec) for a, spec in (data.get("vocabulary") or {}).items()}
    vocabulary = Vocabulary(axes)
    relations: dict[str, Relation] = {}
    for rel in data.get("relations") or []:
        rname = _ident(rel.get("name"), "relation name")
        if rname in relations:
            raise PackError(f"relation {rname} is declared twice")
        slots: dict[str, Slot] = {}
        for s in rel.get("slots") or []:
            sname = _ident(s.get("name"), f"{rname} slot name")
            stype = s.get("type")
            if stype not in SLOT_TYPES:
                raise PackError(f"{rname}.{sname}: type must be one of {', '.join(SLOT_TYPES)}")
            axis, free = s.get("axis"), bool(s.get("no_vocabulary", False))
            if stype == "term":
                if (axis is None) == (not free):
                    raise PackError(f"{rname}.{sname}: a term slot names its `axis` or says `no_vocabulary = true`")
                if axis is not None and axis not in axes:
                    raise PackError(f"{rname}.{sname}: axis {axis!r} has no vocabulary in the pack")
            elif axis is not None or free:
                raise PackError(f"{rname}.{sname}: only a term slot has an axis")
            if sname in slots:
                raise PackError(f"{rname}.{sname} is declared twice")
            slots[sname] = Slot(sname, stype, axis, free)
        if not slots:
            raise PackError(f"relation {rname} declares no slot")
        period = rel.get("period")
        if period is not None:
            if (not isinstance(period, list) or len(period) != 2
                    or any(p not in slots or slots[p].type not in ("month", "date") for p in period)):
                raise PackError(f"{rname}.period must name two month/date slots of the relation")
            period = (period[0], period[1])
        date_slot = rel.get("date_slot")
        if isinstance(date_slot, list):
            raise PackError(f"{rname}: at most one date_slot")
        if date_slot is not None and (date_slot not in slots or slots[date_slot].type not in ("month", "date")):
            raise PackError(f"{rname}.date_slot must name a month/date slot of the relation")
        length = rel.get("length_slot")
        if length is not None:
            length = _ident(length, f"{rname} length_slot")
            if period is None:
                raise PackError(f"{rname}.length_slot needs the relation's `period` (its length is computed from it)")
            if length in slots:
                raise PackError(f"{rname}.length_slot {length!r} is also a declared slot")
            slots[length] = Slot(length, "number", computed=True)
        relations[rname] = Relation(rname, _ident(rel.get("subject"), f"{rname} subject"), slots,
                                    rel.get("description", ""), period, date_slot, name)
    if not relations:
        raise PackError(f"pack {name} declares no relation")
    readers = data.get("readers") or []
    if not isinstance(readers, list) or any(not isinstance(r, dict) or r.get("relation") not in relations
                                            for r in readers):
        raise PackError(f"pack {name}: each [[readers]] entry names a `relation` of the pack")
    return Pack(name, data.get("description", ""), Schema(relations), vocabulary, path, tuple(readers))


EXTENSIONS = (".toml", ".yaml", ".yml")


@lru_cache(maxsize=64)
def _load(path: Path, mtime: float) -> Pack:
    text = path.read_text(encoding="utf-8")
    try:
        if path.suffix == ".toml":
            data = loads_toml(text)   # bounded depth and digits (engine/core/parsing.py)
        else:
            import yaml

            data = yaml.safe_load(text)
    except Exception as exc:  # TextRefused, yaml.YAMLError: the file is not valid as written
        raise PackError(f"{path.name}: {exc}") from exc
    if not isinstance(data, dict):
        raise PackError(f"{path.name}: a pack is a mapping of name, relations and vocabulary")
    pack = parse_pack(data, path)
    if pack.name != path.stem:
        raise PackError(f"{path.name} declares pack {pack.name!r}; the file name must match")
    return pack


def pack_names(pack_dir: Path = PACK_DIR) -> list[str]:
    return sorted({p.stem for ext in EXTENSIONS for p in pack_dir.glob(f"*{ext}")})


def load_pack(name: str, pack_dir: Path = PACK_DIR) -> Pack:
    """The pack configs/packs/<name>.toml (or .yaml / .yml), parsed and checked (cached until the
    file changes)."""
    if not isinstance(name, str) or not NAME.match(name):
        raise PackNotFound(f"no pack named {name!r}")
    found = [pack_dir / f"{name}{ext}" for ext in EXTENSIONS if (pack_dir / f"{name}{ext}").is_file()]
    if not found:
        raise PackNotFound(f"no pack named {name!r} in {pack_dir}")
    if len(found) > 1:
        raise PackError(f"pack {name!r} is written twice: {', '.join(p.name for p in found)}")
    return _load(found[0], found[0].stat().st_mtime)


def vocabulary_axes(names: list[str]) -> list[tuple[str, Axis]]:
    """Every vocabulary axis of the named packs (["*"]: every installed pack), with its pack's name:
    what an evidence dictionary adds to a workspace's own terms."""
    names = pack_names() if names == ["*"] else names
    return [(name, axis) for name in names for axis in load_pack(name).vocabulary.axes.values()]


def combine(packs: list[Pack]) -> tuple[Schema, Vocabulary]:
    """One address space from a workspace's packs: relation and axis names must not collide."""
    relations: dict[str, Relation] = {}
    axes: dict[str, Axis] = {}
    for p in packs:
        for r in p.schema.relations.values():
            if r.name in relations:
                raise PackError(f"relation {r.name} is declared by two packs of the workspace")
            relations[r.name] = r
        for a in p.vocabulary.axes.values():
            if a.name in axes and axes[a.name] is not a:
                raise PackError(f"axis {a.name} is declared by two packs of the workspace")
            axes[a.name] = a
    return Schema(relations), Vocabulary(axes)
