"""The searcher's workflow beyond one call (seed 002, issue 26): folder groups and sibling rounds over
URL folders, a request's known page list, map_write (what a call found written into the maps and read by
the next call), a packet written after every round — and a call SIGKILLed between rounds leaving a
packet that parses. Real DuckDB, tantivy, FAISS and the bundled embedder throughout."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

import pytest
import yaml
from conftest import ROOT, titled_client, titled_records

PAGES = {
    "https://docs.example/nursing/judgment-models": ("Clinical judgment models",
        "Tanner's model of clinical judgment describes how nurses notice, interpret, respond and reflect. "
        "Clinical judgment models explain how a nurse moves from noticing a change to acting on it."),
    "https://docs.example/nursing/intuition": ("Intuition in nursing practice",
        "Experienced nurses often sense that a patient is deteriorating before the numbers show it. This "
        "intuitive clinical judgment grows from pattern recognition built over years of practice."),
    "https://docs.example/nursing/handover": ("Shift handover",
        "A structured handover between shifts passes on each patient's situation, background, assessment "
        "and recommendation, so the next nurse's judgment starts from what the last one noticed."),
    "https://docs.example/geology/reversal": ("Geomagnetic reversal",
        "A geomagnetic reversal swaps magnetic north and south; the last one occurred about 780,000 years ago."),
    "https://docs.example/geology/paleomagnetism": ("Paleomagnetism",
        "Paleomagnetism reads the record of the Earth's magnetic field locked into volcanic rocks as lava cools."),
    "https://docs.example/geology/plates": ("Plate tectonics",
        "Plates of the lithosphere drift over the mantle; mid-ocean ridges spread the sea floor apart."),
    "https://docs.example/baking/sourdough": ("Sourdough bread",
        "Sourdough rises with a fermented starter of wild yeast and lactic acid bacteria."),
    "https://docs.example/baking/pastry": ("Flaky pastry",
        "Cold butter folded into thin layers of dough turns to steam in the oven and lifts the pastry."),
    "https://birds.example/gannet": ("Northern gannet",
        "The northern gannet plunge-dives from great heights into the sea to catch mackerel and herring."),
    "https://birds.example/puffin": ("Atlantic puffin",
        "The Atlantic puffin nests in burrows on grassy sea cliffs and carries sand eels in its bill."),
}
NURSING = "https://docs.example/nursing/"


@pytest.fixture(scope="module")
def wf(pool, tmp_path_factory, store_settings):
    """One corpus: a site with three folders, and a second site; on each store."""
    client = titled_client(pool, tmp_path_factory.mktemp("evidence-workflow") / "data", PAGES, **store_settings)
    yield client
    client.corpus.close()


def run(client, query, settings=None, **req):
    from engine.evidence.search import EvidenceRequest, EvidenceSearch
    from engine.refind.search import SearchService
    from engine.relations.packs import vocabulary_axes

    s = client.corpus.settings.evidence.model_copy(update=settings or {})
    return EvidenceSearch(client.corpus, SearchService(client.corpus), vocabulary_axes, settings=s).search(
        EvidenceRequest(query=query, **{"workspace": "default", **req}))


def read_packet(path) -> tuple[dict, str]:
    text = path.read_text(encoding="utf-8")
    m = re.match(r"^---\n(.*?)\n---\n(.*)$", text, re.S)
    assert m, "the packet starts with YAML front matter"
    return yaml.safe_load(m.group(1)), m.group(2)


def packet(client, resp):
    return read_packet(client.data_dir / resp.path)


def page_id(client, url):
    from engine.core.urls import normalize_url

    [pid] = client.corpus.store.pages_with_url("default", normalize_url(url))
    return pid


# Folder groups ------------------------------------------------------------------------------------

def test_folders_are_groups_below_what_a_site_shares():
    from engine.evidence.maps import page_folders

    urls = {"a": "https://x.org/docs/api/a.html", "b": "https://x.org/docs/api/b.html",
            "c": "https://x.org/docs/guide/intro/c.html", "d": "https://x.org/docs/index.html",
            "f1": "file:///home/me/notes/raw/nursing/j.md", "f2": "file:///home/me/notes/raw/nursing/k.md",
            "f3": "file:///home/me/notes/raw/geology/r.md"}
    got = page_folders(urls, depth=1)
    assert got["a"] == got["b"] == "x.org/api/" and got["c"] == "x.org/guide/" and got["d"] == "x.org/"
    assert got["f1"] == got["f2"] == "file/nursing/" and got["f3"] == "file/geology/"   # not /home/me/...
    assert page_folders(urls, depth=2)["c"] == "x.org/guide/intro/"


def test_maps_draw_folder_groups(wf):
    from engine.evidence.maps import workspace_maps

    maps = workspace_maps(wf.corpus, "default")
    folders = {g.value: len(g.pages) for g in maps.groups if g.kind == "folder"}
    assert folders == {"docs.example/nursing/": 3, "docs.example/geology/": 3, "docs.example/baking/": 2}
    assert maps.neighbourhood(page_id(wf, NURSING + "intuition")).key == "folder:docs.example/nursing/"
    assert maps.neighbourhood(page_id(wf, "https://birds.example/gannet")).key == "domain:birds.example"
    overview = (wf.data_dir / maps.overview_path).read_text()
    assert "folder docs.example/nursing/" in overview and "folders: 3" in overview


def test_a_sibling_round_over_a_url_folder_finds_a_page_the_first_round_missed(wf):
    resp = run(wf, "clinical judgment models", session_id="folders", k=1, max_rounds=2, min_high_sources=50)
    fm, body = packet(wf, resp)
    first, second = fm["grep_patterns_used"]
    assert second["kind"] == "sibling" and second["within"] == "folder:docs.example/nursing/"
    state = wf.corpus.settings.reports_dir / "default" / ".state" / "evidence_packet_folders.md.json"
    import json

    sources = json.loads(state.read_text())["calls"][0]["sources"]
    by_round = {r: [s["path"] for s in sources if s["round"] == r] for r in (1, 2)}
    assert by_round[1] == [NURSING + "judgment-models"]          # k = 1: the first round saw one page
    assert by_round[2] and all(p.startswith(NURSING) for p in by_round[2])
    assert set(by_round[2]) & {NURSING + "intuition", NURSING + "handover"}
    assert all(s["type"] == "raw_copy" for s in sources)         # the seed's type; the route apart
    assert [s["route"] for s in sources if s["round"] == 2] == ["sibling"] * len(by_round[2])
    assert body.count("- **Type:** raw_copy") == len(sources) and "route sibling" in body


# A known list of pages ----------------------------------------------------------------------------

def test_a_known_page_list_is_searched_first_and_the_maps_skipped(wf):
    listed = [NURSING + "intuition", page_id(wf, NURSING + "handover"), "https://nowhere.example/x", "pg_0000"]
    resp = run(wf, "how nurses sense a patient is deteriorating", session_id="listed", pages=listed,
               max_rounds=1, min_high_sources=50)
    fm, _ = packet(wf, resp)
    nav = fm["navigation"]
    assert nav["maps_accessed"] == [] and nav["navigation_path"] == "page_list → raw_file"
    assert nav["pages_listed"] == 2 and nav["pages_unknown"] == ["https://nowhere.example/x", "pg_0000"]
    [rnd] = fm["grep_patterns_used"]
    assert rnd["kind"] == "pages" and rnd["within"] == "pages:request" and rnd["matches"] <= 2
    assert NURSING + "intuition" in nav["decomposition"]["sub_queries"][0]["sources"]
    # the rest of the plan searches everywhere afterwards
    resp = run(wf, "how nurses sense a patient is deteriorating", session_id="listed2", pages=listed[:1],
               max_rounds=2, min_high_sources=50, siblings=False)
    kinds = [r["kind"] for r in packet(wf, resp)[0]["grep_patterns_used"]]
    assert kinds[0] == "pages" and kinds[1] in ("query", "canonical") and len(kinds) == 2


def test_a_page_list_never_widens_the_request_filters(wf):
    pid = page_id(wf, NURSING + "intuition")
    resp = run(wf, "nursing intuition", session_id="narrow", pages=[pid], max_rounds=1,
               filters={"domain": ["birds.example"]})
    fm, _ = packet(wf, resp)
    assert fm["grep_patterns_used"][0]["matches"] == 0 and fm["sources_found"] == 0


def test_malformed_page_lists_are_refused(wf):
    r = wf.post("/v1/evidence", json={"query": "x", "pages": ["a"] * 1001})
    assert r.status_code == 422 and r.json()["detail"]["type"] == "validation_error"
    r = wf.post("/v1/evidence", json={"query": "x", "route_constraints": ["map_delete"]})
    assert r.status_code == 422 and r.json()["detail"]["type"] == "validation_error"


# map_write --------------------------------------------------------------------------------------

def test_map_write_is_read_by_the_next_call_which_needs_fewer_rounds(wf):
    import json

    notes = wf.corpus.map_notes
    before = notes.version("default")
    # without the grant nothing is written
    run(wf, "clinical judgment models", session_id="nogrant", k=1, max_rounds=2, min_high_sources=50)
    assert notes.version("default") == before
    # the first call: k = 1, so its sources come one round at a time
    first = run(wf, "clinical judgment models", session_id="writer", k=1, max_rounds=3, min_high_sources=50,
                route_constraints=["map_write"])
    fm1, _ = packet(wf, first)
    written = fm1["navigation"]["map_write"]
    assert written["version"] == before + 1 and written["notes"] == first.new_sources >= 2
    assert written["maps"] == ["maps/default/groups/folder-docs-example-nursing/map.md"]
    group_map = (wf.data_dir / written["maps"][0]).read_text()
    assert "## Connections found by retrieval" in group_map and "clinical judgment models" in group_map
    calls1 = json.loads((wf.corpus.settings.reports_dir / "default" / ".state" / "evidence_packet_writer.md.json").read_text())
    found1 = {s["page_id"]: s["round"] for s in calls1["calls"][0]["sources"]}
    assert max(found1.values()) >= 2, "the first call needed more than one round for its sources"
    # a related question, another session: it consults the map the first call wrote, and its first round
    # (within the pages written there) finds every one of those sources
    second = run(wf, "models of clinical judgment in nursing", session_id="reader", k=1, max_rounds=3,
                 min_high_sources=50)
    fm2, _ = packet(wf, second)
    assert written["maps"][0] in fm2["navigation"]["maps_accessed"]
    rounds = fm2["grep_patterns_used"]
    assert rounds[0]["kind"] == "map" and rounds[0]["within"] == "notes:sub-query 0"
    calls2 = json.loads((wf.corpus.settings.reports_dir / "default" / ".state" / "evidence_packet_reader.md.json").read_text())
    found2 = {s["page_id"]: s["round"] for s in calls2["calls"][0]["sources"]}
    assert set(found1) <= set(found2) and all(found2[p] == 1 for p in found1)
    assert fm2["navigation"]["evidence_found_in"] == "map"
    # an unrelated question consults no note
    other = run(wf, "how does sourdough rise", session_id="unrelated", max_rounds=1)
    fm3, _ = packet(wf, other)
    assert fm3["grep_patterns_used"][0]["kind"] != "map"
    assert written["maps"][0] not in fm3["navigation"]["maps_accessed"]


def test_maps_show_prints_what_searches_wrote(wf):
    run(wf, "atlantic puffin burrows", session_id="puffins", max_rounds=1, route_constraints=["map_write"])
    shown = wf.get("/v1/evidence/maps").json()
    assert shown["notes_version"] >= 1
    puffin = [n for n in shown["notes"] if n["url"] == "https://birds.example/puffin"]
    assert puffin and puffin[0]["sub_query"] == "atlantic puffin burrows" and puffin[0]["session_id"] == "puffins"
    assert puffin[0]["map"] == "maps/default/groups/domain-birds-example/map.md"
    # (`refindery maps show` prints the same: tested below on a data dir no other process holds)


# The packet after every round, and a kill between rounds -------------------------------------------

def _env(data_dir, crash_at=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("REFINDERY_")}
    env.update(REFINDERY_DATA_DIR=str(data_dir), REFINDERY_MODELS__DEVICE="cpu")
    if crash_at:
        env["REFINDERY_TEST_CRASH_AT"] = crash_at
    return env


def test_a_call_killed_between_rounds_leaves_a_packet_of_the_rounds_done(pool, make_corpus, tmp_path):
    from engine.ingest.pipeline import Ingester

    data = tmp_path / "data"
    corpus = make_corpus(data)
    Ingester(corpus, "default", progress=False).ingest(titled_records(PAGES))
    corpus.close()   # the child process opens the data dir
    argv = [sys.executable, "-m", "server.cli", "evidence", "clinical judgment of nurses", "--session", "killed",
            "-k", "1", "--max-rounds", "5", "--min-high-sources", "50"]
    proc = subprocess.run(argv, cwd=ROOT, env=_env(data, "evidence_round:2"), capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    path = data / "agent_reports" / "default" / "evidence_packet_killed.md"
    fm, body = read_packet(path)
    nav = fm["navigation"]
    assert nav["search_termination"] == "in_progress" and nav["search_rounds"] == 2
    assert [p["round"] for p in fm["grep_patterns_used"]] == [1, 2]
    assert fm["sources_found"] == len(re.findall(r"^### Source \d+: ", body, re.M)) >= 1
    # the next call of the session appends after the interrupted one, and finishes
    done = subprocess.run(argv[:-2] + ["--min-high-sources", "1", "--json"], cwd=ROOT, env=_env(data),
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    fm, _ = read_packet(path)
    assert fm["calls"] == 2 and fm["navigation"]["search_termination"] != "in_progress"
    assert fm["navigation"]["search_rounds"] >= 3
    # `refindery evidence --map-write` writes into the maps; `refindery maps show` prints what it wrote
    wrote = subprocess.run(argv[:5] + ["--session", "writer", "--map-write"], cwd=ROOT, env=_env(data),
                           capture_output=True, text=True, timeout=600)
    assert wrote.returncode == 0, wrote.stderr[-2000:]
    shown = subprocess.run([sys.executable, "-m", "server.cli", "maps", "show"], cwd=ROOT, env=_env(data),
                           capture_output=True, text=True, timeout=300)
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert "notes written by searches (version 1)" in shown.stdout
    assert '"clinical judgment of nurses"' in shown.stdout and "session writer" in shown.stdout


# Term expansion from the corpus's own vocabulary ---------------------------------------------------

def test_corpus_words_are_common_content_words_one_per_stem():
    from engine.evidence.vocabulary import corpus_words

    texts = ["Nurses judge.", "A nurse judges the patient", "the nurses' patient sleeps", "Lava cools", "lava 42"]
    got = corpus_words(texts, 10)
    # counted by stem (nurse, nurses: three texts), shown as the commonest surface; df 1, stop words,
    # digits and short words left out
    assert got == ["nurses", "judge", "lava", "patient"]
    assert corpus_words(texts, 2) == ["nurses", "judge"]


def test_a_broadening_round_adds_each_words_nearest_corpus_words(wf):
    import numpy as np

    from engine.evidence.vocabulary import corpus_vocabulary, unit

    settings = {"vocabulary_min_cosine": 0.3, "vocabulary_neighbours": 2, "vocabulary_round": "always"}
    resp = run(wf, "nurse instinct", settings=settings, session_id="neighbours", min_high_sources=50,
               siblings=False, max_rounds=10)
    fm, _ = packet(wf, resp)
    [rnd] = [r for r in fm["grep_patterns_used"] if r["kind"] == "neighbours"]
    vocab = corpus_vocabulary(wf.corpus, "default")
    emb = wf.corpus.embedder()
    excluded = {"nurs", "instinct"}          # the question's own stems, then each word's picks in turn
    for word in ("nurse", "instinct"):
        cos = vocab.matrix @ unit(emb.encode_query(word))
        expected = [(vocab.words[i], float(cos[i])) for i in np.argsort(-cos, kind="stable")
                    if vocab.stems[i] not in excluded and cos[i] >= 0.3][:2]
        excluded |= {vocab.stems[vocab.words.index(w)] for w, _ in expected}
        recorded = {t: src for t, src in fm["expansion_sources"].get(word, {}).items() if src.startswith("embedding")}
        assert list(recorded) == [w for w, _ in expected]
        for w, c in expected:
            assert recorded[w] == f"embedding (cosine {c:.2f})"
            assert w in fm["keyword_expansions"][word] and w in rnd["pattern"].split()
    assert fm["expansion_sources"]["nurse"] and rnd["pattern"].startswith("nurse instinct ")


def test_by_default_the_vocabulary_round_broadens_only_a_sub_query_without_sources(wf):
    settings = {"vocabulary_min_cosine": 0.0}
    # sources from the start: the plan passes the vocabulary round's place (keywords come after it) without it
    found = run(wf, "what is the clinical instinct of a nurse", settings=settings, session_id="gated",
                min_high_sources=50, siblings=False, max_rounds=10)
    fm, _ = packet(wf, found)
    kinds = [r["kind"] for r in fm["grep_patterns_used"]]
    assert "keywords" in kinds and "neighbours" not in kinds and fm["sources_found"] >= 1
    # nothing found and no map to turn to (none consulted): the corpus's own words come second
    empty = run(wf, "zqxvbn", settings={**settings, "maps_consulted": 0}, session_id="gated-empty",
                max_rounds=5)
    fm, _ = packet(wf, empty)
    kinds = [r["kind"] for r in fm["grep_patterns_used"]]
    assert kinds[:2] == ["query", "neighbours"] and fm["grep_patterns_used"][0]["sources"] == 0
    assert "zqxvbn" in fm["expansion_sources"]


def test_the_packet_yaml_is_the_same_from_libyaml_and_pure_python(wf):
    import json

    import yaml

    from engine.evidence.packet import DUMPER, _yaml, front_matter

    assert DUMPER is yaml.CSafeDumper   # PyYAML's wheels carry libyaml: the fast path is the one tested
    run(wf, "sourdough starter and flaky pastry", session_id="yaml", max_rounds=2)
    states = list((wf.corpus.settings.reports_dir / "default" / ".state").glob("*.json"))
    assert states
    for state_file in states:
        state = json.loads(state_file.read_text())
        fm = front_matter(state, None)
        fm["odd"] = ["ünïcödé — “quotes”", "a: b", "- dash", "#hash", "x" * 1500, "", None, 1e-7, "yes", "0123"]
        assert _yaml(fm, yaml.CSafeDumper) == _yaml(fm, yaml.SafeDumper)
