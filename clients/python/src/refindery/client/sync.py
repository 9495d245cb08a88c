"""`Client` and `AsyncClient`: one set of operations (`_Operations`), two transports.

Each operation builds its request — validated by the client's own models first (refindery.client.models)
— and says how to read the reply; `Client._call` sends it with httpx and returns the reply,
`AsyncClient._call` returns an awaitable of it. Retries (429, 503, connection errors; never another 4xx)
wait `retry_after` when the server gives it, else `backoff * 2**attempt` seconds (at most 30).
"""
from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Callable, Iterator

import httpx
from pydantic import ValidationError

from . import models as m
from .errors import Invalid, RateLimited, RefinderyError, Unavailable, from_response

RETRY_STATUSES = (429, 503)
MAX_WAIT_S = 30.0


@dataclass
class _Op:
    method: str
    path: str
    json: Any = None
    params: dict[str, Any] = field(default_factory=dict)
    read: Callable[[Any], Any] = lambda body: body
    text: bool = False      # the reply is text (a packet's Markdown), not JSON


def _build(model: type[m.Request], **fields) -> m.Request:
    try:
        return model(**fields)
    except ValidationError as exc:   # before anything is sent: the same type as the server's 422
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"]) or model.__name__
        raise Invalid(422, "validation_error", f"invalid {model.__name__}: {where}: {first['msg']}",
                      {"type": "validation_error", "errors": exc.errors(include_url=False)}) from exc


class _Operations:
    """Every operation once; `_call` is the transport's."""

    def _call(self, op: _Op):
        raise NotImplementedError

    # Refind search -----------------------------------------------------------------------------
    def search(self, query: str, **params) -> m.SearchResponse:
        """POST /v1/search: every SearchRequest field as a keyword (k, offset, filters, explain, rerank ...)."""
        req = _build(m.SearchRequest, query=query, **params)
        return self._call(_Op("POST", "/v1/search", req.body(), read=m.SearchResponse.model_validate))

    def compare(self, query: str, models: list[str], **params) -> m.CompareResponse:
        """POST /v1/compare: the pipeline once per embedder, with their agreement."""
        req = _build(m.CompareRequest, query=query, models=models, **params)
        return self._call(_Op("POST", "/v1/compare", req.body(), read=m.CompareResponse.model_validate))

    def feedback(self, query_id: str, page_id: str, kind: str) -> dict:
        req = _build(m.FeedbackIn, query_id=query_id, page_id=page_id, kind=kind)
        return self._call(_Op("POST", "/v1/feedback", req.body()))

    def choices(self, workspace: str | None = None) -> dict:
        """GET /v1/feedback: the pages chosen for the workspace's searches, which shortcuts put first."""
        return self._call(_Op("GET", "/v1/feedback", params={"workspace": workspace} if workspace else {}))

    def clear_feedback(self, workspace: str | None = None, query_id: str | None = None,
                       page_id: str | None = None) -> dict:
        """DELETE /v1/feedback: forget judgments (and their shortcuts) — one query's, one page's, or all."""
        params = {k: v for k, v in (("workspace", workspace), ("query_id", query_id), ("page_id", page_id)) if v}
        return self._call(_Op("DELETE", "/v1/feedback", params=params))

    # Pages -------------------------------------------------------------------------------------
    def upsert_pages(self, pages: list[dict], workspace: str | None = None) -> m.UpsertResponse:
        """POST /v1/pages: one batch (at most 1000 records); each item's status in `.items`."""
        req = _build(m.PagesUpsert, pages=pages, workspace=workspace)
        return self._call(_Op("POST", "/v1/pages", req.body(), read=m.UpsertResponse.model_validate))

    def get_page(self, page_id: str) -> m.Page:
        return self._call(_Op("GET", f"/v1/pages/{_segment(page_id)}", read=m.Page.model_validate))

    def delete_page(self, page_id: str) -> dict:
        return self._call(_Op("DELETE", f"/v1/pages/{_segment(page_id)}"))

    def start_import(self, kind: str, source: str, entries: list[dict], *, fetch: bool = True, skip: str = "",
                     allow: str = "", workspace: str | None = None) -> dict:
        """POST /v1/imports: one batch of a history or bookmarks import ({url, title?, visits: [ISO times],
        entities?, first_seen?} each, at most 5,000): written at once, texts fetched by the server in the
        background. The same kind and source join one import."""
        body = {"kind": kind, "source": source, "entries": entries, "fetch": fetch, "skip": skip, "allow": allow,
                **({"workspace": workspace} if workspace else {})}
        return self._call(_Op("POST", "/v1/imports", body))

    def import_status(self, import_id: str | None = None) -> dict:
        """GET /v1/imports/{id}: counts per status and the failures' reasons; no id: every import."""
        return self._call(_Op("GET", f"/v1/imports/{_segment(import_id)}" if import_id else "/v1/imports"))

    def forget(self, url: str | None = None, *, domain: str | None = None, since: Any = None, until: Any = None,
               workspace: str | None = None) -> dict:
        """POST /v1/forget: the pages at a URL, of a domain and its subdomains, or seen between `since`
        and `until` (datetimes or ISO strings; all given must hold) — gone from the store, every index
        and the query log. `{"forgotten": n, "page_ids": [...]}`."""
        body = {k: v.isoformat() if hasattr(v, "isoformat") else v for k, v in
                (("url", url), ("domain", domain), ("since", since), ("until", until), ("workspace", workspace))
                if v is not None}
        return self._call(_Op("POST", "/v1/forget", body))

    def similar(self, page_id: str, mediation: str = "vector", k: int = 10) -> m.SimilarResponse:
        return self._call(_Op("GET", f"/v1/pages/{_segment(page_id)}/similar",
                              params={"mediation": mediation, "k": k}, read=m.SimilarResponse.model_validate))

    # Relation search ---------------------------------------------------------------------------
    def relation_search(self, workspace_id: str, **params) -> m.RelationSearchResponse:
        """POST /v1/public/search: constraints, brief, idea, criteria, as_of, limit ... (`detail="compact"`
        for the compact reply)."""
        req = _build(m.RelationSearchRequest, workspace_id=workspace_id, **params)
        return self._call(_Op("POST", "/v1/public/search", req.body(),
                              read=m.RelationSearchResponse.model_validate))

    def relation_workspaces(self) -> dict:
        """GET /v1/public/workspaces: the workspaces the key may read, each with its relations, slots,
        operators and allowed values (with how many entities hold each) — what constraints may name."""
        return self._call(_Op("GET", "/v1/public/workspaces"))

    def facts(self, **body) -> m.FactsResponse:
        """POST /v1/public/facts (the body as the server documents it)."""
        return self._call(_Op("POST", "/v1/public/facts", body, read=m.FactsResponse.model_validate))

    # Evidence ----------------------------------------------------------------------------------
    def evidence(self, query: str, **params) -> m.EvidenceResponse:
        """POST /v1/evidence: writes an evidence packet; the reply says where and what it holds."""
        req = _build(m.EvidenceRequest, query=query, **params)
        return self._call(_Op("POST", "/v1/evidence", req.body(), read=m.EvidenceResponse.model_validate))

    def read_packet(self, session_id: str, topic: str | None = None, part: str = "packet",
                    workspace: str | None = None) -> str:
        """GET /v1/evidence/packets/{session_id}: the packet's (or appendix's) Markdown; sessions are
        per workspace (default: the key's)."""
        params = {"part": part} | ({"topic": topic} if topic else {}) | ({"workspace": workspace} if workspace else {})
        return self._call(_Op("GET", f"/v1/evidence/packets/{_segment(session_id)}", params=params, text=True))

    # Operations ----------------------------------------------------------------------------------
    def request(self, method: str, path: str, json: Any = None, params: dict[str, Any] | None = None) -> Any:
        """Any route by method and path, JSON in and out: for what the typed operations do not cover
        (`refindery`'s own command line reaches its server this way). The same retries and typed errors."""
        return self._call(_Op(method.upper(), path, json, dict(params or {})))

    def status(self) -> dict:
        return self._call(_Op("GET", "/v1/status"))

    def health(self) -> dict:
        return self._call(_Op("GET", "/healthz"))


def _segment(value: str) -> str:
    return httpx.URL("/" + value.replace("/", "%2F")).raw_path.decode()[1:]


def _client_args(base_url: str, api_key: str | None, timeout: float, uds: str | None, headers: dict | None,
                 transport_cls) -> dict:
    h = {"user-agent": "refindery-client/0.1", **(headers or {})}
    if api_key:
        h["authorization"] = f"Bearer {api_key}"
    args: dict[str, Any] = {"base_url": base_url, "timeout": timeout, "headers": h}
    if uds:
        args["transport"] = transport_cls(uds=uds)
    return args


def _delay(error: Exception, attempt: int, max_retries: int, backoff: float) -> float:
    """Seconds to wait before trying again, or `error` raised when it is not worth another try."""
    if not isinstance(error, (RateLimited, Unavailable, httpx.ConnectError, httpx.ConnectTimeout)) \
            or attempt >= max_retries:
        raise error
    if isinstance(error, RateLimited) and error.retry_after is not None:
        return min(MAX_WAIT_S, max(0.0, error.retry_after))
    return min(MAX_WAIT_S, backoff * 2 ** attempt)


class _Pager:
    """The paging of `iter_pages`: the next request's parameters, and which hits of a reply to yield."""

    def __init__(self, page_size: int, limit: int | None, params: dict):
        self.size, self.limit, self.params = page_size, limit, params
        self.offset, self.seen, self.done = params.pop("offset", 0), 0, limit is not None and limit <= 0

    def next(self) -> dict:
        return {**self.params, "k": self.size, "offset": self.offset}

    def take(self, resp: m.SearchResponse) -> list[m.PageHit]:
        hits = resp.pages if self.limit is None else resp.pages[: self.limit - self.seen]
        self.seen += len(hits)
        self.offset += self.size
        self.done = (not resp.pages or self.offset >= resp.total
                     or (self.limit is not None and self.seen >= self.limit))
        return hits


def _reply(op: _Op, response: httpx.Response):
    if response.status_code >= 400:
        try:
            body = response.json()
        except ValueError:
            body = response.text
        raise from_response(response.status_code, body, dict(response.headers))
    return op.read(response.text if op.text else response.json())


class Client(_Operations):
    """A synchronous client: `Client(base_url, api_key=None, timeout=30, max_retries=3, backoff=0.5,
    uds=None)`; `uds` is a Unix socket path (the base URL's host is then only a name)."""

    def __init__(self, base_url: str = "http://127.0.0.1:8000", api_key: str | None = None, timeout: float = 30.0,
                 max_retries: int = 3, backoff: float = 0.5, uds: str | None = None, headers: dict | None = None):
        self.max_retries, self.backoff = max_retries, backoff
        self._http = httpx.Client(**_client_args(base_url, api_key, timeout, uds, headers, httpx.HTTPTransport))

    def _call(self, op: _Op):
        for attempt in range(self.max_retries + 1):
            try:
                return _reply(op, self._http.request(op.method, op.path, json=op.json, params=op.params or None))
            except (RefinderyError, httpx.TransportError) as exc:
                time.sleep(_delay(exc, attempt, self.max_retries, self.backoff))

    def iter_pages(self, query: str, page_size: int = 10, limit: int | None = None, **params) -> Iterator[m.PageHit]:
        """Every page of a ranking, `page_size` at a time (offset 0, page_size, ...), at most `limit`."""
        pager = _Pager(page_size, limit, params)
        while not pager.done:
            yield from pager.take(self.search(query, **pager.next()))

    def export_pages(self, workspace: str | None = None) -> Iterator[dict]:
        """GET /v1/export/pages: the workspace's pages (default: the key's) one at a time as they stream, each
        a dict in the shape `ingest` reads back (url, title, body_text, seen_at, ...) with its visits."""
        params = {"workspace": workspace} if workspace else None
        with self._http.stream("GET", "/v1/export/pages", params=params) as response:
            if response.status_code >= 400:
                response.read()
                _reply(_Op("GET", "/v1/export/pages"), response)
            for line in response.iter_lines():
                if line.strip():
                    yield json.loads(line)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class AsyncClient(_Operations):
    """The same operations, awaited: `async with AsyncClient(...) as rf: await rf.search(...)`."""

    def __init__(self, base_url: str = "http://127.0.0.1:8000", api_key: str | None = None, timeout: float = 30.0,
                 max_retries: int = 3, backoff: float = 0.5, uds: str | None = None, headers: dict | None = None):
        self.max_retries, self.backoff = max_retries, backoff
        self._http = httpx.AsyncClient(**_client_args(base_url, api_key, timeout, uds, headers,
                                                      httpx.AsyncHTTPTransport))

    async def _call(self, op: _Op):
        for attempt in range(self.max_retries + 1):
            try:
                return _reply(op, await self._http.request(op.method, op.path, json=op.json,
                                                           params=op.params or None))
            except (RefinderyError, httpx.TransportError) as exc:
                await asyncio.sleep(_delay(exc, attempt, self.max_retries, self.backoff))

    async def iter_pages(self, query: str, page_size: int = 10, limit: int | None = None,
                         **params) -> AsyncIterator[m.PageHit]:
        """Every page of a ranking, `page_size` at a time, at most `limit` (`async for`)."""
        pager = _Pager(page_size, limit, params)
        while not pager.done:
            for hit in pager.take(await self.search(query, **pager.next())):
                yield hit

    async def export_pages(self, workspace: str | None = None) -> AsyncIterator[dict]:
        """GET /v1/export/pages, one page at a time as it streams (`async for`)."""
        params = {"workspace": workspace} if workspace else None
        async with self._http.stream("GET", "/v1/export/pages", params=params) as response:
            if response.status_code >= 400:
                await response.aread()
                _reply(_Op("GET", "/v1/export/pages"), response)
            async for line in response.aiter_lines():
                if line.strip():
                    yield json.loads(line)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()
