"""The refind benchmark's harness (eval/refind.py, eval/refind_queries.py): a seeded, heavy-tailed
history; each query's page worked out from it; two fixed halves; and the promises the queries make
(vague ones avoid the title's words, recent ones name different pages). Its run is `make eval`."""
from __future__ import annotations

from collections import Counter

from engine.core.urls import normalize_url
from eval import refind
from eval.refind_queries import KINDS, RECENT, VAGUE
from indexes.sparse import index_terms

SITE_NAMES = set(index_terms("python sqlite postgres postgresql"))


def test_the_history_is_seeded_heavy_tailed_and_every_query_means_a_page_in_it():
    a, b = refind.history(), refind.history()
    assert a == b and a != refind.history(seed=8)
    assert [r["seen_at"] for r in a] == sorted(r["seen_at"] for r in a)
    assert all(refind.START.isoformat() <= r["seen_at"] <= refind.END.isoformat() + "Z" for r in a)
    counts = Counter(r["url"] for r in a)
    assert set(counts) == set(refind.corpus())                       # every page seen at least once
    assert sum(1 for n in counts.values() if n == 1) > len(counts) / 3   # many seen once ...
    assert sum(1 for n in counts.values() if n >= 10) >= 5               # ... some seen often
    seen = refind.last_seen(a)
    cases = refind.cases(a)
    assert len(cases) >= 120 and {c["kind"] for c in cases} == set(KINDS)
    assert all(c["target"] in seen for c in cases)
    for c, (query, group) in zip([c for c in cases if c["kind"] == "recent"], RECENT):
        assert c["query"] == query and c["target"] == max((normalize_url(u) for u in group), key=seen.__getitem__)
    for c in cases:
        if c["kind"] == "site":
            meant = dict(refind.SITE)[c["query"]]
            under = [u for u in seen if refind._under(u, meant)]
            assert c["target"] in under and seen[c["target"]] == max(seen[u] for u in under)


def test_each_kind_is_split_in_two_fixed_halves():
    cases = refind.cases(refind.history())
    for kind in KINDS:
        halves = Counter(c["half"] for c in cases if c["kind"] == kind)
        assert set(halves) == {"dev", "test"} and abs(halves["dev"] - halves["test"]) <= 1
    # a query's half depends on its text only: the same under another history
    assert [c["half"] for c in cases] == [c["half"] for c in refind.cases(refind.history(seed=8))]


def test_vague_queries_avoid_the_titles_words_and_recent_ones_name_different_pages():
    pages = refind.corpus()
    absent = 0
    for query, url in VAGUE:
        words = set(index_terms(query)) - SITE_NAMES
        assert not words & set(index_terms(pages[url]["title"])), query
        absent += bool(words - set(index_terms(pages[url]["title"] + " " + pages[url]["body_text"])))
    assert absent >= len(VAGUE) / 2        # mostly with a word the page never uses
    for query, group in RECENT:
        assert len(group) >= 2 and len({pages[u]["body_text"] for u in group}) == len(group), query


def test_every_query_has_a_second_phrasing_in_other_words():
    """The shortcut replay's phrasings (eval/refind_rephrasings.py): one per query, and never close to it
    by words — at most 0.3 of their terms in common (a page's only name is sometimes shared), below
    every word threshold the replay tries — so what they teach must come through meaning."""
    from eval.refind_rephrasings import REPHRASED
    from eval.refind_shortcuts import OVERLAPS

    cases = refind.cases(refind.history())
    assert set(REPHRASED) == {c["query"] for c in cases}
    for query, other in REPHRASED.items():
        a, b = set(index_terms(query)), set(index_terms(other))
        assert b and len(a & b) / len(a | b) <= 0.3 < min(OVERLAPS), (query, other)


def test_the_sibling_groups_add_sessions_and_want_the_most_recent_page_of_the_whole_family():
    """eval/refind_siblings.py: the benchmark's history unchanged plus sessions over the sibling groups'
    pages only; each sibling query wants the most recently seen page of its family (the pages read
    together and every page of the site it names whose title carries its other words)."""
    from collections import Counter

    from eval import refind_siblings
    from eval.refind_queries import SIBLINGS

    base, both = refind.history(), refind_siblings.history()
    extra = Counter(r["url"] for r in both) - Counter(r["url"] for r in base)
    assert sum(extra.values()) == len(both) - len(base) > len(SIBLINGS)
    assert set(extra) <= {u for _, g in SIBLINGS for u in g}
    seen = refind.last_seen(both)
    sib = [c for c in refind_siblings.cases(both) if c["kind"] == "siblings"]
    assert [c["query"] for c in sib] == [q for q, _ in SIBLINGS]
    assert Counter(c["half"] for c in sib) == {"dev": 12, "test": 12}
    for c, (query, group) in zip(sib, SIBLINGS):
        fam = refind_siblings.family(query, group)
        assert {normalize_url(u) for u in group} <= set(fam) and c["target"] in fam
        assert seen[c["target"]] == max(seen[u] for u in fam)
    alter = refind_siblings.family("postgres alter", ())
    assert len(alter) > 10 and all(u.startswith("postgresql.org/") for u in alter)


def test_the_looser_shortcut_rule_study_lifts_only_a_chosen_page_within_the_top_k_and_counts_the_others():
    """eval/refind_levers.py's rule, on four hand-made queries: a choice lifts its page to first only when
    its phrasing is at least s alike *and* the page ranks within the top K; "others" skip the query's own
    choice; "across" counts the other half's queries whose page nobody chose."""
    import numpy as np

    from eval.refind_levers import _rule_grid

    cases = [{"half": "dev", "page": "a"}, {"half": "dev", "page": "b"}, {"half": "test", "page": "c"},
             {"half": "test", "page": "a"}]
    tops = [["b", "a"], ["b", "a"], ["c", "x", "a"], ["a", "b"]]
    sim = np.array([[0.45, 0.1, 0, 0], [0.1, 0.9, 0, 0], [0.42, 0.1, 0, 0], [0.1, 0.1, 0, 0]])
    g = _rule_grid(cases, tops, sim, "dev")
    assert g["off"] == [1, 1, 1] and g["of"] == [2, 2, 1]
    # query 0 (page a, 2nd) is lifted by its own phrasing (0.45) within the top 2, not without it ("others");
    # query 2 (test, page c first, nobody chose c) loses to the dev choice of a (0.42 alike, a 3rd) when s <= 0.42
    # and K >= 3
    assert g["grid"]["sim 0.4, top 2"] == [2, 1, 1]
    assert g["grid"]["sim 0.4, top 3"] == [2, 1, 0]
    assert g["grid"]["sim 0.5, top 3"] == [1, 1, 1]


def test_hub_queries_are_vague_and_name_a_page_that_lists_everything():
    """Issue 73's kind: vague words for a page that a page listing everything also touches; each names
    the hub it was written against, one of the hand-labelled HUB_PAGES, and both halves hold some."""
    from eval.refind_queries import HUB_PAGES, HUB_QUERIES

    pages = refind.corpus()
    assert HUB_PAGES <= set(pages)
    for query, url, hub in HUB_QUERIES:
        assert hub in HUB_PAGES and url not in HUB_PAGES and url != hub, query
        words = set(index_terms(query)) - SITE_NAMES
        assert not words & set(index_terms(pages[url]["title"])), query
    halves = Counter(c["half"] for c in refind.cases(refind.history()) if c["kind"] == "hub")
    assert halves == {"dev": len(HUB_QUERIES) // 2, "test": len(HUB_QUERIES) - len(HUB_QUERIES) // 2}


def test_the_hub_study_ships_only_a_setting_that_loses_no_kind_on_dev_in_every_profile():
    """eval/refind_hubs.py's rule: safe = no kind's dev success@1 or MRR@10 below focus off's, in each
    profile; of those, the best dev success@1 over all kinds (summed over profiles); the test half never
    enters."""
    from eval import refind_hubs

    def result(changes: dict[str, dict]) -> dict:
        flat = {k: {"success@1": 0.5, "success@10": 1.0, "mrr@10": 0.6} for k in (*KINDS, "all")}
        res = {}
        for name in refind_hubs.GRID:
            dev = {k: dict(v) for k, v in flat.items()}
            for k, v in changes.get(name, {}).items():
                dev[k].update(v)
            res[name] = {"dev": dev, "test": {k: {"success@1": 9.0, "success@10": 1.0, "mrr@10": 9.0}
                                              for k in (*KINDS, "all")}}
        return {"results": res}

    good, loud = "share 0.2, slack 2", "share 1.0, slack 0"
    a = result({good: {"all": {"success@1": 0.6}}, loud: {"all": {"success@1": 0.9}, "recent": {"mrr@10": 0.5}}})
    b = result({good: {"all": {"success@1": 0.55}}, loud: {"all": {"success@1": 0.9}}})
    d = refind_hubs.decide({"default": a, "quality": b})
    assert d["shipped"] == good and loud not in d["safe_in_all"] and loud in d["safe"]["quality"]
    # a loss on either profile's dev half rules a setting out
    c = result({good: {"hub": {"success@1": 0.4}, "all": {"success@1": 0.6}}})
    assert refind_hubs.decide({"default": a, "quality": c})["shipped"] != good
