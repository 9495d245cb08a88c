"""Sentence embedders loaded from local folders, with the tokenizer exposed for chunking."""
from __future__ import annotations

import os
import queue
import threading
from collections import OrderedDict
from concurrent.futures import Future
from pathlib import Path
from threading import Lock
from typing import Callable

import numpy as np

from .device import resolve_device
from .registry import ModelNotFound, ModelRegistry, ModelSpec

# Loading by hub name would try the network; everything here is resolved to a path first.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


class Embedder:
    """One embedding model: `encode_documents`, `encode_query`, and its tokenizer for chunking."""

    def __init__(self, spec: ModelSpec, path: Path, device: str = "auto", batch_size: int = 64,
                 query_cache_size: int = 256, onnx_path: Path | None = None, query_batch_max: int = 1):
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
        # Queries that arrive together (concurrent searches) are encoded in one forward pass.
        self._batcher = _QueryBatcher(self._encode_queries, query_batch_max) if query_batch_max > 1 else None

    def _encode_queries(self, texts: list[str]) -> np.ndarray:
        return self.model.encode(
            [self.spec.query_prefix + t for t in texts],
            batch_size=len(texts),
            normalize_embeddings=self.spec.normalize,
            convert_to_numpy=True,
            show_progress_bar=False,
        ).astype(np.float32)

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
        vec = self._batcher.encode(text) if self._batcher is not None else self._encode_queries([text])[0]
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


class _QueryBatcher:
    """One thread encodes the queries; whatever queued up while it was busy goes in its next forward
    pass (up to `max_batch`). A query that arrives alone is encoded alone, at once — no waiting
    window — so a quiet server answers as before; a busy one spends less per query (batch 4 costs
    ~0.7x per query on CPU, bench/results/throughput.md) and runs one forward pass at a time, not
    one per request thread fighting for the cores. A query encoded beside others can differ from
    its lone encoding in the last bits of its floats (padding changes the arithmetic's order)."""

    def __init__(self, encode: Callable[[list[str]], np.ndarray], max_batch: int):
        self._encode, self.max_batch = encode, max_batch
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._start = Lock()
        self.batches = self.queries = 0

    def encode(self, text: str) -> np.ndarray:
        if self._thread is None:
            with self._start:
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name="query-encoder", daemon=True)
                    self._thread.start()
        done: Future = Future()
        self._queue.put((text, done))
        return done.result()

    def _run(self) -> None:
        while True:
            batch = [self._queue.get()]
            while len(batch) < self.max_batch:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            try:
                vecs = self._encode([t for t, _ in batch])
            except BaseException as exc:   # every waiting search gets the error, the thread lives on
                for _, done in batch:
                    done.set_exception(exc)
                continue
            self.batches += 1
            self.queries += len(batch)
            for (_, done), vec in zip(batch, vecs):
                done.set_result(vec)


class EmbedderPool:
    """Loads each embedder once, on first use, and keeps it."""

    def __init__(self, registry: ModelRegistry, device: str = "auto", batch_size: int = 64,
                 query_cache_size: int = 256, query_batch_max: int = 1):
        self.registry = registry
        self.device = device
        self.batch_size = batch_size
        self.query_cache_size = query_cache_size
        self.query_batch_max = query_batch_max
        self._loaded: dict[str, Embedder] = {}
        self._lock = Lock()

    def get(self, name: str) -> Embedder:
        with self._lock:
            if name not in self._loaded:
                spec = self.registry.spec(name)
                path = self.registry.resolve(name)
                # one copy of the weights per process (the first pool's cache and batching settings hold)
                key = (spec.name, str(path.resolve()), resolve_device(self.device))
                with _PROCESS_LOCK:
                    emb = _PROCESS_CACHE.get(key)
                    if emb is None or emb.spec != spec:
                        onnx_path = onnx_file_for(self.registry, spec, path) if backend_of(spec) == "onnx" else None
                        emb = Embedder(spec, path, self.device, self.batch_size, self.query_cache_size, onnx_path,
                                       self.query_batch_max)
                        _PROCESS_CACHE[key] = emb
                self._loaded[name] = emb
            return self._loaded[name]

    def loaded(self) -> dict[str, Embedder]:
        return dict(self._loaded)
