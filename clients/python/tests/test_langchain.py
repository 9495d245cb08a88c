"""LangChain: RefinderyRetriever passes LangChain's own standard retriever tests (langchain-tests,
RetrieversIntegrationTests) against the real server, and says what a Document carries."""
from __future__ import annotations

import asyncio

import pytest
from langchain_tests.integration_tests import RetrieversIntegrationTests

from refindery.client.langchain import RefinderyRetriever

from conftest import BASE_URL

_live: dict = {}


@pytest.fixture(autouse=True)
def _serve(server):
    """The standard tests build the retriever from `retriever_constructor_params`: the live server's."""
    _live.update(base_url=BASE_URL, uds=server.uds, api_key=server.token)


class TestRefinderyRetriever(RetrieversIntegrationTests):
    @property
    def retriever_constructor(self) -> type[RefinderyRetriever]:
        return RefinderyRetriever

    @property
    def retriever_constructor_params(self) -> dict:
        return dict(_live)

    @property
    def retriever_query_example(self) -> str:
        return "how do I pretty-print JSON"


def test_documents_carry_the_snippet_and_the_page(server):
    r = RefinderyRetriever(base_url=BASE_URL, uds=server.uds, api_key=server.token, k=3,
                           search_kwargs={"highlight": False})
    docs = r.invoke("how do I pretty-print JSON")
    assert 1 <= len(docs) <= 3
    d = docs[0]
    md = d.metadata
    assert d.page_content and md["rank"] == 1 and md["url"].startswith("http") and md["page_id"] == d.id
    assert md["char_end"] > md["char_start"] >= 0 and isinstance(md["chunk_id"], int) and md["score"] > 0
    assert [x.metadata["page_id"] for x in r.invoke("how do I pretty-print JSON", k=2)] == \
        [x.metadata["page_id"] for x in docs[:2]]
    adocs = asyncio.run(r.ainvoke("how do I pretty-print JSON"))
    assert [x.metadata["page_id"] for x in adocs] == [x.metadata["page_id"] for x in docs]
    narrowed = RefinderyRetriever(base_url=BASE_URL, uds=server.uds, api_key=server.token, k=5,
                                  filters={"domain": [md["domain"]]}).invoke("tables")
    assert narrowed and {x.metadata["domain"] for x in narrowed} == {md["domain"]}
