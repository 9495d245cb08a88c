"""The brief compiler's deterministic halves: the tool's schema and the checker of a model's call."""
from __future__ import annotations

import pytest

from engine.relations.compile import compile_tool, read_compile_output, sentences
from engine.relations.packs import load_pack

PACK = load_pack("expert_network")
BRIEF = "Sales leaders in DACH. Sales roles only. Passed screening, as of 2020-03. Speaks Romansh."


def read(*constraints, **extra):
    return read_compile_output(BRIEF, PACK.schema, PACK.vocabulary, {"constraints": list(constraints), **extra})


def con(slot, value, quote, span=None, relation="held_role", op="eq", required=True):
    start = BRIEF.find(quote)
    return {"relation": relation, "slot": slot, "op": op, "value": value, "quote": quote,
            "brief_span": span if span is not None else [start, start + len(quote)], "required": required}


def test_the_tool_offers_one_variant_per_relation_slot_with_the_ops_its_type_supports():
    tool = compile_tool(PACK.schema, PACK.vocabulary)
    variants = tool["input_schema"]["properties"]["constraints"]["items"]["anyOf"]
    by = {(v["properties"]["relation"]["enum"][0], v["properties"]["slot"]["enum"][0]): v for v in variants}
    # the packs' declared slots; a computed length (held_role.years) is not offered (the seed prints 13)
    assert len(by) == sum(len(r.stored_slots) for r in PACK.schema.relations.values()) == 13
    assert by[("held_role", "function")]["properties"]["op"]["enum"] == ["eq", "ne", "in"]
    assert by[("engagement", "hourly_rate_usd")]["properties"]["op"]["enum"] == ["eq", "ne", "in", "gte", "lte"]
    assert "Sales, Marketing" in by[("held_role", "function")]["properties"]["slot"]["description"]
    assert all(v["required"] == ["relation", "slot", "op", "value", "brief_span", "quote", "required"]
               for v in variants)


def test_sentences_are_split_without_their_spaces():
    assert [BRIEF[s:e] for s, e in sentences(BRIEF)] == [
        "Sales leaders in DACH.", "Sales roles only.", "Passed screening, as of 2020-03.", "Speaks Romansh."]


def test_a_span_that_re_slices_to_its_quote_is_kept_as_is():
    out = read(con("geography", "DACH", "DACH"))
    (kept,) = out.constraints
    assert BRIEF[kept.brief_span[0]:kept.brief_span[1]] == "DACH" and kept.span_relocated_from is None


def test_a_miscounted_span_is_relocated_when_the_quote_occurs_once():
    out = read(con("geography", "DACH", "in DACH", span=[0, 4]))
    (kept,) = out.constraints
    assert kept.brief_span == (14, 21) and kept.span_relocated_from == (0, 4)


@pytest.mark.parametrize("constraint, reason", [
    (con("function", "Sales", "Sales", span=[100, 105]), "span_ambiguous"),   # twice, the span on neither
    (con("geography", "DACH", "ACH", span=[0, 3]), "quote_not_whole_words"),
    (con("geography", "DACH", "DACH. Sales", span=[0, 3]), "quote_crosses_sentences"),
    (con("geography", "DACH", "Austria and Germany"), "quote_not_in_brief"),
    (con("geography", "DACH", "  "), "quote_empty"),
    (con("geography", "DACH", "DACH", relation="board_seat"), "relation_unknown:board_seat"),
    (con("hair", "DACH", "DACH"), "slot_unknown:hair"),
    (con("function", "Sales", "Sales leaders", op="gte"), "op_not_offered:gte"),
    (con("hourly_rate_usd", "lots", "Sales leaders", relation="engagement", op="gte"), "type_cannot_answer"),
    (con("geography", "DACH", "DACH", op="in"), "value_malformed"),
])
def test_what_cannot_be_attributed_or_run_is_dropped_with_its_reason(constraint, reason):
    out = read(constraint)
    assert out.constraints == []
    assert [d["reason"] for d in out.dropped] == [reason]


def test_every_sentence_no_kept_constraint_came_from_is_uncompiled():
    out = read(con("geography", "DACH", "DACH"), con("outcome", "passed", "Passed", relation="screening"),
               as_of="2020-03")
    assert [u["text"] for u in out.uncompiled] == ["Sales roles only.", "Speaks Romansh."]
    assert out.as_of == "2020-03"
    assert read(as_of="March 2020").as_of is None


def test_a_term_slot_without_vocabulary_is_kept_for_the_search_to_report_unbound():
    (kept,) = read(con("title", "Head of Sales", "Sales leaders")).constraints
    assert kept.slot == "title" and kept.as_constraint()["brief_span"] == [0, 13]
