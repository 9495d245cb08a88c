"""Sentence embedders loaded from local folders, with the tokenizer exposed for chunking."""
from __future__ import annotations

import os
from collections import OrderedDict
from pathlib import Path
from threading import Lock

import numpy as np

from .device import resolve_device
from .registry import ModelNotFound, ModelRegistry, ModelSpec

# Loading by hub name would try the network; everything here is resolved to a path first.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


class Embedder:
    """One embedding model: `encode_documents`, `encode_query`, and its tokenizer for chunking."""

    def __init__(self, spec: ModelSpec, path: Path, device: str = "auto", batch_size: int = 64,
                 query_cache_size: int = 256, onnx_path: Path | None = None):
        self.spec = spec
        self.name = spec.name
        self.path = Path(path)
        self.backend = backend_of(spec)
        # ONNX Runtime runs on CPU here (onnxruntime, not onnxruntime-gpu, is installed).
        self.device = "cpu" if self.backend == "onnx" else resolve_device(device)
        # A registry entry may set its own batch size (the best one differs by backend: measured in
        # bench/results/embedders.md); otherwise the [models] batch_size of the settings.
        self.batch_size = int(spec.extra.get("batch_size") or batch_size)
        if self.backend == "onnx":
            self.model = _load_onnx(self.path, Path(onnx_path), spec.max_seq_length, int(spec.extra.get("threads", 0)))
        else:
            self.model = _load_weights(self.path, self.device, spec.max_seq_length)
        if spec.max_seq_length and spec.max_seq_length != self.model.max_seq_length:
            raise ValueError(f"model {spec.name!r}: max_seq_length {spec.max_seq_length} differs from another "
                             f"registry entry sharing these weights ({self.model.max_seq_length})")
        get_dim = getattr(self.model, "get_embedding_dimension", None) or self.model.get_sentence_embedding_dimension
        self.dim = int(get_dim())
        if spec.dim and spec.dim != self.dim:
            raise ValueError(f"model {spec.name!r}: registry says dim {spec.dim}, weights give {self.dim}")
        self.max_seq_length = int(self.model.max_seq_length)
        self.tokenizer = self.model.tokenizer
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._cache_size = query_cache_size
        self._lock = Lock()

    @property
    def max_content_tokens(self) -> int:
        """Tokens of text that fit in one forward pass (the window minus [CLS] and [SEP])."""
        return self.max_seq_length - self.tokenizer.num_special_tokens_to_add(pair=False)

    def encode_documents(self, texts: list[str], show_progress: bool = False) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        prefixed = [self.spec.document_prefix + t for t in texts] if self.spec.document_prefix else texts
        vecs = self.model.encode(
            prefixed,
            batch_size=self.batch_size,
            normalize_embeddings=self.spec.normalize,
            convert_to_numpy=True,
            show_progress_bar=show_progress,
        )
        return np.ascontiguousarray(vecs, dtype=np.float32)

    def encode_query(self, text: str) -> np.ndarray:
        with self._lock:
            hit = self._cache.get(text)
            if hit is not None:
                self._cache.move_to_end(text)
                return hit
        vec = self.model.encode(
            [self.spec.query_prefix + text],
            batch_size=1,
            normalize_embeddings=self.spec.normalize,
            convert_to_numpy=True,
            show_progress_bar=False,
        )[0].astype(np.float32)
        if self._cache_size:
            with self._lock:
                self._cache[text] = vec
                while len(self._cache) > self._cache_size:
                    self._cache.popitem(last=False)
        return vec


# One instance per (registry entry, weights, device) in a process, and one copy of the weights per
# (weights, device): a CLI command, the server and the tests never load the same weights twice,
# even when two registry entries (say, with different prefixes) share them.
_PROCESS_CACHE: dict[tuple[str, str, str], Embedder] = {}
_PROCESS_LOCK = Lock()
_WEIGHTS: dict[tuple[str, str], object] = {}


def backend_of(spec: ModelSpec) -> str:
    backend = str(spec.extra.get("backend", "torch"))
    if backend not in ("torch", "onnx"):
        raise ValueError(f"model {spec.name!r}: unknown backend {backend!r} (torch or onnx)")
    return backend


def _load_weights(path: Path, device: str, max_seq_length: int | None):
    from sentence_transformers import SentenceTransformer

    key = (str(Path(path).resolve()), device)
    model = _WEIGHTS.get(key)
    if model is None:
        model = SentenceTransformer(str(path), device=device, local_files_only=True)
        if max_seq_length:
            model.max_seq_length = max_seq_length
        if device.startswith("cuda"):
            # Half precision on a GPU: about twice the throughput, vectors within ~1e-3 of fp32.
            model.half()
        _WEIGHTS[key] = model
    return model


def _load_onnx(path: Path, onnx_path: Path, max_seq_length: int | None, threads: int):
    from .onnx_embedder import OnnxSentenceEncoder

    key = (str(Path(onnx_path).resolve()), f"onnx:{max_seq_length}:{threads}")
    model = _WEIGHTS.get(key)
    if model is None:
        model = OnnxSentenceEncoder(path, onnx_path, max_seq_length, threads)
        _WEIGHTS[key] = model
    return model


def onnx_file_for(registry: ModelRegistry, spec: ModelSpec, folder: Path) -> Path:
    """The ONNX file of an `backend = "onnx"` entry: its `onnx_file`, else the export of its folder
    as `onnx` ("int8" by default) in the models cache, made on first use."""
    from .onnx_embedder import export, export_path

    given = spec.extra.get("onnx_file")
    if given:
        p = Path(str(given)).expanduser()
        p = p if p.is_absolute() else registry.path.parent / p
        if not p.is_file():
            raise ModelNotFound(spec.name, f"model {spec.name!r}: onnx_file {p} does not exist")
        return p
    variant = str(spec.extra.get("onnx", "int8"))
    target = export_path(registry.cache_dir, folder, variant)
    if not target.is_file():
        export(folder, target, variant)
    return target


class EmbedderPool:
    """Loads each embedder once, on first use, and keeps it."""

    def __init__(self, registry: ModelRegistry, device: str = "auto", batch_size: int = 64,
                 query_cache_size: int = 256):
        self.registry = registry
        self.device = device
        self.batch_size = batch_size
        self.query_cache_size = query_cache_size
        self._loaded: dict[str, Embedder] = {}
        self._lock = Lock()

    def get(self, name: str) -> Embedder:
        with self._lock:
            if name not in self._loaded:
                spec = self.registry.spec(name)
                path = self.registry.resolve(name)
                key = (spec.name, str(path.resolve()), resolve_device(self.device))
                with _PROCESS_LOCK:
                    emb = _PROCESS_CACHE.get(key)
                    if emb is None or emb.spec != spec:
                        onnx_path = onnx_file_for(self.registry, spec, path) if backend_of(spec) == "onnx" else None
                        emb = Embedder(spec, path, self.device, self.batch_size, self.query_cache_size, onnx_path)
                        _PROCESS_CACHE[key] = emb
                self._loaded[name] = emb
            return self._loaded[name]

    def loaded(self) -> dict[str, Embedder]:
        return dict(self._loaded)
