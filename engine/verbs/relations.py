"""Relation search's verbs: search, facts, corrections, receipts' regions, audit events, workspaces
and loads (SQL exports, folders of documents)."""
from __future__ import annotations

import json
from pathlib import Path
from pydantic import ValidationError

from engine.core import access
from engine.core.access import OPEN, Forbidden, Grant
from engine.core.errors import LoadInvalid, LoadNotFound
from engine.core.urls import normalize_url
from engine.ingest.records import PageInput, describe_validation_error
from engine.relations import documents as relation_documents
from engine.relations import facts as relation_facts
from engine.relations.criteria import CriterionReader
from engine.relations.criteria_model import ModelCriterionReader
from engine.relations.loads import LoadRequest, load, workspace_roots
from engine.relations.search import RelationSearch, RelationSearchRequest
from engine.relations.workspaces import WorkspaceCreate, create_workspace, describe_workspace, schema_of
from engine.verbs.base import Verbs

# How one constraint is written (the listing of workspaces says it once, beside what it may name).
CONSTRAINT_HELP = ("{relation, slot, op, value, required?}: op one of the slot's operators; value one value, or a "
                   "list with op in; required false makes it a preference. Several constraints all hold (AND).")


class RelationVerbs(Verbs):
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
        return RelationSearch(self.relation_store, self.querylog, compiler, self.pages, reader, scopes=scopes).search(req, routes)

    def facts(self, req: relation_facts.FactsRequest, caller: Grant = OPEN) -> dict:
        caller.workspace(req.workspace_id, req.workspace_id)
        return relation_facts.facts(self.relation_store, req, caller.document_scopes)

    def correct(self, req: relation_facts.CorrectionRequest, caller: Grant = OPEN) -> dict:
        """Retire a row: the caller must write, and a key with document scopes retires only rows read
        from documents of its scopes (a row every key reads is not its to retire)."""
        caller.require_write()  # a read-only key is refused before the workspace is looked at
        caller.workspace(req.workspace_id, req.workspace_id)
        return relation_facts.correct(self.relation_store, req, caller.document_scopes)

    def region(self, req: relation_facts.RegionRequest, caller: Grant = OPEN) -> dict:
        caller.workspace(req.workspace_id, req.workspace_id)
        return relation_facts.region(self.relation_store, req, caller.document_scopes)

    def audit_events(self, request_id: str, caller: Grant = OPEN) -> dict:
        """The events of a request that the caller may read: in its workspaces, and (for a key with
        document scopes) recording a search that read no document outside them."""
        out = relation_facts.audit_events(self.relation_store, request_id)
        out["events"] = [ev for ev in out["events"] if caller.may_read(ev["workspace_id"])
                         and access.within_scopes(caller, (ev.get("summary") or {}).get("document_scopes"))]
        if not out["events"]:
            raise relation_facts.AuditNotFound(f"no audit event for request {request_id!r}", ref=request_id)
        return out

    def create_relation_workspace(self, body: WorkspaceCreate, caller: Grant = OPEN) -> dict:
        caller.require_write()
        if not caller.everywhere and body.workspace_id not in caller.workspaces:
            raise Forbidden("this key may create only the workspaces it names", key_id=caller.key_id)
        return create_workspace(self.relation_store, body)

    def has_relation_workspace(self, workspace_id: str) -> bool:
        return self.relation_store.workspace(workspace_id) is not None

    def relation_workspaces(self, caller: Grant = OPEN) -> dict:
        """The relation workspaces the caller may read, each with what its constraints may say
        (relations, slots, operators, allowed values with counts): an agent's first call."""
        rstore = self.relation_store
        return {"workspaces": [schema_of(rstore, ws, caller.document_scopes) for ws in rstore.workspace_ids()
                               if caller.may_read(ws)],
                "constraint": CONSTRAINT_HELP}

    def describe_relation_workspace(self, workspace_id: str, caller: Grant = OPEN) -> dict:
        caller.workspace(workspace_id, workspace_id)
        out = describe_workspace(self.relation_store, workspace_id, caller.document_scopes)
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
                                self.keys.closed) if confined else None
        if isinstance(req, relation_documents.DocumentLoadRequest):
            return self._load_documents(workspace_id, req, roots, caller)
        if scopes is not None:
            raise Forbidden("a key with document scopes may load only documents of its scopes: the rows of a "
                            "SQL export are read by every key of the workspace")
        return load(self.relation_store, workspace_id, req, roots)

    def sync_load(self, workspace_id: str, load_id: str, caller: Grant = OPEN, confined: bool = True) -> dict:
        """Run a load again from its stored body: for a folder of documents or records (a connected
        export) only what changed is re-read and superseded; a SQL load is re-read whole."""
        caller.require_write()
        caller.workspace(workspace_id, workspace_id)
        spec = self.relation_store.load_spec(load_id)
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
        prep = relation_documents.prepare(self.relation_store, workspace_id, req, roots,
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
        for url, scope in prep.removed_pages():   # that document's page, in its scope (another scope's stay)
            found = self.store.pages_with_url(workspace_id, normalize_url(url), list(scopes) if scopes is not None else None)
            for page_id, meta in self.store.pages_by_id(found).items():
                if meta.get("scope") == scope:
                    c.delete_page(page_id)
        return relation_documents.write(self.relation_store, prep, pages)
