"""The browser extension (clients/extension) in a real browser: Debian's Chromium driven by Playwright
(headless, a persistent profile, the unpacked extension), pages served by a local HTTP server, and a
real `refindery serve` on a loopback port with three keys — an admin key the test reads with, the
extension's pages-only capture key and a read-only search key. One browser for the module (relaunched
once, on the same profile, for the restart); the tests run in order and build on each other.

Every request the browser makes is in Chromium's own network log; the last test reads it: everything
the extension sent went to the configured server, and nowhere else."""
from __future__ import annotations

import os
import time
from pathlib import Path

import httpx
import pytest
from conftest import MODELS_CACHE, chromium_path, loopback_up
from harness import Browser, Refindery, Site, create_keys, netlog_requests
from playwright.sync_api import expect

# Made-up words, one set to a page: a page is found by words of its text only (never of its title).
WORDS = ["quillmoss", "brantwick", "ferrowane", "solvicket", "marrowind", "tindlebay", "corvastle", "plimsnort",
         "gravelund", "hushwater", "ombrivale", "dunselmoor", "kestrahal", "wyverton", "pellucine", "stravenock",
         "tarnhollow", "ulverdrop", "zennibark", "bramblesk", "cindergap", "drowsmere", "emberlick", "fallowick"]
DWELL_S = 1
ARTIFACTS = Path(os.environ.get("REFINDERY_TEST_ARTIFACTS") or Path(__file__).resolve().parents[2] / "artifacts" / "web")


def paragraphs(word: str) -> list[str]:
    return [f"The harbour pilot wrote about the {word} tide tables in a long letter to the council.",
            f"Every spring the {word} fishermen mend their nets along the northern quay before the herring run.",
            "The council answered that the lighthouse keeper would publish new charts before the autumn storms."]


class Rig:
    def __init__(self, site: Site, server: Refindery, keys: dict, browser: Browser):
        self.site, self.server, self.keys, self.browser = site, server, keys, browser
        self.admin = httpx.Client(base_url=server.base, headers={"Authorization": f"Bearer {keys['admin']}"}, timeout=60)
        self.pages: dict[str, str] = {}   # word -> url

    def add(self, word: str, path: str | None = None) -> str:
        url = self.site.add(path or f"/read/{word}", f"Notes on the harbour ({word[:3]})", paragraphs(word))
        self.pages[word] = url
        return url

    def found(self, word: str) -> list[str]:
        """The URLs of the pages a search for the word finds (the admin's search: every workspace)."""
        r = self.admin.post("/v1/search", json={"query": word, "k": 5, "shortcuts": False})
        r.raise_for_status()
        return [p["url"] for p in r.json()["pages"] if word in " ".join(s["text"] for s in p["snippets"])]

    def page(self, url: str) -> dict | None:
        """The stored page at this URL (its visits, its text), or None."""
        r = self.admin.post("/v1/search", json={"query": url, "k": 1, "shortcuts": False}).json()
        hit = next((p for p in r["pages"] if p.get("pinned") == "url" and p["url"] == url), None)
        return None if hit is None else self.admin.get(f"/v1/pages/{hit['page_id']}").json()

    def vectors(self) -> dict:
        return self.admin.get("/v1/status").json()["counts"]["embeddings"]

    def read(self, url: str, seconds: float = DWELL_S + 0.5):
        """Open the page and leave it in view for `seconds`; the tab stays open."""
        p = self.browser.page(url)
        p.wait_for_timeout(seconds * 1000)
        return p

    def popup(self):
        p = self.browser.ctx.new_page()
        p.goto(f"chrome-extension://{self.browser.id}/popup.html")
        return p


def wait_for(rig, check, timeout_s: float = 30, what: str = "the condition"):
    """`check()` once it is true (its value), polled while the browser's events go on being taken."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        rig.browser.pause(0.2)
    raise AssertionError(f"{what} did not hold within {timeout_s:g} s")


@pytest.fixture(scope="module")
def rig(pool, tmp_path_factory):
    from playwright.sync_api import sync_playwright

    loopback_up()   # (the offline check's fresh network namespace starts with it down)
    root = tmp_path_factory.mktemp("extension")
    data = root / "data"
    keys = create_keys(data, pool)
    server = Refindery(data, MODELS_CACHE)
    server.start()
    site = Site()
    with sync_playwright() as pw:
        browser = Browser(pw, root / "profile", chromium_path())
        browser.launch()
        rig = Rig(site, server, keys, browser)
        try:
            yield rig
        finally:
            browser.close()
            rig.admin.close()
            server.stop()
            site.close()


def test_the_first_run_keeps_nothing_until_a_mode_is_chosen_on_the_settings_page(rig):
    b = rig.browser
    settings = wait_for(rig, lambda: next((p for p in b.ctx.pages if p.url.endswith("/options.html")), None),
                        what="the settings page opening on install")
    early = rig.add(WORDS[0])
    rig.read(early, 2.5).close()   # read for longer than any dwell: nothing is kept before a mode is chosen
    settings.reload()
    expect(settings.locator("#firstrun")).to_be_visible()   # drawn once the page has read its storage
    expect(settings.locator("#example")).to_contain_text("http://127.0.0.1:8000/v1/pages")   # the default server, until set
    settings.fill("#server", rig.server.base)
    settings.fill("#captureKey", rig.keys["capture"])
    settings.fill("#searchKey", rig.keys["search"])
    settings.fill("#dwellSeconds", str(DWELL_S))
    settings.locator("#save").click()
    expect(settings.locator("#saved")).to_contain_text("choose what to keep")   # no mode: not saved
    assert "mode" not in (b.storage().get("settings") or {})
    # what is sent, shown before anything is: the fields, the server they go to
    what = settings.locator("#what").inner_text()
    assert "address" in what and "title" in what and "HTML" in what and "private windows" in what
    expect(settings.locator("#example")).to_contain_text(rig.server.base)
    settings.check("input[name=mode][value=skip]")
    settings.locator("#save").click()
    expect(settings.locator("#saved")).to_have_text("Saved.")
    s = b.storage()["settings"]
    assert s["mode"] == "skip" and s["captureKey"] == rig.keys["capture"] and s["dwellSeconds"] == DWELL_S
    settings.close()
    b.settings(retryMaxSeconds=2)
    # a page read for the dwell time now is searchable by its text within seconds ...
    url = rig.add(WORDS[1])
    rig.read(url).close()
    assert wait_for(rig, lambda: rig.found(WORDS[1]), what="the page read being searchable") == [url]
    # ... and the one read before the mode was chosen never went
    assert rig.found(WORDS[0]) == [] and rig.page(early) is None
    page = rig.page(url)
    assert WORDS[1] in page["body_text"] and page["visit_count"] == 1   # its text, not just its title


def test_a_page_closed_before_the_dwell_time_is_not_kept(rig):
    rig.browser.settings(dwellSeconds=3)
    short = rig.add(WORDS[2])
    p = rig.browser.page(short)
    p.wait_for_timeout(500)
    p.close()
    assert rig.site.served("/read/" + WORDS[2]) == 1   # it was loaded, and closed after half a second
    control = rig.add(WORDS[3])
    rig.read(control, 3.5).close()
    wait_for(rig, lambda: rig.found(WORDS[3]), what="the page read for the dwell time being kept")
    assert rig.found(WORDS[2]) == [] and rig.page(short) is None
    rig.browser.settings(dwellSeconds=DWELL_S)


def kept_nothing(rig, url: str, word: str, control_word: str) -> None:
    """`url` was loaded and read past the dwell time, then a control page that is kept: once the control
    is in, the first page is not (captures are sent in the order they are made)."""
    path = url.split(rig.site.base, 1)[1]
    wait_for(rig, lambda: rig.site.served(path) >= 1, what=f"{url} being loaded")
    control = rig.add(control_word)
    rig.read(control).close()
    wait_for(rig, lambda: rig.found(control_word), what="the control page being kept")
    assert rig.found(word) == [] and rig.page(url) is None


def test_a_skip_rule_the_allow_only_mode_pause_and_a_private_window_each_keep_nothing(rig):
    b = rig.browser
    b.settings(skip=f"# a test rule\n{rig.site.base}/skip/*")
    rig.read(rig.add(WORDS[4], "/skip/" + WORDS[4]), 2).close()
    kept_nothing(rig, rig.pages[WORDS[4]], WORDS[4], WORDS[5])

    b.settings(mode="allow", allow=f"{rig.site.base}/read/*")
    rig.read(rig.add(WORDS[6], "/elsewhere/" + WORDS[6]), 2).close()
    kept_nothing(rig, rig.pages[WORDS[6]], WORDS[6], WORDS[7])   # the control is under /read/: allowed
    b.settings(mode="skip")

    b.settings(paused=True)
    rig.read(rig.add(WORDS[8]), 2).close()
    b.settings(paused=False)
    kept_nothing(rig, rig.pages[WORDS[8]], WORDS[8], WORDS[9])

    private = rig.add(WORDS[10])
    b.worker().evaluate("(url) => chrome.windows.create({incognito: true, url})", private)
    wait_for(rig, lambda: rig.site.served("/read/" + WORDS[10]) >= 1, what="the private window loading its page")
    rig.browser.pause(DWELL_S + 1.5)
    kept_nothing(rig, private, WORDS[10], WORDS[11])


def test_keep_this_page_works_while_paused_and_forget_this_page_deletes_it(rig):
    b = rig.browser
    b.settings(paused=True)
    url = rig.add(WORDS[12])
    tab = rig.read(url)
    popup = rig.popup()
    expect(popup.locator("#state")).to_contain_text("paused")
    popup.locator("#keep").click()
    popup.locator("#said").filter(has_text="Kept").wait_for()
    assert wait_for(rig, lambda: rig.found(WORDS[12]), what="the page kept by hand") == [url]
    page_id = rig.page(url)["page_id"]
    popup.locator("#forget").click()   # "this page", the list's first choice
    popup.locator("#said").filter(has_text="Forgotten").wait_for()
    assert rig.found(WORDS[12]) == [] and rig.page(url) is None
    assert rig.admin.get(f"/v1/pages/{page_id}").status_code == 404
    popup.close()
    tab.close()
    b.settings(paused=False)


def test_a_revisit_of_an_unchanged_page_adds_a_visit_without_embedding_and_a_changed_one_updates(rig):
    url = rig.pages[WORDS[1]]
    before, vectors = rig.page(url), rig.vectors()
    rig.read(url).close()
    after = wait_for(rig, lambda: (p := rig.page(url)) and p["visit_count"] == 2 and p, what="the re-visit recorded")
    assert rig.vectors() == vectors and after["chunks"] == before["chunks"]   # nothing embedded again
    calls = rig.admin.get("/v1/audit/access", params={"limit": 50}).json()["calls"]
    visits = [c for c in calls if c["route"] == "/v1/visits"]
    assert visits and visits[0]["status"] == 200   # sent as a visit: no body
    # the page changed: sent again whole, and the new text is found
    rig.site.add("/read/" + WORDS[1], "Notes on the harbour (bra)", paragraphs(WORDS[1]) + [f"A postscript on {WORDS[13]}."])
    rig.read(url).close()
    assert wait_for(rig, lambda: rig.found(WORDS[13]), what="the changed page's new text") == [url]
    assert rig.page(url)["visit_count"] == 3


def test_the_popup_search_finds_the_page_and_logs_found_feedback(rig):
    popup = rig.popup()
    popup.fill("#q", WORDS[3])
    popup.press("#q", "Enter")
    first = popup.locator("#results li a").first
    first.wait_for()
    url = rig.pages[WORDS[3]]
    assert popup.locator("#results li .url").first.inner_text() == url
    assert WORDS[3] in popup.locator("#results li .passage").first.inner_text()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    popup.set_viewport_size({"width": 444, "height": 380})
    popup.screenshot(path=str(ARTIFACTS / "extension-popup.png"))   # docs/img/extension-popup.png is one
    with rig.browser.ctx.expect_page() as opened:
        first.click()
    assert opened.value.url == url
    search = httpx.get(rig.server.base + "/v1/feedback", headers={"Authorization": f"Bearer {rig.keys['search']}"})
    chosen = [c for c in search.json()["choices"] if c["kind"] == "found"]
    assert [c["page_id"] for c in chosen] == [rig.page(url)["page_id"]] and chosen[0]["query"] == WORDS[3]
    opened.value.close()


def test_a_refused_key_is_said_in_words_and_the_capture_waits_for_a_good_one(rig):
    b = rig.browser
    b.settings(captureKey="rfy_000000000000_" + "x" * 43)   # well formed, unknown: the server's 401
    url = rig.add(WORDS[19])
    rig.read(url).close()
    popup = rig.popup()
    popup.locator("#state").filter(has_text="bad key").wait_for()
    assert "1 waiting" in popup.locator("#state").inner_text()
    assert b.worker().evaluate("() => chrome.action.getBadgeText({})") == "!"
    assert rig.found(WORDS[19]) == []
    b.settings(captureKey=rig.keys["capture"])   # put right: what waited goes at once
    assert wait_for(rig, lambda: rig.found(WORDS[19]), what="the capture after the key was put right") == [url]
    popup.reload()   # the popup draws its state once it has asked the background: wait for it
    expect(popup.locator("#state")).to_have_text("on: keeping the pages you read")
    popup.close()


def test_captures_wait_through_a_stopped_server_and_a_browser_restart_and_arrive_once(rig):
    b = rig.browser
    rig.server.stop()
    try:
        urls = [rig.add(w) for w in WORDS[14:19]]
        for url in urls:
            rig.read(url).close()
        wait_for(rig, lambda: len(b.storage().get("queue", [])) == 5, what="five captures waiting")
        popup = rig.popup()
        popup.locator("#state").filter(has_text="server unreachable").wait_for()
        assert "5 waiting" in popup.locator("#state").inner_text()
        popup.close()
        b.close()
        b.launch()   # the same profile: the queue is in the extension's storage
        assert len(b.storage()["queue"]) == 5
        # a browser that loads the extension from a folder installs it again at each start: with its keys
        # kept, the settings page does not open again (it did, at every start, into the harness's tab)
        b.pause(2)
        assert not [p.url for p in b.ctx.pages if p.url.endswith("/options.html")]
    finally:   # the tests after this one need the server whatever happened here
        if rig.server.proc is None:
            rig.server.start()
    for w, url in zip(WORDS[14:19], urls):
        assert wait_for(rig, lambda: rig.found(w), timeout_s=60, what=f"{url} arriving") == [url]
    wait_for(rig, lambda: b.storage().get("queue") == [], what="the queue emptied")
    for url in urls:
        assert rig.page(url)["visit_count"] == 1   # each once
    assert b.storage()["state"]["error"] is None


def test_forget_the_last_hour_and_this_site_from_the_popup(rig):
    """The popup's other two forget choices: "this site" (the tab's host and its subdomains) and "the last
    hour" (every page seen in it; a page seen in January stays)."""
    rig.admin.post("/v1/pages", json={"pages": [
        {"url": "https://old.example/kept", "body_text": "A page kept long ago.", "seen_at": "2026-01-05T10:00:00Z"},
        {"url": "https://docs.old.example/also", "body_text": "Its subdomain.", "seen_at": "2026-01-05T10:00:00Z"},
        {"url": "https://other.example/kept", "body_text": "Another site.", "seen_at": "2026-01-05T10:00:00Z"}]})
    url = rig.pages[WORDS[3]]
    assert rig.page(url) is not None
    tab = rig.read(url)
    popup = rig.popup()
    popup.select_option("#forgetWhat", "hour")
    popup.locator("#forget").click()
    popup.locator("#said").filter(has_text="Forgotten").wait_for()
    assert rig.page(url) is None and rig.page(rig.pages[WORDS[1]]) is None   # every page read in this run
    assert rig.page("https://old.example/kept") is not None
    tab.close()
    tab = rig.browser.ctx.new_page()
    tab.goto(rig.site.base + "/read/" + WORDS[3])   # the popup's tab is the site's; "this site" is its host
    gone = rig.admin.post("/v1/pages", json={"pages": [{"url": rig.site.base + "/x", "body_text": "On the test site."}]})
    assert gone.status_code == 200
    popup.select_option("#forgetWhat", "site")
    popup.evaluate("document.getElementById('said').textContent = ''")   # the last answer's words, gone
    popup.locator("#forget").click()
    popup.locator("#said").filter(has_text="Forgotten").wait_for()
    assert rig.page(rig.site.base + "/x") is None and rig.page("https://other.example/kept") is not None
    popup.close()
    tab.close()


def test_the_extension_talks_to_the_configured_server_only(rig):
    rig.browser.close()   # the network logs are complete once the browser has closed
    requests = [r for log in rig.browser.netlogs for r in netlog_requests(log)]
    ours = [r for r in requests if (r["initiator"] or "").startswith(f"chrome-extension://{rig.browser.id}")
            and r["url"].startswith(("http:", "https:"))]
    paths = {r["url"].split(rig.server.base, 1)[-1] for r in ours}
    assert {"/v1/pages", "/v1/visits", "/v1/search", "/v1/feedback", "/v1/forget"} <= paths   # it did talk
    assert [r for r in ours if not r["url"].startswith(rig.server.base + "/")] == []
    # the site's pages were loaded by the browser's navigations only, never by the extension
    assert not [r for r in requests if r["url"].startswith(rig.site.base) and (r["initiator"] or "").startswith("chrome-extension:")]
