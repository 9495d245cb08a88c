"""Shortcuts (issue 54, item 5): the page chosen last time for a close query comes first — bounded to
the search's candidates, explained, confined to the caller's workspace and scopes, forgotten with its
page or when cleared. Real app, DuckDB, tantivy, FAISS and the bundled MiniLM."""
from __future__ import annotations

import contextlib
import json

import pytest

BIRDS = {
    "https://birds.example/gannet": ("Gannets", "Gannets dive into the sea from great heights to catch fish."),
    "https://birds.example/puffin": ("Puffins", "Puffins dive underwater to catch small fish and nest in burrows."),
    "https://birds.example/tern": ("Terns", "Terns dive for fish near the shore and migrate from pole to pole."),
    "https://sea.example/kelp": ("Kelp", "Kelp forests shelter fish along rocky coasts."),
}
QUERY = "seabirds that dive for fish"
CLOSE = "seabirds diving for fish"            # the same terms once stemmed
FAR = "forests along rocky coasts"


def h(token):
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture(scope="module")
def shared_birds(pool, tmp_path_factory):
    from conftest import titled_client

    cl = titled_client(pool, tmp_path_factory.mktemp("birds") / "data", BIRDS)
    yield cl
    cl.corpus.close()


@pytest.fixture
def birds(shared_birds):
    """The module's corpus with no feedback (each test starts from none; one deletes and writes back a page)."""
    assert shared_birds.delete("/v1/feedback").status_code == 200
    return shared_birds


@pytest.fixture
def own_birds(pool, tmp_path):
    """A corpus of its own (the CLI's test closes it to open the data dir itself)."""
    from conftest import titled_client

    cl = titled_client(pool, tmp_path / "data", BIRDS)
    yield cl
    with contextlib.suppress(Exception):
        cl.corpus.close()


def search(cl, query, headers=None, **kw):
    r = cl.post("/v1/search", json={"query": query, **kw}, headers=headers or {})
    assert r.status_code == 200, r.text
    return r.json()


def urls(reply):
    return [p["url"] for p in reply["pages"]]


def choose(cl, reply, url, kind="found", headers=None):
    pid = next(p["page_id"] for p in reply["pages"] if p["url"] == url)
    r = cl.post("/v1/feedback", json={"query_id": reply["query_id"], "page_id": pid, "kind": kind},
                headers=headers or {})
    assert r.status_code == 200, r.text
    return pid


def test_the_page_chosen_for_close_words_comes_first_and_says_why(birds):
    before = search(birds, QUERY)
    target = [u for u in urls(before) if u.startswith("https://birds.example/")][-1]
    assert urls(before)[0] != target and urls(search(birds, CLOSE))[0] != target
    far_before = search(birds, FAR)
    choose(birds, before, target)

    after = search(birds, CLOSE, explain=True)
    assert urls(after)[0] == target
    first = after["pages"][0]
    assert first["shortcut"]["query"] == QUERY and first["shortcut"]["by"] == "words"
    assert first["shortcut"]["closeness"] == 1.0 and first["shortcut"]["kind"] == "found"
    assert first["explain"]["shortcut"].startswith("chosen on ") and QUERY in first["explain"]["shortcut"]
    assert all(p["shortcut"] is None and p["explain"]["shortcut"] is None for p in after["pages"][1:])
    # the query log says why it was first
    birds.corpus.querylog.flush()
    logged = birds.corpus.store.sql().rows(
        "SELECT rank, pinned FROM log_results WHERE query_id = ? ORDER BY rank", [after["query_id"]])
    assert logged[0] == (1, f"shortcut:{before['query_id']}") and all(p is None for _, p in logged[1:])
    # the rest keeps its order; the total is the same (the page was a candidate already)
    off = search(birds, CLOSE, shortcuts=False)
    assert urls(after)[1:] == [u for u in urls(off) if u != target] and after["total"] == off["total"]
    # a query about something else is left as it was
    assert urls(search(birds, FAR)) == urls(far_before)
    # by words only: a threshold above the overlap turns it off
    assert urls(search(birds, CLOSE, shortcut_min_overlap=1.0, shortcut_min_similarity=1.0))[0] == target
    assert urls(search(birds, "seabirds diving for fish at dawn", shortcut_min_overlap=0.9,
                       shortcut_min_similarity=1.0))[0] != target


def test_a_shortcut_by_meaning_takes_a_close_paraphrase(birds):
    paraphrase = "ocean birds plunging after their prey"
    target = [u for u in urls(search(birds, paraphrase)) if u.startswith("https://birds.example/")][-1]
    choose(birds, search(birds, QUERY), target)
    assert urls(search(birds, paraphrase, shortcuts=False))[0] != target
    lifted = search(birds, paraphrase, shortcut_min_overlap=1.0, shortcut_min_similarity=0.5)
    assert urls(lifted)[0] == target and lifted["pages"][0]["shortcut"]["by"] == "meaning"
    assert 0.5 <= lifted["pages"][0]["shortcut"]["closeness"] < 1.0
    # above that cosine it does not
    cos = lifted["pages"][0]["shortcut"]["closeness"]
    assert urls(search(birds, paraphrase, shortcut_min_overlap=1.0,
                       shortcut_min_similarity=min(1.0, cos + 0.01)))[0] != target


def test_a_shortcut_never_lifts_a_page_the_search_does_not_match(birds):
    before = search(birds, QUERY)
    target = [u for u in urls(before) if u.startswith("https://birds.example/")][-1]
    choose(birds, before, target)
    # filtered out: the page is not a candidate, so it is not lifted into the reply
    only_sea = search(birds, CLOSE, filters={"domain": ["sea.example"]})
    assert target not in urls(only_sea) and all(p["shortcut"] is None for p in only_sea["pages"])


def test_irrelevant_later_takes_the_choice_back_and_a_cleared_or_deleted_one_is_forgotten(birds):
    before = search(birds, QUERY)
    target = [u for u in urls(before) if u.startswith("https://birds.example/")][-1]
    pid = choose(birds, before, target)
    assert urls(search(birds, CLOSE))[0] == target
    choose(birds, before, target, kind="irrelevant")
    assert urls(search(birds, CLOSE))[0] != target
    choose(birds, before, target, kind="click")
    listed = birds.get("/v1/feedback").json()
    assert [(c["query"], c["page_id"], c["kind"]) for c in listed["choices"]] == [(QUERY, pid, "click")]
    assert urls(search(birds, CLOSE))[0] == target

    # cleared: DELETE /v1/feedback of that query
    r = birds.delete("/v1/feedback", params={"query_id": before["query_id"]})
    assert r.status_code == 200 and r.json()["deleted"] == 3, r.text
    assert urls(search(birds, CLOSE))[0] != target and birds.get("/v1/feedback").json()["choices"] == []

    # deleted with its page: the choice goes, and the same URL written again is not lifted
    again = search(birds, QUERY)
    choose(birds, again, target)
    assert birds.delete(f"/v1/pages/{pid}").status_code == 200
    assert birds.get("/v1/feedback").json()["choices"] == []
    assert birds.corpus.querylog.tables.feedback() == []
    title, body = BIRDS[target]
    assert birds.post("/v1/pages", json={"pages": [{"url": target, "title": title, "body_text": body,
                                                    "seen_at": "2026-05-01T00:00:00Z"}]}).status_code == 200
    assert urls(search(birds, CLOSE))[0] != target


def test_shortcuts_stay_inside_the_callers_workspace_and_scopes(pool, tmp_path):
    """With choices shared by the workspace ([search] shortcut_scope = "workspace"): still never
    across a workspace or a scope. (The default, each key's own: test_a_choice_serves_the_key_that_made_it.)"""
    from docs.examples import make_client
    from engine.core.access import create_key

    cl = make_client(tmp_path / "data", pool=pool, search={"shortcut_scope": "workspace"})
    keys = cl.corpus.keys
    admin = create_key(keys, ["*"])["token"]
    a = create_key(keys, ["default"], scopes=["a", "shared"])["token"]
    b = create_key(keys, ["default"], scopes=["b", "shared"])["token"]
    other = create_key(keys, ["other"])["token"]
    reader = create_key(keys, ["default"], scopes=["a", "shared"], read_only=True)["token"]
    try:
        pages = [{"url": u, "title": t, "body_text": body, "seen_at": "2026-05-01T00:00:00Z", "scope": "shared"}
                 for u, (t, body) in BIRDS.items()]
        for ws in ("default", "other"):
            r = cl.post("/v1/pages", json={"workspace": ws, "pages": pages}, headers=h(admin))
            assert r.status_code == 200 and r.json()["errors"] is False, r.text
        before = search(cl, QUERY, h(a))
        target = [u for u in urls(before) if u.startswith("https://birds.example/")][-1]
        assert urls(search(cl, CLOSE, h(b)))[0] != target
        choose(cl, before, target, headers=h(a))

        assert urls(search(cl, CLOSE, h(a)))[0] == target        # the key whose search chose it
        assert urls(search(cl, CLOSE, h(admin)))[0] == target    # a key of every scope
        # b reads the page too, but the choice was made in a search over scope a: not b's to see
        lifted_for_b = search(cl, CLOSE, h(b))
        assert urls(lifted_for_b)[0] != target and all(p["shortcut"] is None for p in lifted_for_b["pages"])
        assert cl.get("/v1/feedback", headers=h(b)).json()["choices"] == []
        assert len(cl.get("/v1/feedback", headers=h(a)).json()["choices"]) == 1
        # another workspace with the same pages is untouched, and cannot list or clear this one's
        assert urls(search(cl, CLOSE, h(other), workspace="other"))[0] != target
        assert urls(search(cl, CLOSE, h(admin), workspace="other"))[0] != target
        assert cl.get("/v1/feedback", params={"workspace": "default"}, headers=h(other)).status_code == 404
        r = cl.delete("/v1/feedback", params={"query_id": before["query_id"]}, headers=h(b))
        assert (r.status_code, r.json()["detail"]["type"]) == (404, "query_not_found")
        r = cl.delete("/v1/feedback", params={"workspace": "other"}, headers=h(other))
        assert r.status_code == 200 and r.json()["deleted"] == 0
        # a read-only key of a's scopes sees the choice and is lifted by it, but may not forget it
        assert len(cl.get("/v1/feedback", headers=h(reader)).json()["choices"]) == 1
        assert urls(search(cl, CLOSE, h(reader)))[0] == target
        r = cl.delete("/v1/feedback", headers=h(reader))
        assert (r.status_code, r.json()["detail"]["type"]) == (403, "forbidden"), r.text
        # b clearing its whole workspace clears only what b could have run: a's choice stays
        assert cl.delete("/v1/feedback", headers=h(b)).json()["deleted"] == 0
        assert urls(search(cl, CLOSE, h(a)))[0] == target
        assert cl.delete("/v1/feedback", headers=h(a)).json()["deleted"] == 1
        assert urls(search(cl, CLOSE, h(a)))[0] != target
    finally:
        cl.corpus.close()


def test_the_cli_lists_and_clears_the_choices(own_birds, capsys, monkeypatch):
    from server.cli import main

    birds = own_birds
    before = search(birds, QUERY)
    target = [u for u in urls(before) if u.startswith("https://birds.example/")][-1]
    pid = choose(birds, before, target)
    birds.corpus.close()
    monkeypatch.setenv("REFINDERY_DATA_DIR", str(birds.corpus.settings.data_dir))
    assert main(["feedback", "list"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [(c["query"], c["page_id"]) for c in listed["choices"]] == [(QUERY, pid)]
    assert main(["feedback", "clear", "--page-id", pid]) == 0
    assert json.loads(capsys.readouterr().out)["deleted"] == 1
    assert main(["feedback", "list"]) == 0
    assert json.loads(capsys.readouterr().out)["choices"] == []


def test_a_choice_serves_the_key_that_made_it_is_capped_and_ages_out(pool, tmp_path):
    """Issue 70, row 6: a read-only key marked an unrelated page `found` and it became first for the
    admin. By default a choice serves the key that made it; each key keeps its newest
    shortcut_max_choices; a choice older than shortcut_max_age_days stops counting."""
    from datetime import timedelta

    from docs.examples import make_client
    from engine.core.access import create_key
    from engine.core.clock import utcnow

    cl = make_client(tmp_path / "data", pool=pool, search={"shortcut_max_choices": 1, "shortcut_max_age_days": 30})
    keys = cl.corpus.keys
    admin = create_key(keys, ["*"])["token"]
    reader = create_key(keys, ["default"], read_only=True)["token"]
    try:
        pages = [{"url": u, "title": t, "body_text": body, "seen_at": "2026-05-01T00:00:00Z"}
                 for u, (t, body) in BIRDS.items()]
        assert cl.post("/v1/pages", json={"pages": pages}, headers=h(admin)).status_code == 200
        before = search(cl, QUERY, h(reader))
        target = [u for u in urls(before) if u.startswith("https://birds.example/")][-1]
        assert urls(search(cl, CLOSE, h(admin)))[0] != target
        choose(cl, before, target, headers=h(reader))
        assert urls(search(cl, CLOSE, h(reader)))[0] == target          # the key that chose it
        assert urls(search(cl, CLOSE, h(admin)))[0] != target           # not another key, the admin's included
        assert cl.get("/v1/feedback", headers=h(admin)).json()["choices"] == []
        assert len(cl.get("/v1/feedback", headers=h(reader)).json()["choices"]) == 1

        # the cap: the reader's newer choice (another query) leaves the older one out
        far = search(cl, FAR, h(reader))
        choose(cl, far, "https://sea.example/kelp", headers=h(reader))
        assert [c["query"] for c in cl.get("/v1/feedback", headers=h(reader)).json()["choices"]] == [FAR]
        assert urls(search(cl, CLOSE, h(reader)))[0] != target

        # age: a choice made 40 days ago (written with that time) does not count; one made now does
        cl.delete("/v1/feedback", headers=h(admin))
        old = search(cl, QUERY, h(reader))
        pid = next(p["page_id"] for p in old["pages"] if p["url"] == target)
        from engine.core.access import grant_for
        key_id = grant_for(cl.corpus.keys, f"Bearer {reader}").key_id
        cl.corpus.querylog.tables.add_feedback(old["query_id"], pid, "found", utcnow() - timedelta(days=40), key_id)
        cl.corpus.querylog.forget_pages([])   # (a change of the feedback: the shortcuts read it again)
        assert cl.get("/v1/feedback", headers=h(reader)).json()["choices"] == []
        assert urls(search(cl, CLOSE, h(reader)))[0] != target
        choose(cl, old, target, headers=h(reader))
        assert urls(search(cl, CLOSE, h(reader)))[0] == target
    finally:
        cl.corpus.close()
