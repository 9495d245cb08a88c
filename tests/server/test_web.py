"""The web page at `/`, end to end in a real browser: Debian's Chromium (headless, driven by
Playwright's Python client with executable_path set, so no browser is downloaded) against a real
uvicorn server on 127.0.0.1 over the bundled demo pages, two embedders (torch MiniLM and its ONNX
int8 export) and k-means clusters. Every check compares what the page shows with what the API
answers for the same request. Screenshots of each view go to artifacts/web/ (or
$REFINDERY_TEST_ARTIFACTS) for a person to look at; docs/web.md shows one."""
from __future__ import annotations

import gzip
import json
import os
import socket
import threading
import time
from pathlib import Path

import httpx
import pytest
from conftest import CHROMIUM_ARGS, chromium_path, loopback_up

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(os.environ.get("REFINDERY_TEST_ARTIFACTS") or ROOT / "artifacts" / "web")
INT8 = "all-minilm-l6-v2-int8"
TORCH = "all-minilm-l6-v2"
PER_DOMAIN = 12


def demo_by_domain(per_domain: int) -> list[dict]:
    """Every record (re-visits included) of the first `per_domain` pages of each demo domain."""
    keep: dict[str, list[str]] = {}
    records = [json.loads(line) for line in gzip.open(ROOT / "demo" / "pages.jsonl.gz", "rt", encoding="utf-8")]
    for r in records:
        urls = keep.setdefault(r["url"].split("/")[2], [])
        if r["url"] not in urls and len(urls) < per_domain:
            urls.append(r["url"])
    wanted = {u for urls in keep.values() for u in urls}
    return [r for r in records if r["url"] in wanted]


@pytest.fixture(scope="module")
def server(pool, int8_pool, tmp_path_factory):
    """uvicorn serving create_app() on a free port of 127.0.0.1, over its own ingested data dir."""
    import uvicorn

    from conftest import ingest
    from engine.ingest.clusters import refit_clusters
    from engine.core.corpus import open_corpus
    from engine.core.settings import load_settings
    from server.app import create_app

    loopback_up()
    int8_pool.get(INT8)  # exported once per session; the corpus's pool reuses the loaded instance
    s = load_settings(data_dir=str(tmp_path_factory.mktemp("web") / "data"),
                      models={"also_embed": [INT8], "cache_dir": str(int8_pool.registry.cache_dir)})
    corpus = open_corpus(s, pool)
    ingest(corpus, demo_by_domain(PER_DOMAIN))
    refit_clusters(corpus, "default", k=4)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    uv = uvicorn.Server(uvicorn.Config(create_app(corpus=corpus), log_level="warning", lifespan="on"))
    thread = threading.Thread(target=uv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not uv.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert uv.started, "uvicorn did not start"
    base = f"http://127.0.0.1:{port}"
    with httpx.Client(base_url=base, timeout=60) as client:
        yield base, client, corpus
    uv.should_exit = True
    thread.join(timeout=30)
    corpus.close()


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium_path(), headless=True, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture
def tab(browser, server):
    ctx = browser.new_context(viewport={"width": 1200, "height": 900}, base_url=server[0])
    pg = ctx.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    yield pg
    ctx.close()
    assert not errors, f"script errors on the page: {errors}"


def shot(pg, name: str, full: bool = True) -> None:
    pg.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=full)


def focused(pg) -> dict:
    return pg.evaluate("""() => { const el = document.activeElement;
        return {id: el.id, tag: el.tagName, pageId: el.dataset ? el.dataset.pageId : undefined}; }""")


def wait_url(pg, part: str) -> None:
    """The page changes its URL with history.pushState (no load event): wait for the address itself."""
    pg.wait_for_function("part => location.search.includes(part)", arg=part)


def shown_ids(pg, selector: str = "#results li.result") -> list[str]:
    return pg.eval_on_selector_all(selector, "els => els.map(e => e.dataset.pageId)")


def api_search(client, **body) -> dict:
    r = client.post("/v1/search", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def test_search_page_and_keyboard(tab, server):
    """Focus on load, Enter searches, results as pages with marked terms, arrows move, Enter opens
    the page (and logs a click on the query), Esc comes back; what is shown is what /v1/search answers."""
    _, client, corpus = server
    tab.goto("/")
    assert focused(tab)["id"] == "q"
    tab.keyboard.type("sqlite transaction")
    tab.keyboard.press("Enter")
    tab.wait_for_selector("#results li.result")
    expected = api_search(client, query="sqlite transaction", k=10, offset=0)
    assert shown_ids(tab) == [p["page_id"] for p in expected["pages"]]
    assert tab.inner_text("#summary").startswith(f"Results 1–10 of {expected['total']} pages")
    first = tab.locator("#results li.result").first
    hit = expected["pages"][0]
    assert first.locator("h2 a").inner_text() == hit["title"]
    assert first.locator(".url").inner_text() == hit["url"]
    meta = first.locator(".meta").inner_text()
    assert hit["domain"] in meta and hit["last_seen"][:10] in meta
    # The marked words are the snippet's words whose stems the query has (the API's spans).
    marks = [m.lower() for m in tab.locator("#results mark").all_inner_texts()]
    assert marks and all(m.startswith(("sqlite", "transact")) for m in marks), marks
    spans = [s for p in expected["pages"] for sn in p["snippets"] for s in sn["highlights"]]
    assert len(marks) <= len(spans)
    shot(tab, "search")
    shot(tab, "search-top", full=False)

    tab.keyboard.press("ArrowDown")
    assert focused(tab)["pageId"] == hit["page_id"]
    tab.keyboard.press("ArrowDown")
    second = expected["pages"][1]
    assert focused(tab)["pageId"] == second["page_id"]
    tab.keyboard.press("Enter")
    tab.wait_for_selector("#page-title")
    assert f"id={second['page_id']}" in tab.url
    assert tab.inner_text("#page-title") == second["title"]
    assert focused(tab)["id"] == "page-title"
    page = client.get(f"/v1/pages/{second['page_id']}").json()
    assert tab.locator(".chunk").count() == len(page["chunks"])
    tab.wait_for_selector("#page-similar li")
    similar = client.get(f"/v1/pages/{second['page_id']}/similar", params={"k": 8}).json()
    assert tab.eval_on_selector_all("#page-similar a", "as => as.map(a => new URL(a.href).searchParams.get('id'))") \
        == [s["page_id"] for s in similar["pages"]]
    shot(tab, "page")
    # Opening a result told the query log: a "click" on the page's logged query (sent in the background).
    deadline = time.monotonic() + 10
    clicks = []
    while not clicks and time.monotonic() < deadline:
        clicks = corpus.store.sql().rows(
            "SELECT query_id FROM feedback WHERE page_id = ? AND kind = 'click'", [second["page_id"]])
        time.sleep(0.05)
    assert len(clicks) == 1
    corpus.querylog.flush()
    query = corpus.store.sql().row("SELECT query FROM log_queries WHERE query_id = ?", [clicks[0][0]])
    assert query == ("sqlite transaction",)
    tab.keyboard.press("Escape")
    tab.wait_for_selector("#results li.result")
    assert tab.input_value("#q") == "sqlite transaction"
    # The page opened is the one chosen: the same words searched again put it first, marked so (a shortcut).
    again = api_search(client, query="sqlite transaction", k=10)["pages"][0]
    assert again["page_id"] == second["page_id"] and again["shortcut"]["query"] == "sqlite transaction"
    tab.focus("#q")
    tab.keyboard.press("Enter")
    tab.wait_for_function("id => document.querySelector('#results li.result')?.dataset.pageId === id",
                          arg=second["page_id"])
    assert tab.locator("#results li.result").first.locator(".badge").inner_text() == "chosen before"


def test_paging_with_arrow_keys(tab, server):
    _, client, _ = server
    tab.goto("/?q=python")
    tab.wait_for_selector("#results li.result")
    total = api_search(client, query="python", k=10)["total"]
    assert total > 10
    tab.locator("#results [data-item]").first.focus()
    tab.keyboard.press("ArrowRight")
    tab.wait_for_selector("#summary:has-text('Results 11–')")
    assert "page=2" in tab.url
    assert shown_ids(tab) == [p["page_id"] for p in api_search(client, query="python", k=10, offset=10)["pages"]]
    assert focused(tab)["pageId"] == shown_ids(tab)[0]
    tab.keyboard.press("ArrowLeft")
    tab.wait_for_selector("#summary:has-text('Results 1–')")
    assert tab.locator("#prev").is_disabled()


def test_filters_domain_dates_cluster_entity(tab, server):
    _, client, _ = server
    facets = client.get("/v1/facets").json()
    assert {d["domain"] for d in facets["domains"]} == {"docs.python.org", "postgresql.org", "sqlite.org"}
    tab.goto("/?q=transactions")
    tab.wait_for_selector("#results li.result")
    tab.focus("#filters summary")
    tab.keyboard.press("Enter")  # the filters open from the keyboard
    assert tab.locator("#filters").get_attribute("open") is not None
    tab.get_by_label("Domain").fill("sqlite.org")
    tab.get_by_label("Last seen from").fill("2026-05-01")
    tab.get_by_label("Last seen until").fill("2026-11-30")
    tab.get_by_label("Domain").press("Enter")
    wait_url(tab, "domain=sqlite.org")
    tab.wait_for_selector("#results li.result")
    want = api_search(client, query="transactions", k=10, filters={
        "domain": ["sqlite.org"], "after": "2026-05-01T00:00:00Z", "before": "2026-12-01T00:00:00Z"})
    assert shown_ids(tab) == [p["page_id"] for p in want["pages"]] and want["pages"]
    assert all("sqlite.org" in m for m in tab.locator("#results .meta").all_inner_texts())
    shot(tab, "filter")

    # A date range that holds nothing says so.
    tab.goto("/?q=transactions&to=2026-01-01")
    tab.wait_for_selector("#summary")
    assert tab.inner_text("#summary") == "No pages match."

    # Cluster: the select offers the live clusters (from /v1/facets); every result is in the one chosen.
    cluster = facets["clusters"][0]["cluster_id"]
    tab.goto("/?q=database")
    tab.wait_for_selector(f"#f-cluster option[value='{cluster}']", state="attached")
    tab.click("#filters summary")
    tab.select_option("#f-cluster", str(cluster))
    tab.click("#search-form button[type=submit]")
    wait_url(tab, f"cluster={cluster}")
    tab.wait_for_selector("#results li.result")
    want = api_search(client, query="database", k=10, filters={"cluster_id": [cluster]})
    assert shown_ids(tab) == [p["page_id"] for p in want["pages"]]
    assert all(f"cluster #{cluster}" in m for m in tab.locator("#results .meta").all_inner_texts())

    # Entity, by its canonical form.
    tab.goto("/?q=database&entity=PostgreSQL")
    tab.wait_for_selector("#results li.result")
    want = api_search(client, query="database", k=10, filters={"entity": ["PostgreSQL"]})
    assert shown_ids(tab) == [p["page_id"] for p in want["pages"]]
    assert all("PostgreSQL" in m for m in tab.locator("#results .meta").all_inner_texts())
    assert tab.locator("#filters").get_attribute("open") is not None  # filters in use stay visible


def test_explain_toggle_shows_provenance(tab, server):
    _, client, _ = server
    tab.goto("/?q=json+module")
    tab.wait_for_selector("#results li.result")
    assert tab.locator(".explain").count() == 0
    tab.locator("#results [data-item]").first.focus()
    tab.keyboard.press("e")  # the explain toggle, from the keyboard
    tab.wait_for_selector(".explain")
    assert "explain=1" in tab.url
    want = api_search(client, query="json module", k=10, explain=True)
    assert tab.locator(".explain").count() == len(want["pages"])
    x = want["pages"][0]["explain"]
    first = tab.locator(".explain").first
    rows = first.locator("tbody tr")
    assert rows.count() == len(x["chunks"])
    cells = rows.first.locator("th, td").all_inner_texts()
    c = x["chunks"][0]
    assert cells[0] == str(c["chunk_id"])
    assert cells[1] == (f"#{c['dense']['rank']} ({c['dense']['score']:.3f})" if c["dense"] else "—")
    assert cells[2] == (f"#{c['sparse']['rank']} ({c['sparse']['score']:.2f})" if c["sparse"] else "—")
    assert cells[6] == f"{c['score']:.4f}"
    text = first.inner_text()
    assert f"{x['rollup']['how']} of its chunks" in text and "Recency" in text and "Pinned" in text
    f = x["focus"]   # on by default: what it multiplied the page's value by, and from what
    assert f"×{f['factor']:.3f} ({f['chunks_matched']:.0f} of its {f['chunks']:.0f} chunks among the candidates" in text
    shot(tab, "explain")


def test_similar_pages_from_a_result(tab, server):
    _, client, _ = server
    tab.goto("/?q=window+functions")
    tab.wait_for_selector("#results li.result")
    first_id = shown_ids(tab)[0]
    tab.locator("#results [data-item]").first.focus()
    tab.keyboard.press("s")
    box = tab.locator(f"#sim-{first_id}")
    box.locator("li").first.wait_for()
    want = client.get(f"/v1/pages/{first_id}/similar", params={"k": 5}).json()
    got = box.locator("a").evaluate_all("as => as.map(a => new URL(a.href).searchParams.get('id'))")
    assert got == [s["page_id"] for s in want["pages"]] and got
    assert tab.locator(f"#results li.result >> nth=0 >> button[aria-controls]").get_attribute("aria-expanded") == "true"
    shot(tab, "similar")


def test_compare_two_embedders_side_by_side(tab, server):
    _, client, _ = server
    tab.goto("/?view=compare")
    assert focused(tab)["id"] == "cq"
    tab.wait_for_selector(f"#model-b option[value='{INT8}']", state="attached")
    assert tab.input_value("#model-a") == TORCH and tab.input_value("#model-b") == INT8
    # a model that is not installed is offered as such, and cannot be picked
    for m in (m for m in client.get("/v1/models").json()["models"] if m["kind"] == "embedder"):
        opt = tab.locator(f"#model-b option[value='{m['name']}']")
        assert (opt.get_attribute("disabled") is not None) == (not m["installed"]) == ("not installed" in opt.inner_text())
    tab.keyboard.type("python json encoding")
    tab.keyboard.press("Enter")
    tab.wait_for_selector("#agreement")
    want = client.post("/v1/compare", json={"query": "python json encoding", "models": [TORCH, INT8], "k": 10}).json()
    ag = want["agreement"][0]
    figures = tab.locator("#agreement dd").all_inner_texts()
    assert figures[:2] == [f"{ag['jaccard']:.3f}", f"{ag['rbo_ext']:.3f}"]
    assert figures[3] == f"{ag['shared']} of {ag['k']}"
    runs = {r["model"]: [p["page_id"] for p in r["pages"]] for r in want["runs"]}
    assert shown_ids(tab, "#list-a li") == runs[TORCH] and shown_ids(tab, "#list-b li") == runs[INT8]
    # Moved items are marked against the other list: up/down by how many ranks, or only in one list.
    rank_a = {pid: i + 1 for i, pid in enumerate(runs[TORCH])}
    for i, pid in enumerate(runs[INT8], start=1):
        mark = tab.locator(f"#list-b li[data-page-id='{pid}'] .move").inner_text()
        if pid not in rank_a:
            assert mark == "only in B"
        elif rank_a[pid] == i:
            assert mark == "= same rank"
        else:
            assert mark.startswith("▲" if rank_a[pid] > i else "▼")
            assert str(abs(rank_a[pid] - i)) in mark
    # Keyboard: down the list, across to the same page in the other one.
    tab.keyboard.press("ArrowDown")
    assert focused(tab)["pageId"] is None  # focus is on a link; its list item carries the id
    pid = tab.evaluate("() => document.activeElement.closest('li').dataset.pageId")
    assert pid == runs[TORCH][0]
    tab.keyboard.press("ArrowRight")
    now = tab.evaluate("() => [document.activeElement.dataset.side,"
                       " document.activeElement.closest('li').dataset.pageId]")
    assert now[0] == "B" and (now[1] == pid if pid in runs[INT8] else True)
    shot(tab, "compare")
    shot(tab, "compare-top", full=False)

    tab.set_viewport_size({"width": 390, "height": 900})  # a phone-width window: the lists stack
    box_a = tab.locator("#list-a").bounding_box()
    box_b = tab.locator("#list-b").bounding_box()
    assert box_b["y"] >= box_a["y"] + box_a["height"] - 1
    assert tab.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth")
    shot(tab, "compare-narrow")


def test_api_errors_are_shown_as_messages(tab, server):
    tab.goto("/?view=page&id=no-such-page")
    alert = tab.locator("#message .error")
    alert.wait_for()
    assert "page_not_found" in alert.inner_text() and "HTTP 404" in alert.inner_text()
    shot(tab, "error")
    # The same embedder on both sides is refused by /v1/compare (422); the page says why.
    tab.goto(f"/?view=compare&q=json&a={TORCH}&b={TORCH}")
    alert.wait_for()
    assert "HTTP 422" in alert.inner_text() and "distinct" in alert.inner_text()
    shot(tab, "error-compare", full=False)
    # A model that is not in the registry (an old link): the API's 422 model_unknown, shown; the form
    # still works.
    tab.goto(f"/?view=compare&q=json&a={TORCH}&b=no-such-model")
    alert.wait_for()
    assert "model_unknown" in alert.inner_text() and "HTTP 422" in alert.inner_text()
    assert tab.locator("#cq").is_enabled()
    # An empty query never reaches the API: the page says what to do instead.
    tab.goto("/")
    tab.keyboard.press("Enter")
    assert "Type something to search for" in tab.locator("#message").inner_text()


def test_labels_and_a_narrow_window(tab):
    """Every control is named for a screen reader; the search page fits a phone-width window."""
    tab.set_viewport_size({"width": 375, "height": 800})
    for url in ("/?q=json", "/?view=compare"):
        tab.goto(url)
        tab.wait_for_load_state("networkidle")
        unnamed = tab.evaluate("""() => Array.from(document.querySelectorAll('input, select, button'))
            .filter(el => el.offsetParent !== null || el.closest('details'))
            .filter(el => !(el.labels && el.labels.length) && !el.getAttribute('aria-label') && !el.textContent.trim())
            .map(el => el.outerHTML)""")
        assert unnamed == []
        assert tab.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth")
    shot(tab, "compare-form-narrow")
    tab.goto("/?q=json")
    tab.wait_for_selector("#results li.result")
    assert tab.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth")
    shot(tab, "search-narrow")
