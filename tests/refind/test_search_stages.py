"""Each stage of the search pipeline in isolation: fusion, rollup, decay, pinning, slicing."""
from __future__ import annotations

import random
from datetime import datetime, timedelta

import numpy as np
import pytest

from engine.refind.fusion import arm_levels, extra_arm, fuse, normalise, rrf, rrf_arrays, tied_ranks
from engine.refind.pinning import pin_intent
from engine.refind.ranking import rank_pages
from engine.refind.recency import age_days, factors_us
from engine.refind.rollup import rollup_rows
from indexes.hot import HotView


def test_rrf_counts_ranks_from_one_with_weights():
    fused = rrf({"dense": [(1, 0.9), (2, 0.8)], "sparse": [(2, 12.0), (3, 7.0)]}, {"dense": 1.0, "sparse": 0.5}, k=60)
    got = {f.chunk_id: f.score for f in fused}
    assert got[1] == pytest.approx(1 / 61)
    assert got[2] == pytest.approx(1 / 62 + 0.5 / 61)
    assert got[3] == pytest.approx(0.5 / 62)
    assert [f.chunk_id for f in fused] == [2, 1, 3]
    assert fused[0].ranks == {"dense": 2, "sparse": 1} and fused[0].arm_scores == {"dense": 0.8, "sparse": 12.0}


def test_equal_scores_share_a_rank_and_fuse_to_the_same_score():
    assert tied_ranks([3.0, 2.0, 2.0, 1.0, 1.0, 0.5]) == [1, 2, 2, 4, 4, 6]
    # two copies of one text: the same score in each arm, so the same fused score (recency decides)
    fused = rrf({"dense": [(5, 0.9), (6, 0.9), (7, 0.1)], "sparse": [(5, 4.0), (6, 4.0)]}, k=60)
    got = {f.chunk_id: f.score for f in fused}
    assert got[5] == got[6] == pytest.approx(2 / 61) and got[7] == pytest.approx(1 / 63)
    assert fused[1].ranks == {"dense": 1, "sparse": 1}
    assert extra_arm({1: 0.5, 2: 0.5, 3: 0.1}, 1.0, "rrf", 60) == pytest.approx({1: 1 / 61, 2: 1 / 61, 3: 1 / 63})


def test_rrf_ties_break_by_chunk_id():
    fused = rrf({"a": [(9, 1.0)], "b": [(4, 1.0)]}, k=60)
    assert [f.chunk_id for f in fused] == [4, 9]


@pytest.mark.parametrize("how,expected", [
    ("minmax", [1.0, 0.5, 0.0]),
    ("zscore", [1.224744871, 0.0, -1.224744871]),          # population std of 4, 3, 2 is sqrt(2/3)
    ("l2", [4 / 29 ** 0.5, 3 / 29 ** 0.5, 2 / 29 ** 0.5]),
    ("dbsf", [0.5 + 1 / (6 * (2 / 3) ** 0.5), 0.5, 0.5 - 1 / (6 * (2 / 3) ** 0.5)]),
])
def test_normalisers(how, expected):
    assert normalise([4.0, 3.0, 2.0], how) == pytest.approx(expected)


@pytest.mark.parametrize("how,expected", [("minmax", 1.0), ("zscore", 0.0), ("dbsf", 1.0)])
def test_normalisers_when_every_score_is_equal(how, expected):
    assert normalise([2.5, 2.5], how) == [expected, expected]
    assert normalise([], how) == []


def test_an_unknown_normaliser_is_refused():
    with pytest.raises(ValueError, match="unknown normalizer"):
        normalise([1.0, 2.0], "softmax")


def test_linear_fusion_sums_weighted_normalised_scores_and_a_missing_arm_adds_nothing():
    arms = {"dense": [(1, 0.9), (2, 0.5), (3, 0.1)], "sparse": [(3, 20.0), (4, 10.0)]}
    fused = fuse(arms, {"dense": 1.0, "sparse": 0.5}, "linear", normalizer="minmax")
    got = {f.chunk_id: f.score for f in fused}
    # dense minmax: 1, 0.5, 0; sparse minmax: 1, 0
    assert got == pytest.approx({1: 1.0, 2: 0.5, 3: 0.0 + 0.5 * 1.0, 4: 0.0})
    assert [f.chunk_id for f in fused] == [1, 2, 3, 4]          # 2 and 3 tie at 0.5: by chunk id
    three = next(f for f in fused if f.chunk_id == 3)
    assert three.normalised == {"dense": 0.0, "sparse": 1.0} and three.arm_scores == {"dense": 0.1, "sparse": 20.0}
    assert three.ranks == {"dense": 3, "sparse": 1}
    assert fuse(arms, None, "rrf") == rrf(arms)                 # rrf is the default method


def test_an_extra_arm_joins_in_the_requests_fusion():
    scores = {7: 3.0, 8: 1.0, 9: 2.0}
    assert extra_arm(scores, 2.0, "rrf", 60) == pytest.approx({7: 2 / 61, 9: 2 / 62, 8: 2 / 63})
    assert extra_arm(scores, 2.0, "linear", normalizer="minmax") == pytest.approx({7: 2.0, 9: 1.0, 8: 0.0})


@pytest.mark.parametrize("how,expected", [("max", {"p1": 0.5, "p2": 0.4}),
                                          ("sum", {"p1": 0.6, "p2": 0.7}),
                                          ("mean_top2", {"p1": 0.3, "p2": 0.35})])
def test_rollup_variants(how, expected):
    # chunks 1..5 best first; chunk 5 has no page (-1) and is left out
    ids = np.array([1, 3, 4, 2, 5])
    rolled = rollup_rows(np.array([0, 1, 1, 0, -1]), np.array([0.5, 0.4, 0.3, 0.1, 0.05]), how)
    names = {0: "p1", 1: "p2"}
    assert {names[r]: pytest.approx(v) for r, v in zip(rolled.pages.tolist(), rolled.values.tolist())} == expected
    assert {names[r]: ids[rolled.chunk_positions(i)].tolist() for i, r in enumerate(rolled.pages.tolist())} == \
        {"p1": [1, 2], "p2": [3, 4]}


def test_rollup_rejects_unknown_mode():
    with pytest.raises(ValueError):
        rollup_rows(np.zeros(0, dtype=np.int32), np.zeros(0), "median")


def decay_factor(last_seen: datetime, now: datetime, half_life_days: float, weight: float = 1.0) -> float:
    """The recency factor as seed 001 states it, on datetimes: the reference the search's own
    implementation (recency.factors_us, over microseconds) is held to."""
    if not half_life_days or half_life_days <= 0 or weight <= 0:
        return 1.0
    return 1.0 - weight * (1.0 - 0.5 ** (age_days(last_seen, now) / half_life_days))


def _factor(last_seen: datetime, now: datetime, half_life: float, weight: float = 1.0) -> float:
    epoch = datetime(1970, 1, 1)
    return factors_us((now - epoch) // timedelta(microseconds=1), [(last_seen - epoch) // timedelta(microseconds=1)],
                      half_life, weight)[0]


def test_decay_halves_per_half_life_and_is_off_at_zero():
    now = datetime(2026, 11, 29)
    assert _factor(now - timedelta(days=30), now, 30) == pytest.approx(0.5)
    assert _factor(now - timedelta(days=60), now, 30) == pytest.approx(0.25)
    assert _factor(now, now, 30) == 1.0
    assert _factor(now + timedelta(days=3), now, 30) == 1.0  # a future last_seen is not a bonus
    assert _factor(now - timedelta(days=999), now, 0) == 1.0
    assert _factor(now - timedelta(days=30), now, 30, weight=0.05) == pytest.approx(0.975)   # bounded


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


def test_highlights_mark_exactly_the_words_whose_stem_is_a_query_term(demo_subset):
    """The fast highlighter (distinct words stemmed once, found with str.find) against the word-by-
    word reference, over the demo pages' text and queries made of their own words, odd cases added."""
    import random

    from engine.refind.highlight import highlight_all, query_terms, word_spans

    texts = [r.get("body_text") or "" for r in demo_subset][:40]
    texts += ["Data databases DATA-data data_data (data) dataData", "İstanbul data İ data", "", "ünïcödé Über über",
              "data data\tdata\n(data),data. _data_ 3data data3 DATA's data-\x00data", "data", " data ", "-data"]
    rng = random.Random(7)
    checked = 0
    for text in texts:
        words = text.split() or ["data"]
        for _ in range(5):
            query = " ".join(rng.choice(words) for _ in range(rng.randint(1, 4))) + " data über"
            terms = query_terms(query)
            assert highlight_all([text], terms) == [word_spans(text, terms)], (query, text[:80])
            checked += bool(word_spans(text, terms))
        # a response's snippets at once (ASCII ones joined, the others alone), handed back to each
        assert highlight_all(texts, terms) == [word_spans(t, terms) for t in texts]
    assert checked > 50   # most cases mark something


def test_decay_from_microseconds_is_decay_factor_bit_for_bit():
    """The search decays pages from their last_seen in microseconds (recency.factors_us); the factors
    must be exactly decay_factor's (explain reports the factor, and ties would reorder on one ulp) —
    ages past 285 years (2**53 microseconds) and future last_seen included."""
    now = datetime(2026, 6, 1, 12, 0, 0)
    seen = [now - timedelta(seconds=37 * i * i, microseconds=13 * i) for i in range(300)]
    seen += [now + timedelta(days=2), datetime(1, 1, 1), datetime(1700, 3, 4, 5, 6, 7, 891011), datetime(9999, 1, 1)]
    epoch = datetime(1970, 1, 1)
    us = [(t - epoch) // timedelta(microseconds=1) for t in seen]
    for half_life, weight in ((30.0, 0.05), (0.7, 1.0), (3650.0, 0.3), (0.0, 0.5), (30.0, 0.0), (1e-3, 0.5)):
        got = factors_us((now - epoch) // timedelta(microseconds=1), us, half_life, weight)
        assert [g.hex() for g in got] == [decay_factor(t, now, half_life, weight).hex() for t in seen]
        assert got[300] == 1.0 and (got[299] < 1.0 or not half_life or not weight)


def _rank_pages_reference(chunks, page_of, how, last_seen, now, half_life, weight):
    """The list implementation the search ran before it ranked over arrays (kept as the reference)."""
    per_page = {}
    for cid, score in chunks:   # given best first
        if (pid := page_of.get(cid)) is not None:
            per_page.setdefault(pid, []).append((score, cid))
    out = []
    for pid, items in per_page.items():
        value = items[0][0] if how == "max" else sum(s for s, _ in items) if how == "sum" else \
            sum(s for s, _ in items[:2]) / min(2, len(items))
        factor = decay_factor(last_seen[pid], now, half_life, weight) if half_life > 0 and weight > 0 else 1.0
        out.append((pid, value * factor, value, factor, [c for _, c in items], [s for s, _ in items]))
    out.sort(key=lambda t: (-t[1], t[0]))
    return out


def _view(page_ids, last_seen, chunk_page):
    """A HotView over these pages (rows in the given order) and chunks."""
    ids = np.array(sorted(chunk_page), dtype=np.int64)
    row_of = {p: i for i, p in enumerate(page_ids)}
    epoch = datetime(1970, 1, 1)
    n = len(ids)
    return HotView(0, row_of, {"page_id": list(page_ids)}, [()] * len(page_ids), {}, ids,
                   np.array([row_of[chunk_page[c]] for c in ids.tolist()], dtype=np.int32),
                   np.zeros(n, dtype=np.int32), np.zeros(n, dtype=np.int32), {},
                   seen_us=np.array([(last_seen[p] - epoch) // timedelta(microseconds=1) for p in page_ids],
                                    dtype=np.int64))


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("how", ["max", "sum", "mean_top2"])
def test_pages_ranked_over_arrays_are_the_list_implementations_bit_for_bit(seed, how):
    """rollup_rows + rank_pages against the list implementation: the same pages in the same order
    (ties by page id, and many: equal chunk scores, equal last_seen), the same scores, rollup values
    and factors bit for bit, the same chunks best first; chunks without a page left out. (With a cut,
    rank_pages decays only the pages that can reach it: any page it leaves out must be one the
    reference ranks below the cut.)"""
    rng = random.Random(seed)
    now = datetime(2026, 6, 1)
    pages = [f"p{rng.randrange(10**6):06d}" for _ in range(rng.randint(1, 60))]
    pages = list(dict.fromkeys(pages))
    rng.shuffle(pages)   # rows not in page id order
    last_seen = {p: now - timedelta(days=rng.choice([0, 1, 1, 30, rng.random() * 900]), seconds=rng.choice([0, 7]))
                 for p in pages}
    last_seen[pages[0]] = now + timedelta(days=3)   # seen after now
    chunk_page = {c: rng.choice(pages) for c in rng.sample(range(10**5), rng.randint(1, 200))}
    scores = {c: rng.choice([0.5, 0.25, 1 / 61, 1 / 62 + 1 / 63, rng.random()]) for c in chunk_page}
    if seed % 3 == 2:   # linear fusion's z-scores can be negative: decay then raises a page's score
        scores = {c: s - 0.5 for c, s in scores.items()}
    chunks = sorted(scores.items(), key=lambda t: (-t[1], t[0]))
    chunks += [(10**6 + i, 0.001) for i in range(3)]   # written after the view: no page
    view = _view(pages, last_seen, chunk_page)
    ids = np.array([c for c, _ in chunks], dtype=np.int64)
    sc = np.array([s for _, s in chunks], dtype=np.float64)
    for half_life, weight in ((30.0, 0.05), (0.0, 0.05), (2.0, 1.0), (90.0, 0.4)):
        expected = _rank_pages_reference(chunks, chunk_page, how, last_seen, now, half_life, weight)
        for top in (None, 0, 1, rng.randint(1, 12), len(expected) - 1, len(expected), len(expected) + 5):
            rolled = rollup_rows(view.chunk_rows(ids), sc, how)
            ranked = rank_pages(rolled, ids, sc, view, now, half_life, weight, top)
            shown = expected if top is None else expected[:top]   # only the first `top` put in order
            assert ranked.page_ids == [e[0] for e in shown] and ranked.total == len(expected)
            for e in shown:
                sp = ranked.page(e[0])
                got = (sp.page_id, sp.score, sp.rollup, sp.factor, sp.chunk_ids, sp.chunk_scores)
                assert got == e and [x.hex() for x in got[1:4]] == [x.hex() for x in e[1:4]]
            assert ranked.page("nope") is None


@pytest.mark.parametrize("seed", range(20))
def test_rrf_arrays_are_fuses_scores_bit_for_bit_in_the_same_order(seed):
    rng = random.Random(seed)

    def arm(n):   # best first, with ties (a few distinct scores) and ids shared with the other arm
        scores = sorted((rng.choice([0.1, 0.25, 0.5, 0.75, rng.random()]) for _ in range(n)), reverse=True)
        ids = rng.sample(range(3 * n), n)
        return list(zip(ids, scores))

    arms = {"dense": arm(rng.randint(0, 120)), "sparse": arm(rng.randint(0, 120))}
    weights = {"dense": rng.choice([1.0, 0.3, 2.0]), "sparse": rng.choice([1.0, 0.7])}
    k = rng.choice([60.0, 1.0, 10.5])
    expected = [(f.chunk_id, f.score) for f in fuse(arms, weights, "rrf", k)]
    ids, scores = rrf_arrays(arms, weights, k)
    got = list(zip(ids.tolist(), scores.tolist()))
    assert got == expected and all(a[1].hex() == b[1].hex() for a, b in zip(got, expected))
    assert ids.dtype == np.int64 and scores.dtype == np.float64


def test_arm_levels_are_each_pages_best_chunk_over_each_arms_best_averaged_by_weight():
    pages = np.array([3, 5, 9])
    arms = {"dense": (np.array([5, 3, 5, -1]), np.array([0.8, 0.4, 0.6, 0.9])),   # -1: a chunk of no page
            "sparse": (np.array([3, 9]), np.array([10.0, 5.0]))}
    # the dense arm's best is 0.9 (a chunk the view does not hold still sets the arm's scale)
    d = {3: 0.4 / 0.9, 5: 0.8 / 0.9, 9: 0.0}
    s = {3: 1.0, 5: 0.0, 9: 0.5}
    got = arm_levels(pages, arms, {"dense": 1.0, "sparse": 1.0})
    assert got.tolist() == pytest.approx([(d[p] + s[p]) / 2 for p in (3, 5, 9)])
    got = arm_levels(pages, arms, {"dense": 3.0, "sparse": 1.0})
    assert got.tolist() == pytest.approx([(3 * d[p] + s[p]) / 4 for p in (3, 5, 9)])
    # an arm turned off, or one that returned nothing above 0, adds nothing
    assert arm_levels(pages, arms, {"dense": 0.0, "sparse": 1.0}).tolist() == pytest.approx([1.0, 0.0, 0.5])
    assert arm_levels(pages, {"sparse": (np.array([3]), np.array([0.0]))}, {"sparse": 1.0}).tolist() == [0, 0, 0]
