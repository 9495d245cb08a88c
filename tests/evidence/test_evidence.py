"""Evidence search over a small real corpus (real DuckDB, tantivy, FAISS and the bundled embedder)
with a workspace dictionary: expansion, decomposition, every termination, siblings, maps, the
packet's front matter, appending, the appendix split, the zero-source packet, HTTP and MCP."""
from __future__ import annotations

import json
import re

import pytest
import yaml
from conftest import titled_client

PAGES = {
    "https://earth.example/reversal": ("Geomagnetic reversal",
        "A geomagnetic reversal is a change in the Earth's magnetic field such that the positions of magnetic "
        "north and magnetic south are interchanged. Geomagnetic reversals happen at irregular intervals; the "
        "last one, the Brunhes-Matuyama reversal, occurred about 780,000 years ago."),
    "https://earth.example/dynamo": ("The geodynamo",
        "Convection of molten iron in the outer core sustains the Earth's magnetic field. Turbulence in this "
        "dynamo occasionally weakens the dipole until its polarity flips."),
    "https://earth.example/paleomagnetism": ("Paleomagnetism",
        "Paleomagnetism is the study of the record of the Earth's magnetic field preserved in volcanic rocks "
        "and sediments; magnetized minerals lock in the field's direction as lava cools."),
    "https://birds.example/gannet": ("Northern gannet",
        "The northern gannet is a large seabird that plunge-dives from great heights into the sea to catch "
        "fish such as mackerel and herring. Gannets breed in dense colonies on cliffs."),
    "https://birds.example/puffin": ("Atlantic puffin",
        "The Atlantic puffin is a small auk with a colourful beak that nests in burrows on grassy sea cliffs. "
        "Puffins carry several sand eels crosswise in their bill to feed their chick."),
    "https://birds.example/albatross": ("Wandering albatross",
        "The wandering albatross glides for hours over the Southern Ocean on the longest wingspan of any "
        "living bird, rarely flapping its wings."),
    "https://baking.example/sourdough": ("Sourdough bread",
        "Sourdough bread rises with a fermented starter of wild yeast and lactic acid bacteria instead of "
        "baker's yeast, which gives the crumb its sour taste."),
    "https://baking.example/pastry": ("Flaky pastry",
        "Cold butter folded into the dough in thin layers turns to steam in a hot oven and lifts flaky pastry."),
    "https://baking.example/oven": ("Oven temperature",
        "An oven thermometer shows whether the oven runs hot or cold; a fan spreads the heat so loaves bake "
        "evenly."),
}

DICTIONARY_MD = """# Dictionary

## geomagnetic reversal
- aliases: magnetic reversal, polarity reversal
- colloquial: pole flip
- related: paleomagnetism

| colloquial | technical |
|---|---|
| fish-diving bird | gannet, booby |
"""


@pytest.fixture(scope="module")
def ev(pool, tmp_path_factory, store_settings):
    """One corpus (three folders), its dictionary, and an app over it, for the whole module; on each
    store (its maps' notes and the query log in PostgreSQL too)."""
    from engine.evidence import service

    client = titled_client(pool, tmp_path_factory.mktemp("evidence") / "data", PAGES, **store_settings)
    service.set_dictionary(client.corpus, "default", "markdown", DICTIONARY_MD)
    yield client
    client.corpus.close()


def searcher(client, **settings):
    from engine.evidence.search import EvidenceSearch
    from engine.refind.search import SearchService
    from engine.relations.packs import vocabulary_axes

    s = client.corpus.settings.evidence.model_copy(update=settings)
    return EvidenceSearch(client.corpus, SearchService(client.corpus), vocabulary_axes, settings=s)


def run(client, query, settings=None, **req):
    from engine.evidence.search import EvidenceRequest

    return searcher(client, **(settings or {})).search(EvidenceRequest(query=query, **{"workspace": "default", **req}))


def packet(client, resp) -> tuple[dict, str]:
    text = (client.data_dir / resp.path).read_text(encoding="utf-8")
    m = re.match(r"^---\n(.*?)\n---\n(.*)$", text, re.S)
    assert m, "the packet starts with YAML front matter"
    return yaml.safe_load(m.group(1)), m.group(2)


# The dictionary --------------------------------------------------------------------------------

def test_dictionary_formats_and_stem_matching():
    from engine.evidence.dictionary import Dictionary, DictionaryError, parse

    toml = '[[terms]]\nterm = "geomagnetic reversal"\naliases = ["magnetic reversal"]\ncolloquial = ["pole flip"]\n'
    for entries in (parse(toml, "toml"), parse(DICTIONARY_MD, "markdown")):
        d = Dictionary(entries)
        [m] = d.lookup("Why do Pole-Flips happen?")
        assert (m.surface, m.kind, m.entry.term) == ("Pole Flips", "colloquial", "geomagnetic reversal")
    d = Dictionary(parse(DICTIONARY_MD, "markdown"))
    gannet = [e for e in d.entries if e.term == "gannet"][0]
    assert gannet.aliases == ["booby"] and gannet.colloquial == ["fish-diving bird"]
    with pytest.raises(DictionaryError, match="line 2"):
        parse("# x\n- aliases: a, b\n", "markdown")
    with pytest.raises(DictionaryError, match="unknown keys"):
        parse('[[terms]]\nterm = "a"\nsynonym = ["b"]\n', "toml")


def test_pack_vocabularies_join_and_acronyms_match_in_capitals():
    from engine.evidence.dictionary import Dictionary, pack_entries
    from engine.relations.packs import vocabulary_axes

    d = Dictionary(pack_entries(vocabulary_axes(["expert_network"])))
    found = {(m.surface, m.entry.term, m.kind) for m in d.lookup("a Vice President or a VP, not a vp")}
    assert ("Vice President", "VP", "alias") in found and ("VP", "VP", "term") in found
    assert not any(m.surface == "vp" for m in d.lookup("not a vp"))
    assert not d.lookup("WHAT IS AT STAKE FOR A VP")  # all capitals: case tells no acronym apart


def test_decomposition_rules():
    from engine.evidence.decompose import decompose

    assert decompose("Compare video processing vs document processing in Mixpeek").sub_queries == [
        "video processing in Mixpeek", "document processing in Mixpeek"]
    assert decompose("What is the difference between gannets and puffins?").sub_queries == ["gannets", "puffins"]
    assert decompose("python vs java performance").sub_queries == ["python performance", "java performance"]
    assert not decompose("salt and pepper").decomposed
    assert not decompose("How does sqlite work with python").decomposed
    apart = decompose("what causes magnetic pole reversals and how is sourdough bread baked", lambda parts: [0.1])
    assert apart.sub_queries == ["what causes magnetic pole reversals", "how is sourdough bread baked"]
    assert apart.signal == "and"
    close = decompose("what causes magnetic pole reversals and why do magnetic fields flip", lambda parts: [0.9])
    assert not close.decomposed
    # a coordinated phrase is one question, however far apart the embedder puts its parts
    assert not decompose("observations of whistlers and lightning discharges", lambda parts: [0.1]).decomposed


# The verb ---------------------------------------------------------------------------------------

def test_colloquial_question_is_bridged_through_the_dictionary(ev):
    resp = run(ev, "why do pole flips happen", session_id="bridge", siblings=False)
    fm, body = packet(ev, resp)
    assert fm["keyword_expansions"]["pole flips"][:3] == ["geomagnetic reversal", "magnetic reversal",
                                                           "polarity reversal"]
    first = fm["grep_patterns_used"][0]
    assert first["kind"] == "canonical" and "geomagnetic reversal" in first["pattern"]
    assert "https://earth.example/reversal" in fm["navigation"]["decomposition"]["sub_queries"][0]["sources"]
    assert "### Source 1: https://earth.example/reversal" in body


def test_alias_rounds_follow_the_canonical_one(ev):
    resp = run(ev, "pole flip", session_id="aliases", max_rounds=4, min_high_sources=50, siblings=False,
               k=len(PAGES))
    fm, _ = packet(ev, resp)
    kinds = [(p["kind"], p["pattern"]) for p in fm["grep_patterns_used"]]
    assert kinds[0] == ("canonical", "geomagnetic reversal")
    assert kinds[1:3] == [("alias", "magnetic reversal"), ("alias", "polarity reversal")]


def test_comparative_question_is_decomposed_and_both_sides_have_sources(ev):
    resp = run(ev, "What is the difference between gannets and puffins?", session_id="compare")
    fm, _ = packet(ev, resp)
    dec = fm["navigation"]["decomposition"]
    assert dec["signal"] == "difference"
    subs = {s["query"]: s["sources"] for s in dec["sub_queries"]}
    assert set(subs) == {"gannets", "puffins"}
    assert "https://birds.example/gannet" in subs["gannets"]
    assert "https://birds.example/puffin" in subs["puffins"]
    assert {p["sub_query"] for p in fm["grep_patterns_used"]} == {0, 1}


@pytest.mark.parametrize("query,req,reason", [
    ("geomagnetic reversal of the magnetic field", {"min_high_sources": 1}, "sufficient_evidence"),
    ("pole flip", {"min_high_sources": 50, "siblings": False, "k": len(PAGES), "max_rounds": 10},
     "diminishing_returns"),
    ("geomagnetic reversal", {"line_budget": 1, "min_high_sources": 50}, "token_budget"),
    ("sourdough starter yeast", {"max_rounds": 1, "min_high_sources": 50}, "max_rounds"),
    ("albatross", {"min_high_sources": 50, "siblings": False}, "full"),
])
def test_each_termination_is_reached(ev, query, req, reason):
    resp = run(ev, query, session_id=f"stop-{reason}", **req)
    fm, _ = packet(ev, resp)
    nav = fm["navigation"]
    assert nav["search_termination"] == reason == resp.navigation["search_termination"]
    assert nav["search_rounds"] == len(fm["grep_patterns_used"]) <= req.get("max_rounds", 5)
    if reason == "diminishing_returns":
        assert [p["new_sources"] for p in fm["grep_patterns_used"][-2:]] == [0, 0]
    if reason == "token_budget":
        assert nav["lines_read"] > 1 and nav["search_rounds"] == 1
    if reason == "full":
        assert nav["search_rounds"] == 1  # a one-word question with no dictionary entry has one round


def test_sibling_round_explores_the_folder_of_a_new_source(ev):
    resp = run(ev, "geomagnetic reversal", session_id="siblings", k=1, max_rounds=2, min_high_sources=50)
    fm, body = packet(ev, resp)
    rounds = fm["grep_patterns_used"]
    assert [r["kind"] for r in rounds] == ["canonical" if rounds[0]["kind"] == "canonical" else "query", "sibling"]
    assert rounds[1]["within"] == "domain:earth.example" and rounds[1]["new_sources"] >= 1
    assert "- **Type:** raw_copy" in body and "route sibling" in body


def test_maps_are_consulted_recorded_and_on_disk(ev):
    resp = run(ev, "seabirds that dive for fish", session_id="maps", min_high_sources=1)
    fm, _ = packet(ev, resp)
    maps = fm["navigation"]["maps_accessed"]
    assert maps[0].endswith("corpus_overview.md") and len(maps) == 3
    assert maps[1].endswith("domain-birds-example/map.md")  # the group nearest the question comes first
    for m in maps:
        assert (ev.data_dir / m).is_file()
    assert "birds.example/gannet" in (ev.data_dir / maps[1]).read_text()
    assert fm["navigation"]["navigation_path"] == "overview → group_map → raw_file"


SEED_FIELDS = {
    "": ["type", "query", "sources_found", "created", "navigation", "keyword_expansions", "grep_patterns_used"],
    "navigation": ["maps_accessed", "navigation_path", "raw_files_scanned", "raw_files_read", "evidence_found_in",
                   "search_rounds", "search_termination", "decomposition", "scratchpad_state"],
    "navigation.scratchpad_state": ["rounds_completed", "failed_searches", "gaps_remaining"],
}


def test_front_matter_parses_and_has_every_field_of_the_seed(ev):
    resp = run(ev, "how does sourdough bread rise", session_id="fields")
    fm, body = packet(ev, resp)
    for path, fields in SEED_FIELDS.items():
        node = fm
        for part in filter(None, path.split(".")):
            node = node[part]
        assert set(fields) <= set(node), (path, set(fields) - set(node))
    assert fm["type"] == "evidence_packet" and fm["query"] == "how does sourdough bread rise"
    assert fm["navigation"]["search_termination"] in (
        "full", "sufficient_evidence", "diminishing_returns", "token_budget", "max_rounds")
    assert fm["navigation"]["evidence_found_in"] in ("map", "raw")
    for sq in fm["navigation"]["decomposition"]["sub_queries"]:
        assert {"query", "sources"} <= set(sq)
    for p in fm["grep_patterns_used"]:
        assert {"pattern", "matches"} <= set(p)
    n = fm["sources_found"]
    assert n == resp.sources_found == len(re.findall(r"^### Source \d+: ", body, re.M)) >= 1
    assert sum(fm["confidence"].values()) == n
    for field in ("- **Type:**", "- **Relevant excerpt:**", "- **Confidence:**"):
        assert body.count(field) == n
    assert resp.summary.startswith(f"Evidence written to {resp.path}\n- Sources found: {n}")
    assert "sourdough" not in resp.summary.split("Key themes")[0]  # counts, not evidence, in the reply


def test_a_second_call_appends_to_the_same_packet(ev):
    first = run(ev, "gannets diving for fish", session_id="append", max_rounds=1)
    _, body1 = packet(ev, first)
    second = run(ev, "sourdough bread", session_id="append", max_rounds=1)
    fm, body2 = packet(ev, second)
    assert second.path == first.path and fm["calls"] == 2
    assert fm["queries"] == ["gannets diving for fish", "sourdough bread"]
    section1 = body1[body1.index("## Search 1"):]
    assert body2.index("## Search 1") < body2.index("## Search 2")
    assert section1.strip() in body2, "the first call's section is kept as it was"
    assert fm["sources_found"] == first.sources_found + second.new_sources == second.sources_found
    assert fm["navigation"]["search_rounds"] == 2


def test_topic_names_a_packet_of_its_own(ev):
    a = run(ev, "puffins", session_id="par", topic="Sea birds!", max_rounds=1)
    b = run(ev, "oven heat", session_id="par", topic="baking", max_rounds=1)
    assert a.path == "agent_reports/default/evidence_packet_par_sea-birds.md"
    assert b.path == "agent_reports/default/evidence_packet_par_baking.md"


def test_a_large_packet_splits_into_main_and_appendix(ev):
    resp = run(ev, "magnetic field of the earth", settings={"split_chars": 1000}, session_id="split",
               min_high_sources=50, k=len(PAGES), max_rounds=1)
    assert resp.appendix_path == "agent_reports/default/evidence_appendix_split.md" and resp.reports_written == 2
    fm, main = packet(ev, resp)
    appendix = (ev.data_dir / resp.appendix_path).read_text()
    afm = yaml.safe_load(appendix.split("---\n")[1])
    assert fm["appendix"] == "evidence_appendix_split.md" and afm["type"] == "evidence_appendix"
    n = fm["sources_found"]
    assert n >= 3
    assert len(re.findall(r"^### Source \d+: ", appendix, re.M)) == n
    assert "## Top sources by confidence" in main and "## Key patterns" in main
    # the main file quotes shortened excerpts; the appendix the whole passage
    src = "Convection of molten iron in the outer core sustains"
    assert src in appendix


def test_zero_source_packet(ev):
    resp = run(ev, "zqxvbn plkmrt wvyxq", session_id="nothing")
    fm, body = packet(ev, resp)
    assert fm["sources_found"] == 0 == resp.sources_found
    assert resp.navigation["raw_files_scanned"] > 0 and resp.navigation["raw_files_read"] == 0
    assert "sources_found: 0" in body and "no page in the workspace gave evidence" in body
    assert fm["navigation"]["scratchpad_state"]["failed_searches"]
    assert fm["navigation"]["scratchpad_state"]["gaps_remaining"] == ["no source for: zqxvbn plkmrt wvyxq"]
    # nothing found by the first round: the next looks where the maps point, within that group
    rounds = fm["grep_patterns_used"]
    assert rounds[0]["kind"] == "query" and rounds[1]["kind"] == "map"
    assert rounds[1]["within"] == "domain:" + fm["navigation"]["maps_accessed"][1].split("/domain-")[1].split(
        "/")[0].replace("-", ".")
    assert fm["navigation"]["search_termination"] == "diminishing_returns"


def test_confidence_comes_from_the_calibration(ev):
    from engine.evidence.confidence import load_calibration

    cal = load_calibration()
    assert cal.fitted_on["collections"] and cal.weights["dense_cosine"] > 0
    resp = run(ev, "geomagnetic reversal", session_id="calib", max_rounds=1)
    fm, body = packet(ev, resp)
    found = list(re.finditer(r"\*\*Confidence:\*\* (\w+) \(p = ([0-9.]+)", body))
    assert found, "the packet lists no source with its confidence"
    for m in found:
        assert m.group(1) == cal.level(float(m.group(2)) + 0.005) or m.group(1) == cal.level(float(m.group(2)))


# HTTP, MCP, the query log --------------------------------------------------------------------------

def test_http_route_and_packet_read(ev):
    r = ev.post("/v1/evidence", json={"query": "puffins nesting in burrows", "session_id": "http"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["path"] == "agent_reports/default/evidence_packet_http.md" and body["session_id"] == "http"
    assert "excerpt" not in json.dumps(body)
    text = ev.get("/v1/evidence/packets/http")
    assert text.status_code == 200 and text.text.startswith("---\ntype: evidence_packet\n")
    assert ev.get("/v1/evidence/packets/nobody").json()["detail"]["type"] == "packet_not_found"
    assert ev.get("/v1/evidence/packets/http", params={"part": "appendix"}).status_code == 404


@pytest.mark.parametrize("body", [{"query": ""}, {"query": "x", "session_id": "../etc"},
                                  {"query": "x", "max_rounds": 0}, {"query": "x", "topic": "!!!"},
                                  {"query": "x", "bogus": 1}])
def test_http_rejects_malformed_requests(ev, body):
    r = ev.post("/v1/evidence", json=body)
    assert r.status_code == 422 and r.json()["detail"]["type"] == "validation_error"


def test_http_dictionary_round_trip_and_invalid_dictionary_writes_nothing(ev):
    before = ev.get("/v1/evidence/dictionary").json()
    assert before["sources"][0] == "default.md" and any(t["term"] == "geomagnetic reversal" for t in before["terms"])
    bad = ev.put("/v1/evidence/dictionary", json={"format": "toml", "text": "[[terms]]\nterm = 3\n"})
    assert bad.status_code == 422 and bad.json()["detail"]["type"] == "dictionary_invalid"
    assert ev.get("/v1/evidence/dictionary").json() == before
    ok = ev.put("/v1/evidence/dictionary", params={"workspace": "other"},
                json={"format": "toml", "text": '[[terms]]\nterm = "auk"\naliases = ["puffin"]\n'})
    assert ok.status_code == 200 and ok.json()["entries"] == 1
    assert ev.get("/v1/evidence/dictionary", params={"workspace": "other"}).json()["terms"][0]["term"] == "auk"
    maps = ev.get("/v1/evidence/maps").json()
    assert {g["value"] for g in maps["groups"]} == {"earth.example", "birds.example", "baking.example"}


def test_a_relation_workspace_of_the_same_id_lends_its_packs_vocabularies(ev):
    def sources():
        return ev.get("/v1/evidence/dictionary", params={"workspace": "experts"}).json()["sources"]

    assert sources() == []
    r = ev.post("/v1/public/workspaces", json={"workspace_id": "experts", "packs": ["expert_network"]})
    assert r.status_code == 201, r.text
    assert "pack:expert_network/seniority" in sources()
    assert "pack:expert_network/seniority" not in ev.get("/v1/evidence/dictionary").json()["sources"]


def test_mcp_tools(ev):
    from docs.examples.over_mcp import call_tool

    res = call_tool(ev, "evidence_search", {"query": "albatross wingspan", "session_id": "mcp"})
    assert not res.isError, res.content[0].text
    reply = json.loads(res.content[0].text)
    assert reply["path"] == "agent_reports/default/evidence_packet_mcp.md" and reply["sources_found"] >= 1
    read = call_tool(ev, "read_evidence_packet", {"session_id": "mcp"})
    assert json.loads(read.content[0].text)["text"].startswith("---\ntype: evidence_packet")
    bad = call_tool(ev, "evidence_search", {"query": "x", "session_id": "a/b"})
    assert bad.isError is True and "session_id" in bad.content[0].text
    missing = call_tool(ev, "read_evidence_packet", {"session_id": "nobody"})
    refusal = json.loads(missing.content[0].text.partition(": ")[2])
    assert missing.isError is True and (refusal["status"], refusal["detail"]["type"]) == (404, "packet_not_found")


def test_every_call_and_round_is_in_the_query_log(ev):
    resp = run(ev, "northern gannet colonies", session_id="logged", max_rounds=2, min_high_sources=50)
    ev.corpus.querylog.flush()
    sql = ev.corpus.store.sql()
    row = sql.row("SELECT endpoint, returned, CAST(params AS JSON)->>'session_id' FROM log_queries "
                  "WHERE query_id = ?", [resp.query_id])
    assert tuple(row) == ("evidence", resp.new_sources, "logged")
    rounds = sql.row("SELECT count(*) FROM log_queries WHERE endpoint = 'evidence_round' AND "
                     "CAST(params AS JSON)->>'evidence_query_id' = ?", [resp.query_id])[0]
    assert rounds == resp.navigation["search_rounds"]


def test_a_packet_lost_after_its_state_was_written_is_redrawn_whole(ev):
    """The state file is written first; a crash before the packet lands is mended by the next call."""
    first = run(ev, "wandering albatross", session_id="crash", max_rounds=1)
    (ev.data_dir / first.path).unlink()  # as if killed between the two writes
    second = run(ev, "flaky pastry butter", session_id="crash", max_rounds=1)
    fm, body = packet(ev, second)
    assert fm["calls"] == 2 and "## Search 1: wandering albatross" in body and "## Search 2" in body
    assert not list((ev.data_dir / "agent_reports").rglob(".*.tmp"))


def test_cli_dictionary_set_and_show(tmp_path, capsys, monkeypatch):
    from server.cli import main

    f = tmp_path / "dict.toml"
    f.write_text('[[terms]]\nterm = "auk"\naliases = ["puffin", "guillemot"]\n')
    monkeypatch.setenv("REFINDERY_DATA_DIR", str(tmp_path / "data"))
    assert main(["dictionary", "set", str(f), "--workspace", "birds"]) == 0
    capsys.readouterr()
    assert main(["dictionary", "show", "--workspace", "birds"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["terms"][0] == {"term": "auk", "aliases": ["puffin", "guillemot"], "colloquial": [],
                                 "related": [], "source": "birds.toml"}
    bad = tmp_path / "bad.md"
    bad.write_text("- aliases: x\n")
    assert main(["dictionary", "set", str(bad), "--workspace", "birds"]) == 2
    assert "a '- aliases:' line must follow" in capsys.readouterr().err
    assert (tmp_path / "data" / "dictionaries" / "birds.toml").is_file()
    assert not (tmp_path / "data" / "dictionaries" / "birds.md").exists()


def test_sibling_and_map_rounds_never_leave_the_requests_filters(ev):
    for q, sid in (("zqxvbn plkmrt wvyxq", "flt-nothing"), ("geomagnetic reversal", "flt-some")):
        resp = run(ev, q, session_id=sid, k=1, max_rounds=3, min_high_sources=50,
                   filters={"domain": ["earth.example"]})
        fm, _ = packet(ev, resp)
        for p in fm["grep_patterns_used"]:
            assert p["within"] in (None, "domain:earth.example")
        for s in fm["navigation"]["decomposition"]["sub_queries"]:
            assert all(u.startswith("https://earth.example/") for u in s["sources"])


def test_directories_seen_counts_folders_and_domains_apart(pool, tmp_path):
    """Three pages in two folders of one site: the seed's "directories seen" is folders (2), not
    sites (1); the sites are counted apart."""
    notes = {
        "https://notes.example/geology/reversal": ("Reversal", "The magnetic field reverses its polarity."),
        "https://notes.example/geology/dynamo": ("Dynamo", "Molten iron convection drives the magnetic field."),
        "https://notes.example/physics/compass": ("Compass", "A compass needle follows the magnetic field."),
    }
    client = titled_client(pool, tmp_path / "data", notes)
    try:
        resp = run(client, "magnetic field", session_id="folders", k=len(notes), max_rounds=1, siblings=False)
        assert resp.navigation["raw_files_scanned"] == 3
        assert resp.navigation["directories_seen"] == 2
        assert resp.navigation["domains_seen"] == 1
        fm, _ = packet(client, resp)
        assert (fm["navigation"]["directories_seen"], fm["navigation"]["domains_seen"]) == (2, 1)
    finally:
        client.corpus.close()
