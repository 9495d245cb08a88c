"""A live switch of the embedder (issue 54, item 4): `refindery models switch NAME` builds NAME's
vectors and index in a server's background while the active embedder keeps serving every search,
then swaps atomically — under the write lock, once no chunk lacks a vector of NAME — and keeps the
old one's vectors until `refindery models drop` removes them.

The data dir keeps the switch in its store (the `meta` table, CorpusStore.setting): the embedder it
runs after a switch (which wins over `[models] active` and the profile's embedder, for this data dir)
and the one it is switching to. A crash at any point loses nothing: the target's missing vectors are
the store's queue (Corpus.embed_missing), and a server started on a data dir with a switch under way
resumes it (server/cli/operations.py). Writes during the switch are encoded by the active embedder on the write
path and by the target in the background (Settings.background_models).

With replicas the store is the one truth of all three: a switch is claimed in the store (two at once,
through one replica or two: one wins), every replica follows the data dir's embedder and switch from
it (`follow`, on its follower's every look at the store) and says which embedders it uses
(`REPLICA_MODELS`), and a drop is refused while any live replica still uses the model."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from engine.core.clock import utcnow
from engine.core.errors import ModelInUse

if TYPE_CHECKING:   # (the Corpus is not imported, even for types: it imports this module)
    from engine.core.settings import Settings
    from indexes.store import CorpusStore

ACTIVE, TARGET, FROM, AT = "models.active", "models.switching_to", "models.switched_from", "models.switched_at"
REPLICA_MODELS = "models.used_by:"   # + a replica's id: the embedders it keeps, comma-separated


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


def follow(corpus: Any) -> str | None:
    """Take the data dir's embedder and switch from the store (another replica may have begun, swapped
    or cancelled one): the newly active embedder when it changed here, else None."""
    s, store = corpus.settings, corpus.store
    active, target = store.setting(ACTIVE), store.setting(TARGET)
    with corpus.write_lock:
        before = (s.models.active, s.switch_target)
        if active:
            s.models.active = active
        s._switch_target = target if target and target != s.models.active else None
        changed = before != (s.models.active, s.switch_target)
    if changed:
        report_models(corpus)
    return s.models.active if before[0] != s.models.active else None


def report_models(corpus: Any) -> None:
    """Record in the store which embedders this replica keeps (what a drop through any replica checks)."""
    rid, store = corpus.replica_name, corpus.store
    if rid is not None:
        store.set_settings({REPLICA_MODELS + rid: ",".join(corpus.settings.embedder_names)})


def used_by_other_replicas(corpus: Any, model: str) -> list[str]:
    """The live replicas other than this one that keep `model` (ids)."""
    mine, store = corpus.replica_name, corpus.store
    out = []
    for r in store.replicas(within_s=90.0):   # live: a replica reports at least every 30 s
        rid = r["replica_id"]
        if rid != mine and model in (store.setting(REPLICA_MODELS + rid) or "").split(","):
            out.append(rid)
    return out


def begin(corpus: Any, model: str) -> None:
    """Claim the switch to `model` in the store (the background embedding is the caller's to start):
    ModelInUse when a switch is under way already, begun by this replica or another, even at the
    same moment."""
    store = corpus.store
    with corpus.write_lock:
        if not store.claim_setting(TARGET, model):
            under_way = store.setting(TARGET)
            raise ModelInUse(f"a switch to {under_way!r} is under way already", model=model, switching_to=under_way)
        corpus.settings._switch_target = model
    report_models(corpus)


def cancel(corpus: Any) -> str | None:
    """Forget a switch under way (its vectors stay, as any model's do until dropped); returns its target."""
    store = corpus.store
    with corpus.write_lock:
        target = corpus.settings.switch_target
        store.set_settings({TARGET: None})
        corpus.settings._switch_target = None
    report_models(corpus)
    return target


def try_swap(corpus: Any, model: str) -> bool:
    """Make `model` the active embedder if a switch to it is under way and every chunk has its vector:
    under the write lock (no write between the check and the swap), in one store transaction. A search
    that started before keeps the model it started with; the next one uses `model`."""
    s, store = corpus.settings, corpus.store
    with corpus.write_lock:
        if s.switch_target != model or store.setting(TARGET) != model \
                or store.chunks_missing_embeddings(model, limit=1):
            return False
        corpus.dense(model)          # its index is open and current (embed_missing kept it so)
        corpus.flush()               # and saved before the store says it is the one
        old = s.models.active
        store.set_settings({ACTIVE: model, TARGET: None, FROM: old, AT: utcnow().isoformat(timespec="seconds")})
        s.models.active = model
        s._switch_target = None
    report_models(corpus)
    return True
