"""What every verb class stands on: the services the Engine composed and handed to it, the one place a
request's workspace is defaulted, and the read checks several verbs share."""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

from engine.core import access
from engine.core.access import OPEN, Grant
from engine.core.corpus import Corpus
from engine.core.settings import Settings

if TYPE_CHECKING:
    from indexes.backends import SparseArm
    from indexes.keys import KeyStore
    from indexes.relations import RelationStore
    from indexes.store_protocol import Store
    from models.embedder import EmbedderPool
    from models.registry import ModelRegistry

    from engine.core.querylog import QueryLog
    from engine.ingest.pipeline import IngestReport
    from engine.refind.search import SearchService


class Verbs:
    """Built by the Engine (engine/app.py), which is composed of these classes; a verb of one class
    may call another's (a document load ingests pages) through `self`. What a verb uses the Engine
    hands it once, by name: the store, the query log, the keys, the relation store, the model
    registry, the embedders loaded, the BM25 arm, page search — and the corpus itself for what is the corpus's own (its indexes kept in
    step: generations, repair, the embedders and their vectors)."""
    corpus: Corpus
    settings: Settings
    store: Store
    querylog: QueryLog
    keys: KeyStore
    relation_store: RelationStore
    registry: ModelRegistry
    pool: EmbedderPool
    sparse: SparseArm
    pages: SearchService
    _embeds: dict[str, dict]      # model -> its background embedding's state (operations)

    @property
    def default_workspace(self) -> str:
        return self.settings.default_workspace

    def workspace_for(self, caller: Grant, requested: str | None) -> str:
        """The workspace a request works in: the one it names, else the default (a key bound to
        workspaces: its first); outside the caller's grant, 404 as if absent."""
        return caller.workspace(requested, self.default_workspace)

    def readable_page(self, grant: Grant, page_id: str) -> None:
        access.readable_page(grant, self.store, page_id)

    def readable_query(self, grant: Grant, query_id: str) -> None:
        access.readable_query(grant, self.querylog, query_id)

    def embedding(self, model: str) -> dict | None:
        """A background embedding's state: embedding (with done, total and percent), ready, failed, stopped."""
        state = self._embeds.get(model)
        if state is None:
            return None
        out = dict(state)
        if out.get("total"):
            out["percent"] = min(100, int(100 * out["done"] / out["total"]))
        return out

    def ingest(self, records: Iterable, workspace: str | None = None, progress: bool | None = None,
               flush: bool = True, total: int | None = None, ray: str | None = None,
               caller: Grant = OPEN) -> IngestReport:
        """Pages in (engine/verbs/pages.py): a relation load of documents makes them pages."""
        raise NotImplementedError
