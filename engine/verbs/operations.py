"""Operations: status, models and their background embedding, the reranker's training, the query
log's replay and pruning, reindexing."""
from __future__ import annotations

import logging
import os
import threading
from datetime import datetime
from pathlib import Path
from typing import Any, Callable

from engine.core.access import OPEN, Grant
from engine.core.clock import utcnow
from engine.core import switch
from engine.core.errors import InvalidRequest, ModelInUse, ModelNotInstalled, ModelUnknown
from engine.core.profile import describe as describe_profile
from engine.core.progress import Progress
from engine.refind.rerank_pairs import NegativePlan, Pair, feedback_pairs, judgment_pairs, mined_pairs
from engine.refind.reranker_training import train_reranker
from engine.verbs.base import Verbs

SWITCH_RECHECK_S = 5.0   # a pending switch's next look, with no new write (_follow_writes)
log = logging.getLogger("refindery.engine")
LIVE_S = 90.0   # a replica that reported within this long counts as live (it reports at least every 30 s)


def background_priority(nice: int) -> None:
    """Lower the calling thread's CPU priority to `nice` (Linux: a thread's own niceness; threads it
    starts inherit it). Elsewhere, or when refused, it runs as it is."""
    if nice <= 0 or not hasattr(os, "setpriority"):
        return
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), nice)
    except OSError as exc:
        log.info("background embedding at normal priority: %s", exc)


class OperationsVerbs(Verbs):
    _embed_threads: list[threading.Thread]
    _stop_embedding: threading.Event

    def status(self, caller: Grant = OPEN) -> dict[str, Any]:
        caller.require_everywhere("status (counts over every workspace)")
        c = self.corpus
        return {
            "data_dir": str(c.data_dir),
            "active_model": c.settings.models.active,
            "profile": c.settings.profile,
            "counts": self.store.counts(),
            "generations": c.consistency(),
            "repairs_at_open": [r.__dict__ for r in c.repairs],
            "quarantine": self.store.quarantined(),
            "query_log": self.querylog.stats(),
            "reranker": c.reranker_status(),
            "device": c.device_status(),
            "query_runtime": self.query_runtime(),
        }

    def counts(self, caller: Grant = OPEN) -> dict[str, Any]:
        """Pages, chunks and each model's vectors over every workspace (what status counts)."""
        caller.require_everywhere("counts over every workspace")
        return self.store.counts()

    def applied_generation(self) -> int:
        """The store generation this process's indexes have applied (a reply's Refindery-Generation)."""
        return self.corpus.applied

    def replica_id(self) -> str | None:
        """This process's replica id, with the store shared (None with a DuckDB store)."""
        return self.corpus.replica_name

    def live_replicas(self) -> int:
        """How many replicas share the store now (those that reported within LIVE_S: a replica
        reports at least every 30 s); 1 without replicas (a DuckDB store)."""
        return max(1, len(self.store.replicas(within_s=LIVE_S))) if self.corpus.replica is not None else 1

    def wait_applied(self, generation: int, timeout_s: float) -> bool:
        """Whether this process has applied `generation` within `timeout_s` (read your writes on any replica)."""
        return self.corpus.wait_applied(generation, timeout_s)

    def health(self) -> dict[str, Any]:
        """/healthz: up, the profile, and the generation applied (a replica: its id, how far behind the store)."""
        out: dict[str, Any] = {"status": "ok", **self.profile(), "applied_generation": self.corpus.applied}
        replica = self.corpus.describe_replica()
        return out | ({"replica": replica} if replica is not None else {})

    def profile(self) -> dict[str, str]:
        """Which profile runs and its embedder (engine/core/profile.py): /healthz and /v1/models say it."""
        return describe_profile(self.corpus.settings)

    def query_runtime(self) -> dict[str, Any]:
        """How the active model encodes queries ("onnx" or "torch", and why torch when the ONNX path
        was tried), or not loaded yet."""
        emb = self.pool.loaded().get(self.settings.models.active)
        if emb is None:
            return {"model": self.settings.models.active, "loaded": False}
        out = {"model": emb.name, "loaded": True, "runtime": emb.query_runtime, "device": emb.device}
        return out | ({"note": emb.query_runtime_note} if emb.query_runtime_note else {})

    # Evaluation and the reranker's training ---------------------------------------------------------
    def reranker_status(self) -> dict:
        return self.corpus.reranker_status()

    def declared_reranker(self, name: str) -> Path | None:
        """Where the model registry declares a reranker of this name to live (None: not declared)."""
        reg = self.registry
        return reg.declared_path(name) if name in reg.names("reranker") else None

    def training_pairs(self, source: str, workspace: str, plan: NegativePlan | None = None, n: int = 400,
                       seed: int = 13, collection=None) -> list[Pair]:
        """A cross-encoder's training pairs from this corpus: `judgments` (a test collection's, with
        hard negatives from hybrid search), `mined` (sentences of the workspace's pages), `feedback`
        (found / click / irrelevant in the query log)."""
        if source == "judgments":
            return judgment_pairs(self.pages, self.store, collection, workspace, plan, seed=seed)
        if source == "mined":
            return mined_pairs(self.pages, self.store, workspace, n=n, plan=plan, seed=seed)
        if source == "feedback":
            return feedback_pairs(self.pages, self.store, self.querylog, workspace, plan=plan, seed=seed)
        raise ValueError(f"unknown pair source {source!r}")

    def train_reranker(self, pairs: list[Pair], out_dir: Path, **kw) -> dict:
        """Train a cross-encoder on `pairs` into `out_dir` (engine/refind/reranker_training.py)."""
        return train_reranker(self.registry, pairs, out_dir, **kw)

    def embed_model(self, model: str, progress: Callable[[int, int], None] | None = None,
                    background: bool = False) -> int:
        """Embed every chunk `model` lacks and bring its index up (`refindery models --embed`);
        `background`: as a background encoder (a server's thread: embed_model_in_background)."""
        self._embeddable(model)
        c = self.corpus
        c.sync([])
        batch = 128
        encoder = None
        if background:
            batch = self.settings.models.catch_up_batch
            encoder = self.pool.background(model, self.settings.models.catch_up_threads)
        n = c.embed_missing(model, batch=batch, progress=progress, stop=self._stop_embedding, encoder=encoder)
        c.sync([model])
        c.flush()
        return n

    def embed_model_in_background(self, model: str, caller: Grant = OPEN, report: bool = False) -> dict:
        """Start embedding what `model` lacks in a thread of this process (a server keeps serving;
        writes wait one batch at most); its progress is `embedding(model)`, and with `report` a line on
        stderr every few seconds (the server's log). Idempotent while it runs.

        The quality profile's catch-up model (settings.catch_up_model) and a live switch's target are
        *followed*: the thread stays, and embeds what each later write adds (state "ready" while nothing
        waits); the catch-up model's fast stand-in first gets whatever it lacks (a data dir written
        under another profile); a switch's target, once it lacks nothing, becomes the active embedder
        (engine/core/switch.py: try_swap) and the thread ends there. Either runs as a
        background encoder: at `models.catch_up_nice`, `models.catch_up_batch` chunks at a time, on a
        model session of its own with `models.catch_up_threads` (EmbedderPool.background)."""
        caller.require_everywhere("embedding a model (every workspace's chunks)")
        caller.require_write()
        self._embeddable(model)
        state = self._embeds.get(model)
        if state is not None and state["state"] == "embedding" or (state or {}).get("follows_writes"):
            return self.embedding(model)
        follow = model in self.settings.background_models
        self._embeds[model] = state = {"model": model, "state": "embedding", "done": 0, "total": None,
                                       "started": utcnow().isoformat(timespec="seconds")}
        if follow:
            state["follows_writes"] = True

        progress = _Progress(state, model, report)

        def run() -> None:
            try:
                background_priority(self.settings.models.catch_up_nice)
                if not follow:
                    self.embed_model(model, progress, background=True)
                    state["state"] = "stopped" if self._stop_embedding.is_set() else "ready"
                    progress.close()
                    return
                self._follow_writes(model, state, progress)
            except Exception as exc:   # noqa: BLE001 — said in the state (and the log), not lost in a thread
                log.exception("embedding %s failed", model)
                state["state"], state["error"] = "failed", f"{type(exc).__name__}: {exc}"

        t = threading.Thread(target=run, name=f"embed-{model}", daemon=True)
        self._embed_threads.append(t)
        t.start()
        return self.embedding(model)

    def _follow_writes(self, model: str, state: dict, progress: "_Progress") -> None:
        """A followed model's thread: the catch-up model's fast stand-in first gets what it lacks; then,
        pass after pass, what the model lacks is embedded, a switch's target swapped in once it lacks
        nothing, and the next pass waits for the next write (a store generation) — until the model is
        no longer followed or the engine closes."""
        fast = self.settings.fast_model
        if fast and model == self.settings.catch_up_model:
            self.embed_model(fast, background=True)
        while not self._stop_embedding.is_set() and model in self.settings.background_models:
            generation = self.store.generation()
            state["state"], state["done"], state["total"] = "embedding", 0, None
            self.embed_model(model, progress, background=True)
            progress.close()
            if not self._stop_embedding.is_set() and switch.try_swap(self.corpus, model):
                state["switched"] = utcnow().isoformat(timespec="seconds")
                log.warning("switched the active embedder to %s", model)
            state["state"] = "ready"
            state["caught_up"] = utcnow().isoformat(timespec="seconds")
            # the next write (a store generation) is the next pass; nothing to do meanwhile — but while a
            # switch to this model waits, a pass again every few seconds too: a write another replica made
            # before this pass began may not have reached this replica's indexes when the pass ran, and then
            # no later generation would come to wake it
            waited = 0.0
            while model in self.settings.background_models and self.store.generation() == generation \
                    and not (self.settings.switch_target == model and waited >= SWITCH_RECHECK_S) \
                    and not self._stop_embedding.wait(0.5):
                waited += 0.5
        state["follows_writes"] = False
        if self._stop_embedding.is_set():
            state["state"] = "stopped"

    # A live switch of the embedder (engine/core/switch.py) ----------------------------------------
    def switch_status(self) -> dict:
        """The data dir's embedder, the one it is switching to (with the background embedding's
        progress) and the last switch: `GET /v1/models/switch`."""
        out = switch.status(self.corpus)
        if out["switching_to"]:
            out["embedding"] = self.embedding(out["switching_to"])
        return out

    def switch_model(self, model: str, caller: Grant = OPEN, report: bool = False) -> dict:
        """Switch the data dir's embedder to `model` without a pause: its vectors and index are built
        in this process's background while the active one serves; once it lacks nothing, it becomes
        the active embedder atomically. Switching to the active embedder cancels a switch under way.
        A switch survives a restart (a server resumes it)."""
        caller.require_everywhere("switching the embedder (every workspace's chunks)")
        caller.require_write()
        self._embeddable(model)
        self._installed(model)
        s = self.settings
        switch.follow(self.corpus)   # what every replica agrees on: the store's (another may have begun one)
        if model == s.models.active:
            if s.switch_target is None:
                raise ModelInUse(f"{model!r} is the active embedder already", model=model)
            return self.switch_status() | {"cancelled": switch.cancel(self.corpus)}
        if s.switch_target not in (None, model):
            raise ModelInUse(f"a switch to {s.switch_target!r} is under way; switch to the active {s.models.active!r} "
                             "to cancel it first", model=model, switching_to=s.switch_target)
        switch.begin(self.corpus, model)
        self.embed_model_in_background(model, caller, report)
        return self.switch_status()

    def drop_model(self, model: str, caller: Grant = OPEN) -> dict:
        """Delete every vector of `model` and empty its index (`refindery models drop`): the old embedder
        a switch kept, or any other the data dir no longer uses. Refused for one in use."""
        caller.require_everywhere("dropping a model's vectors (every workspace's chunks)")
        caller.require_write()
        self._embeddable(model)
        switch.follow(self.corpus)   # the store's embedder and switch, whichever replica set them
        state = self._embeds.get(model)
        if model in self.settings.embedder_names or (state is not None and state["state"] == "embedding"):
            raise ModelInUse(f"{model!r} is in use here (active, being switched to or embedded, or kept up to date "
                             "on writes): it cannot be dropped", model=model)
        others = switch.used_by_other_replicas(self.corpus, model)
        if others:
            raise ModelInUse(f"{model!r} is still in use by replica{'s' if len(others) > 1 else ''} "
                             f"{', '.join(others)}: it cannot be dropped", model=model, replicas=others)
        n = self.corpus.drop_vectors(model)
        self._embeds.pop(model, None)
        return {"model": model, "dropped_vectors": n}

    def _installed(self, model: str) -> None:
        """ModelNotInstalled (422, with the install hint) unless the model's weights are here."""
        reg = self.registry
        if not reg.is_available(model):
            hint = reg.spec(model).install
            raise ModelNotInstalled(f"{model!r} is registered but not installed here"
                                    + (f": install it with {hint}" if hint else ""), model=model,
                                    **({"install": hint} if hint else {}))

    def _embeddable(self, model: str) -> None:
        reg = self.registry
        if model not in reg.names():
            raise ModelUnknown(f"no model {model!r} in the registry (known: {', '.join(reg.names())})", model=model)
        if reg.spec(model).kind != "embedder":
            raise InvalidRequest(f"{model!r} is not an embedder", model=model)

    def logged_searches(self, since: datetime, limit: int = 10_000) -> dict:
        """The searches logged since `since` (query id, request params, model), the pages each
        returned in order, and every feedback row (query id, page id, kind): what a replay reads."""
        self.querylog.flush()
        t = self.querylog.tables
        return {"searches": t.searches_since(since, limit), "results": t.results_since(since),
                "feedback": t.feedback()}

    def logged_stages(self, query_ids: list[str]) -> dict[str, dict]:
        """Per logged execution, its params and the pages of each stage in rank order (each arm's
        candidates, fused, reranked, results): what `eval stages` reads."""
        self.querylog.flush()
        return self.querylog.tables.stage_rows(query_ids)

    def logged_judgments(self, since: datetime) -> dict[str, tuple[str, list[str]]]:
        """The logged searches with feedback since `since`: query id -> (text, pages marked found / click)."""
        self.querylog.flush()
        return self.querylog.tables.judged_searches(since)

    def logged_agreement(self, since: datetime) -> list[tuple]:
        """Every logged compare's agreement rows since `since` (model_a, model_b, k, jaccard, rbo_ext, tau)."""
        self.querylog.flush()
        return self.querylog.tables.agreement_since(since)

    def prune_log(self, before: datetime) -> int:
        return self.querylog.prune(before)

    def reindex(self) -> dict:
        reports = self.corpus.reindex()
        return {"rebuilt": [r.__dict__ for r in reports], "consistency": self.corpus.consistency()}

    def flush(self) -> None:
        self.corpus.flush()

    @property
    def data_dir(self) -> Path:
        return self.corpus.data_dir


class _Progress:
    """A background embedding's progress: into its state and — `report` — a line on stderr every few
    seconds (the server's log), a bar per pass."""

    def __init__(self, state: dict, model: str, report: bool):
        self.state, self.model, self.report = state, model, report
        self.bar: Progress | None = None

    def __call__(self, done: int, total: int) -> None:
        self.state["done"], self.state["total"] = done, total
        if self.report and total:
            if self.bar is None:
                self.bar = Progress(f"embed {self.model} (in the background)", total, "chunks", lines=True)
            self.bar.total = total   # what waits now: pages written during the pass count too
            self.bar.update(done - self.bar.done)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
