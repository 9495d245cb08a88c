"""Batch embedding through Ray Data: `map_batches` over an actor pool, one embedder loaded per
actor (`refindery ingest --ray [ADDRESS]`). Only the embedding moves: the ingest still reads,
chunks, writes the store and the indexes in this process, batch by batch, so the store and the
indexes stay consistent and a killed ingest is re-runnable exactly as without Ray.

ADDRESS is a Ray cluster (`ray://head:10001` or `head:6379`); without one, a local Ray is started
for the ingest (`ray_local_cpus` CPUs) and shut down after it.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class EmbedderSource:
    """What an actor needs to load an embedder the way this process does."""
    registry_path: str
    cache_dir: str
    data_dir: str
    device: str
    batch_size: int


class _EmbedActor:
    """A Ray Data actor: loads one embedder once, then embeds every batch it is given."""

    def __init__(self, model: str, source: EmbedderSource):
        from models.embedder import EmbedderPool
        from models.registry import ModelRegistry

        registry = ModelRegistry(source.registry_path, source.cache_dir, data_dir=source.data_dir)
        self.embedder = EmbedderPool(registry, source.device, source.batch_size).get(model)

    def __call__(self, batch: dict) -> dict:
        vectors = self.embedder.encode_documents([str(t) for t in batch["text"]])
        # the worker process that embedded each text: the driver's record of where the work ran
        return {"i": batch["i"], "vector": vectors, "pid": np.full(len(batch["i"]), os.getpid())}


class RayEmbedding:
    """Embeds lists of texts on a Ray cluster; `encode(model, texts)` returns the vectors in order."""

    def __init__(self, address: str | None, source: EmbedderSource, actors: int = 2, batch_size: int = 64,
                 cpus_per_actor: float = 1.0, local_cpus: int = 2):
        try:
            import ray
        except ImportError as exc:  # an optional extra
            raise RuntimeError("--ray needs Ray: pip install 'refindery[ray]'") from exc
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        self.ray = ray
        self.source, self.actors, self.batch_size, self.cpus = source, actors, batch_size, cpus_per_actor
        self.workers: set[int] = set()   # the processes (Ray actors) that embedded what encode returned
        self.last_stats = ""             # Ray Data's own account of the last encode's execution
        self.started = not ray.is_initialized()
        if self.started:
            if address:
                host = address.split("://")[-1].rsplit(":", 1)[0]
                # a cluster on this machine's loopback: the driver is on loopback too (not on the
                # address Ray would pick, which a network namespace without it cannot reach)
                local = {"_node_ip_address": "127.0.0.1"} if host in ("127.0.0.1", "localhost") else {}
                ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING, **local)
            else:
                ray.init(num_cpus=local_cpus, include_dashboard=False, log_to_driver=False,
                         logging_level=logging.WARNING, object_store_memory=200_000_000)
        ctx = ray.data.DataContext.get_current()
        ctx.enable_progress_bars = False
        ctx.execution_options.preserve_order = True
        logging.getLogger("ray.data").setLevel(logging.WARNING)

    def encode(self, model: str, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, 1), dtype=np.float32)
        ds = self.ray.data.from_items([{"i": i, "text": t} for i, t in enumerate(texts)])
        mapped = ds.map_batches(_EmbedActor, fn_constructor_kwargs={"model": model, "source": self.source},
                                concurrency=self.actors, batch_size=self.batch_size, num_cpus=self.cpus,
                                batch_format="numpy")
        out = mapped.take_all()
        self.last_stats = mapped.stats()
        self.workers |= {int(r["pid"]) for r in out}
        out.sort(key=lambda r: int(r["i"]))
        if [int(r["i"]) for r in out] != list(range(len(texts))):
            raise RuntimeError(f"Ray returned {len(out)} vectors for {len(texts)} texts")
        return np.ascontiguousarray(np.stack([np.asarray(r["vector"], dtype=np.float32) for r in out]))

    def close(self) -> None:
        if self.started and self.ray.is_initialized():
            self.ray.shutdown()
