"""The relation search verb's rules, each asserted over a small export made for it.

Every test goes through POST /v1/public/search on a real app over a real DuckDB store, with data
loaded from a real DuckDB file by the product's SQL load.
"""
from __future__ import annotations

import pytest
from relations_helpers import c, load, loaded, new_workspace, role, screening, search, write_duckdb


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    from docs.examples import make_client

    cl = make_client(tmp_path_factory.mktemp("relations-search"))
    yield cl
    cl.corpus.close()


VP_DACH = [c("held_role", "seniority", "gte", "VP"), c("held_role", "geography", "eq", "DACH")]
SALES = [c("held_role", "function", "eq", "Sales")]


# The partition -------------------------------------------------------------------------------
def test_every_entity_is_in_exactly_one_set_and_bound_is_matched_plus_none(client, tmp_path):
    ws = loaded(client, tmp_path, ["a", "b", "c", "d"],
                roles=[role("a"), role("b", function="Marketing"), role("d")],
                screenings=[screening("a"), screening("b"), screening("c", outcome="failed")],
                screened=["a", "b", "c"])
    body = search(client, ws, [c("held_role", "function", "eq", "Sales"),
                               c("screening", "outcome", "eq", "passed")])
    e, n = body["entities"], body["counts"]
    assert e["matched"] == ["a"]
    assert e["none"] == ["b", "c"]          # b: Marketing; c: holds no role (looked at), failed screening
    assert e["not_recorded"] == ["d"]       # d: a Sales role, but nobody looked at d's screenings
    sets = [set(e[k]) for k in ("matched", "none", "not_recorded", "undetermined")]
    assert sum(map(len, sets)) == n["universe"] == 4 and set().union(*sets) == {"a", "b", "c", "d"}
    assert n["bound"] == n["matched"] + n["none"] == 3
    assert body["coverage"]["narrowed_by"] == ["entities_not_recorded"]


def test_a_group_is_one_rows_conditions_not_several_rows(client, tmp_path):
    # p holds a VP role outside DACH and a Director role inside it: no ONE role is VP-level in DACH.
    ws = loaded(client, tmp_path, ["p", "q"],
                roles=[role("p", "VP", geography="United States"), role("p", "Director", geography="Germany"),
                       role("q", "SVP", geography="Austria")])
    body = search(client, ws, VP_DACH)
    assert body["entities"]["matched"] == ["q"]
    assert body["entities"]["none"] == ["p"]
    per = {e["index"]: e["matched"] for e in body["counts"]["per_constraint"]}
    assert per == {0: 2, 1: 2}  # each condition alone holds for both


def test_per_constraint_counts_each_condition_alone(client, tmp_path):
    ws = loaded(client, tmp_path, ["a", "b", "c"],
                roles=[role("a", "VP", geography="Germany"), role("a", "IC", geography="France"),
                       role("b", "Manager", geography="Austria")])
    body = search(client, ws, VP_DACH)
    first, second = body["counts"]["per_constraint"]
    assert (first["matched"], first["rows"], first["none"], first["not_recorded"]) == (1, 1, 2, 0)
    assert (second["matched"], second["rows"], second["none"], second["not_recorded"]) == (2, 2, 1, 0)
    assert first["status"] == second["status"] == "bound"


# Expansion through the vocabulary ------------------------------------------------------------
def test_a_records_synonym_reads_as_its_term_and_the_hierarchy_covers_it(client, tmp_path):
    ws = loaded(client, tmp_path, ["de", "ch", "us"],
                roles=[role("de", geography="Deutschland"), role("ch", geography="Schweiz"),
                       role("us", geography="USA")])
    body = search(client, ws, [c("held_role", "geography", "eq", "DACH")])
    assert body["entities"]["matched"] == ["ch", "de"]
    assert body["expansion"] == ["geography: DACH → {DACH, Germany, Austria, Switzerland} via hierarchy"]
    row = body["matches"][0]["rows"][0]
    assert row["slots"]["geography"] == "Switzerland"                      # the vocabulary's own label
    assert row["slot_receipts"]["geography"]["value"] == "Schweiz"         # what the cell says
    body = search(client, ws, [c("held_role", "geography", "eq", "Deutschland")])
    assert body["entities"]["matched"] == ["de"]
    assert body["expansion"] == ["geography: Deutschland → {Germany} via synonym"]


def test_order_expands_gte_and_lte_with_their_lines(client, tmp_path):
    ws = loaded(client, tmp_path, ["ic", "dir", "ceo"],
                roles=[role("ic", "IC"), role("dir", "Director"), role("ceo", "CEO")])
    up = search(client, ws, [c("held_role", "seniority", "gte", "Director")])
    assert up["entities"]["matched"] == ["dir", "ceo"]   # rank: distance 0 rungs, then 2
    assert up["expansion"] == ["seniority: ≥ Director → {Director, VP, SVP, C-level} via order"]
    down = search(client, ws, [c("held_role", "seniority", "lte", "Manager")])
    assert down["entities"]["matched"] == ["ic"]
    assert down["expansion"] == ["seniority: ≤ Manager → {IC, Manager} via order"]


def test_a_value_the_vocabulary_does_not_know_runs_as_written_and_withholds_the_licence(client, tmp_path):
    ws = loaded(client, tmp_path, ["a", "b"], roles=[role("a", geography="Benelux"), role("b")])
    body = search(client, ws, [c("held_role", "geography", "eq", "benelux")])
    assert body["entities"]["matched"] == ["a"]
    assert body["expansion"] == ["geography: benelux is not a term of axis geography: matched as written"]
    assert body["coverage"]["narrowed_by"] == ["vocabulary_unknown_surface:geography"]


def test_a_row_value_the_vocabulary_cannot_place_withholds_the_licence(client, tmp_path):
    # "Benelux" is no term of the geography axis: nobody can say whether it lies in DACH.
    ws = loaded(client, tmp_path, ["a", "b"], roles=[role("a", geography="Benelux"), role("b")])
    body = search(client, ws, [c("held_role", "geography", "eq", "DACH")])
    assert body["entities"]["matched"] == ["b"]
    assert body["entities"]["none"] == ["a"]
    assert body["coverage"]["narrowed_by"] == ["vocabulary_unplaced:geography"]


# as_of ---------------------------------------------------------------------------------------
def test_as_of_uses_the_half_open_period(client, tmp_path):
    ws = loaded(client, tmp_path, ["a"], roles=[role("a", started="2019-03", ended="2020-06")])
    at = {m: search(client, ws, VP_DACH, as_of=m)["entities"] for m in
          ("2019-02", "2019-03", "2020-05", "2020-06", "2021-01")}
    assert at["2019-02"]["none"] == ["a"]        # before period_from
    assert at["2019-03"]["matched"] == ["a"]     # period_from ≤ as_of
    assert at["2020-05"]["matched"] == ["a"]
    assert at["2020-06"]["none"] == ["a"]        # period_to is not > as_of: the tenure is over
    assert at["2021-01"]["none"] == ["a"]
    assert search(client, ws, VP_DACH)["entities"]["matched"] == ["a"]   # no as_of: every current row


def test_an_open_period_holds_at_any_later_month(client, tmp_path):
    ws = loaded(client, tmp_path, ["a"], roles=[role("a", started="2019-03", ended=None)])
    assert search(client, ws, VP_DACH, as_of="2030-12")["entities"]["matched"] == ["a"]


def test_a_period_that_straddles_as_of_is_unanswerable_never_none(client, tmp_path):
    # period_from is a bare year: at 2019-05 nobody can tell whether the role had begun.
    ws = loaded(client, tmp_path, ["a", "b"], roles=[role("a", started="2019"), role("b", started="2018-01")])
    body = search(client, ws, VP_DACH, as_of="2019-05")
    assert body["entities"]["undetermined"] == ["a"]
    assert body["entities"]["matched"] == ["b"]
    assert body["counts"]["undetermined"] == 1
    assert body["coverage"]["narrowed_by"] == ["undated_rows_unanswerable:held_role"]
    # a month after the whole of 2019, it has begun
    assert search(client, ws, VP_DACH, as_of="2020-01")["entities"]["matched"] == ["a", "b"]


def test_a_row_without_tenure_cannot_be_placed_when_the_relation_has_no_date_slot(client, tmp_path):
    ws = loaded(client, tmp_path, ["a"], roles=[role("a", started=None)])
    body = search(client, ws, VP_DACH, as_of="2020-01")
    assert body["entities"]["undetermined"] == ["a"]
    group = body["groups"][0]
    assert group["undated_rows"] == 1 and group["time_test"]["date_slot"] is None
    assert "the relation declares no date slot — unanswerable" in group["time_test"]["rule"]
    assert search(client, ws, VP_DACH)["entities"]["matched"] == ["a"]   # without as_of it counts


def test_undated_rows_count_when_their_one_date_slot_has_passed(client, tmp_path):
    ws = loaded(client, tmp_path, ["early", "late", "year", "blank"],
                screenings=[screening("early", on="2023-11"), screening("late", on="2024-02"),
                            screening("year", on="2024"), screening("blank", on=None)])
    body = search(client, ws, [c("screening", "outcome", "eq", "passed")], as_of="2024-01")
    e = body["entities"]
    assert e["matched"] == ["early"]
    assert e["none"] == ["late"]                       # screened after the month: not yet
    assert e["undetermined"] == ["blank", "year"]      # no date, or a year straddling the month
    assert body["coverage"]["narrowed_by"] == ["undated_rows_unanswerable:screening"]
    g = body["groups"][0]
    assert (g["undated_rows"], g["active_rows"], g["inactive_rows"]) == (4, 1, 1)
    assert g["time_test"]["date_slot"] == "as_of"


# Unrecorded slots --------------------------------------------------------------------------------
def test_a_slot_no_load_wrote_is_undetermined_both_ways(client, tmp_path):
    ws = loaded(client, tmp_path, ["a", "ops"], roles=[role("a"), role("ops", function="Operations")])
    for op in ("eq", "ne"):
        body = search(client, ws, [c("held_role", "function", "eq", "Sales"),
                                   c("held_role", "industry", op, "Technology")])
        assert body["entities"]["undetermined"] == ["a"], op
        assert body["entities"]["matched"] == []
        assert body["entities"]["none"] == ["ops"], op     # fails function on the record
        assert body["groups"][0]["unrecorded_slots"] == ["industry"]
        assert body["coverage"]["completeness_licensed"] is False
        assert body["coverage"]["narrowed_by"] == ["slot_unrecorded_rows_unanswerable:held_role"]


def test_a_recorded_slot_answers_normally(client, tmp_path):
    ws = loaded(client, tmp_path, ["a", "b"], roles=[role("a", industry="Software"), role("b", industry="Energy")],
                industry=True)
    body = search(client, ws, [c("held_role", "industry", "eq", "Technology")])
    assert body["entities"]["matched"] == ["a"] and body["entities"]["none"] == ["b"]
    assert body["coverage"] == {"completeness_licensed": True}


def test_another_matching_row_settles_an_entity_with_an_unrecorded_one(client, tmp_path):
    ws = loaded(client, tmp_path, ["a"], roles=[role("a", industry=None), role("a", industry="Tech")], industry=True)
    body = search(client, ws, [c("held_role", "industry", "eq", "Technology")])
    assert body["entities"]["matched"] == ["a"]
    assert body["coverage"] == {"completeness_licensed": True}


# Licence reasons ----------------------------------------------------------------------------------
def test_a_required_relation_nobody_loaded_is_named(client, tmp_path):
    ws = loaded(client, tmp_path, ["a"], roles=[role("a")])
    body = search(client, ws, [c("engagement", "hourly_rate_usd", "gte", 100)])
    assert body["entities"]["not_recorded"] == ["a"]
    assert body["coverage"]["narrowed_by"] == ["relation_not_recorded:engagement"]


def test_a_preference_never_removes_or_withholds(client, tmp_path):
    ws = loaded(client, tmp_path, ["a", "b"], roles=[role("a"), role("b")], screenings=[screening("b")],
                screened=["b"])
    body = search(client, ws, [c("held_role", "function", "eq", "Sales"),
                               c("screening", "outcome", "eq", "passed", required=False)])
    assert [(m["entity_id"], m["rank_key"]["optional_groups_satisfied"]) for m in body["matches"]] == \
        [("b", 1), ("a", 0)]
    assert body["coverage"] == {"completeness_licensed": True}
    assert [g["required"] for g in body["groups"]] == [True, False]


def test_unbound_constraints_are_gaps_that_do_not_run(client, tmp_path):
    ws = loaded(client, tmp_path, ["a"], roles=[role("a")])
    body = search(client, ws, [c("held_role", "title", "eq", "CEO"), c("held_role", "colour", "eq", "red"),
                               c("held_role", "function", "eq", "Sales")])
    assert [(g["index"], g["reason"]) for g in body["gaps"]["unbound"]] == \
        [(0, "vocabulary_unbound:title"), (1, "slot_unknown:colour")]
    assert body["bound"] is False
    assert body["entities"]["matched"] == ["a"]
    assert body["coverage"]["narrowed_by"] == ["constraint_unbound:0", "constraint_unbound:1"]
    assert [p["status"] for p in body["counts"]["per_constraint"]] == ["unbound", "unbound", "bound"]
    assert body["counts"]["per_constraint"][0]["matched"] is None


def test_numbers_compare_as_numbers_and_rank_by_distance_in_units(client, tmp_path):
    src = tmp_path / "eng.duckdb"
    write_duckdb(src, {"eng": (["id", "person_id", "topic", "rate"],
                               [{"id": "e1", "person_id": "a", "topic": "pricing", "rate": "150"},
                                {"id": "e2", "person_id": "b", "topic": "pricing", "rate": "99.5"},
                                {"id": "e3", "person_id": "c", "topic": "pricing", "rate": "1000"},
                                {"id": "e4", "person_id": "d", "topic": "pricing", "rate": "n/a"}])})
    ws = new_workspace(client)
    summary = load(client, ws, {"source": str(src), "relations": [
        {"relation": "engagement", "table": "eng", "entity_column": "person_id", "key_column": "id",
         "slots": {"topic": "topic", "hourly_rate_usd": "rate"}}]})
    assert summary["relations"][0]["withheld"] == 1
    body = search(client, ws, [c("engagement", "hourly_rate_usd", "gte", "100")])
    assert [(m["entity_id"], m["rank_key"]["threshold_distance"]) for m in body["matches"]] == \
        [("a", [50.0]), ("c", [900.0])]
    assert body["entities"]["none"] == ["b"]
    assert body["entities"]["undetermined"] == ["d"]       # its loader could not read the rate
    assert body["coverage"]["narrowed_by"] == ["withheld_rows_unanswerable:engagement"]


def test_a_row_tied_to_nobody_withholds_the_licence(client, tmp_path):
    ws = loaded(client, tmp_path, ["a"], roles=[role("a"), role("")])
    body = search(client, ws, [c("held_role", "function", "eq", "Sales")])
    assert body["entities"]["matched"] == ["a"]
    assert body["coverage"]["narrowed_by"] == ["unattributed_rows_withheld:held_role"]


def test_a_period_constraint_over_an_empty_column_is_unanswerable(client, tmp_path):
    ws = loaded(client, tmp_path, ["open", "closed"],
                roles=[role("open", ended=None), role("closed", ended="2020-01")])
    body = search(client, ws, [c("held_role", "period_to", "lte", "2021-01")])
    assert body["entities"]["matched"] == ["closed"]
    assert body["entities"]["undetermined"] == ["open"]
    assert body["coverage"]["narrowed_by"] == ["open_period_rows_unanswerable:held_role"]


# Paging, lists, restriction ----------------------------------------------------------------------
def test_limit_offset_page_the_ranked_set_and_truncation_withholds(client, tmp_path):
    people = [f"p{i}" for i in range(7)]
    ws = loaded(client, tmp_path, people, roles=[role(p) for p in people])
    whole = search(client, ws, [c("held_role", "function", "eq", "Sales")])
    assert whole["coverage"] == {"completeness_licensed": True} and whole["truncated"] is False
    pages = [search(client, ws, [c("held_role", "function", "eq", "Sales")], limit=3, offset=o) for o in (0, 3, 6)]
    assert [m["entity_id"] for p in pages for m in p["matches"]] == whole["entities"]["matched"]
    assert [m["rank"] for p in pages for m in p["matches"]] == list(range(1, 8))
    assert pages[0]["truncated"] is True
    assert pages[0]["coverage"] == {"completeness_licensed": False, "withheld_because": "truncated"}
    assert all(p["counts"] == whole["counts"] for p in pages)


def test_list_limit_bounds_the_lists_and_never_the_counts(client, tmp_path):
    people = [f"p{i}" for i in range(5)]
    ws = loaded(client, tmp_path, people, roles=[role(p, function="Marketing") for p in people])
    body = search(client, ws, [c("held_role", "function", "eq", "Sales")], list_limit=2)
    assert body["entities"]["none"] == ["p0", "p1"] and body["counts"]["none"] == 5
    assert body["none"][0]["total"] == 5 and len(body["none"][0]["entity_ids"]) == 2
    assert len(body["groups"][0]["absence"]["none"]) == 0   # everyone holds a role: none are absent
    assert body["list_limit"] == 2


def test_entity_ids_deliver_only_those_with_the_whole_sets_counts_and_ranks(client, tmp_path):
    people = ["a", "b", "c"]
    ws = loaded(client, tmp_path, people, roles=[role(p) for p in people])
    body = search(client, ws, [c("held_role", "function", "eq", "Sales")], entity_ids=["c"])
    assert [(m["entity_id"], m["rank"]) for m in body["matches"]] == [("c", 3)]
    assert body["counts"]["matched"] == 3
    assert body["entities"]["matched"] == ["c"]


# Refusals ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("constraints, title", [
    ([], "`constraints` is empty"),
    ([{"relation": "held_role", "slot": "seniority", "op": "in", "value": "VP"}], "constraints[0] is malformed"),
    ([{"relation": "held_role", "slot": "seniority", "op": "between", "value": "VP"}], "constraints[0] is malformed"),
    ([{"relation": "held_role", "slot": "seniority", "value": "VP"}], "constraints[0] is malformed"),
    ([c("held_role", "function", "eq", "Sales"), "VP"], "constraints[1] is malformed"),
    ([c("held_role", "function", "gte", "Sales")], "a constraint asks its slot something its type cannot answer"),
    ([c("held_role", "company", "lte", "Acme")], "a constraint asks its slot something its type cannot answer"),
    ([c("engagement", "hourly_rate_usd", "gte", "1,5")], "a constraint asks its slot something its type cannot answer"),
    ([c("held_role", "period_from", "gte", "spring")], "a constraint asks its slot something its type cannot answer"),
    ([c("held_role", "seniority", "gte", "Principal")], "a constraint asks its slot something its type cannot answer"),
])
def test_malformed_constraints_are_422_search_constraint_invalid(client, constraints, title):
    ws = new_workspace(client)
    r = client.post("/v1/public/search", json={"workspace_id": ws, "constraints": constraints})
    assert r.status_code == 422
    assert r.json()["detail"]["type"] == "search_constraint_invalid"
    assert r.json()["detail"]["title"] == title


def test_brief_and_constraints_are_exactly_one_and_a_brief_needs_a_model(client):
    ws = new_workspace(client)
    for body in ({"workspace_id": ws}, {"workspace_id": ws, "brief": "x", "constraints": SALES}):
        r = client.post("/v1/public/search", json=body)
        assert r.status_code == 422
        assert r.json()["detail"]["title"] == "send exactly one of `brief` and `constraints`"
    r = client.post("/v1/public/search", json={"workspace_id": ws, "brief": "VP Sales in DACH"})
    assert r.status_code == 503
    assert r.json() == {"type": "compile_unavailable", "reason": "compile requires a model; pass constraints"}


@pytest.mark.parametrize("extra", [{"as_of": "2024-13"}, {"as_of": "2024"}, {"list_limit": 201}, {"limit": 501},
                                   {"offset": -1}, {"detail": "verbose"}, {"surprise": 1}])
def test_malformed_request_fields_are_422(client, extra):
    ws = new_workspace(client)
    r = client.post("/v1/public/search", json={"workspace_id": ws, "constraints": SALES, **extra})
    assert r.status_code == 422 and r.json()["detail"]["type"] == "validation_error"


def test_an_unknown_workspace_is_404(client):
    r = client.post("/v1/public/search", json={"workspace_id": "nope", "constraints": SALES})
    assert r.status_code == 404 and r.json()["detail"]["type"] == "workspace_not_found"


def test_the_same_request_gives_the_same_answer(client, tmp_path):
    people = ["b", "a", "c"]
    ws = loaded(client, tmp_path, people, roles=[role(p, "VP" if p != "a" else "SVP") for p in people])
    one = search(client, ws, VP_DACH)
    two = search(client, ws, VP_DACH)
    for body in (one, two):
        body.pop("request_id")
    assert one == two
    assert one["entities"]["matched"] == ["b", "c", "a"]   # distance 0, 0 (by id), then 1 rung


def test_in_ne_and_contains(client, tmp_path):
    ws = loaded(client, tmp_path, ["s", "m", "o"],
                roles=[role("s", company="Kestrel Pumps AG"), role("m", function="Marketing", company="Lumen"),
                       role("o", function="Ops", company="Corvid Freight")])
    body = search(client, ws, [c("held_role", "function", "in", ["Sales", "Operations"])])
    assert body["entities"]["matched"] == ["o", "s"]
    assert body["expansion"] == ["function: in Sales, Operations → {Sales, Operations}"]
    body = search(client, ws, [c("held_role", "function", "ne", "Sales")])
    assert body["entities"]["matched"] == ["m", "o"] and body["entities"]["none"] == ["s"]
    assert body["expansion"] == ["function: ≠ Sales → not {Sales}"]
    body = search(client, ws, [c("held_role", "company", "contains", "pumps")])
    assert body["entities"]["matched"] == ["s"]



def test_a_length_is_computed_from_the_rows_dates_with_the_arithmetic_shown(client, tmp_path):
    """held_role.years (the pack's length_slot): the period's length in years, from period_from's
    first day to period_to's last (to as_of's last day, or today, while open) — `why.from:
    "computed"` with the arithmetic; a bare year cannot be counted in years, so it is unanswerable."""
    ws = loaded(client, tmp_path, ["a", "b", "c", "d"], roles=[
        role("a", started="2016-03", ended="2018-09"),      # 944 days = 2.58 years
        role("b", started="2010-01"),                       # open: counted to today
        role("c", started="2015", ended="2019-06"),         # a bare year: not computable
        role("d", started="2019-01", ended="2019-06")])     # 181 days
    body = search(client, ws, [c("held_role", "years", "gte", 2)])
    assert body["entities"] == {"matched": ["a", "b"], "none": ["d"], "not_recorded": [], "undetermined": ["c"]}
    assert body["coverage"]["narrowed_by"] == ["slot_unrecorded_rows_unanswerable:held_role"]
    a = next(m for m in body["matches"] if m["entity_id"] == "a")
    assert a["rows"][0]["computed"]["years"] == {"value": 2.6,
                                                 "arithmetic": "2016-03-01 to 2018-09-30: 944 days = 2.6 years"}
    assert search(client, ws, [c("held_role", "years", "gte", 2.6)])["entities"]["matched"] == ["b"]  # 2.58 < 2.6

    compact = search(client, ws, [c("held_role", "years", "gte", 2)], detail="compact", entity_ids=["b"])
    why = compact["matches"][0]["why"][0]
    assert why["from"] == "computed" and why["condition"] == "held_role.years ≥ 2"
    assert why["arithmetic"].startswith("2010-01-01 to ") and why["arithmetic"].endswith("(open: counted to today)")
    # at as_of the length so far: a had held the role 13 months by March 2017
    at = search(client, ws, [c("held_role", "years", "gte", 2)], as_of="2017-03")
    assert at["entities"]["matched"] == ["b"] and "a" in at["entities"]["none"]
    b = next(m for m in at["matches"] if m["entity_id"] == "b")
    assert b["rows"][0]["computed"]["years"]["arithmetic"] == (
        "2010-01-01 to 2017-03-31: 2647 days = 7.2 years (open: counted to as_of)")

    slots = client.get(f"/v1/public/workspaces/{ws}").json()["relations"][0]["slots"]
    assert next(s for s in slots if s["slot"] == "years")["computed"]
    src = write_duckdb(tmp_path / "y.duckdb", {"roles": (["person_id", "y"], [{"person_id": "a", "y": "3"}])})
    r = client.post(f"/v1/public/workspaces/{ws}/loads", json={"source": str(src), "relations": [
        {"relation": "held_role", "table": "roles", "entity_column": "person_id", "slots": {"years": "y"}}]})
    assert r.status_code == 422 and r.json()["detail"]["reason"] == "slot_computed"


# The verdict cache ------------------------------------------------------------------------------
def _answer(body: dict) -> dict:
    return {k: body[k] for k in ("entities", "counts", "matches", "coverage", "groups") if k in body}


def test_repeated_and_refined_searches_read_cached_verdicts_and_a_write_moves_past_them(client, tmp_path):
    from relations_helpers import export, load_body

    src = export(tmp_path / "cache.duckdb", ["a", "b", "c"],
                 roles=[role("a"), role("b"), role("c", function="Marketing")],
                 screenings=[screening("a"), screening("b", outcome="failed"), screening("c")],
                 screened=["a", "b", "c"])
    ws = new_workspace(client)
    load(client, ws, load_body(src))
    cache = client.corpus.relations.verdicts
    passed = SALES + [c("screening", "outcome", "eq", "passed")]
    hits = cache.hits
    first, second, third = (search(client, ws, passed) for _ in range(3))
    # first: computed in one statement; second: each relation apart, cached; third: the cached plan
    assert _answer(first) == _answer(second) == _answer(third)
    assert first["entities"]["matched"] == ["a"] and cache.hits > hits
    # a refinement that changes only the screening constraint reuses the held_role verdicts
    failed = SALES + [c("screening", "outcome", "eq", "failed")]
    before = cache.hits
    assert search(client, ws, failed)["entities"]["matched"] == ["b"]
    assert search(client, ws, failed)["entities"]["matched"] == ["b"]
    assert cache.hits > before
    # as_of is part of what was cached: another as_of is its own answer
    assert search(client, ws, passed, as_of="2010-01")["entities"]["matched"] == []
    # a correction moves the workspace past every cached verdict
    row_id = next(m["rows"][0]["row_id"] for m in third["matches"] if m["entity_id"] == "a")
    r = client.post("/v1/public/corrections", json={"workspace_id": ws, "row_id": row_id, "reason": "not Sales"})
    assert r.status_code == 200
    after = search(client, ws, passed)
    assert after["entities"]["matched"] == [] and after["entities"]["undetermined"] == ["a"]
    # and so does a load whose source changed
    export(src, ["a", "b", "c"], roles=[role("a", function="Marketing", role_id="fixed"), role("b"), role("c")],
           screenings=[screening("a"), screening("b", outcome="failed"), screening("c")], screened=["a", "b", "c"])
    load(client, ws, load_body(src))
    assert search(client, ws, passed)["entities"]["matched"] == ["c"]
