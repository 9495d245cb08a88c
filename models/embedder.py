"""Sentence embedders loaded from local folders, with the tokenizer exposed for chunking."""
from __future__ import annotations

import copy

import dataclasses
import logging
import os
from collections import OrderedDict
from pathlib import Path
from threading import Lock
from typing import Callable

import numpy as np

from .device import resolve_device
from .onnx_embedder import OnnxSentenceEncoder
from .registry import ModelNotFound, ModelRegistry, ModelSpec

log = logging.getLogger(__name__)
# How single queries are encoded on CPU: "auto" runs them through an fp32 ONNX export of the model's
# own weights where it reproduces the model's vectors (else torch), "onnx" requires it, "torch" never.
QUERY_RUNTIMES = ("auto", "torch", "onnx")

# Loading by hub name would try the network; everything here is resolved to a path first.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


class Embedder:
    """One embedding model: `encode_documents`, `encode_query`, and its tokenizer for chunking."""

    def __init__(self, spec: ModelSpec, path: Path, device: str = "auto", batch_size: int = 64,
                 query_cache_size: int = 256, onnx_path: Path | None = None,
                 query_onnx: Callable[[], Path] | None = None, query_threads: int = 0,
                 query_required: bool = False):
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
            self.model = _load_onnx(self.path, Path(onnx_path), spec.max_seq_length, int(spec.extra.get("threads", 0)),
                                    str(spec.extra.get("session", "")))
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
        # Chunking's own copy: a fast tokenizer keeps its padding and truncation on the shared Rust
        # object and sets them before each call, so chunking (no padding, no truncation) on one thread
        # while the model encodes (padded) on another gave ragged batches — "unable to create tensor"
        # in a write that met another write's chunking on a busy server (two at once, tests/cluster/).
        self.chunk_tokenizer = copy.deepcopy(self.tokenizer)
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._cache_size = query_cache_size
        self._lock = Lock()
        # Queries (one short text each) through ONNX Runtime: an fp32 export of these same weights,
        # ~3x faster than torch for one query on CPU (torch's small-matrix GEMMs dominate there) and
        # the same vectors to ~1e-7. Documents keep torch, which batches as fast (bench/results/embedders.md).
        # Made on the first query (or `prepare_queries`, which a server calls at start): a process that
        # only ingests never exports it.
        self.query_runtime = self.backend
        self.query_runtime_note = ""
        self._query_model = None
        self._query_source = query_onnx if (self.backend == "torch" and self.device == "cpu") else None
        self._query_threads = query_threads
        self._query_required = query_required
        self._query_lock = Lock()

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

    def encode_queries(self, texts: list[str]) -> np.ndarray:
        """Several queries' vectors at once, batched and not cached (the queries of the log that the
        shortcuts compare a search with): as encode_query makes them, to float rounding."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        vecs = self.model.encode([self.spec.query_prefix + t for t in texts], batch_size=self.batch_size,
                                 normalize_embeddings=self.spec.normalize, convert_to_numpy=True,
                                 show_progress_bar=False)
        return np.ascontiguousarray(vecs, dtype=np.float32)

    def prepare_queries(self) -> str:
        """Set up the query runtime now (the ONNX export on first use: ~7 s once per models cache);
        returns it ("onnx" or "torch"). With query_runtime "onnx" required, raises when it cannot."""
        with self._query_lock:
            source, self._query_source = self._query_source, None
            if source is None:
                return self.query_runtime
            try:
                model, note = _query_session(self.model, self.path, source(), self._query_threads)
            except Exception as exc:   # noqa: BLE001 — the export failed: said in status and the log
                model, note = None, f"the ONNX export failed: {type(exc).__name__}: {exc}"
            if model is None:
                if self._query_required:
                    raise ValueError(f"model {self.name!r}: query_runtime = \"onnx\" asked for, but {note}")
                log.warning("model %s: queries stay on torch (%s)", self.name, note)
            self._query_model, self.query_runtime_note = model, note
            self.query_runtime = "onnx" if model is not None else self.backend
            return self.query_runtime

    def encode_query(self, text: str, meanwhile: Callable[[], None] | None = None) -> np.ndarray:
        """The query's vector (from the LRU cache when it holds it). `meanwhile`, when given, is called
        once, when the model is about to run — after tokenisation, right before ONNX Runtime's run, which
        releases the GIL for the whole forward pass — or at once on a cache hit or with the torch
        runtime: the search starts its BM25 arm there, so that arm's Python holds up neither the
        tokeniser nor the encoder's start."""
        if self._query_source is not None:
            self.prepare_queries()
        with self._lock:
            hit = self._cache.get(text)
            if hit is not None:
                self._cache.move_to_end(text)
        if hit is not None:
            if meanwhile is not None:
                meanwhile()
            return hit
        model = self._query_model or self.model
        kwargs = {}
        if meanwhile is not None:
            if isinstance(model, OnnxSentenceEncoder):
                kwargs["before_run"] = meanwhile
            else:
                meanwhile()
        vec = model.encode(
            [self.spec.query_prefix + text],
            batch_size=1,
            normalize_embeddings=self.spec.normalize,
            convert_to_numpy=True,
            show_progress_bar=False,
            **kwargs,
        )[0].astype(np.float32)
        if self._cache_size:
            with self._lock:
                self._cache[text] = vec
                while len(self._cache) > self._cache_size:
                    self._cache.popitem(last=False)
        return vec


# One instance per (registry entry, weights, device, query runtime, query threads; for ONNX, the models
# cache holding its export) in a process, and
# one copy of the weights per (weights, device): a CLI command, the server and the tests never load the
# same weights twice, even when two registry entries (say, with different prefixes) share them.
_PROCESS_CACHE: dict[tuple[str, str, str, str, int, str], Embedder] = {}
_PROCESS_LOCK = Lock()
_WEIGHTS: dict[tuple[str, str], object] = {}


def backend_of(spec: ModelSpec) -> str:
    backend = str(spec.extra.get("backend", "torch"))
    if backend not in ("torch", "onnx"):
        raise ValueError(f"model {spec.name!r}: unknown backend {backend!r} (torch or onnx)")
    return backend


def quiet_loading() -> None:
    """No "Loading weights 0%…100%" bar from transformers: a log file gets it as noise."""
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    except ImportError:   # pragma: no cover — transformers comes with sentence-transformers
        pass


def _load_weights(path: Path, device: str, max_seq_length: int | None):
    from sentence_transformers import SentenceTransformer

    quiet_loading()

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


def _load_onnx(path: Path, onnx_path: Path, max_seq_length: int | None, threads: int, session: str = ""):
    """One ONNX Runtime session per (file, window, threads, `session`: "" shared, "background" a
    background embedding's own)."""
    key = (str(Path(onnx_path).resolve()), f"onnx:{max_seq_length}:{threads}:{session}")
    model = _WEIGHTS.get(key)
    if model is None:
        model = OnnxSentenceEncoder(path, onnx_path, max_seq_length, threads)
        _WEIGHTS[key] = model
    return model


# The sentence-transformers modules the ONNX query path reproduces (transformer, mean or CLS pooling,
# normalisation); any other module (a Dense projection, ...) keeps queries on torch.
_QUERY_ONNX_MODULES = {"Transformer", "Pooling", "Normalize"}
_PROBES = ["a short query", "which enzymes break down lactose in the small intestine?",
           "Refindery finds again the page you saw " * 12]


def _query_session(model, folder: Path, onnx_path: Path, threads: int):
    """(encoder, "") when the fp32 export at `onnx_path` answers queries as `model` does, else (None, why)."""
    kinds = {type(m).__name__ for m in model}
    if not kinds <= _QUERY_ONNX_MODULES:
        return None, f"modules {sorted(kinds - _QUERY_ONNX_MODULES)} are not reproduced by the ONNX query path"
    try:
        enc = _load_onnx(folder, onnx_path, model.max_seq_length, threads)
        a = np.asarray(model.encode(_PROBES, normalize_embeddings=True, convert_to_numpy=True), dtype=np.float32)
        b = enc.encode(_PROBES, normalize_embeddings=True)
    except Exception as exc:   # noqa: BLE001 — any failure leaves queries on torch, said in status
        return None, f"ONNX query path unavailable: {type(exc).__name__}: {exc}"
    cos = float((a * b).sum(axis=1).min())
    if cos < 0.9999:
        return None, f"ONNX query vectors differ from torch's (cosine {cos:.5f})"
    return enc, ""


def query_onnx_file(registry: ModelRegistry, folder: Path) -> Path:
    """The fp32 ONNX export of `folder` for the query path, made once into the models cache (~7 s, offline)."""
    from .onnx_embedder import export, export_path

    target = export_path(registry.cache_dir, folder, "fp32")
    if not target.is_file():
        export(folder, target, "fp32")
    return target


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
    keep = spec.extra.get("onnx_keep_fp32", [])
    if not isinstance(keep, list) or not all(isinstance(k, str) and k for k in keep):
        raise ValueError(f"model {spec.name!r}: onnx_keep_fp32 must be a list of node-name substrings")
    target = export_path(registry.cache_dir, folder, variant, tuple(keep))
    if not target.is_file():
        export(folder, target, variant, tuple(keep))
    return target


class EmbedderPool:
    """Loads each embedder once, on first use, and keeps it."""

    def __init__(self, registry: ModelRegistry, device: str = "auto", batch_size: int = 64,
                 query_cache_size: int = 256, query_runtime: str = "auto", query_threads: int = 0):
        if query_runtime not in QUERY_RUNTIMES:
            raise ValueError(f"unknown query_runtime {query_runtime!r} (one of {', '.join(QUERY_RUNTIMES)})")
        self.registry = registry
        self.device = device
        self.batch_size = batch_size
        self.query_cache_size = query_cache_size
        self.query_runtime = query_runtime
        self.query_threads = query_threads
        self._loaded: dict[str, Embedder] = {}
        self._lock = Lock()

    def get(self, name: str) -> Embedder:
        with self._lock:
            if name not in self._loaded:
                spec = self.registry.spec(name)
                path = self.registry.resolve(name)
                device = resolve_device(self.device)
                # (a model on ONNX Runtime is the export in this registry's cache: one instance per cache)
                key = (spec.name, str(path.resolve()), device, self.query_runtime, self.query_threads,
                       str(self.registry.cache_dir) if backend_of(spec) == "onnx" else "")
                with _PROCESS_LOCK:
                    emb = _PROCESS_CACHE.get(key)
                    if emb is None or emb.spec != spec:
                        onnx_path = onnx_file_for(self.registry, spec, path) if backend_of(spec) == "onnx" else None
                        query_onnx = None
                        if self.query_runtime != "torch":
                            registry = self.registry
                            query_onnx = lambda: query_onnx_file(registry, path)   # noqa: E731
                        emb = Embedder(spec, path, self.device, self.batch_size, self.query_cache_size, onnx_path,
                                       query_onnx, self.query_threads, query_required=self.query_runtime == "onnx")
                        if self.query_runtime == "onnx":   # required: fail at load, not at the first query
                            emb.prepare_queries()
                        _PROCESS_CACHE[key] = emb
                self._loaded[name] = emb
            return self._loaded[name]

    def background(self, name: str, threads: int = 0) -> Embedder:
        """`name` for work in the background (a catch-up's documents): a model on ONNX Runtime gets a
        session of its own with `threads` intra-op threads (0: one per core), made on the calling
        thread — whose priority its threads inherit (1: it runs on the calling thread itself) — so the
        session that encodes queries is never busy with it; a torch model is the one `get` gives
        (torch's threads are the process's)."""
        emb = self.get(name)
        if emb.backend != "onnx":
            return emb
        with self._lock:
            key = f"{name}\0background:{threads}"
            if key not in self._loaded:
                spec = dataclasses.replace(emb.spec, extra={**emb.spec.extra, "threads": threads,
                                                            "session": "background"})
                onnx_path = onnx_file_for(self.registry, spec, emb.path)
                self._loaded[key] = Embedder(spec, emb.path, self.device, self.batch_size, 0, onnx_path)
            return self._loaded[key]

    def loaded(self) -> dict[str, Embedder]:
        return {k: v for k, v in self._loaded.items() if "\0" not in k}
