"""LlamaIndex: `RefinderyRetriever`, a `llama_index.core` retriever over a Refindery server's page search
(`pip install 'refindery-client[llamaindex]'`).

    from refindery.client.llamaindex import RefinderyRetriever
    retriever = RefinderyRetriever(base_url="http://127.0.0.1:8000", similarity_top_k=4)
    nodes = retriever.retrieve("how do I pretty-print JSON")

One `NodeWithScore` per page, best first: a `TextNode` of its best snippet (id `<page_id>:<chunk_id>`)
with the same metadata as the LangChain retriever's Documents, and the page's score. Sync (`retrieve`)
and async (`aretrieve`); `similarity_top_k`, `workspace`, `filters` and `search_kwargs` as in LangChain's.
"""
from __future__ import annotations

from typing import Any

from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from .documents import page_metadata, page_text
from .models import SearchResponse
from .sync import AsyncClient, Client


class RefinderyRetriever(BaseRetriever):
    def __init__(self, base_url: str = "http://127.0.0.1:8000", api_key: str | None = None, timeout: float = 30.0,
                 uds: str | None = None, similarity_top_k: int = 4, workspace: str | None = None,
                 filters: dict[str, Any] | None = None, search_kwargs: dict[str, Any] | None = None, **kwargs: Any):
        self._connection = {"base_url": base_url, "api_key": api_key, "timeout": timeout, "uds": uds}
        self._params = {**(search_kwargs or {}), "k": similarity_top_k, "workspace": workspace, "filters": filters}
        self._params = {k: v for k, v in self._params.items() if v is not None}
        self._client: Client | None = None
        super().__init__(**kwargs)

    @staticmethod
    def _nodes(resp: SearchResponse) -> list[NodeWithScore]:
        out = []
        for h in resp.pages:
            md = page_metadata(h)
            node = TextNode(text=page_text(h), id_=f"{h.page_id}:{md['chunk_id']}", metadata=md,
                            excluded_embed_metadata_keys=list(md), excluded_llm_metadata_keys=list(md))
            out.append(NodeWithScore(node=node, score=h.score))
        return out

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        if self._client is None:
            self._client = Client(**self._connection)
        return self._nodes(self._client.search(query_bundle.query_str, **self._params))

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        async with AsyncClient(**self._connection) as client:
            return self._nodes(await client.search(query_bundle.query_str, **self._params))
