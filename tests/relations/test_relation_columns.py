"""The enumeration judged over a relation's rows held in memory (indexes/judging/held_columns.py, in_memory.py) gives
exactly what its SQL gives: each relation's per-entity aggregate and the plan's statuses, column for
column, over messy data — values the vocabulary cannot place, missing values, bare years, open and
straddling periods, a row tied to nobody, a retired row, a withheld row, rows of document scopes —
for many constraint sets, with and without as_of, as every reader and as a scoped one.
"""
from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa
import pytest
from relations_helpers import c, export, load, load_body, new_workspace, role, screening, search, write_duckdb

from engine.relations.constraints import bind, parse_constraints, parse_span
from engine.relations.plan import Plan, make_groups
from engine.relations.workspaces import open_space
from indexes.judging import statuses
from indexes.judging.held_columns import Unsupported
from indexes.judging.three_valued import Tri, compile_sql, evaluate

SENIORITY = ["IC", "Manager", "Director", "VP", "SVP", "C-level", "Vice President", "Wizard", None]
FUNCTION = ["Sales", "Marketing", "Finance", "Vertrieb", "Alchemy", None]
GEOGRAPHY = ["Germany", "Austria", "Switzerland", "Deutschland", "Sweden", "France", "Benelux", "Atlantis", None]
MONTHS = [None, "2015", "2016-03", "2018-07", "2019-01", "2020-01", "2020-02", "2021-06", "2023-11"]


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    from docs.examples import make_client

    cl = make_client(tmp_path_factory.mktemp("relation-columns"))
    cl.corpus.relations.columns.background = False   # read in the asking search: judged in memory at once
    yield cl
    cl.corpus.close()


@pytest.fixture(scope="module")
def workspace(client, tmp_path_factory):
    rng = random.Random(11)
    people = [f"p{i:03d}" for i in range(160)]
    roles, screenings = [], []
    for p in people[:140]:
        for _ in range(rng.randint(0, 4)):
            started = rng.choice(MONTHS)
            roles.append(role(p, seniority=rng.choice(SENIORITY), function=rng.choice(FUNCTION),
                              geography=rng.choice(GEOGRAPHY), started=started,
                              ended=rng.choice([None, None, "2021-06", "2018", "2024-01"]),
                              company=rng.choice(["Acme AG", "Globex", None]), title=rng.choice(["Head of X", None])))
    roles.append(role("", function="Sales"))                     # tied to nobody
    for p in people[20:150]:
        for _ in range(rng.randint(0, 3)):
            screenings.append(screening(p, outcome=rng.choice(["passed", "failed", "pending", None]),
                                        kind=rng.choice(["compliance", "conflicts", None]),
                                        on=rng.choice(MONTHS)))
    tmp = tmp_path_factory.mktemp("relation-columns-src")
    src = export(tmp / "export.duckdb", people, roles, screenings, screened=people[10:150])
    ws = new_workspace(client)
    load(client, ws, load_body(src))
    # numbers: one the loader cannot read is withheld
    eng = write_duckdb(tmp / "eng.duckdb", {"eng": (["id", "person_id", "topic", "rate"], [
        {"id": f"e{i}", "person_id": people[i % 50], "topic": rng.choice(["pricing", "ops"]),
         "rate": rng.choice(["150", "99.5", "1000", "n/a", None])} for i in range(80)])})
    load(client, ws, {"source": str(eng), "relations": [
        {"relation": "engagement", "table": "eng", "entity_column": "person_id", "key_column": "id",
         "slots": {"topic": "topic", "hourly_rate_usd": "rate"}}]})
    # a correction retires a row
    body = search(client, ws, [c("held_role", "function", "eq", "Sales")])
    row_id = body["matches"][0]["rows"][0]["row_id"]
    assert client.post("/v1/public/corrections", json={"workspace_id": ws, "row_id": row_id,
                                                       "reason": "not Sales"}).status_code == 200
    # some rows and coverage rows belong to document scopes (as a document load writes them)
    rstore = client.corpus.relations
    space = open_space(rstore, ws)
    with rstore.transaction() as con:
        for rel in space.schema.relations.values():
            table = space.shape(rel).name
            con.execute(f"UPDATE {table} SET scope = CASE WHEN hash(row_id) % 3 = 0 THEN 'hr' "
                        f"WHEN hash(row_id) % 3 = 1 THEN 'public' END WHERE workspace_id = ?", [ws])
        con.execute("UPDATE rel_coverage SET scope = 'hr' WHERE workspace_id = ? AND hash(entity_id) % 4 = 0", [ws])
    rstore.changed(ws)
    return ws


PLANS = [
    [c("held_role", "seniority", "gte", "VP"), c("held_role", "function", "eq", "Sales"),
     c("held_role", "geography", "eq", "DACH"), c("screening", "kind", "eq", "compliance"),
     c("screening", "outcome", "eq", "passed")],
    [c("held_role", "seniority", "lte", "Director"), c("held_role", "geography", "ne", "DACH")],
    [c("held_role", "function", "in", ["Sales", "Finance"]), c("held_role", "company", "contains", "acme")],
    [c("held_role", "period_from", "gte", "2019-01"), c("held_role", "period_to", "lte", "2022-01")],
    [c("held_role", "geography", "eq", "Atlantis"), c("screening", "as_of", "lte", "2020-01")],
    [c("engagement", "hourly_rate_usd", "gte", "100"), c("engagement", "topic", "eq", "pricing")],
    [c("held_role", "function", "eq", "Sales"), c("screening", "outcome", "eq", "passed", required=False),
     c("held_role", "seniority", "gte", "Director", required=False)],
    [c("held_role", "years", "gte", 2)],     # a computed length: judged in SQL
]


def _plan(client, ws, constraints, as_of, scopes):
    rstore = client.corpus.relations
    space = open_space(rstore, ws, scopes)
    bound, _ = bind(parse_constraints(constraints), space.schema, space.vocabulary)
    return rstore, Plan(space, make_groups(bound), bound, parse_span(as_of) if as_of else None, ["person"])


def _sorted(table: pa.Table) -> dict:
    table = table.filter(pa.compute.is_valid(table.column("ent_no"))).sort_by("ent_no")
    return {name: (table.schema.field(name).type, table.column(name).to_pylist()) for name in table.column_names}


@pytest.mark.parametrize("as_of", [None, "2020-01", "2019", "2024-06"])
@pytest.mark.parametrize("scopes", [None, ("hr",)])
@pytest.mark.parametrize("plan_no", range(len(PLANS)))
@pytest.mark.parametrize("direct", [True, False], ids=["mixed-radix", "occurring"])
def test_in_memory_judging_equals_the_sql(client, workspace, plan_no, as_of, scopes, direct, monkeypatch):
    if not direct:   # every combination of inputs numbered as it occurs (what a wide one takes)
        monkeypatch.setattr("indexes.judging.three_valued.DIRECT", 0)
    client.corpus.relations.verdicts.clear()
    rstore, plan = _plan(client, workspace, PLANS[plan_no], as_of, scopes)
    en = rstore.enumerator(plan)
    try:
        judged_all = True
        for rel in plan.relations:
            judged = en.judged(rel)
            if rel.length_slot and any(b.slot.name == rel.length_slot for b in plan.singles if b.rel.name == rel.name):
                assert judged is None       # computed lengths stay in SQL
                judged_all = False
                continue
            assert judged is not None
            agg, params = en.rows.aggregate(rel)
            assert _sorted(judged) == _sorted(en._arrow(agg, params)), rel.name
            en._tables[rel.name] = judged
        sql, params = statuses.statement(en.rows)
        expected = _sorted(en._arrow(sql, params))
        if judged_all:
            assert _sorted(statuses.final(en.rows, en._tables, en.universe())) == expected
        en.run()                                      # whichever way it runs, the statuses are the SQL's
        assert _sorted(en._arrow(f"SELECT * FROM {en.table}")) == expected
        assert len(expected["ent_no"][1]) > 0
        # the lists, the ranking and the page read off the held arrays equal the SQL's over the table
        specs = {f"{kind}:{s}": (kind, s) for kind in ("status",) for s in ("matched", "none", "not_recorded",
                                                                               "undetermined")}
        specs.update({f"g{g.index}:{s}": ("unit", f"g{g.index}", s) for g in plan.groups for s in ("none", "matched")})
        specs.update({f"abs:{r.name}": ("absent", r.name) for r in plan.relations})
        specs.update({f"unc:{r.name}": ("uncovered", r.name) for r in plan.relations})
        # (and the counts: the combinations of statuses with their entity counts and counter sums)
        def answer():
            dims, combos = en.combinations()
            return (en.lists(specs, 7), en.matched_ids(1000), en.page(5, 0), en.page(5, 3), en.page(5, 10_000),
                    dims, sorted(combos))

        answers = [answer()]
        assert (en.statuses.held is not None) == judged_all
        en.statuses.held = None
        answers.append(answer())
        assert answers[0] == answers[1]
    finally:
        en.drop()


def test_the_data_exercises_what_the_sql_must_handle(client, workspace):
    """The comparison above means something only if the data holds each hard case."""
    _, plan = _plan(client, workspace, PLANS[0], "2020-01", None)
    en = client.corpus.relations.enumerator(plan)
    held = en.profiles["held_role"]
    assert held.retired and held.unattributed and {"seniority", "geography"} <= held.unplaced
    assert {"seniority", "function", "geography", "period_from"} <= held.null
    _, plan = _plan(client, workspace, PLANS[5], None, None)
    assert client.corpus.relations.enumerator(plan).profiles["engagement"].withheld
    statuses = set()
    for p in PLANS[:3]:
        r = search(client, workspace, p, as_of="2020-01")
        statuses |= {k for k, v in r["counts"].items() if v}
    assert {"matched", "none", "not_recorded", "undetermined"} <= statuses


def test_searches_answer_the_same_with_the_columns_off(client, workspace):
    cols = client.corpus.relations.columns
    answers = {}
    for budget in (cols.budget, 0):
        cols.budget = budget
        client.corpus.relations.verdicts.clear()
        answers[budget] = [
            {k: v for k, v in search(client, workspace, p, as_of=a).items() if k != "request_id"}
            for p in PLANS for a in (None, "2020-01")]
    cols.budget = max(answers)
    builds = cols.builds
    search(client, workspace, PLANS[0])
    assert cols.builds == builds       # held until the workspace's next write
    for on, off in zip(answers[max(answers)], answers[0]):
        assert {k for k in on if on[k] != off[k]} == set()


def test_searches_side_by_side_answer_as_one_at_a_time(client, workspace):
    # each search judges its relations and delivers its page on shared threads, each with a cursor of
    # its own: eight searches at once (plans and as_of mixed, first and repeated) answer as alone
    def ask(plan_as_of) -> dict:
        plan, as_of = plan_as_of
        return {k: v for k, v in search(client, workspace, plan, as_of=as_of).items() if k != "request_id"}

    asks = [(p, a) for p in PLANS for a in (None, "2020-01")]
    client.corpus.relations.verdicts.clear()
    alone = [ask(x) for x in asks]
    client.corpus.relations.verdicts.clear()
    with ThreadPoolExecutor(8) as pool:
        together = list(pool.map(ask, asks * 2))
    assert together == alone * 2
    assert any(r["matches"] and r["matches"][0]["rows"] for r in alone)   # pages with rows were delivered


def test_a_write_drops_the_held_columns(client, workspace):
    cols = client.corpus.relations.columns
    search(client, workspace, PLANS[0])
    builds = cols.builds
    client.corpus.relations.changed(workspace)
    search(client, workspace, PLANS[0])
    assert cols.builds > builds


@pytest.mark.parametrize("sql, t, f", [
    ("a AND b", [True, False, False, False], [False, False, False, True]),
    ("a OR b", [True, True, True, False], [False, False, False, True]),
    ("NOT a", [False, False, False, True], [True, True, False, False]),
    ("a IS NULL", [False, False, True, False], [True, True, False, True]),
    ("a IS NOT TRUE AND NOT b IS FALSE", [False, False, True, False], [True, True, False, True]),
    ("(a OR b) AND tm <> 1", [True, False, True, False], [False, True, False, True]),
    ("NOT NOT a AND tm = 1", [False, True, False, False], [True, False, True, True]),
])
def test_three_valued_evaluation_follows_sql(sql, t, f):
    # a: TRUE, TRUE, NULL, FALSE; b: TRUE, NULL, TRUE, FALSE; tm: 0, 1, 0, 2
    env = {"a": Tri(np.array([1, 1, 0, 0], bool), np.array([0, 0, 0, 1], bool)),
           "b": Tri(np.array([1, 0, 1, 0], bool), np.array([0, 0, 0, 1], bool)),
           "tm": np.array([0, 1, 0, 2])}
    out = evaluate(compile_sql(sql), env)
    assert list(np.broadcast_to(out.t, 4)) == t and list(np.broadcast_to(out.f, 4)) == f


@pytest.mark.parametrize("sql", ["a + b", "coalesce(a, FALSE)", "a AND", "CASE WHEN a THEN b END", "a IN (1)"])
def test_what_the_evaluator_cannot_read_is_refused(sql):
    with pytest.raises(Unsupported):
        evaluate(compile_sql(sql), {"a": Tri(True, False), "b": Tri(True, False)})


def test_a_relation_with_no_rows_is_judged_as_in_sql(client, tmp_path):
    src = export(tmp_path / "roles-only.duckdb", ["a", "b"], roles=[role("a"), role("b", function="Finance")],
                 screenings=[], screened=[])
    ws = new_workspace(client)
    load(client, ws, load_body(src, screening_coverage=False))
    rstore, plan = _plan(client, ws, PLANS[0], "2020-01", None)
    en = rstore.enumerator(plan)
    try:
        for rel in plan.relations:
            agg, params = en.rows.aggregate(rel)
            assert _sorted(en.judged(rel)) == _sorted(en._arrow(agg, params))
            en._tables[rel.name] = en.judged(rel)
        sql, params = statuses.statement(en.rows)
        assert _sorted(statuses.final(en.rows, en._tables, en.universe())) == _sorted(en._arrow(sql, params))
    finally:
        en.drop()


def test_after_a_write_the_columns_are_read_apart_and_searches_meanwhile_run_in_sql(client, workspace, monkeypatch):
    import threading

    from indexes.judging.held_columns import RelationColumns

    rstore = client.corpus.relations
    cols = rstore.columns
    before = search(client, workspace, PLANS[0])
    gate = threading.Event()   # holds the reads the write starts, so a search surely comes first
    read = RelationColumns.read.__func__
    monkeypatch.setattr(RelationColumns, "read", classmethod(lambda cls, *a: (gate.wait(60), read(cls, *a))[1]))
    cols.background = True
    try:
        rstore.changed(workspace)
        _, plan = _plan(client, workspace, PLANS[0], None, None)
        en = rstore.enumerator(plan)
        try:
            assert en.judged(plan.relations[0]) is None      # not held yet: this search is judged in SQL
        finally:
            en.drop()
        during = search(client, workspace, PLANS[0])
        gate.set()
        cols.settle()
        en = rstore.enumerator(plan)
        try:
            assert en.judged(plan.relations[0]) is not None   # read meanwhile, on its own thread
        finally:
            en.drop()
        after = search(client, workspace, PLANS[0])
    finally:
        gate.set()
        cols.settle()
        cols.background = False
    same = {k: v for k, v in before.items() if k != "request_id"}
    assert {k: v for k, v in during.items() if k != "request_id"} == same
    assert {k: v for k, v in after.items() if k != "request_id"} == same


def test_a_write_reads_again_at_once_the_relations_held_before_it(client, workspace):
    rstore = client.corpus.relations
    cols = rstore.columns
    _, plan = _plan(client, workspace, PLANS[0], None, None)
    search(client, workspace, PLANS[0])          # its relations held (read in the search in this module)
    cols.background = True
    try:
        builds = cols.builds
        rstore.changed(workspace)
        cols.settle()
        assert cols.builds - builds == len(plan.relations)   # read again with no search asking
        _, plan = _plan(client, workspace, PLANS[0], None, None)
        en = rstore.enumerator(plan)
        try:
            assert all(en.judged(r) is not None for r in plan.relations)   # held at the new version
        finally:
            en.drop()
        cols.clear()                                 # nothing held: a write reads nothing
        builds = cols.builds
        rstore.changed(workspace)
        cols.settle()
        assert cols.builds == builds
    finally:
        cols.settle()
        cols.background = False


class _Sized:
    def __init__(self, nbytes):
        self.nbytes = nbytes


def test_the_column_cache_reads_in_the_background_and_drops_a_read_a_write_overtook():
    import threading

    from indexes.judging.column_cache import ColumnCache

    cache = ColumnCache(1)   # 1 MB
    gate = threading.Event()

    def slow():
        gate.wait(5)
        return _Sized(100)

    later: list = []
    assert cache.get(("ws", 1, "t"), slow, later) is None and len(later) == 1   # deferred to the caller
    cache.start(later)
    assert cache.get(("ws", 1, "t"), slow) is None                            # being read
    cache.forget("ws")                                                        # a write meanwhile
    gate.set()
    cache.settle()
    assert cache.get(("ws", 1, "t"), lambda: None) is None and cache.builds == 0   # not kept
    cache.settle()
    got = cache.get(("ws", 2, "t"), lambda: _Sized(100))
    cache.settle()
    assert got is None and cache.get(("ws", 2, "t"), lambda: _Sized(100)).nbytes == 100
    cache.get(("ws", 3, "big"), lambda: _Sized(2 * 2**20))                   # over the budget: never kept
    cache.settle()
    assert cache.get(("ws", 3, "big"), lambda: None) is None
    cache.settle()
    assert ColumnCache(0).get(("ws", 1, "t"), lambda: _Sized(1)) is None     # off
