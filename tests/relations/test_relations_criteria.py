"""Criteria read from each candidate's own documents, with the real hybrid pipeline and the bundled
MiniLM: a stated criterion with its quote, a not-stated one, a candidate with no documents, and a
repeated call served from stored judgments."""
from __future__ import annotations

import pytest

CRITERION = "twenty years marketing baby formula in European markets"
SALES = [{"relation": "held_role", "slot": "function", "op": "eq", "value": "Sales"}]
PROFILES = [
    {"url": "https://profiles.example/isolde", "title": "Isolde Marbrook",
     "entities": ["isolde_marbrook"],
     "body_text": "# Isolde Marbrook\n\nIsolde spent twenty years marketing infant formula across European markets. "
                  "She now runs sales for a Swiss glassmaker."},
    {"url": "https://profiles.example/halvard", "title": "Halvard Quist",
     "entities": ["halvard_quist"],
     "body_text": "# Halvard Quist\n\nHalvard sells industrial pumps to utilities. He is a keen sailor."},
    {"url": "https://profiles.example/odile", "title": "Odile Fenwright", "entities": ["odile_fenwright"],
     "body_text": "# Odile Fenwright\n\nOdile marketed baby food in Europe for a few years."},
]


@pytest.fixture(scope="module")
def setup(tmp_path_factory, pool, store_settings):
    from docs.examples import make_client
    from docs.examples.roster import roster

    cl = make_client(tmp_path_factory.mktemp("criteria"), pool, **store_settings)
    corpus = cl.corpus
    ws = roster(cl).workspace_id
    r = cl.post("/v1/pages", json={"workspace": ws, "pages": PROFILES})
    assert r.status_code == 200 and not r.json()["errors"]
    yield cl, ws, corpus
    corpus.close()


def page_searches(corpus) -> int:
    corpus.querylog.flush()
    return corpus.store.sql().row("SELECT count(*) FROM log_queries WHERE endpoint = 'search'")[0]


def test_a_criterion_is_read_from_each_candidates_own_documents(setup):
    client, ws, corpus = setup
    before = page_searches(corpus)
    body = client.post("/v1/public/search", json={"workspace_id": ws, "constraints": SALES,
                                                  "criteria": [CRITERION]}).json()
    # Sales roles: halvard, isolde, yusuf — the candidates the criterion is read for
    block = body["criteria"][0]
    assert block["candidates"] == 3 and block["read_this_call"] == 2   # yusuf has no documents to read
    states = {j["entity_id"]: j for j in block["judgments"]}
    assert states["isolde_marbrook"]["state"] == "stated"
    assert states["isolde_marbrook"]["quote"] == \
        "Isolde spent twenty years marketing infant formula across European markets."
    assert states["halvard_quist"]["state"] == "not_stated"
    assert states["yusuf_alderane"]["state"] == "no_documents"
    assert body["entities"]["matched"] == ["isolde_marbrook"]
    assert body["entities"]["undetermined"] == ["halvard_quist"]      # a document not saying it is no "no"
    assert "yusuf_alderane" in body["entities"]["not_recorded"]
    assert body["matches"][0]["criteria"][0]["page_id"]
    assert body["provenance"] == {"declared": 1, "extracted": 1}
    assert body["coverage"]["narrowed_by"] == ["criterion_unproved:0", "criterion_no_documents:0"]
    assert page_searches(corpus) == before + 2


def test_a_repeated_call_reads_nothing(setup):
    client, ws, corpus = setup
    client.post("/v1/public/search", json={"workspace_id": ws, "constraints": SALES, "criteria": [CRITERION]})
    before = page_searches(corpus)
    body = client.post("/v1/public/search", json={"workspace_id": ws, "constraints": SALES,
                                                  "criteria": [CRITERION]}).json()
    assert body["criteria"][0]["read_this_call"] == 0 and page_searches(corpus) == before
    assert body["entities"]["matched"] == ["isolde_marbrook"]


def test_criteria_narrow_a_cached_plan_on_a_copy_never_in_the_cache(setup):
    """The same constraints asked for again are answered from the verdict cache's Arrow table, read in
    place; the criteria's demotions are written to the search's own copy, so the constraints alone
    still answer every Sales role holder afterwards."""
    client, ws, corpus = setup
    cache = corpus.relations.verdicts
    body = {"workspace_id": ws, "constraints": SALES, "criteria": [CRITERION]}
    answers = [client.post("/v1/public/search", json=body).json() for _ in range(3)]
    hits = cache.hits
    again = client.post("/v1/public/search", json=body).json()
    assert cache.hits > hits   # the plan's statuses came from the cache
    for a in answers + [again]:
        assert a["entities"]["matched"] == ["isolde_marbrook"] and a["entities"]["undetermined"] == ["halvard_quist"]
    plain = client.post("/v1/public/search", json={"workspace_id": ws, "constraints": SALES}).json()
    assert plain["entities"]["matched"] == ["halvard_quist", "isolde_marbrook", "yusuf_alderane"]
    assert client.post("/v1/public/search", json=body).json()["entities"]["matched"] == ["isolde_marbrook"]


def test_a_changed_document_is_read_again(setup):
    client, ws, corpus = setup
    client.post("/v1/pages", json={"workspace": ws, "pages": [{
        **PROFILES[1], "body_text": "# Halvard Quist\n\nBefore pumps, Halvard spent twenty years marketing baby "
                                    "formula in European markets."}]})
    body = client.post("/v1/public/search", json={"workspace_id": ws, "constraints": SALES,
                                                  "criteria": [CRITERION]}).json()
    assert body["criteria"][0]["read_this_call"] == 1
    assert body["entities"]["matched"] == ["halvard_quist", "isolde_marbrook"]
    client.post("/v1/pages", json={"workspace": ws, "pages": [PROFILES[1]]})   # put it back


def test_a_plausible_sentence_is_stated_not_verified_and_compact_counts_the_rest(setup):
    client, ws, _ = setup
    passed = [{"relation": "screening", "slot": "outcome", "op": "eq", "value": "passed"}]
    reply = client.post("/v1/public/search", json={"workspace_id": ws, "constraints": passed,
                                                   "criteria": [CRITERION], "detail": "compact"}).json()
    # passed screenings: halvard (not stated) and odile ("baby food in Europe for a few years")
    assert reply["matched"]["total"] == 0 and reply["candidates"] == 2
    assert reply["others"] == {"ruled_out": 2, "cannot_tell": 2, "not_read": 1, "no_documents": 0}
    full = client.post("/v1/public/search", json={"workspace_id": ws, "constraints": passed,
                                                  "criteria": [CRITERION]}).json()
    odile = next(j for j in full["criteria"][0]["judgments"] if j["entity_id"] == "odile_fenwright")
    assert odile["state"] == "stated_not_verified"
    assert odile["quote"] == "Odile marketed baby food in Europe for a few years."


def test_with_a_cross_encoder_configured_it_picks_the_quote_among_the_stated_sentences(tmp_path, pool, tiny_reranker):
    from docs.examples import make_client
    from docs.examples.roster import roster
    from engine.core.settings import CONFIG_DIR

    reg = tmp_path / "models.toml"
    reg.write_text((CONFIG_DIR / "models.toml").read_text()
                   + f'\n[rerankers.tiny-ce]\nsource = "path"\npath = "{tiny_reranker}"\nmax_seq_length = 128\n')
    client = make_client(tmp_path / "data", pool, models={"registry": str(reg), "reranker": "tiny-ce"})
    try:
        ws = roster(client).workspace_id
        client.post("/v1/pages", json={"workspace": ws, "pages": PROFILES})
        body = client.post("/v1/public/search", json={"workspace_id": ws, "constraints": SALES,
                                                      "criteria": [CRITERION]}).json()
        block = body["criteria"][0]
        assert block["judged_by"] == ["embedder:all-minilm-l6-v2", "cross-encoder:tiny-ce"]
        states = {j["entity_id"]: j["state"] for j in block["judgments"]}
        assert states == {"halvard_quist": "not_stated", "isolde_marbrook": "stated", "yusuf_alderane": "no_documents"}
    finally:
        client.corpus.close()


def test_a_candidate_one_criterion_short_is_a_close_match(setup):
    client, ws, _ = setup
    pumps = "sells industrial pumps to utilities"
    body = client.post("/v1/public/search", json={"workspace_id": ws, "constraints": SALES,
                                                  "criteria": [CRITERION, pumps]}).json()
    assert body["entities"]["matched"] == []
    close = {c["entity_id"]: (c["criterion"], c["because"]) for c in body["close"]["matches"]}
    # each states one criterion and not the other: one condition open, one of substance established
    assert close == {"halvard_quist": (0, "not_stated"), "isolde_marbrook": (1, "not_stated")}
    reply = client.post("/v1/public/search", json={"workspace_id": ws, "constraints": SALES, "detail": "compact",
                                                   "criteria": [CRITERION, pumps]}).json()
    assert [c["entity_id"] for c in reply["close"]["matches"]] == ["halvard_quist", "isolde_marbrook"]
    assert reply["close"]["matches"][0]["about"][0].startswith("Austria, Director, Sales")
    assert reply["others"]["cannot_tell"] == body["counts"]["undetermined"] - 2


def test_a_key_with_document_scopes_reads_criteria_only_from_its_documents(setup):
    """Read with a scope none of the profiles carries: every candidate's documents are out of reach
    (no_documents, never the judgment stored from documents the key cannot read), and the licence is
    withheld with acl first."""
    from engine.relations.criteria import CriterionReader
    from engine.relations.search import RelationSearch, RelationSearchRequest
    from engine.refind.search import SearchService

    client, ws, corpus = setup
    pages = SearchService(corpus)
    req = RelationSearchRequest(workspace_id=ws, constraints=SALES, criteria=[CRITERION])
    scopes = ("team-x",)
    body = RelationSearch(corpus.relations, corpus.querylog, None, pages, CriterionReader(corpus, pages, scopes),
                          scopes=scopes).search(req)
    states = {j["entity_id"]: j["state"] for j in body["criteria"][0]["judgments"]}
    assert states["isolde_marbrook"] == "no_documents" and states["halvard_quist"] == "no_documents"
    assert body["coverage"]["narrowed_by"][0] == "acl"
    whole = RelationSearch(corpus.relations, corpus.querylog, None, pages, CriterionReader(corpus, pages)).search(req)
    assert {j["entity_id"]: j["state"] for j in whole["criteria"][0]["judgments"]}["isolde_marbrook"] == "stated"
    assert "acl" not in whole["coverage"].get("narrowed_by", [])


def test_compact_counts_each_criterion_reason_as_the_full_reply_holds_it(setup):
    """Passed screenings: halvard (not stated) and odile (stated, not verified) — two unproved, not
    one; read with two scopes none of the profiles carries, every Sales candidate has no documents
    (three), and `acl` counts the key's two scopes."""
    from engine.relations.criteria import CriterionReader
    from engine.relations.search import RelationSearch, RelationSearchRequest
    from engine.refind.search import SearchService

    client, ws, corpus = setup
    passed = [{"relation": "screening", "slot": "outcome", "op": "eq", "value": "passed"}]
    reply = client.post("/v1/public/search", json={"workspace_id": ws, "constraints": passed,
                                                   "criteria": [CRITERION], "detail": "compact"}).json()
    assert "criterion_unproved:0: 2" in reply["incomplete_because"]
    pages = SearchService(corpus)
    scopes = ("team-x", "team-y")
    req = RelationSearchRequest(workspace_id=ws, constraints=SALES, criteria=[CRITERION], detail="compact")
    reply = RelationSearch(corpus.relations, corpus.querylog, None, pages, CriterionReader(corpus, pages, scopes),
                           scopes=scopes).search(req)
    assert reply["incomplete_because"][:2] == ["acl: 2", "criterion_no_documents:0: 3"]
