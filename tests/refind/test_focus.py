"""Focus (issue 73, engine/refind/focus.py): a page that lists everything and matches by one passage
of many no longer outranks the page about the query throughout; explain says what focus did to each
page; off, the ranking is what it was. Real pipeline, real model."""
from __future__ import annotations

import pytest
from conftest import ingest, page
from fastapi.testclient import TestClient

from engine.refind.search import SearchRequest, SearchService
from server.app import create_app

# A page that lists everything: sixty short sections on unrelated subjects, one of which says the
# query's words almost as written.
SUBJECTS = ["volcanoes", "chess openings", "tax forms", "violin strings", "tide tables", "bicycle gears",
            "knitting patterns", "train timetables", "coral reefs", "opera singers", "roof tiles", "moth wings",
            "desert roads", "glass blowing", "river dams", "tennis rackets", "paper mills", "wool dyes",
            "lighthouse lamps", "camel caravans", "jazz drums", "clock springs", "salt marshes", "ice hockey",
            "stamp albums", "copper mines", "kite flying", "pottery glazes", "mountain huts", "sailing knots"]
HUB = "\n\n".join(
    [f"## {s.title()}\n\nNotes on {s}: " + " ".join(f"{s} item {j} and its history." for j in range(18))
     for s in SUBJECTS[:15]]
    + ["## Sourdough\n\nFeed a sourdough starter every day with flour and water to keep the yeast alive."]
    + [f"## {s.title()}\n\nNotes on {s}: " + " ".join(f"{s} item {j} and its history." for j in range(18))
       for s in SUBJECTS[15:]])
FOCUSED = ("Keeping a levain healthy.\n\nA levain is a culture of wild yeast and bacteria. It needs fresh flour "
           "and water at regular times; a culture left unfed turns sour and sluggish. Most bakers refresh theirs "
           "once or twice daily, discarding part of it first. Warmth speeds the culture up; the fridge slows "
           "feedings to once a week.")
QUERY = "feed a sourdough starter every day with flour and water"
# Other kitchen pages, nearer the query than the hub's other sections: the candidates are a part of the
# corpus, as in any real one (here a shallow pool: 20 chunks an arm, 5 pages enough).
DISHES = ["omelette", "risotto", "pancakes", "dumplings", "flatbread", "porridge", "custard", "noodles",
          "brioche", "scones", "crepes", "polenta", "gnocchi", "muffins", "biscuits", "tortillas", "bagels",
          "waffles", "focaccia", "pretzels"]
FILLER = [page(f"https://kitchen.example/{d}", f"How to make {d}: mix the batter or dough, rest it, then cook "
               f"the {d} until golden. Serve the {d} warm.", title=d.title()) for d in DISHES]


@pytest.fixture(scope="module")
def corpus(pool, tmp_path_factory):
    from engine.core.corpus import open_corpus
    from engine.core.settings import load_settings

    c = open_corpus(load_settings(data_dir=str(tmp_path_factory.mktemp("focus") / "data"),
                                  search={"min_candidate_pages": 5}), pool)
    ingest(c, [page("https://hub.example/everything", HUB, title="Everything index"),
               page("https://bake.example/levain", FOCUSED, title="Levain care"), *FILLER])
    c.flush()
    yield c
    c.close()


def _search(corpus, **kw):
    return SearchService(corpus).search(SearchRequest(query=QUERY, k=25, explain=True, pin=False, workspace="default",
                                                       dense_top_n=20, sparse_top_n=20, **kw), log=False)


def test_the_page_listing_everything_wins_without_focus_and_falls_below_the_focused_page_with_it(corpus):
    off = _search(corpus, focus=0.0)
    assert [h.url for h in off.pages][:2] == ["https://hub.example/everything", "https://bake.example/levain"]
    assert all(h.explain.focus is None for h in off.pages)
    on = _search(corpus, focus=0.5, focus_form="share", focus_slack=0.0)
    urls = [h.url for h in on.pages]
    assert urls[0] == "https://bake.example/levain" and "https://hub.example/everything" in urls[1:]


@pytest.mark.parametrize("form,strength,slack", [("share", 0.5, 0.0), ("share", 0.3, 2.0), ("length", 0.2, 0.0)])
def test_explain_says_what_focus_did_to_each_page(corpus, form, strength, slack):
    res = _search(corpus, focus=strength, focus_form=form, focus_slack=slack)
    counts = dict(corpus.store.sql().rows("SELECT p.url, count(*) FROM chunks c JOIN pages p USING (page_id) GROUP BY 1"))
    for h in res.pages:
        f = h.explain.focus
        n, m = counts[h.url], len(h.explain.chunks)
        assert (f["form"], f["strength"], f["chunks"], f["chunks_matched"]) == (form, strength, n, m)
        want = min(1.0, (m + slack) / n) ** strength if form == "share" else n ** -strength
        assert f["factor"] == pytest.approx(want)
        assert f["after"] == pytest.approx(f["before"] * f["factor"]) == pytest.approx(h.score)
        assert h.explain.rollup["value"] == pytest.approx(f["after"])
    hub = next(h for h in res.pages if "hub" in h.url).explain.focus
    assert hub["chunks"] > 10 and hub["factor"] < next(h for h in res.pages if "levain" in h.url).explain.focus["factor"]


def test_off_leaves_the_scores_as_the_rollup_made_them(corpus):
    off = _search(corpus, focus=0.0)
    for h in off.pages:
        assert h.score == h.explain.rollup["value"] == max(c.score for c in h.explain.chunks)


def test_bad_focus_values_are_a_clear_422(corpus):
    with TestClient(create_app(corpus.settings, corpus)) as client:
        for body in ({"focus": -1}, {"focus_form": "mass"}, {"focus_slack": -2}):
            r = client.post("/v1/search", json={"query": QUERY, **body})
            assert r.status_code == 422, r.text
            assert r.headers["content-type"].startswith("application/")


SERP = ("feed a sourdough starter every day with flour and water - Search. About 1,200,000 results. "
        "Levain care - bake.example: Keeping a levain healthy, fresh flour and water at regular times. "
        "Sourdough starter feeding schedule - forum.example. Feed a sourdough starter every day - videos.")


@pytest.fixture(scope="module")
def with_results_page(pool, tmp_path_factory):
    from engine.core.corpus import open_corpus
    from engine.core.settings import load_settings

    c = open_corpus(load_settings(data_dir=str(tmp_path_factory.mktemp("focus-serp") / "data"),
                                  search={"min_candidate_pages": 5}), pool)
    ingest(c, [page("https://www.google.com/search?q=feed+a+sourdough+starter+every+day", SERP,
                    title="feed a sourdough starter every day - Google Search"),
               page("https://bake.example/levain", FOCUSED, title="Levain care"), *FILLER])
    c.flush()
    yield c
    c.close()


def test_a_search_results_page_does_not_outrank_the_page_it_led_to(with_results_page):
    off = _search(with_results_page, focus=0.0)
    assert off.pages[0].url.startswith("https://www.google.com/search")
    on = _search(with_results_page, focus=0.3, focus_slack=2.0)
    assert on.pages[0].url == "https://bake.example/levain"
    serp = next(h for h in on.pages if "google" in h.url).explain.focus
    assert serp["results_page"] == 0.5 and serp["factor"] == pytest.approx(0.5 * min(
        1.0, (serp["chunks_matched"] + 2.0) / serp["chunks"]) ** 0.3)
    # 1 treats it as any page: then it comes first again here
    assert _search(with_results_page, focus=0.3, focus_slack=2.0, focus_results_page=1.0).pages[0].url == off.pages[0].url


@pytest.mark.parametrize("url,results", [
    ("https://www.google.com/search?q=sourdough", True), ("https://www.bing.com/search?q=a+b&form=QBLH", True),
    ("https://duckduckgo.com/?q=sourdough&ia=web", True), ("https://html.duckduckgo.com/html/?q=x", True),
    ("https://search.yahoo.com/search?p=sourdough", True), ("https://www.baidu.com/s?wd=sourdough", True),
    ("https://docs.python.org/3/search.html?q=asyncio", True), ("www.google.com/search?q=x", True),
    ("https://www.google.com/search?q=", False), ("https://www.google.com/", False),
    ("https://duckduckgo.com/about", False), ("https://example.com/?q=x", False),
    ("https://example.com/research?q=x", False), ("https://example.com/blog/search-engines", False),
    ("https://docs.python.org/3/library/asyncio.html", False), ("http://[::1", False),
])
def test_which_urls_are_search_results_pages(url, results):
    from engine.refind.focus import is_results_page

    assert is_results_page(url) is results
