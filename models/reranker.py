"""Cross-encoder rerankers: any sentence-transformers CrossEncoder folder named in the registry."""
from __future__ import annotations

from pathlib import Path
from threading import Lock

import numpy as np

from .device import resolve_device
from .registry import ModelNotFound, ModelRegistry, ModelSpec


class RerankerUnavailable(RuntimeError):
    """Rerank was asked for, but no reranker is configured or its weights are missing."""


class Reranker:
    """Scores (query, passage) pairs; scores are sigmoid probabilities in (0, 1), so they stay
    positive through rollup and recency decay."""

    def __init__(self, spec: ModelSpec, path: Path, device: str = "auto", batch_size: int = 32):
        import torch
        from sentence_transformers import CrossEncoder

        self.spec = spec
        self.name = spec.name
        self.path = Path(path)
        self.device = resolve_device(device)
        self.batch_size = batch_size
        kwargs = {"device": self.device, "local_files_only": True, "activation_fn": torch.nn.Sigmoid()}
        if spec.max_seq_length:
            kwargs["max_length"] = spec.max_seq_length
        self.model = CrossEncoder(str(self.path), **kwargs)

    def score(self, query: str, passages: list[str]) -> np.ndarray:
        if not passages:
            return np.zeros(0, dtype=np.float32)
        scores = self.model.predict([(query, p) for p in passages], batch_size=self.batch_size,
                                    show_progress_bar=False, convert_to_numpy=True)
        return np.asarray(scores, dtype=np.float32).reshape(-1)


_CACHE: dict[tuple[str, str], Reranker] = {}
_LOCK = Lock()


def load_reranker(registry: ModelRegistry, name: str | None, device: str = "auto",
                  batch_size: int = 32) -> Reranker:
    if not name:
        raise RerankerUnavailable("no reranker is configured (set models.reranker to a name in the registry)")
    try:
        spec = registry.spec(name)
        if spec.kind != "reranker":
            raise RerankerUnavailable(f"{name!r} is an {spec.kind}, not a reranker")
        path = registry.resolve(name)
    except ModelNotFound as exc:
        raise RerankerUnavailable(str(exc)) from exc
    key = (str(path.resolve()), resolve_device(device))
    with _LOCK:
        rr = _CACHE.get(key)
        if rr is None:
            rr = Reranker(spec, path, device, batch_size)
            _CACHE[key] = rr
        return rr
