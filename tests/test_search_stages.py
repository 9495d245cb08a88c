"""Each stage of the search pipeline in isolation: fusion, rollup, decay, pinning, slicing."""
from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from engine.refind.fusion import rrf
from engine.refind.pinning import pin_intent
from engine.refind.recency import decay_factor
from engine.refind.rollup import rollup


def test_rrf_counts_ranks_from_one_with_weights():
    fused = rrf({"dense": [(1, 0.9), (2, 0.8)], "sparse": [(2, 12.0), (3, 7.0)]}, {"dense": 1.0, "sparse": 0.5}, k=60)
    got = {f.chunk_id: f.score for f in fused}
    assert got[1] == pytest.approx(1 / 61)
    assert got[2] == pytest.approx(1 / 62 + 0.5 / 61)
    assert got[3] == pytest.approx(0.5 / 62)
    assert [f.chunk_id for f in fused] == [2, 1, 3]
    assert fused[0].ranks == {"dense": 2, "sparse": 1} and fused[0].arm_scores == {"dense": 0.8, "sparse": 12.0}


def test_rrf_ties_break_by_chunk_id():
    fused = rrf({"a": [(9, 1.0)], "b": [(4, 1.0)]}, k=60)
    assert [f.chunk_id for f in fused] == [4, 9]


@pytest.mark.parametrize("how,expected", [("max", {"p1": 0.5, "p2": 0.4}),
                                          ("sum", {"p1": 0.6, "p2": 0.7}),
                                          ("mean_top2", {"p1": 0.3, "p2": 0.35})])
def test_rollup_variants(how, expected):
    pages = {1: "p1", 2: "p1", 3: "p2", 4: "p2"}
    out = rollup([(1, 0.5), (2, 0.1), (3, 0.4), (4, 0.3)], pages.get, how)
    assert {p: pytest.approx(v) for p, v, _ in out} == expected
    assert dict((p, c) for p, _, c in out) == {"p1": [1, 2], "p2": [3, 4]}


def test_rollup_rejects_unknown_mode():
    with pytest.raises(ValueError):
        rollup([], lambda c: None, "median")


def test_decay_halves_per_half_life_and_is_off_at_zero():
    now = datetime(2026, 11, 29)
    assert decay_factor(now - timedelta(days=30), now, 30) == pytest.approx(0.5)
    assert decay_factor(now - timedelta(days=60), now, 30) == pytest.approx(0.25)
    assert decay_factor(now, now, 30) == 1.0
    assert decay_factor(now + timedelta(days=3), now, 30) == 1.0  # a future last_seen is not a bonus
    assert decay_factor(now - timedelta(days=999), now, 0) == 1.0


@pytest.mark.parametrize("query,kind,value", [
    ("https://www.sqlite.org/lang_select.html", "url", "sqlite.org/lang_select.html"),
    ("http://SQLITE.org:80/lang_select.html/#syntax", "url", "sqlite.org/lang_select.html"),
    ("sqlite.org/lang_select.html", "url", "sqlite.org/lang_select.html"),
    ("www.postgresql.org", "domain", "postgresql.org"),
    ("docs.python.org", "domain", "docs.python.org"),
])
def test_pin_intent(query, kind, value):
    intent = pin_intent(query)
    assert intent is not None and (intent.kind, intent.value) == (kind, value)


@pytest.mark.parametrize("query", ["json encoder", "how to use sqlite.org", "python3", "e.g."])
def test_ordinary_queries_pin_nothing(query):
    assert pin_intent(query) is None
