"""The restriction stage: a request's filters (workspace, domains, last seen, clusters, entities, page
ids) and the caller's document scopes, pushed into both arms before they run — never applied after
ranking. Entities are resolved here (EntityNotFound for one the workspace does not hold)."""
from __future__ import annotations

import dataclasses

from indexes.sparse import SparseFilter

from engine.core.corpus import Corpus
from engine.core.errors import EntityNotFound, FilterTooBroad
from engine.refind.candidates import Restriction
from engine.refind.schema import SearchFilters


def restriction(corpus: Corpus, workspace: str, filters: SearchFilters | None, snapshot=None,
                scopes: tuple[str, ...] | None = None) -> Restriction:
    """What the request's filters and the caller's document scopes (None: every document) leave each
    arm: tantivy's filter clauses, and — unless one workspace holds every page and nothing else
    restricts — the chunk ids FAISS may return (an IDSelector); FilterTooBroad past the push-down cap."""
    store = corpus.store
    f = filters or SearchFilters()
    entity_ids: list[str] = []
    for ref in f.entity or []:
        eids = store.resolve_entities(workspace, ref, list(scopes) if scopes is not None else None)
        if not eids:
            raise EntityNotFound(f"no entity {ref!r} in workspace {workspace!r}", ref=ref)
        entity_ids += [e for e in eids if e not in entity_ids]
    domains = tuple(d.strip().lower().removeprefix("www.") for d in (f.domain or []))
    sparse = SparseFilter(workspace=workspace, domains=domains, after=f.after, before=f.before,
                          cluster_ids=tuple(f.cluster_id or ()), entities=tuple(entity_ids),
                          scopes=tuple(scopes) if scopes is not None else None,
                          page_ids=tuple(dict.fromkeys(f.page_id)) if f.page_id is not None else None)
    if f.is_empty() and scopes is None:
        populated = corpus.populated_workspaces(snapshot)
        if populated == {workspace}:  # the only workspace with pages: nothing to restrict, in either arm
            # (a chunk written after this request's view is not in it, so rollup drops it)
            return Restriction(dataclasses.replace(sparse, workspace=None), None, None)
        # Otherwise the dense arm is restricted too — to nothing, for a workspace with no pages
        # (an unrestricted FAISS search would answer from another workspace).
        pages = (snapshot or corpus.hot()).workspace_page_ids(workspace) if workspace in populated else []
    else:
        pages = store.filtered_pages(workspace, domains, f.after, f.before, f.cluster_id or (), entity_ids,
                                     scopes=list(scopes) if scopes is not None else None, page_ids=f.page_id)
        cap = corpus.settings.search.filter_pushdown_cap
        if not f.is_empty() and len(pages) > cap:  # a key's scopes are never refused for breadth
            raise FilterTooBroad(
                f"the filter matches {len(pages)} pages, more than the push-down cap of {cap}; narrow it",
                matched_pages=len(pages), cap=cap)
    # a backend that reads the filters as an expression (r.sparse) needs no chunk id list
    dense_ids = ((snapshot or corpus.hot()).chunk_ids_of_pages(pages)
                 if corpus.dense_takes_id_lists else None)
    return Restriction(sparse, dense_ids, set(pages))
