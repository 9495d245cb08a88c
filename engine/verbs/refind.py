"""Refind search's verbs: search, compare, similar pages, a page, facets, the models, feedback and the
shortcuts it makes."""
from __future__ import annotations

from datetime import datetime

from engine.core.access import OPEN, Grant
from engine.core.corpus import read_page
from engine.core.errors import ModelUnavailable, PageNotFound, QueryNotFound
from engine.core.settings import SearchSettings
from engine.refind.compare import CompareRequest, CompareResponse, compare
from engine.refind.search import SearchRequest, SearchResponse, SearchService
from engine.refind.shortcuts import Serving
from engine.refind.similar import similar_pages
from engine.verbs.base import Verbs


class RefindVerbs(Verbs):
    def search(self, req: SearchRequest, caller: Grant = OPEN, model: str | None = None,
               log: bool = True, search_settings: SearchSettings | None = None,
               now: datetime | None = None) -> SearchResponse:
        """`model`: an embedder other than the active one; `log=False`: leave the query log alone
        (evaluation); `search_settings`: run under other [search] defaults (a replay); `now`: the
        clock recency measures age against (a simulated history's end; default the real one)."""
        req.workspace = self.workspace_for(caller, req.workspace)
        pages = self.pages
        if search_settings is not None:
            pages = SearchService(self.corpus, search_settings)
            pages.shortcuts = self.pages.shortcuts   # the choices and their vectors, read and encoded once
        return pages.search(req, scopes=caller.document_scopes, model=model, log=log, now=now, chooser=caller.key_id)

    def compare(self, req: CompareRequest, caller: Grant = OPEN) -> CompareResponse:
        req.workspace = self.workspace_for(caller, req.workspace)
        for m in req.models:
            state = self.embedding(m)
            if state is not None and state["state"] == "embedding" and not state.get("follows_writes"):
                raise ModelUnavailable(f"model {m!r} is being embedded ({state.get('percent', 0)} %); compare it "
                                       "once that is done", model=m, embedding=state)
        return compare(self.pages, req, scopes=caller.document_scopes)

    def similar(self, page_id: str, mediation: str = "vector", k: int = 10, caller: Grant = OPEN) -> list[dict]:
        self.readable_page(caller, page_id)
        return similar_pages(self.corpus, page_id, mediation, k, scopes=caller.document_scopes)

    def page(self, page_id: str, caller: Grant = OPEN) -> dict:
        self.readable_page(caller, page_id)
        return read_page(self.corpus, page_id)

    def pages_with_url(self, url: str, workspace: str | None = None, caller: Grant = OPEN) -> list[str]:
        """The ids of the workspace's pages at this URL (normalised as ingest does) that the caller reads."""
        from engine.core.urls import normalize_url

        ws = self.workspace_for(caller, workspace)
        scopes = caller.document_scopes
        return self.store.pages_with_url(ws, normalize_url(url), list(scopes) if scopes is not None else None)

    def term_stats(self, terms: list[str], caller: Grant = OPEN) -> tuple[dict[str, int], int]:
        """The BM25 arm's document frequency of each term, and its number of documents (chunks), over
        every workspace: what a learned ranker's features read (eval/ltr.py)."""
        caller.require_everywhere("term statistics over every workspace")
        return (self.sparse.doc_freqs(terms) if terms else {}), self.sparse.count()

    def facets(self, workspace: str | None = None, caller: Grant = OPEN, limit: int = 50) -> dict:
        ws = self.workspace_for(caller, workspace)
        return {"workspace": ws} | self.store.facets(ws, caller.document_scopes, limit)

    def models(self) -> list[dict]:
        rows = self.corpus.models_status()
        for row in rows:
            state = self.embedding(row["name"])
            if state is not None:
                row["embedding"] = state
        return rows

    def feedback(self, query_id: str, page_id: str, kind: str, caller: Grant = OPEN) -> dict:
        """A judgment on a logged query; a read-only key may send one (it changes no document). Only on
        a query the caller could have read and a page it can read, of the query's own workspace:
        feedback trains the reranker and tunes fusion, so a judgment across walls would steer
        another workspace's or scope's rankings."""
        self.readable_query(caller, query_id)
        self.readable_page(caller, page_id)
        _, workspace, _ = self.querylog.origin_of(query_id)
        meta = self.store.pages_by_id([page_id]).get(page_id)
        if meta is not None and workspace is not None and meta.get("workspace_id") != workspace:
            raise PageNotFound(f"no page with id {page_id!r} in the query's workspace {workspace!r}", ref=page_id)
        out = self.corpus.record_feedback(query_id, page_id, kind, caller.key_id)
        self.corpus.follow_own_write()   # with replicas: the reply's generation covers the choice
        return out

    def choices(self, workspace: str | None = None, caller: Grant = OPEN) -> dict:
        """The pages chosen (found / click) for the workspace's logged searches that the caller's
        searches take shortcuts from — within its scopes, its own by default ([search] shortcut_scope),
        not aged out nor past the cap — newest first (engine/refind/shortcuts.py)."""
        ws = self.workspace_for(caller, workspace)
        rows = self.pages.shortcuts.serving(ws, caller.document_scopes, Serving.of(self.pages.defaults, caller.key_id))
        return {"workspace": ws, "choices": [
            {"query_id": c.query_id, "query": c.query, "page_id": c.page_id, "kind": c.kind,
             "chosen_at": c.chosen_at.isoformat() + "Z"} for c in reversed(rows)]}

    def clear_feedback(self, workspace: str | None = None, query_id: str | None = None, page_id: str | None = None,
                       caller: Grant = OPEN) -> dict:
        """Forget judgments, and the shortcuts they make: those on one logged query, on one page, on both,
        or (neither given) every judgment of the workspace — only on queries the caller could have run
        (its workspaces, and within its scopes). A key that may write."""
        caller.require_write()
        if query_id is not None:
            self.readable_query(caller, query_id)
            _, of_query, _ = self.querylog.origin_of(query_id)
            ws = self.workspace_for(caller, workspace if workspace is not None else of_query)
            if ws != of_query:
                raise QueryNotFound(f"no logged query with id {query_id!r} in workspace {ws!r}", ref=query_id)
        else:
            ws = self.workspace_for(caller, workspace)
        if page_id is not None:
            self.readable_page(caller, page_id)
        scopes = caller.document_scopes
        n = self.querylog.delete_feedback(ws, query_id, page_id, list(scopes) if scopes is not None else None)
        self.corpus.follow_own_write()
        return {"workspace": ws, "query_id": query_id, "page_id": page_id, "deleted": n}
