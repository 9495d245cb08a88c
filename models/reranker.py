"""Cross-encoder rerankers: any sentence-transformers CrossEncoder folder named in the registry."""
from __future__ import annotations

from collections import OrderedDict
from pathlib import Path
from threading import Lock

import numpy as np

from .device import resolve_device
from .registry import ModelNotFound, ModelRegistry, ModelSpec


class RerankerUnavailable(RuntimeError):
    """Rerank was asked for, but no reranker is configured or its weights are missing."""


class _OnnxCrossEncoder:
    """A cross-encoder exported to ONNX (`refindery reranker train --onnx`), run by onnxruntime on
    CPU: the tokenizer from the model folder, one session, raw logits out."""

    def __init__(self, path: Path, file: str, max_length: int | None):
        import onnxruntime as ort
        from transformers import AutoTokenizer

        onnx_path = path / file
        if not onnx_path.is_file():
            raise RerankerUnavailable(f"{onnx_path} does not exist (export it with `refindery reranker train --onnx`)")
        self.tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        self.max_length = max_length or min(self.tokenizer.model_max_length, 512)
        self.session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
        self.inputs = [i.name for i in self.session.get_inputs()]

    def logits(self, query: str, passages: list[str], batch_size: int) -> np.ndarray:
        out = []
        for i in range(0, len(passages), batch_size):
            b = passages[i:i + batch_size]
            enc = self.tokenizer([query] * len(b), b, padding=True, truncation="longest_first",
                                 max_length=self.max_length, return_tensors="np")
            feed = {n: enc[n].astype(np.int64) for n in self.inputs if n in enc}
            out.append(self.session.run(None, feed)[0].reshape(-1))
        return np.concatenate(out).astype(np.float32)


class Reranker:
    """Scores (query, passage) pairs; scores are sigmoid probabilities in (0, 1), so they stay
    positive through rollup and recency decay.

    Backend: "torch" (sentence-transformers CrossEncoder, CPU or CUDA) by default; a registry entry
    with `backend = "onnx"` runs `onnx_file` (default onnx/model.onnx) with onnxruntime on CPU.
    Passages are scored in length order, so each batch pads to similar lengths, and truncated to
    the model's maximum length (query + passage, longest first)."""

    def __init__(self, spec: ModelSpec, path: Path, device: str = "auto", batch_size: int = 32):
        self.spec = spec
        self.name = spec.name
        self.path = Path(path)
        self.batch_size = batch_size
        self.cache_size = 4096
        self._cache: OrderedDict[tuple[str, str], float] = OrderedDict()
        self._cache_lock = Lock()
        self.backend = str(spec.extra.get("backend", "torch"))
        if self.backend == "onnx":
            self.device = "cpu"
            self.model = _OnnxCrossEncoder(self.path, str(spec.extra.get("onnx_file", "onnx/model.onnx")),
                                           spec.max_seq_length)
            return
        if self.backend != "torch":
            raise RerankerUnavailable(f"reranker {spec.name!r}: unknown backend {self.backend!r} (torch or onnx)")
        import torch
        from sentence_transformers import CrossEncoder

        self.device = resolve_device(device)
        kwargs = {"device": self.device, "local_files_only": True, "activation_fn": torch.nn.Sigmoid()}
        if spec.max_seq_length:
            kwargs["max_length"] = spec.max_seq_length
        self.model = CrossEncoder(str(self.path), **kwargs)
        if self.device.startswith("cuda"):
            # Half precision on a GPU (the scores go through a sigmoid; fp16 logits are plenty).
            self.model.model.half()

    def score(self, query: str, passages: list[str]) -> np.ndarray:
        """Scores in the order of `passages`. Recently scored (query, passage) pairs come from a
        small cache: a paged or repeated query, or compare's runs over shared chunks, score once."""
        if not passages:
            return np.zeros(0, dtype=np.float32)
        out = np.empty(len(passages), dtype=np.float32)
        todo = []
        with self._cache_lock:
            for i, p in enumerate(passages):
                hit = self._cache.get((query, p))
                if hit is None:
                    todo.append(i)
                else:
                    out[i] = hit
        if todo:
            order = sorted(todo, key=lambda i: len(passages[i]))
            ordered = [passages[i] for i in order]
            if self.backend == "onnx":
                logits = self.model.logits(query, ordered, self.batch_size)
                scores = 1.0 / (1.0 + np.exp(-logits.astype(np.float64)))
            else:
                scores = self.model.predict([(query, p) for p in ordered], batch_size=self.batch_size,
                                            show_progress_bar=False, convert_to_numpy=True)
            scores = np.asarray(scores, dtype=np.float32).reshape(-1)
            out[order] = scores
            with self._cache_lock:
                for i, s in zip(order, scores):
                    self._cache[(query, passages[i])] = float(s)
                    self._cache.move_to_end((query, passages[i]))
                while len(self._cache) > self.cache_size:
                    self._cache.popitem(last=False)
        return out


_CACHE: dict[tuple, Reranker] = {}
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
    # One folder can hold several graphs (fp32 and int8 ONNX beside the torch weights), declared as
    # separate registry entries: the cache tells them apart by everything that changes the scores.
    key = (str(path.resolve()), resolve_device(device), str(spec.extra.get("backend", "torch")),
           str(spec.extra.get("onnx_file", "")), spec.max_seq_length)
    with _LOCK:
        rr = _CACHE.get(key)
        if rr is None:
            rr = Reranker(spec, path, device, batch_size)
            _CACHE[key] = rr
        return rr
