"""LangChain: `RefinderyRetriever`, a `langchain_core` retriever over a Refindery server's page search
(`pip install 'refindery-client[langchain]'`).

    from refindery.client.langchain import RefinderyRetriever
    retriever = RefinderyRetriever(base_url="http://127.0.0.1:8000", k=4)
    docs = retriever.invoke("how do I pretty-print JSON")

One Document per page, best first: its best snippet (a whole matched chunk) as `page_content`; in
`metadata` the page's url, title, domain, score, rank, page_id, last_seen and the snippet's chunk_id,
char_start, char_end (offsets in the page's text) and section_path. `k`, `workspace`, `filters` and any
other search parameter (`search_kwargs`: rerank, fusion, ...) are fields; `invoke(query, k=2)` overrides
them for one call. Sync and async (`ainvoke`).
"""
from __future__ import annotations

from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import PrivateAttr

from .documents import page_metadata, page_text
from .models import SearchResponse
from .sync import AsyncClient, Client


class RefinderyRetriever(BaseRetriever):
    """Pages of a Refindery server as LangChain Documents (see the module's docstring)."""

    base_url: str = "http://127.0.0.1:8000"
    api_key: str | None = None
    timeout: float = 30.0
    uds: str | None = None
    k: int = 4
    workspace: str | None = None
    filters: dict[str, Any] | None = None
    search_kwargs: dict[str, Any] = {}

    _client: Client | None = PrivateAttr(default=None)

    def _params(self, overrides: dict[str, Any]) -> dict[str, Any]:
        params = {**self.search_kwargs, "k": self.k, "workspace": self.workspace, "filters": self.filters}
        params.update(overrides)
        return {k: v for k, v in params.items() if v is not None}

    def _connection(self) -> dict[str, Any]:
        return {"base_url": self.base_url, "api_key": self.api_key, "timeout": self.timeout, "uds": self.uds}

    @staticmethod
    def _documents(resp: SearchResponse) -> list[Document]:
        return [Document(page_content=page_text(h), metadata=page_metadata(h), id=h.page_id) for h in resp.pages]

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun,
                                **kwargs: Any) -> list[Document]:
        if self._client is None:
            self._client = Client(**self._connection())
        return self._documents(self._client.search(query, **self._params(kwargs)))

    async def _aget_relevant_documents(self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun,
                                       **kwargs: Any) -> list[Document]:
        async with AsyncClient(**self._connection()) as client:   # one per call: a loop of its own each time
            return self._documents(await client.search(query, **self._params(kwargs)))
