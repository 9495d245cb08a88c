"""Ideas: a question about an idea is answered over the parts of the workspace's documents, found
by the real hybrid pipeline (tantivy + FAISS + the bundled MiniLM), grouped by document and part."""
from __future__ import annotations

import pytest

DOCS = [
    {"url": "https://wiki.example/pricing", "title": "Pricing review",
     "body_text": "# Pricing review\n\n## Risks\n\nThe main pricing risk is discounting below cost when a competitor "
                  "undercuts us. We watch margin erosion every quarter.\n\n## Process\n\nPrices are set by the "
                  "product council twice a year."},
    {"url": "https://wiki.example/hiring", "title": "Hiring plan",
     "body_text": "# Hiring plan\n\nWe will hire two engineers and a designer next year. Interviews take two weeks."},
    {"url": "https://wiki.example/board", "title": "Board notes",
     "body_text": "# Board notes\n\n## Commercial\n\nThe board asked how pricing risk from currency swings is "
                  "hedged. Finance answered that contracts are priced in euros."},
]


@pytest.fixture(scope="module")
def client(tmp_path_factory, pool):
    from docs.examples import make_client

    cl = make_client(tmp_path_factory.mktemp("ideas"), pool)
    ws = cl.post("/v1/public/workspaces", json={"workspace_id": "acme"}).json()["workspace_id"]
    r = cl.post("/v1/pages", json={"workspace": ws, "pages": DOCS})
    assert r.status_code == 200 and not r.json()["errors"]
    cl.post("/v1/pages", json={"workspace": "elsewhere", "pages": [
        {"url": "https://other.example/p", "title": "Other", "body_text": "Pricing risk elsewhere, not in acme."}]})
    yield cl
    cl.corpus.close()


def test_an_idea_is_answered_by_document_and_part_with_quotes(client):
    r = client.post("/v1/public/search", json={"workspace_id": "acme", "idea": "where do we discuss pricing risk?"})
    assert r.status_code == 200, r.text
    body = r.json()
    urls = [d["url"] for d in body["documents"]]
    assert set(urls[:2]) == {"https://wiki.example/pricing", "https://wiki.example/board"}
    assert "https://other.example/p" not in urls          # only the workspace's own documents
    pricing = next(d for d in body["documents"] if d["url"].endswith("/pricing"))
    part = pricing["parts"][0]
    assert part["part"].endswith("Risks")
    passage = part["passages"][0]
    assert passage["quote"] == ("The main pricing risk is discounting below cost when a competitor undercuts us.")
    page = client.get(f"/v1/pages/{pricing['page_id']}").json()
    loc = passage["location"]
    assert page["body_text"][loc["char_start"]:loc["char_end"]] == passage["quote"]
    assert body["map_version"] == 1 and "coverage" not in body


def test_idea_goes_on_its_own(client):
    r = client.post("/v1/public/search", json={"workspace_id": "acme", "idea": "pricing", "constraints": [
        {"relation": "held_role", "slot": "function", "op": "eq", "value": "Sales"}]})
    assert r.status_code == 422 and r.json()["detail"]["type"] == "search_request_invalid"
