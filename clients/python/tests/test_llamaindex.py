"""LlamaIndex: RefinderyRetriever returns NodeWithScore results with the page's metadata, sync and async,
against the real server."""
from __future__ import annotations

import asyncio

from llama_index.core.schema import NodeWithScore, TextNode

from refindery.client import Client
from refindery.client.llamaindex import RefinderyRetriever

from conftest import BASE_URL

QUERY = "how do I pretty-print JSON"


def test_nodes_are_the_pages_with_their_snippets_and_scores(server):
    r = RefinderyRetriever(base_url=BASE_URL, uds=server.uds, api_key=server.token, similarity_top_k=3)
    nodes = r.retrieve(QUERY)
    with Client(BASE_URL, api_key=server.token, uds=server.uds) as rf:
        pages = rf.search(QUERY, k=3).pages
    assert [n.node.metadata["page_id"] for n in nodes] == [p.page_id for p in pages]
    for n, p in zip(nodes, pages):
        assert isinstance(n, NodeWithScore) and isinstance(n.node, TextNode)
        # (two searches a moment apart: where recency decay is configured, it moves the score by a hair)
        assert abs(n.score - p.score) < 1e-6 * p.score and n.node.get_content() == p.snippets[0].text
        md = n.node.metadata
        assert md["url"] == p.url and md["chunk_id"] == p.snippets[0].chunk_id
        assert (md["char_start"], md["char_end"]) == (p.snippets[0].char_start, p.snippets[0].char_end)
        assert n.node.node_id == f"{p.page_id}:{p.snippets[0].chunk_id}"
    anodes = asyncio.run(r.aretrieve(QUERY))
    assert [n.node.node_id for n in anodes] == [n.node.node_id for n in nodes]
    one = RefinderyRetriever(base_url=BASE_URL, uds=server.uds, api_key=server.token, similarity_top_k=1,
                             filters={"domain": [pages[0].domain]}).retrieve(QUERY)
    assert len(one) == 1 and one[0].node.metadata["domain"] == pages[0].domain


def test_errors_reach_the_caller_typed(server):
    from refindery.client import Unauthorized

    r = RefinderyRetriever(base_url=BASE_URL, uds=server.uds, api_key="rfy_not_a_key")
    try:
        r.retrieve(QUERY)
    except Unauthorized as exc:
        assert exc.status == 401
    else:
        raise AssertionError("a wrong key was let in")
