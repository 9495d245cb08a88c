"""Packs: the shipped expert_network pack, and a pack file that cannot be used is refused."""
from __future__ import annotations

import pytest

from engine.relations.packs import PackError, load_pack, parse_pack


def test_load_pack_gives_schema_and_vocabulary():
    pack = load_pack("expert_network")
    held = pack.schema.relation("held_role")
    assert held.subject == "person" and held.period == ("period_from", "period_to") and held.date_slot is None
    assert pack.schema.relation("screening").date_slot == "as_of"
    assert held.slots["title"].no_vocabulary and held.slots["company"].type == "text"
    seniority = pack.vocabulary.axis("seniority")
    assert seniority.order == ["IC", "Manager", "Director", "VP", "SVP", "C-level"]
    geo = pack.vocabulary.axis("geography")
    assert geo.covered("DACH") == ["DACH", "Germany", "Austria", "Switzerland"]
    assert geo.resolve("  deutschland ") == "Germany" and geo.resolve("Atlantis") is None
    assert held.slots["seniority"].ops(pack.vocabulary) == ("eq", "ne", "in", "gte", "lte")
    assert held.slots["function"].ops(pack.vocabulary) == ("eq", "ne", "in")


BASE = {"name": "p", "relations": [{"name": "r", "subject": "thing", "slots": [{"name": "s", "type": "text"}]}]}


@pytest.mark.parametrize("change, message", [
    ({"relations": []}, "declares no relation"),
    ({"relations": [{"name": "r", "subject": "thing", "slots": [{"name": "s", "type": "colour"}]}]}, "type must be"),
    ({"relations": [{"name": "r", "subject": "thing", "slots": [{"name": "s", "type": "term"}]}]}, "names its `axis`"),
    ({"relations": [{"name": "r", "subject": "thing", "slots": [{"name": "s", "type": "term", "axis": "x"}]}]},
     "has no vocabulary"),
    ({"relations": [{"name": "r", "subject": "thing", "date_slot": "s",
                     "slots": [{"name": "s", "type": "text"}]}]}, "date_slot must name a month/date slot"),
    ({"relations": [{"name": "R!", "subject": "thing", "slots": [{"name": "s", "type": "text"}]}]}, "identifier"),
    ({"vocabulary": {"x": {"terms": ["a"], "order": ["a", "b"]}}}, "order must list distinct terms"),
    ({"vocabulary": {"x": {"terms": ["a", "b"], "synonyms": {"a": ["z"], "b": ["Z"]}}}}, "is both"),
])
def test_a_pack_that_cannot_be_used_is_refused(change, message):
    with pytest.raises(PackError, match=message):
        parse_pack({**BASE, **change})


def test_a_yaml_pack_reads_like_a_toml_one(tmp_path):
    (tmp_path / "tiny.yaml").write_text(
        "name: tiny\n"
        "relations:\n"
        "  - name: owns\n"
        "    subject: company\n"
        "    slots:\n"
        "      - {name: asset, type: term, axis: asset}\n"
        "      - {name: since, type: month}\n"
        "    date_slot: since\n"
        "vocabulary:\n"
        "  asset:\n"
        "    terms: [Plant, Fleet, Ship]\n"
        "    hierarchy: {Fleet: [Ship]}\n")
    pack = load_pack("tiny", tmp_path)
    assert pack.schema.relation("owns").date_slot == "since"
    assert pack.vocabulary.axis("asset").covered("Fleet") == ["Fleet", "Ship"]
    (tmp_path / "tiny.toml").write_text('name = "tiny"\n')
    with pytest.raises(PackError, match="written twice"):
        load_pack("tiny", tmp_path)
