"""The Engine: the one composition root every face (HTTP routers, MCP tools, CLI, eval, bench) is
given. Built from Settings (or around an already open corpus), usable as a context manager, it owns
the corpus (store + indexes + models) and the verbs' services, and exposes each verb as one method —
written in engine/verbs/, one class per concern, that this class is composed of.

Every verb takes its **caller** (the request's grant, engine/core/access.py; `OPEN` for the local
operator: the CLI, a notebook) and does its own workspace defaulting and scoping — for what it
writes and would overwrite as for what it reads — so no face can forget a check. A face parses,
calls one of these with the caller, and shapes the reply; it never opens a store, loads a model or
imports `indexes`/`models` itself.
"""
from __future__ import annotations

import threading

from engine.core.corpus import Corpus, open_corpus
from engine.core.errors import EngineError, ModelUnavailable
from engine.core.querylog import LogEntry
from engine.core.settings import Settings, load_settings
from engine.refind.search import SearchService
from engine.verbs.access import AccessVerbs
from engine.verbs.backups import BackupVerbs
from engine.verbs.evidence import EvidenceVerbs
from engine.verbs.imports import ImportVerbs
from engine.verbs.operations import OperationsVerbs
from engine.verbs.pages import PageVerbs
from engine.verbs.refind import RefindVerbs
from engine.verbs.relations import CONSTRAINT_HELP, RelationVerbs  # noqa: F401 — named from here too


def _user_errors() -> tuple[type[Exception], ...]:
    from engine.core.private import UntrustedDataDir
    from indexes.store import StoreError
    from models.registry import ModelNotFound

    return EngineError, ModelNotFound, StoreError, UntrustedDataDir


# Failures a face reports as one line (a refusal, a model not installed, a store that cannot open),
# not as a traceback.
USER_ERRORS = _user_errors()


def _data_dir_busy() -> type[Exception]:
    from indexes.store import StoreBusy

    return StoreBusy


# The store is held by another process (a server, an ingest): the faces say who, and what to do.
DataDirBusy = _data_dir_busy()


def _store_unavailable() -> type[Exception]:
    from indexes.store_rows import StoreUnavailable

    return StoreUnavailable


# The store's database did not answer (PostgreSQL restarting): a face answers 503 store_unavailable,
# and the same request may succeed once it is back.
StoreUnavailable = _store_unavailable()


class Engine(RefindVerbs, PageVerbs, ImportVerbs, RelationVerbs, EvidenceVerbs, AccessVerbs, OperationsVerbs,
             BackupVerbs):
    def __init__(self, settings: Settings | None = None, pool=None, repair: bool = True,
                 corpus: Corpus | None = None):
        """`pool` shares already-loaded embedders (tests, bench); `corpus` wraps one already open
        (the caller then closes it); `repair=False` skips bringing the indexes to the store's
        generation (commands that only read keys or settings)."""
        self.owns_corpus = corpus is None
        self.corpus = corpus if corpus is not None else open_corpus(settings or load_settings(), pool, repair)
        c = self.corpus
        self.settings = c.settings
        # what the verbs use, handed to them here by name (engine/verbs/base.py) rather than reached
        # through the corpus
        self.store, self.querylog, self.keys = c.store, c.querylog, c.keys
        self.relation_store, self.registry, self.pool, self.sparse = c.relations, c.registry, c.pool, c.sparse
        self.pages = SearchService(c)
        self._evidence = None                       # the evidence searcher, made on first use
        self._embeds: dict[str, dict] = {}          # model -> its background embedding's state
        self._embed_threads: list[threading.Thread] = []
        self._stop_embedding = threading.Event()
        self._import_threads: dict[str, threading.Thread] = {}   # import id -> the thread fetching its texts
        self._imports_lock = threading.Lock()
        self._stop_imports = threading.Event()
        # another replica swapped the embedder: what this one wrote meanwhile gets the new one's vectors
        c.on_switched = lambda model: self.embed_model_in_background(model)

    # Lifetime ------------------------------------------------------------------------------------
    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._stop_embedding.set()        # a background embedding stops between two batches
        for t in self._embed_threads:
            t.join()
        self.stop_imports()
        if self.owns_corpus:
            self.corpus.close()
        else:
            self.querylog.flush()
            self.corpus.flush()

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
        self.querylog.record(entry)
