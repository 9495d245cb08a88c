"""Train a reranker from collected pairs, write its model card, register it by name, optionally
export ONNX. The pairs come from `engine.refind.rerank_pairs` (and, for test collections, `eval.rerank`)."""
from __future__ import annotations

from pathlib import Path

from models.device import DeviceUnavailable  # noqa: F401  (faces catch it from here)
from models.registry import ModelRegistry, register_reranker
from models.reranker_train import Pair, TrainConfig, export_onnx, train_cross_encoder, write_card
from models.reranker_train import package_onnx  # noqa: F401  (`refindery reranker package` calls it from here)

from engine.refind.rerank_pairs import describe

BASES = ("all-minilm-l6-v2", "all-mpnet-base-v2")


def train_reranker(registry: ModelRegistry, pairs: list[Pair], out_dir: Path, name: str | None = None,
                   base: str = "all-minilm-l6-v2", config: TrainConfig | None = None, sources: dict | None = None,
                   register: bool = True, onnx: bool = False) -> dict:
    """Fine-tune the registry's encoder `base` as a cross-encoder on `pairs`; returns a summary."""
    config = config or TrainConfig()
    spec = registry.spec(base)  # ModelNotFound for an unknown base
    if spec.kind != "embedder":
        raise ValueError(f"--from {base!r}: start from an encoder in the registry's [embedders] ({', '.join(BASES)})")
    base_path = registry.resolve(base)
    data = {"sources": sources or {}, **describe(pairs)}
    result = train_cross_encoder(base_path, pairs, out_dir, config)
    card = write_card(Path(out_dir), base, result, config, data)
    out = {"out_dir": str(Path(out_dir).resolve()), "card": str(card), "data": data, **result.as_dict()}
    if onnx:
        out["onnx"] = str(export_onnx(Path(out_dir), config.max_length))
    if register and name:
        changed = register_reranker(registry.path, name, Path(out_dir), config.max_length,
                                    note=f"trained by `refindery reranker train` from {base}; card: README.md there")
        out["registered"] = {"name": name, "registry": str(registry.path), "changed": changed}
    return out
