"""The Engine: the one composition root every face (HTTP routers, MCP tools, CLI, eval, bench) is
given. Built from Settings (or around an already open corpus), usable as a context manager, it owns
the corpus (store + indexes + models) and the verbs' services, and exposes each verb as one method.
A face parses, resolves the caller's grant, calls one of these, and shapes the reply; it never opens a
store, loads a model or imports `indexes`/`models` itself.
"""
from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any, Iterable

import numpy as np
from pydantic import ValidationError

from engine.core import access
from engine.core.access import Forbidden, Grant
from engine.core.corpus import Corpus, open_corpus, read_page
from engine.core.errors import EngineError, LoadInvalid, LoadNotFound, ModelUnavailable
from engine.core.urls import normalize_url
from engine.core.querylog import LogEntry
from engine.core.settings import SearchSettings, Settings, load_settings
from engine.evidence import service as evidence
from engine.evidence.confidence import Calibration, chunk_cosines
from engine.ingest.clusters import refit_clusters
from engine.ingest.entities import EntityUpsert, upsert_entity
from engine.ingest.pipeline import Ingester, IngestReport, delete_page
from engine.ingest.records import PageInput, describe_validation_error
from engine.refind.compare import CompareRequest, CompareResponse, compare
from engine.refind.rerank_pairs import NegativePlan, Pair, feedback_pairs, judgment_pairs, mined_pairs
from engine.refind.reranker_training import train_reranker
from engine.refind.search import SearchRequest, SearchResponse, SearchService
from engine.refind.similar import similar_pages
from engine.relations import facts as relation_facts
from engine.relations.criteria import CriterionReader
from engine.relations.criteria_model import ModelCriterionReader
from engine.relations import documents as relation_documents
from engine.relations.loads import LoadRequest, load, workspace_roots
from engine.relations.search import RelationSearch, RelationSearchRequest
from engine.relations.workspaces import WorkspaceCreate, create_workspace, describe_workspace


def _user_errors() -> tuple[type[Exception], ...]:
    from indexes.store import StoreError
    from models.registry import ModelNotFound

    return EngineError, ModelNotFound, StoreError


# Failures a face reports as one line (a refusal, a model not installed, a store that cannot open),
# not as a traceback.
USER_ERRORS = _user_errors()


class Engine:
    def __init__(self, settings: Settings | None = None, pool=None, repair: bool = True,
                 corpus: Corpus | None = None):
        """`pool` shares already-loaded embedders (tests, bench); `corpus` wraps one already open
        (the caller then closes it); `repair=False` skips bringing the indexes to the store's
        generation (commands that only read keys or settings)."""
        self.owns_corpus = corpus is None
        self.corpus = corpus if corpus is not None else open_corpus(settings or load_settings(), pool, repair)
        self.settings = self.corpus.settings
        self.pages = SearchService(self.corpus)
        self._evidence: evidence.EvidenceSearch | None = None

    # Lifetime ------------------------------------------------------------------------------------
    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self.owns_corpus:
            self.corpus.close()
        else:
            self.corpus.querylog.flush()
            self.corpus.flush()

    @property
    def default_workspace(self) -> str:
        return self.settings.default_workspace

    def load_model(self) -> None:
        """Load the active embedder and its query runtime now (a server does, so its first query does not
        wait for them); ModelUnavailable when its weights are not installed."""
        from models.registry import ModelNotFound

        try:
            self.corpus.embedder().prepare_queries()
        except ModelNotFound as exc:
            raise ModelUnavailable(str(exc), model=exc.name, install=exc.install) from exc

    def record(self, entry: LogEntry) -> None:
        """One row for the query log (written off the request path)."""
        self.corpus.querylog.record(entry)

    # Refind search --------------------------------------------------------------------------------
    def search(self, req: SearchRequest, scopes: tuple[str, ...] | None = None, model: str | None = None,
               log: bool = True, search_settings: SearchSettings | None = None,
               now: datetime | None = None) -> SearchResponse:
        """`model`: an embedder other than the active one; `log=False`: leave the query log alone
        (evaluation); `search_settings`: run under other [search] defaults (a replay); `now`: the
        clock recency measures age against (a simulated history's end; default the real one)."""
        pages = self.pages if search_settings is None else SearchService(self.corpus, search_settings)
        return pages.search(req, scopes=scopes, model=model, log=log, now=now)

    def compare(self, req: CompareRequest, scopes: tuple[str, ...] | None = None) -> CompareResponse:
        return compare(self.pages, req, scopes=scopes)

    def similar(self, page_id: str, mediation: str = "vector", k: int = 10,
                scopes: tuple[str, ...] | None = None) -> list[dict]:
        return similar_pages(self.corpus, page_id, mediation, k, scopes=scopes)

    def page(self, page_id: str) -> dict:
        return read_page(self.corpus, page_id)

    def facets(self, workspace: str, scopes: tuple[str, ...] | None = None, limit: int = 50) -> dict:
        return self.corpus.store.facets(workspace, scopes, limit)

    def models(self) -> list[dict]:
        return self.corpus.models_status()

    def feedback(self, query_id: str, page_id: str, kind: str) -> dict:
        return self.corpus.record_feedback(query_id, page_id, kind)

    # Pages, entities, clusters --------------------------------------------------------------------
    def ingest(self, records: Iterable, workspace: str | None = None, progress: bool | None = None,
               flush: bool = True, total: int | None = None, ray: str | None = None) -> IngestReport:
        """`ray`: embed on Ray Data (an address, or "" for the setting's, else a local Ray); None:
        the setting `ingest.ray` decides. Only the embedding moves; the store and indexes are
        written here batch by batch either way."""
        ing = self.settings.ingest
        if ray is None and ing.ray:
            ray = ing.ray_address
        if ray is None:
            return Ingester(self.corpus, workspace, progress=progress).ingest(records, total=total, flush=flush)
        from models.ray_embed import EmbedderSource, RayEmbedding

        s = self.settings
        source = EmbedderSource(str(s.registry_path), str(s.models_cache_dir), str(s.data_dir), s.models.device,
                                s.models.batch_size)
        remote = RayEmbedding(ray or ing.ray_address or None, source, ing.ray_actors, ing.ray_batch_size,
                              ing.ray_cpus_per_actor, ing.ray_local_cpus)
        try:
            return Ingester(self.corpus, workspace, progress=progress, encode=remote.encode,
                            batch_chunks=ing.ray_batch_chunks).ingest(records, total=total, flush=flush)
        finally:
            remote.close()

    def delete_page(self, page_id: str) -> bool:
        return delete_page(self.corpus, page_id)

    def upsert_entity(self, body: EntityUpsert) -> dict:
        return upsert_entity(self.corpus, body)

    def clusters(self, workspace: str, include_tombstoned: bool = False,
                 scopes: tuple[str, ...] | None = None) -> list[dict]:
        return self.corpus.store.clusters(workspace, include_tombstoned, list(scopes) if scopes is not None else None)

    def refit_clusters(self, workspace: str, k: int | None = None) -> dict:
        return refit_clusters(self.corpus, workspace, k)

    # Relation search ------------------------------------------------------------------------------
    def relation_search(self, req: RelationSearchRequest, scopes: tuple[str, ...] | None = None,
                        routes: dict[str, dict] | None = None) -> dict:
        """`routes`: the face's address (method, path) for each follow-up verb a compact reply names."""
        c = self.corpus
        compiler = c.brief_compiler()
        # criteria are read by the model where one is configured, else by the embedder's thresholds
        reader = (ModelCriterionReader(c, self.pages, scopes, compiler) if compiler is not None and req.criteria
                  else CriterionReader(c, self.pages, scopes))
        return RelationSearch(c.relations, c.querylog, compiler, self.pages, reader, scopes=scopes).search(req, routes)

    def facts(self, req: relation_facts.FactsRequest, scopes: tuple[str, ...] | None = None) -> dict:
        return relation_facts.facts(self.corpus.relations, req, scopes)

    def correct(self, req: relation_facts.CorrectionRequest, scopes: tuple[str, ...] | None = None) -> dict:
        return relation_facts.correct(self.corpus.relations, req, scopes)

    def region(self, req: relation_facts.RegionRequest, scopes: tuple[str, ...] | None = None) -> dict:
        return relation_facts.region(self.corpus.relations, req, scopes)

    def audit_events(self, request_id: str) -> dict:
        return relation_facts.audit_events(self.corpus.relations, request_id)

    def create_relation_workspace(self, body: WorkspaceCreate) -> dict:
        return create_workspace(self.corpus.relations, body)

    def has_relation_workspace(self, workspace_id: str) -> bool:
        return self.corpus.relations.workspace(workspace_id) is not None

    def describe_relation_workspace(self, workspace_id: str, scopes: tuple[str, ...] | None = None) -> dict:
        return describe_workspace(self.corpus.relations, workspace_id, scopes)

    def load(self, workspace_id: str, req: LoadRequest | relation_documents.DocumentLoadRequest,
             confined: bool = True, scopes: tuple[str, ...] | None = None) -> dict:
        """A relation load (SQL tables, or a folder of documents). `confined`: read only from the
        workspace's own source folder once keys exist or source_dirs is set (every face but the local CLI).
        `scopes`: the loading key's document scopes (None: every scope); such a key loads only
        documents of its scopes, and no SQL export (its rows would be every key's)."""
        roots = workspace_roots(self.settings.relations.source_dirs, self.corpus.data_dir, workspace_id,
                                self.corpus.keys.closed) if confined else None
        if isinstance(req, relation_documents.DocumentLoadRequest):
            return self._load_documents(workspace_id, req, roots, scopes)
        if scopes is not None:
            raise Forbidden("a key with document scopes may load only documents of its scopes: the rows of a "
                            "SQL export are read by every key of the workspace")
        return load(self.corpus.relations, workspace_id, req, roots)

    def sync_load(self, workspace_id: str, load_id: str, confined: bool = True,
                  scopes: tuple[str, ...] | None = None) -> dict:
        """Run a load again from its stored body: for a folder of documents or records (a connected
        export) only what changed is re-read and superseded; a SQL load is re-read whole."""
        spec = self.corpus.relations.load_spec(load_id)
        if spec is None or spec.get("workspace_id") != workspace_id:
            raise LoadNotFound(f"no load {load_id!r} in workspace {workspace_id!r}", ref=load_id)
        body = json.loads(spec["spec"]) if isinstance(spec["spec"], str) else spec["spec"]
        model = relation_documents.DocumentLoadRequest if spec["format"] == "documents" else LoadRequest
        out = self.load(workspace_id, model.model_validate(body), confined, scopes)
        return {**out, "synced_from": load_id}

    def _load_documents(self, workspace_id: str, req: relation_documents.DocumentLoadRequest,
                        roots: list[Path] | None, scopes: tuple[str, ...] | None = None) -> dict:
        """Read and check the whole load, then the changed documents become the workspace's pages
        (each linked to its entity), then the rows go in one transaction. A crash between the two
        leaves the relation side as it was; re-running the load finishes it (page upserts are idempotent)."""
        c = self.corpus
        prep = relation_documents.prepare(c.relations, workspace_id, req, roots,
                                          compiler=c.brief_compiler() if req.model_reader else None, scopes=scopes)
        records = []
        for i, (d, page) in enumerate(zip(prep.changed, prep.pages())):
            try:
                records.append((i, d.rel, PageInput.model_validate(page)))
            except ValidationError as exc:
                raise LoadInvalid(f"document {d.rel!r} cannot be a page: {describe_validation_error(exc)}",
                                  reason="document_not_a_page") from exc
        pages: dict[str, str] = {}
        if records:
            report = self.ingest(records, workspace=workspace_id, progress=False)
            for o in report.outcomes:
                if o.status == "error":
                    raise LoadInvalid(f"document {records[o.index][1]!r} cannot be a page: {o.error}",
                                      reason="document_not_a_page")
                if o.url:
                    pages[o.url] = o.page_id
        for url in prep.removed_urls():
            for page_id in c.store.pages_with_url(workspace_id, normalize_url(url)):
                delete_page(c, page_id)
        return relation_documents.write(c.relations, prep, pages)

    # Evidence search ------------------------------------------------------------------------------
    @property
    def evidence_searcher(self) -> evidence.EvidenceSearch:
        if self._evidence is None:
            self._evidence = evidence.EvidenceSearch(self.corpus, self.pages)
        return self._evidence

    def evidence_with(self, calibration: Calibration, reports_dir: Path) -> evidence.EvidenceSearch:
        """An evidence searcher under another confidence calibration, writing its packets to
        `reports_dir` (evaluation: a fit is checked on the collections it was not fitted on)."""
        settings = self.settings.evidence.model_copy(update={"reports_dir": str(reports_dir)})
        return evidence.EvidenceSearch(self.corpus, self.pages, calibration=calibration, settings=settings)

    def chunk_cosines(self, text: str, chunk_ids: list[int], model: str | None = None) -> dict[int, float]:
        """Cosine of the query's embedding to each chunk's stored vector (the confidence signals)."""
        model = model or self.settings.models.active
        vec = self.corpus.embedder(model).encode_query(text)
        vec = vec / (np.linalg.norm(vec) or 1.0)
        return chunk_cosines(self.corpus, model, vec, chunk_ids)

    def evidence(self, req: evidence.EvidenceRequest, scopes: tuple[str, ...] | None = None
                 ) -> evidence.EvidenceResponse:
        return self.evidence_searcher.search(req, scopes=scopes)

    def read_packet(self, session_id: str, topic: str | None = None, part: str = "packet", may_read=None,
                    scopes: tuple[str, ...] | None = None) -> str:
        return evidence.read_packet(self.corpus, session_id, topic, part, may_read=may_read, scopes=scopes)

    def dictionary(self, workspace: str | None, limit: int = 1000) -> dict:
        return evidence.show_dictionary(self.corpus, workspace, limit)

    def set_dictionary(self, workspace: str | None, fmt: str, text: str) -> dict:
        return evidence.set_dictionary(self.corpus, workspace, fmt, text)

    def maps(self, workspace: str | None) -> dict:
        return evidence.show_maps(self.corpus, workspace)

    # Access -----------------------------------------------------------------------------------------
    def grant_for(self, authorization: str | None) -> Grant:
        return access.grant_for(self.corpus.keys, authorization)

    def create_key(self, workspaces: list[str], scopes: list[str] | None = None, read_only: bool = False,
                   name: str | None = None) -> dict:
        return access.create_key(self.corpus.keys, workspaces, scopes, read_only, name)

    def list_keys(self) -> list[dict]:
        return access.list_keys(self.corpus.keys)

    def revoke_key(self, key_id: str) -> dict:
        return access.revoke_key(self.corpus.keys, key_id)

    def reopen_keys(self) -> None:
        self.corpus.keys.reopen()

    @property
    def active_keys(self) -> int:
        return self.corpus.keys.active

    def access_log(self, since: datetime | None = None, key_id: str | None = None, request_id: str | None = None,
                   limit: int = 100) -> list[dict]:
        self.corpus.querylog.flush()
        return self.corpus.querylog.tables.access(since, key_id, request_id, limit)

    def readable_page(self, grant: Grant, page_id: str) -> None:
        access.readable_page(grant, self.corpus.store, page_id)

    def readable_query(self, grant: Grant, query_id: str) -> None:
        access.readable_query(grant, self.corpus.querylog.tables, query_id)

    # Operations -------------------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        c = self.corpus
        return {
            "data_dir": str(c.data_dir),
            "active_model": c.settings.models.active,
            "counts": c.store.counts(),
            "generations": c.consistency(),
            "repairs_at_open": [r.__dict__ for r in c.repairs],
            "quarantine": c.store.quarantined(),
            "query_log": c.querylog.stats(),
            "reranker": c.reranker_status(),
            "query_runtime": self.query_runtime(),
        }

    def query_runtime(self) -> dict[str, Any]:
        """How the active model encodes queries ("onnx" or "torch", and why torch when the ONNX path
        was tried), or not loaded yet."""
        emb = self.corpus.pool.loaded().get(self.corpus.settings.models.active)
        if emb is None:
            return {"model": self.corpus.settings.models.active, "loaded": False}
        out = {"model": emb.name, "loaded": True, "runtime": emb.query_runtime, "device": emb.device}
        return out | ({"note": emb.query_runtime_note} if emb.query_runtime_note else {})

    # Evaluation and the reranker's training ---------------------------------------------------------
    def reranker_status(self) -> dict:
        return self.corpus.reranker_status()

    def declared_reranker(self, name: str) -> Path | None:
        """Where the model registry declares a reranker of this name to live (None: not declared)."""
        reg = self.corpus.registry
        return reg.declared_path(name) if name in reg.names("reranker") else None

    def training_pairs(self, source: str, workspace: str, plan: NegativePlan | None = None, n: int = 400,
                       seed: int = 13, collection=None) -> list[Pair]:
        """A cross-encoder's training pairs from this corpus: `judgments` (a test collection's, with
        hard negatives from hybrid search), `mined` (sentences of the workspace's pages), `feedback`
        (found / click / irrelevant in the query log)."""
        if source == "judgments":
            return judgment_pairs(self.corpus, collection, workspace, plan, seed=seed)
        if source == "mined":
            return mined_pairs(self.corpus, workspace, n=n, plan=plan, seed=seed)
        if source == "feedback":
            return feedback_pairs(self.corpus, workspace, plan=plan, seed=seed)
        raise ValueError(f"unknown pair source {source!r}")

    def train_reranker(self, pairs: list[Pair], out_dir: Path, **kw) -> dict:
        """Train a cross-encoder on `pairs` into `out_dir` (engine/refind/reranker_training.py)."""
        return train_reranker(self.corpus.registry, pairs, out_dir, **kw)

    def embed_model(self, model: str) -> int:
        """Embed every chunk `model` lacks and bring its index up (`refindery models --embed`)."""
        c = self.corpus
        c.sync([])
        n = c.embed_missing(model)
        c.sync([model])
        c.flush()
        return n

    def logged_searches(self, since: datetime, limit: int = 10_000) -> dict:
        """The searches logged since `since` (query id, request params, model), the pages each
        returned in order, and every feedback row (query id, page id, kind): what a replay reads."""
        self.corpus.querylog.flush()
        t = self.corpus.querylog.tables
        return {"searches": t.searches_since(since, limit), "results": t.results_since(since),
                "feedback": t.feedback()}

    def prune_log(self, before: datetime) -> int:
        return self.corpus.querylog.prune(before)

    def reindex(self) -> dict:
        reports = self.corpus.reindex()
        return {"rebuilt": [r.__dict__ for r in reports], "consistency": self.corpus.consistency()}

    def flush(self) -> None:
        self.corpus.flush()

    @property
    def data_dir(self) -> Path:
        return self.corpus.data_dir
