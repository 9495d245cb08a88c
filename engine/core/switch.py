"""A live switch of the embedder (issue 54, item 4): `refindery models switch NAME` builds NAME's
vectors and index in a server's background while the active embedder keeps serving every search,
then swaps atomically — under the write lock, once no chunk lacks a vector of NAME — and keeps the
old one's vectors until `refindery models drop` removes them.

The data dir keeps the switch in its store (the `meta` table, CorpusStore.setting): the embedder it
runs after a switch (which wins over `[models] active` and the profile's embedder, for this data dir)
and the one it is switching to. A crash at any point loses nothing: the target's missing vectors are
the store's queue (Corpus.embed_missing), and a server started on a data dir with a switch under way
resumes it (server/cli/operations.py). Writes during the switch are encoded by the active embedder on the write
path and by the target in the background (Settings.background_models)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from engine.core.clock import utcnow

if TYPE_CHECKING:   # (the Corpus is not imported, even for types: it imports this module)
    from engine.core.settings import Settings
    from indexes.store import CorpusStore

ACTIVE, TARGET, FROM, AT = "models.active", "models.switching_to", "models.switched_from", "models.switched_at"


def apply(settings: "Settings", store: "CorpusStore") -> None:
    """The data dir's own embedder and switch, read from its store into `settings` (at open)."""
    active = store.setting(ACTIVE)
    if active:
        settings.models.active = active
    target = store.setting(TARGET)
    settings._switch_target = target if target and target != settings.models.active else None


def status(corpus: Any) -> dict:
    """What the data dir runs, what it is switching to, and the last switch."""
    s, store = corpus.settings, corpus.store
    return {"active": s.models.active, "switching_to": s.switch_target,
            "switched_from": store.setting(FROM), "switched_at": store.setting(AT)}


def begin(corpus: Any, model: str) -> None:
    """Record the switch to `model` (the background embedding is the caller's to start)."""
    with corpus.write_lock:
        corpus.store.set_settings({TARGET: model})
        corpus.settings._switch_target = model


def cancel(corpus: Any) -> str | None:
    """Forget a switch under way (its vectors stay, as any model's do until dropped); returns its target."""
    with corpus.write_lock:
        target = corpus.settings.switch_target
        corpus.store.set_settings({TARGET: None})
        corpus.settings._switch_target = None
        return target


def try_swap(corpus: Any, model: str) -> bool:
    """Make `model` the active embedder if a switch to it is under way and every chunk has its vector:
    under the write lock (no write between the check and the swap), in one store transaction. A search
    that started before keeps the model it started with; the next one uses `model`."""
    s = corpus.settings
    with corpus.write_lock:
        if s.switch_target != model or corpus.store.chunks_missing_embeddings(model, limit=1):
            return False
        corpus.dense(model)          # its index is open and current (embed_missing kept it so)
        corpus.flush()               # and saved before the store says it is the one
        old = s.models.active
        corpus.store.set_settings({ACTIVE: model, TARGET: None, FROM: old,
                                   AT: utcnow().isoformat(timespec="seconds")})
        s.models.active = model
        s._switch_target = None
    return True
