"""The verbs that write pages: ingest, visits, forget, delete, entities, clusters."""
from __future__ import annotations

from datetime import datetime
from typing import Iterable

from engine.core.access import OPEN, Grant
from engine.core.errors import InvalidRequest, PageNotFound
from engine.core.clock import utcnow
from engine.core.urls import domain_of, normalize_url
from engine.ingest.clusters import refit_clusters
from engine.ingest.entities import EntityUpsert, upsert_entity
from engine.ingest.pipeline import Ingester, IngestReport
from engine.ingest.records import VisitInput
from engine.verbs.base import Verbs


class PageVerbs(Verbs):
    def ingest(self, records: Iterable, workspace: str | None = None, progress: bool | None = None,
               flush: bool = True, total: int | None = None, ray: str | None = None,
               caller: Grant = OPEN) -> IngestReport:
        """`ray`: embed on Ray Data (an address, or "" for the setting's, else a local Ray); None:
        the setting `ingest.ray` decides. Only the embedding moves; the store and indexes are
        written here batch by batch either way. A `caller` with document scopes writes each page
        in its scope (engine/core/access.py, Grant.write_scope); a page it may not write is that
        item's error."""
        caller.require_write()
        workspace = self.workspace_for(caller, workspace)
        ing = self.settings.ingest
        if ray is None and ing.ray:
            ray = ing.ray_address
        if ray is None:
            return Ingester(self.corpus, workspace, progress=progress, caller=caller).ingest(
                records, total=total, flush=flush)
        from models.ray_embed import EmbedderSource, RayEmbedding

        s = self.settings
        source = EmbedderSource(str(s.registry_path), str(s.models_cache_dir), str(s.data_dir), s.models.device,
                                s.models.batch_size)
        remote = RayEmbedding(ray or ing.ray_address or None, source, ing.ray_actors, ing.ray_batch_size,
                              ing.ray_cpus_per_actor, ing.ray_local_cpus)
        try:
            return Ingester(self.corpus, workspace, progress=progress, encode=remote.encode,
                            batch_chunks=ing.ray_batch_chunks, caller=caller).ingest(records, total=total, flush=flush)
        finally:
            remote.close()

    def visit(self, visits: list[VisitInput], workspace: str | None = None, caller: Grant = OPEN) -> IngestReport:
        """Visits of pages already sent, without their content (Ingester.visit)."""
        caller.require_write()
        workspace = self.workspace_for(caller, workspace)
        return Ingester(self.corpus, workspace, progress=False, caller=caller).visit(list(enumerate(visits)))

    def forget(self, url: str | None = None, workspace: str | None = None, caller: Grant = OPEN, *,
               domain: str | None = None, since: datetime | None = None, until: datetime | None = None) -> dict:
        """Delete the workspace's pages that the caller may write — every scope's for a key without
        document scopes, its own scopes' else — at a URL (normalised as ingest does), of a domain (its
        subdomains too: `example.org` takes `docs.example.org`), or seen within a time range (a page
        whose visits from first to last meet [since, until]: seen in the last hour and a year ago, it
        goes), from the store, every index and the query log (Corpus.delete_pages). Given together, the
        conditions all hold. Forgetting what has no page is not an error: nothing is there either way."""
        caller.require_write()
        ws = self.workspace_for(caller, workspace)
        if url is None and domain is None and since is None and until is None:
            raise InvalidRequest("say what to forget: a url, a domain, or a time range (since, until)")
        if since is not None and until is not None and since > until:
            raise InvalidRequest("since is after until: the time range is empty")
        scopes = caller.document_scopes
        within = list(scopes) if scopes is not None else None
        chosen: set[str] | None = None
        try:
            if url is not None:
                chosen = set(self.store.pages_with_url(ws, normalize_url(url), within))
            if domain is not None:
                host = domain_of(domain)
                if not host or "/" in host or " " in host:
                    raise InvalidRequest(f"not a domain: {domain!r}")
                found = set(self.store.pages_of_domain(ws, host, 2**62, subdomains=True, scopes=within))
                chosen = found if chosen is None else chosen & found
        except ValueError as exc:   # InvalidURL, or urllib's own (a bad IPv6 host)
            raise InvalidRequest(str(exc)) from None
        if since is not None or until is not None:
            found = set(self.store.pages_seen_between(ws, since or datetime.min, until or utcnow(), within))
            chosen = found if chosen is None else chosen & found
        gone = self.corpus.delete_pages(sorted(chosen or ()))
        asked = {k: v for k, v in (("url", url), ("domain", domain), ("since", since), ("until", until)) if v is not None}
        return {"workspace": ws, **{k: v.isoformat() if isinstance(v, datetime) else v for k, v in asked.items()},
                "forgotten": len(gone), "page_ids": gone}

    def delete_page(self, page_id: str, caller: Grant = OPEN) -> dict:
        caller.require_write()
        self.readable_page(caller, page_id)
        if not self.corpus.delete_page(page_id):
            raise PageNotFound(f"no page with id {page_id!r}", ref=page_id)
        return {"page_id": page_id, "deleted": True}

    def upsert_entity(self, body: EntityUpsert, caller: Grant = OPEN) -> dict:
        """Create or edit an entity of the caller's namespace (its workspace and document scope) and
        link pages of that namespace to it (engine/ingest/entities.py)."""
        caller.require_write()
        ws = self.workspace_for(caller, body.workspace)
        return upsert_entity(self.corpus, body, ws, caller.write_scope(body.scope), caller)

    def clusters(self, workspace: str | None = None, include_tombstoned: bool = False,
                 caller: Grant = OPEN) -> dict:
        ws = self.workspace_for(caller, workspace)
        scopes = caller.document_scopes
        return {"workspace": ws, "clusters": self.store.clusters(
            ws, include_tombstoned, list(scopes) if scopes is not None else None)}

    def refit_clusters(self, workspace: str | None = None, k: int | None = None, caller: Grant = OPEN) -> dict:
        """k-means over every page of the workspace: a caller without document scopes only."""
        caller.require_write()
        ws = self.workspace_for(caller, workspace)
        caller.require_unscoped("a re-clustering")
        return refit_clusters(self.corpus, ws, k)
