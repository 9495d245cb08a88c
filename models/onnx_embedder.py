"""ONNX Runtime backend for sentence embedders (CPU).

A registry entry with `backend = "onnx"` is run by onnxruntime instead of torch. Its ONNX file is
either given (`onnx_file`, a path relative to the registry's folder or absolute) or exported once,
offline, from the entry's own sentence-transformers folder into the models cache (`onnx = "fp32"`
or `"int8"`):

1. torch.onnx.export of the transformer with eager attention (so ONNX Runtime can fuse it),
2. onnxruntime.transformers' BERT optimizer (fused Attention, SkipLayerNorm, BiasGelu),
3. for "int8", dynamic int8 quantization of the weights, per output channel.

Per-channel weights keep vectors close to the torch model's (cosine >= 0.98 on CISI passages)
where per-tensor weights drift to ~0.90; the measured speed and retrieval quality of each
variant are in bench/results/embedders.md. Pooling and normalisation follow the folder's
sentence-transformers config (1_Pooling/config.json), so vectors are comparable in kind to the
torch backend's, but not identical: an ONNX entry is a model of its own with its own index.
"""
from __future__ import annotations

import contextlib
import hashlib
import inspect
import json
import logging
import os
import tempfile
import threading
from pathlib import Path
from typing import Callable

import numpy as np

VARIANTS = ("fp32", "int8")


class OnnxSentenceEncoder:
    """The part of SentenceTransformer's interface the Embedder uses: encode, tokenizer,
    max_seq_length and the embedding dimension."""

    def __init__(self, folder: Path, onnx_path: Path, max_seq_length: int | None = None, threads: int = 0):
        import onnxruntime as ort
        from transformers import AutoTokenizer

        self.folder = Path(folder)
        self.onnx_path = Path(onnx_path)
        self.tokenizer = AutoTokenizer.from_pretrained(str(self.folder), local_files_only=True)
        cfg = _read_json(self.folder / "sentence_bert_config.json")
        self.max_seq_length = int(max_seq_length or cfg.get("max_seq_length") or 256)
        pooling = _read_json(self.folder / "1_Pooling" / "config.json")
        self.pooling = "cls" if pooling.get("pooling_mode_cls_token") else "mean"
        self._dim = int(pooling.get("word_embedding_dimension")
                        or _read_json(self.folder / "config.json")["hidden_size"])
        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.inter_op_num_threads = 1
        if threads:
            opts.intra_op_num_threads = int(threads)
        # The pool's threads spin between the operators of a run (turning that off made a query's
        # encoding ~30 % slower), but stop as soon as the run returns: left spinning, they held both
        # cores (2 here) through what a search does next — FAISS, the BM25 arm, fusion — and slowed it
        # (bench/search.py at 10k chunks: FAISS beside the BM25 arm 1.7 → 1.1 ms p50).
        opts.add_session_config_entry("session.force_spinning_stop", "1")
        self.session = ort.InferenceSession(str(self.onnx_path), opts, providers=["CPUExecutionProvider"])
        self.inputs = [i.name for i in self.session.get_inputs()]

    def get_sentence_embedding_dimension(self) -> int:
        return self._dim

    def encode(self, texts: list[str], batch_size: int = 8, normalize_embeddings: bool = True,
               convert_to_numpy: bool = True, show_progress_bar: bool = False,
               before_run: Callable[[], None] | None = None) -> np.ndarray:
        """`before_run`, when given, is called once, after the first batch is tokenised and right before
        ONNX Runtime runs it (the run releases the GIL: work started there overlaps the model)."""
        if not texts:
            if before_run is not None:
                before_run()
            return np.zeros((0, self._dim), dtype=np.float32)
        # Longest first, as sentence-transformers does: each batch pads to similar lengths.
        order = np.argsort([-len(t) for t in texts], kind="stable")
        out = np.empty((len(texts), self._dim), dtype=np.float32)
        starts = range(0, len(texts), max(1, int(batch_size)))
        if show_progress_bar:
            from tqdm import tqdm

            starts = tqdm(starts, desc="Batches", unit="batch")
        for start in starts:
            idx = order[start:start + batch_size]
            enc = self.tokenizer([texts[i] for i in idx], padding=True, truncation=True,
                                 max_length=self.max_seq_length, return_tensors="np")
            feed = {n: enc[n].astype(np.int64) for n in self.inputs if n in enc}
            if "token_type_ids" in self.inputs and "token_type_ids" not in feed:
                feed["token_type_ids"] = np.zeros_like(enc["input_ids"], dtype=np.int64)
            if before_run is not None:
                before_run, run_first = None, before_run
                run_first()
            hidden = self.session.run(None, feed)[0]
            if self.pooling == "cls":
                vecs = hidden[:, 0]
            else:
                mask = enc["attention_mask"][..., None].astype(np.float32)
                vecs = (hidden * mask).sum(axis=1) / np.clip(mask.sum(axis=1), 1e-9, None)
            if normalize_embeddings:
                vecs = vecs / np.clip(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12, None)
            out[idx] = vecs
        return out


def _read_json(path: Path) -> dict:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}


def export_path(cache_dir: Path, folder: Path, variant: str, keep_fp32: tuple[str, ...] = ()) -> Path:
    """Where the export of `folder` as `variant` lives in the models cache: keyed by the folder and
    its weight files' sizes and times, by the onnxruntime version that optimized it, and by the
    matrix products an int8 export keeps in fp32 (`keep_fp32`)."""
    import onnxruntime as ort

    folder = Path(folder).resolve()
    h = hashlib.sha256(str(folder).encode())
    for f in sorted(folder.glob("*.safetensors")) + sorted(folder.glob("*.bin")):
        st = f.stat()
        h.update(f"{f.name}:{st.st_size}:{int(st.st_mtime)}".encode())
    h.update(ort.__version__.encode())
    name = f"model-{variant}.onnx"
    if variant == "int8" and keep_fp32:
        name = f"model-int8-mixed-{hashlib.sha256(repr(sorted(keep_fp32)).encode()).hexdigest()[:8]}.onnx"
    return Path(cache_dir) / "onnx" / f"{folder.name}-{h.hexdigest()[:12]}" / name


def kept_fp32(graph_nodes, patterns: tuple[str, ...]) -> list[str]:
    """The MatMul nodes an int8 export leaves in fp32: those whose name contains one of `patterns`.
    Some encoders carry outlier activations into a few products — in all-mpnet-base-v2 the
    feed-forward output of layers 6-10, whose int8 weights alone take the vectors' cosine to the fp32
    model's from 0.99 to 0.88 (bench/results/embedders.md, "all-mpnet-base-v2 on ONNX Runtime")."""
    return [n.name for n in graph_nodes if n.op_type == "MatMul" and any(p in n.name for p in patterns)]


class _PreprocessingAdvice(logging.Filter):
    """onnxruntime's quantizer logs a warning to the root logger on every run, advising a shape
    pre-processing step meant for vision models: noise in a log, never a problem here."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "pre-processing before quantization" not in record.getMessage()


@contextlib.contextmanager
def _without_preprocessing_advice():
    advice = _PreprocessingAdvice()
    root = logging.getLogger()
    root.addFilter(advice)
    try:
        yield
    finally:
        root.removeFilter(advice)


_EXPORT_LOCK = threading.Lock()


def export(folder: Path, target: Path, variant: str = "int8", keep_fp32: tuple[str, ...] = ()) -> Path:
    """Export a sentence-transformers folder's transformer to an optimized ONNX file at `target`
    (written under a temporary name and renamed: a crash leaves no half file). Offline. For "int8",
    the MatMuls named by `keep_fp32` (substrings of node names, `kept_fp32`) stay fp32; only products
    with constant weights are quantized (activation x activation products, attention's, never).

    One export at a time in a process, and none of a file another made meanwhile: torch.onnx.export
    keeps global state (two at once — a query runtime's fp32 export on a search thread beside a
    background embedding's int8 one — fail), and two threads that both found the file missing would
    each write one, so that sessions opened between them ran different files."""
    with _EXPORT_LOCK:
        if Path(target).is_file():
            return Path(target)
        return _export(folder, target, variant, keep_fp32)


def _quantized(optimized: Path, final: Path, keep_fp32: tuple[str, ...], name: str) -> Path:
    """The optimised graph with its MatMul weights quantised to int8, per channel — but those
    `keep_fp32` names, kept in float32."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with _without_preprocessing_advice():
        keep = kept_fp32(onnx.load(str(optimized), load_external_data=False).graph.node, tuple(keep_fp32))
        if keep_fp32 and not keep:
            raise ValueError(f"keep_fp32 {list(keep_fp32)} names no MatMul of {name}'s graph")
        quantize_dynamic(str(optimized), str(final), weight_type=QuantType.QInt8, per_channel=True,
                         nodes_to_exclude=keep,
                         extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT, "MatMulConstBOnly": True})
    return final


def _export(folder: Path, target: Path, variant: str, keep_fp32: tuple[str, ...]) -> Path:
    if variant not in VARIANTS:
        raise ValueError(f"unknown ONNX variant {variant!r} (one of {', '.join(VARIANTS)})")
    import warnings

    import torch
    from onnxruntime.transformers.optimizer import optimize_model
    from transformers import AutoConfig, AutoModel, AutoTokenizer

    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()   # no "Loading weights" bar in a log file
    folder, target = Path(folder), Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    config = AutoConfig.from_pretrained(str(folder), local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    model = AutoModel.from_pretrained(str(folder), local_files_only=True, attn_implementation="eager").eval()

    # BERT-like encoders take token type ids; MPNet (all-mpnet-base-v2) has none: the graph's inputs
    # are the ones the model's forward names.
    names = ["input_ids", "attention_mask"]
    if "token_type_ids" in inspect.signature(model.forward).parameters:
        names.append("token_type_ids")

    class _Hidden(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, *inputs):
            return self.inner(**dict(zip(names, inputs))).last_hidden_state

    sample = tokenizer(["an example sentence", "and a second, longer example sentence"], padding=True,
                       return_tensors="pt", return_token_type_ids="token_type_ids" in names)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp, warnings.catch_warnings():
        # The tracer's notes on Python-side branches and index ops: the exported graph is checked
        # against the torch model's vectors (tests/models/test_onnx_embedder.py), not by these warnings.
        warnings.simplefilter("ignore")
        raw, optimized = Path(tmp) / "raw.onnx", Path(tmp) / "optimized.onnx"
        with torch.no_grad():
            torch.onnx.export(_Hidden(model), tuple(sample[n] for n in names), str(raw), input_names=names,
                              output_names=["last_hidden_state"], opset_version=17, dynamo=False,
                              dynamic_axes={n: {0: "batch", 1: "seq"} for n in names + ["last_hidden_state"]})
        opt = optimize_model(str(raw), model_type="bert", num_heads=int(config.num_attention_heads),
                             hidden_size=int(config.hidden_size), opt_level=1)
        opt.save_model_to_file(str(optimized))
        final = optimized
        if variant == "int8":
            final = _quantized(optimized, Path(tmp) / "int8.onnx", keep_fp32, folder.name)
        with open(final, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(final, target)
    return target
