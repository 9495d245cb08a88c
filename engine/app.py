"""The Engine: the one composition root every face (HTTP routers, MCP tools, CLI, eval, bench) is
given. Built from Settings (or around an already open corpus), usable as a context manager, it owns
the corpus (store + indexes + models) and the verbs' services, and exposes each verb as one method.

Every verb takes its **caller** (the request's grant, engine/core/access.py; `OPEN` for the local
operator: the CLI, a notebook) and does its own workspace defaulting and scoping — for what it
writes and would overwrite as for what it reads — so no face can forget a check. A face parses,
calls one of these with the caller, and shapes the reply; it never opens a store, loads a model or
imports `indexes`/`models` itself.
"""
from __future__ import annotations

import json
import logging
import threading
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np
from pydantic import ValidationError

from engine.core import access
from engine.core.access import OPEN, Forbidden, Grant
from engine.core.corpus import Corpus, open_corpus, read_page
from engine.core.clock import utcnow
from engine.core.progress import Progress
from engine.core.errors import (EngineError, InvalidRequest, LoadInvalid, LoadNotFound, ModelUnavailable, ModelUnknown,
                                PageNotFound)
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
from engine.relations.packs import vocabulary_axes
from engine.relations.search import RelationSearch, RelationSearchRequest
from engine.relations.workspaces import WorkspaceCreate, create_workspace, describe_workspace, schema_of


log = logging.getLogger("refindery.engine")

# How one constraint is written (the listing of workspaces says it once, beside what it may name).
CONSTRAINT_HELP = ("{relation, slot, op, value, required?}: op one of the slot's operators; value one value, or a "
                   "list with op in; required false makes it a preference. Several constraints all hold (AND).")


def _user_errors() -> tuple[type[Exception], ...]:
    from indexes.store import StoreError
    from models.registry import ModelNotFound

    return EngineError, ModelNotFound, StoreError


# Failures a face reports as one line (a refusal, a model not installed, a store that cannot open),
# not as a traceback.
USER_ERRORS = _user_errors()


def _data_dir_busy() -> type[Exception]:
    from indexes.store import StoreBusy

    return StoreBusy


# The store is held by another process (a server, an ingest): the faces say who, and what to do.
DataDirBusy = _data_dir_busy()


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
        self._embeds: dict[str, dict] = {}          # model -> its background embedding's state
        self._embed_threads: list[threading.Thread] = []
        self._stop_embedding = threading.Event()

    # Lifetime ------------------------------------------------------------------------------------
    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._stop_embedding.set()        # a background embedding stops between two batches
        for t in self._embed_threads:
            t.join()
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
    def search(self, req: SearchRequest, caller: Grant = OPEN, model: str | None = None,
               log: bool = True, search_settings: SearchSettings | None = None,
               now: datetime | None = None) -> SearchResponse:
        """`model`: an embedder other than the active one; `log=False`: leave the query log alone
        (evaluation); `search_settings`: run under other [search] defaults (a replay); `now`: the
        clock recency measures age against (a simulated history's end; default the real one)."""
        req.workspace = caller.scoped(req.workspace, self.default_workspace)
        pages = self.pages if search_settings is None else SearchService(self.corpus, search_settings)
        return pages.search(req, scopes=caller.document_scopes, model=model, log=log, now=now)

    def compare(self, req: CompareRequest, caller: Grant = OPEN) -> CompareResponse:
        req.workspace = caller.scoped(req.workspace, self.default_workspace)
        for m in req.models:
            state = self.embedding(m)
            if state is not None and state["state"] == "embedding":
                raise ModelUnavailable(f"model {m!r} is being embedded ({state.get('percent', 0)} %); compare it "
                                       "once that is done", model=m, embedding=state)
        return compare(self.pages, req, scopes=caller.document_scopes)

    def similar(self, page_id: str, mediation: str = "vector", k: int = 10, caller: Grant = OPEN) -> list[dict]:
        self.readable_page(caller, page_id)
        return similar_pages(self.corpus, page_id, mediation, k, scopes=caller.document_scopes)

    def page(self, page_id: str, caller: Grant = OPEN) -> dict:
        self.readable_page(caller, page_id)
        return read_page(self.corpus, page_id)

    def facets(self, workspace: str | None = None, caller: Grant = OPEN, limit: int = 50) -> dict:
        ws = caller.workspace(workspace, self.default_workspace)
        return {"workspace": ws} | self.corpus.store.facets(ws, caller.document_scopes, limit)

    def models(self) -> list[dict]:
        rows = self.corpus.models_status()
        for row in rows:
            state = self.embedding(row["name"])
            if state is not None:
                row["embedding"] = state
        return rows

    def feedback(self, query_id: str, page_id: str, kind: str, caller: Grant = OPEN) -> dict:
        """A judgment on a logged query; a read-only key may send one (it changes no document)."""
        self.readable_query(caller, query_id)
        self.readable_page(caller, page_id)
        return self.corpus.record_feedback(query_id, page_id, kind)

    # Pages, entities, clusters --------------------------------------------------------------------
    def ingest(self, records: Iterable, workspace: str | None = None, progress: bool | None = None,
               flush: bool = True, total: int | None = None, ray: str | None = None,
               caller: Grant = OPEN) -> IngestReport:
        """`ray`: embed on Ray Data (an address, or "" for the setting's, else a local Ray); None:
        the setting `ingest.ray` decides. Only the embedding moves; the store and indexes are
        written here batch by batch either way. A `caller` with document scopes writes each page
        in its scope (engine/core/access.py, Grant.write_scope); a page it may not write is that
        item's error."""
        caller.require_write()
        workspace = caller.workspace(workspace, self.default_workspace)
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

    def delete_page(self, page_id: str, caller: Grant = OPEN) -> dict:
        caller.require_write()
        self.readable_page(caller, page_id)
        if not delete_page(self.corpus, page_id):
            raise PageNotFound(f"no page with id {page_id!r}", ref=page_id)
        return {"page_id": page_id, "deleted": True}

    def upsert_entity(self, body: EntityUpsert, caller: Grant = OPEN) -> dict:
        """Create or edit an entity of the caller's namespace (its workspace and document scope) and
        link pages of that namespace to it (engine/ingest/entities.py)."""
        caller.require_write()
        ws = caller.workspace(body.workspace, self.default_workspace)
        return upsert_entity(self.corpus, body, ws, caller.write_scope(body.scope), caller)

    def clusters(self, workspace: str | None = None, include_tombstoned: bool = False,
                 caller: Grant = OPEN) -> dict:
        ws = caller.workspace(workspace, self.default_workspace)
        scopes = caller.document_scopes
        return {"workspace": ws, "clusters": self.corpus.store.clusters(
            ws, include_tombstoned, list(scopes) if scopes is not None else None)}

    def refit_clusters(self, workspace: str | None = None, k: int | None = None, caller: Grant = OPEN) -> dict:
        """k-means over every page of the workspace: a caller without document scopes only."""
        caller.require_write()
        ws = caller.workspace(workspace, self.default_workspace)
        caller.require_unscoped("a re-clustering")
        return refit_clusters(self.corpus, ws, k)

    # Relation search ------------------------------------------------------------------------------
    def relation_search(self, req: RelationSearchRequest, caller: Grant = OPEN,
                        routes: dict[str, dict] | None = None) -> dict:
        """`routes`: the face's address (method, path) for each follow-up verb a compact reply names."""
        caller.workspace(req.workspace_id, req.workspace_id)
        scopes = caller.document_scopes
        c = self.corpus
        compiler = c.brief_compiler()
        # criteria are read by the model where one is configured, else by the embedder's thresholds
        reader = (ModelCriterionReader(c, self.pages, scopes, compiler) if compiler is not None and req.criteria
                  else CriterionReader(c, self.pages, scopes))
        return RelationSearch(c.relations, c.querylog, compiler, self.pages, reader, scopes=scopes).search(req, routes)

    def facts(self, req: relation_facts.FactsRequest, caller: Grant = OPEN) -> dict:
        caller.workspace(req.workspace_id, req.workspace_id)
        return relation_facts.facts(self.corpus.relations, req, caller.document_scopes)

    def correct(self, req: relation_facts.CorrectionRequest, caller: Grant = OPEN) -> dict:
        """Retire a row: the caller must write, and a key with document scopes retires only rows read
        from documents of its scopes (a row every key reads is not its to retire)."""
        caller.require_write()  # a read-only key is refused before the workspace is looked at
        caller.workspace(req.workspace_id, req.workspace_id)
        return relation_facts.correct(self.corpus.relations, req, caller.document_scopes)

    def region(self, req: relation_facts.RegionRequest, caller: Grant = OPEN) -> dict:
        caller.workspace(req.workspace_id, req.workspace_id)
        return relation_facts.region(self.corpus.relations, req, caller.document_scopes)

    def audit_events(self, request_id: str, caller: Grant = OPEN) -> dict:
        """The events of a request that the caller may read: in its workspaces, and (for a key with
        document scopes) recording a search that read no document outside them."""
        out = relation_facts.audit_events(self.corpus.relations, request_id)
        out["events"] = [ev for ev in out["events"] if caller.may_read(ev["workspace_id"])
                         and access.within_scopes(caller, (ev.get("summary") or {}).get("document_scopes"))]
        if not out["events"]:
            raise relation_facts.AuditNotFound(f"no audit event for request {request_id!r}", ref=request_id)
        return out

    def create_relation_workspace(self, body: WorkspaceCreate, caller: Grant = OPEN) -> dict:
        caller.require_write()
        if not caller.everywhere and body.workspace_id not in caller.workspaces:
            raise Forbidden("this key may create only the workspaces it names", key_id=caller.key_id)
        return create_workspace(self.corpus.relations, body)

    def has_relation_workspace(self, workspace_id: str) -> bool:
        return self.corpus.relations.workspace(workspace_id) is not None

    def relation_workspaces(self, caller: Grant = OPEN) -> dict:
        """The relation workspaces the caller may read, each with what its constraints may say
        (relations, slots, operators, allowed values with counts): an agent's first call."""
        rstore = self.corpus.relations
        return {"workspaces": [schema_of(rstore, ws, caller.document_scopes) for ws in rstore.workspace_ids()
                               if caller.may_read(ws)],
                "constraint": CONSTRAINT_HELP}

    def describe_relation_workspace(self, workspace_id: str, caller: Grant = OPEN) -> dict:
        caller.workspace(workspace_id, workspace_id)
        out = describe_workspace(self.corpus.relations, workspace_id, caller.document_scopes)
        out["loads"] = [ld for ld in out["loads"] if self._load_visible(ld, caller)]
        return out

    @staticmethod
    def _load_visible(load_row: dict, caller: Grant) -> bool:
        """A load a key with document scopes may see (and sync): a SQL export (its rows are every key's)
        or documents of its scopes only; another scope's load is as absent as one never made."""
        if not caller.scopes or load_row.get("format") != "documents":
            return True
        summary = load_row.get("summary") or {}
        if isinstance(summary, str):
            summary = json.loads(summary)
        docs = summary.get("documents") or {}
        scoped = docs.get("scopes") or {}
        unscoped = docs.get("read", 0) - sum(scoped.values())
        return unscoped <= 0 and set(scoped) <= set(caller.scopes)

    def load(self, workspace_id: str, req: LoadRequest | relation_documents.DocumentLoadRequest,
             caller: Grant = OPEN, confined: bool = True) -> dict:
        """A relation load (SQL tables, or a folder of documents). `confined`: read only from the
        workspace's own source folder once keys exist or source_dirs is set (every face but the local CLI).
        A caller with document scopes loads only documents of its scopes, and no SQL export (its rows
        would be every key's)."""
        caller.require_write()
        caller.workspace(workspace_id, workspace_id)
        scopes = caller.document_scopes
        roots = workspace_roots(self.settings.relations.source_dirs, self.corpus.data_dir, workspace_id,
                                self.corpus.keys.closed) if confined else None
        if isinstance(req, relation_documents.DocumentLoadRequest):
            return self._load_documents(workspace_id, req, roots, caller)
        if scopes is not None:
            raise Forbidden("a key with document scopes may load only documents of its scopes: the rows of a "
                            "SQL export are read by every key of the workspace")
        return load(self.corpus.relations, workspace_id, req, roots)

    def sync_load(self, workspace_id: str, load_id: str, caller: Grant = OPEN, confined: bool = True) -> dict:
        """Run a load again from its stored body: for a folder of documents or records (a connected
        export) only what changed is re-read and superseded; a SQL load is re-read whole."""
        caller.require_write()
        caller.workspace(workspace_id, workspace_id)
        spec = self.corpus.relations.load_spec(load_id)
        if spec is None or spec.get("workspace_id") != workspace_id or not self._load_visible(spec, caller):
            raise LoadNotFound(f"no load {load_id!r} in workspace {workspace_id!r}", ref=load_id)
        body = json.loads(spec["spec"]) if isinstance(spec["spec"], str) else spec["spec"]
        model = relation_documents.DocumentLoadRequest if spec["format"] == "documents" else LoadRequest
        out = self.load(workspace_id, model.model_validate(body), caller, confined)
        return {**out, "synced_from": load_id}

    def _load_documents(self, workspace_id: str, req: relation_documents.DocumentLoadRequest,
                        roots: list[Path] | None, caller: Grant = OPEN) -> dict:
        """Read and check the whole load, then the changed documents become the workspace's pages
        (each linked to its entity), then the rows go in one transaction. A crash between the two
        leaves the relation side as it was; re-running the load finishes it (page upserts are idempotent)."""
        c = self.corpus
        scopes = caller.document_scopes
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
            report = self.ingest(records, workspace=workspace_id, progress=False, caller=caller)
            for o in report.outcomes:
                if o.status == "error":
                    raise LoadInvalid(f"document {records[o.index][1]!r} cannot be a page: {o.error}",
                                      reason="document_not_a_page")
                if o.url:
                    pages[o.url] = o.page_id
        for url in prep.removed_urls():   # the caller's own pages of that document (another scope's stay)
            for page_id in c.store.pages_with_url(workspace_id, normalize_url(url),
                                                  list(scopes) if scopes is not None else None):
                delete_page(c, page_id)
        return relation_documents.write(c.relations, prep, pages)

    # Evidence search ------------------------------------------------------------------------------
    @property
    def evidence_searcher(self) -> evidence.EvidenceSearch:
        if self._evidence is None:
            self._evidence = evidence.EvidenceSearch(self.corpus, self.pages, vocabulary_axes)
        return self._evidence

    def evidence_with(self, calibration: Calibration, reports_dir: Path) -> evidence.EvidenceSearch:
        """An evidence searcher under another confidence calibration, writing its packets to
        `reports_dir` (evaluation: a fit is checked on the collections it was not fitted on)."""
        settings = self.settings.evidence.model_copy(update={"reports_dir": str(reports_dir)})
        return evidence.EvidenceSearch(self.corpus, self.pages, vocabulary_axes, calibration=calibration,
                                       settings=settings)

    def chunk_cosines(self, text: str, chunk_ids: list[int], model: str | None = None) -> dict[int, float]:
        """Cosine of the query's embedding to each chunk's stored vector (the confidence signals)."""
        model = model or self.settings.models.active
        vec = self.corpus.embedder(model).encode_query(text)
        vec = vec / (np.linalg.norm(vec) or 1.0)
        return chunk_cosines(self.corpus, model, vec, chunk_ids)

    def evidence(self, req: evidence.EvidenceRequest, caller: Grant = OPEN) -> evidence.EvidenceResponse:
        """`map_write` writes into the workspace's maps: it needs a caller that may write."""
        if "map_write" in req.route_constraints:
            caller.require_write()
        req.workspace = caller.scoped(req.workspace, self.default_workspace)
        return self.evidence_searcher.search(req, scopes=caller.document_scopes)

    def read_packet(self, session_id: str, topic: str | None = None, part: str = "packet",
                    workspace: str | None = None, caller: Grant = OPEN) -> str:
        ws = caller.workspace(workspace, self.default_workspace)
        return evidence.read_packet(self.corpus, session_id, topic, part, ws, scopes=caller.document_scopes)

    def dictionary(self, workspace: str | None = None, limit: int = 1000, caller: Grant = OPEN) -> dict:
        ws = caller.workspace(workspace, self.default_workspace)
        return evidence.show_dictionary(self.corpus, ws, vocabulary_axes, limit)

    def set_dictionary(self, workspace: str | None, fmt: str, text: str, caller: Grant = OPEN) -> dict:
        """The workspace's dictionary expands every key's questions: a caller without document scopes only."""
        caller.require_write()
        ws = caller.workspace(workspace, self.default_workspace)
        caller.require_unscoped("the workspace's dictionary")
        return evidence.set_dictionary(self.corpus, ws, fmt, text)

    def maps(self, workspace: str | None = None, caller: Grant = OPEN) -> dict:
        ws = caller.workspace(workspace, self.default_workspace)
        if caller.scopes:
            raise Forbidden("maps are drawn over every document of a workspace; a key with document scopes cannot "
                            "read them", key_id=caller.key_id)
        return evidence.show_maps(self.corpus, ws)

    # Access -----------------------------------------------------------------------------------------
    def grant_for(self, authorization: str | None) -> Grant:
        return access.grant_for(self.corpus.keys, authorization)

    def create_key(self, workspaces: list[str], scopes: list[str] | None = None, read_only: bool = False,
                   name: str | None = None, caller: Grant = OPEN) -> dict:
        access.require_admin(caller)
        return access.create_key(self.corpus.keys, workspaces, scopes, read_only, name)

    def list_keys(self, caller: Grant = OPEN) -> list[dict]:
        access.require_admin(caller)
        return access.list_keys(self.corpus.keys)

    def revoke_key(self, key_id: str, caller: Grant = OPEN) -> dict:
        access.require_admin(caller)
        return access.revoke_key(self.corpus.keys, key_id)

    def reopen_keys(self) -> None:
        self.corpus.keys.reopen()

    @property
    def active_keys(self) -> int:
        return self.corpus.keys.active

    def access_log(self, since: datetime | None = None, key_id: str | None = None, request_id: str | None = None,
                   limit: int = 100, caller: Grant = OPEN) -> list[dict]:
        caller.require_everywhere("the access log")
        self.corpus.querylog.flush()
        return self.corpus.querylog.tables.access(since, key_id, request_id, limit)

    def readable_page(self, grant: Grant, page_id: str) -> None:
        access.readable_page(grant, self.corpus.store, page_id)

    def readable_query(self, grant: Grant, query_id: str) -> None:
        access.readable_query(grant, self.corpus.querylog.tables, query_id)

    # Operations -------------------------------------------------------------------------------------
    def status(self, caller: Grant = OPEN) -> dict[str, Any]:
        caller.require_everywhere("status (counts over every workspace)")
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

    def embed_model(self, model: str, progress: Callable[[int, int], None] | None = None) -> int:
        """Embed every chunk `model` lacks and bring its index up (`refindery models --embed`)."""
        self._embeddable(model)
        c = self.corpus
        c.sync([])
        n = c.embed_missing(model, progress=progress, stop=self._stop_embedding)
        c.sync([model])
        c.flush()
        return n

    def embed_model_in_background(self, model: str, caller: Grant = OPEN, report: bool = False) -> dict:
        """Start embedding what `model` lacks in a thread of this process (a server keeps serving;
        writes wait one batch at most); its progress is `embedding(model)`, and with `report` a line on
        stderr every few seconds (the server's log). Idempotent while it runs."""
        caller.require_everywhere("embedding a model (every workspace's chunks)")
        caller.require_write()
        self._embeddable(model)
        state = self._embeds.get(model)
        if state is not None and state["state"] == "embedding":
            return self.embedding(model)
        self._embeds[model] = state = {"model": model, "state": "embedding", "done": 0, "total": None,
                                       "started": utcnow().isoformat(timespec="seconds")}

        bar: Progress | None = None

        def progress(done: int, total: int) -> None:
            nonlocal bar
            state["done"], state["total"] = done, total
            if report:
                if bar is None:
                    bar = Progress(f"embed {model} (in the background)", total, "chunks", lines=True)
                bar.update(done - bar.done)

        def run() -> None:
            try:
                self.embed_model(model, progress)
                state["state"] = "stopped" if self._stop_embedding.is_set() else "ready"
                if bar is not None:
                    bar.close()
            except Exception as exc:   # noqa: BLE001 — said in the state (and the log), not lost in a thread
                log.exception("embedding %s failed", model)
                state["state"], state["error"] = "failed", f"{type(exc).__name__}: {exc}"

        t = threading.Thread(target=run, name=f"embed-{model}", daemon=True)
        self._embed_threads.append(t)
        t.start()
        return self.embedding(model)

    def embedding(self, model: str) -> dict | None:
        """A background embedding's state: embedding (with done, total and percent), ready, failed, stopped."""
        state = self._embeds.get(model)
        if state is None:
            return None
        out = dict(state)
        if out.get("total"):
            out["percent"] = min(100, int(100 * out["done"] / out["total"]))
        return out

    def _embeddable(self, model: str) -> None:
        reg = self.corpus.registry
        if model not in reg.names():
            raise ModelUnknown(f"no model {model!r} in the registry (known: {', '.join(reg.names())})", model=model)
        if reg.spec(model).kind != "embedder":
            raise InvalidRequest(f"{model!r} is not an embedder", model=model)

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
