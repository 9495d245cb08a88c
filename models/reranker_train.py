"""Training a cross-encoder reranker from a bundled encoder (all-MiniLM-L6-v2 or all-mpnet-base-v2)
with a fresh one-logit scoring head.

The loop is plain torch rather than sentence-transformers' `CrossEncoderTrainer`: that trainer
needs the `datasets` package (and its Arrow cache) for what is here a list of a few thousand
(query, passage, label) triples, and a hand loop keeps the run deterministic under one seed and
bounded by `steps`, which is what matters on a CPU. Loss: binary cross-entropy on the logit (the
product applies a sigmoid at scoring time, so scores stay in (0, 1)). Optimiser: AdamW with linear
warm-up and decay.

Validation is by query: a held-out share of the training queries, each with its positive(s) and
negatives, scored every `eval_every` steps: BCE loss, MRR of the first positive and pairwise
accuracy (a positive outscoring a negative of the same query).
"""
from __future__ import annotations

import json
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from .device import resolve_device


@dataclass(frozen=True)
class Pair:
    query: str
    passage: str
    label: float  # 1.0 positive, 0.0 negative
    group: str  # the query's group id: validation splits and groups by it
    source: str  # judgments | mined-heading | mined-sentence | feedback (positives); hard | random (negatives)


@dataclass
class TrainConfig:
    steps: int = 150
    batch_size: int = 16
    lr: float = 1e-4
    warmup: float = 0.1
    weight_decay: float = 0.01
    max_length: int = 192
    seed: int = 13
    device: str = "auto"
    val_share: float = 0.1
    val_max_groups: int = 150
    eval_every: int = 100
    layers: int | None = None  # keep only the encoder's first N transformer layers (faster, weaker)
    # "listwise": each positive with `negatives` of its query's negatives, softmax cross-entropy over
    # the list (ranking is what a reranker is for); "bce": independent pairs, binary cross-entropy.
    loss: str = "listwise"
    negatives: int = 3
    train_top_layers: int | None = None  # fine-tune only the top N layers (+ head); None = all
    progress: bool = True


@dataclass
class TrainResult:
    out_dir: Path
    steps: int
    seconds: float
    device: str
    train_pairs: int
    train_groups: int
    val_pairs: int
    val_groups: int
    validation: list[dict] = field(default_factory=list)

    def as_dict(self) -> dict:
        d = asdict(self)
        d["out_dir"] = str(self.out_dir)
        return d


def truncate_layers(model, n: int) -> None:
    """Keep the first `n` transformer layers of a BERT-like sequence classifier (and say so in its
    config, so the saved folder reloads with `n`)."""
    enc = getattr(model.base_model, "encoder", None)
    layers = getattr(enc, "layer", None)
    if layers is None:
        raise ValueError(f"cannot truncate {type(model).__name__}: no encoder.layer list")
    if not 1 <= n <= len(layers):
        raise ValueError(f"layers must be between 1 and {len(layers)}")
    enc.layer = layers[:n]
    model.config.num_hidden_layers = n


def freeze_below(model, n_top: int) -> None:
    """Train only the top `n_top` transformer layers, the pooler and the head; freeze the rest."""
    layers = model.base_model.encoder.layer
    keep = {id(p) for layer in layers[len(layers) - n_top:] if n_top > 0 for p in layer.parameters()}
    for name, p in model.named_parameters():
        top = id(p) in keep or not name.startswith(model.base_model_prefix + ".") or ".pooler." in name
        p.requires_grad = top


def _lists(train: list[Pair], negatives: int, rng: random.Random) -> list[list[Pair]]:
    """One list per positive: the positive, then `negatives` of its own query's negatives (drawn
    with replacement when the query has fewer)."""
    by_group: dict[str, tuple[list[Pair], list[Pair]]] = {}
    for p in train:
        pos, neg = by_group.setdefault(p.group, ([], []))
        (pos if p.label > 0.5 else neg).append(p)
    out = []
    for g in sorted(by_group):
        pos, neg = by_group[g]
        if not neg:
            continue
        for p in pos:
            drawn = rng.sample(neg, negatives) if len(neg) >= negatives else [rng.choice(neg) for _ in range(negatives)]
            out.append([p, *drawn])
    return out


def split_by_group(pairs: list[Pair], share: float, max_groups: int, seed: int) -> tuple[list[Pair], list[Pair]]:
    """Hold out whole queries (never a query's pairs on both sides), only among groups that have a
    positive and a negative, so every held-out group can be ranked."""
    by_group: dict[str, list[Pair]] = {}
    for p in pairs:
        by_group.setdefault(p.group, []).append(p)
    rankable = sorted(g for g, ps in by_group.items() if {p.label > 0.5 for p in ps} == {True, False})
    rng = random.Random(seed)
    rng.shuffle(rankable)
    n_val = min(max_groups, int(round(len(rankable) * share))) if share > 0 else 0
    val_groups = set(rankable[:n_val])
    train = [p for p in pairs if p.group not in val_groups]
    val = [p for p in pairs if p.group in val_groups]
    return train, val


def _scores(model, tokenizer, pairs: list[Pair], max_length: int, device: str, batch: int = 64) -> np.ndarray:
    import torch

    out = []
    model.eval()
    with torch.inference_mode():
        for i in range(0, len(pairs), batch):
            b = pairs[i:i + batch]
            enc = tokenizer([p.query for p in b], [p.passage for p in b], padding=True, truncation="longest_first",
                            max_length=max_length, return_tensors="pt").to(device)
            out.append(model(**enc).logits.reshape(-1).float().cpu().numpy())
    return np.concatenate(out) if out else np.zeros(0, dtype=np.float32)


def validate(model, tokenizer, val: list[Pair], max_length: int, device: str) -> dict:
    """BCE loss, MRR of the first positive, and pairwise accuracy over the held-out groups."""
    if not val:
        return {}
    logits = _scores(model, tokenizer, val, max_length, device)
    labels = np.array([p.label for p in val], dtype=np.float64)
    z = logits.astype(np.float64)
    loss = float(np.mean(np.maximum(z, 0) - z * labels + np.log1p(np.exp(-np.abs(z)))))
    groups: dict[str, list[tuple[float, float]]] = {}
    for p, s in zip(val, z):
        groups.setdefault(p.group, []).append((s, p.label))
    rr, wins, total = [], 0, 0
    for items in groups.values():
        pos = [s for s, y in items if y > 0.5]
        neg = [s for s, y in items if y <= 0.5]
        if not pos or not neg:
            continue
        best_pos = max(pos)
        rr.append(1.0 / (1 + sum(1 for s in neg if s >= best_pos)))
        for a in pos:
            for b in neg:
                wins += a > b
                total += 1
    return {"loss": round(loss, 4), "mrr": round(float(np.mean(rr)), 4) if rr else None,
            "pairwise_accuracy": round(float(wins) / total, 4) if total else None, "groups": len(rr)}


def _cross_encoder(base_path: str | Path, cfg: TrainConfig, device: str):
    """The encoder as a one-logit CrossEncoder on `device`: its top layers only when `cfg.layers`
    says so, trained above `cfg.train_top_layers` only."""
    from sentence_transformers import CrossEncoder

    ce = CrossEncoder(str(base_path), num_labels=1, max_length=cfg.max_length, device=device,
                      local_files_only=True)
    if cfg.layers:
        truncate_layers(ce.model, cfg.layers)
    if cfg.train_top_layers is not None:
        freeze_below(ce.model, cfg.train_top_layers)
    ce.model.to(device)
    return ce


def _optimizer(model, cfg: TrainConfig) -> tuple:
    """AdamW (no weight decay on biases and norms) and a linear schedule with warm-up."""
    import torch
    from transformers import get_linear_schedule_with_warmup

    no_decay = ("bias", "LayerNorm.weight", "layer_norm.weight")
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    params = [{"params": [p for n, p in named if not any(k in n for k in no_decay)], "weight_decay": cfg.weight_decay},
              {"params": [p for n, p in named if any(k in n for k in no_decay)], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(params, lr=cfg.lr)
    return opt, get_linear_schedule_with_warmup(opt, int(cfg.steps * cfg.warmup), cfg.steps)


def _loss(model, tokenizer, picked: list, cfg: TrainConfig, device: str):
    """One step's loss: listwise, a softmax over each list (its positive first), or BCE per pair."""
    import torch

    batch = [p for item in picked for p in item] if cfg.loss == "listwise" else picked
    enc = tokenizer([p.query for p in batch], [p.passage for p in batch], padding=True,
                    truncation="longest_first", max_length=cfg.max_length, return_tensors="pt").to(device)
    logits = model(**enc).logits.reshape(-1)
    if cfg.loss == "listwise":
        scores = logits.view(len(picked), 1 + cfg.negatives)  # the positive is first in each list
        return torch.nn.functional.cross_entropy(scores, torch.zeros(len(picked), dtype=torch.long, device=device))
    return torch.nn.BCEWithLogitsLoss()(logits, torch.tensor([p.label for p in batch], dtype=logits.dtype,
                                                              device=device))


def _check_training(cfg: TrainConfig, pairs: list[Pair]) -> None:
    if cfg.steps < 1:
        raise ValueError("steps must be at least 1")
    if not any(p.label > 0.5 for p in pairs) or not any(p.label <= 0.5 for p in pairs):
        raise ValueError("training needs both positive and negative pairs")


def _next_batch(order: list[int], source: list, per_step: int, rng: random.Random) -> list:
    """The next `per_step` items of `source`, taken off `order` — refilled with a fresh shuffle of the
    data (an epoch) whenever it runs short."""
    if len(order) < per_step:
        more = list(range(len(source)))
        rng.shuffle(more)
        order += more
    picked = [source[i] for i in order[:per_step]]
    del order[:per_step]
    return picked


def train_cross_encoder(base_path: str | Path, pairs: list[Pair], out_dir: str | Path,
                        config: TrainConfig | None = None) -> TrainResult:
    """Fine-tune `base_path` (a sentence-transformers or Hugging Face encoder folder) as a one-logit
    cross-encoder on `pairs` and save a CrossEncoder folder to `out_dir`."""
    import torch
    from tqdm.auto import tqdm

    cfg = config or TrainConfig()
    _check_training(cfg, pairs)
    device = resolve_device(cfg.device)
    random.seed(cfg.seed)
    np.random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    rng = random.Random(cfg.seed)

    train, val = split_by_group(pairs, cfg.val_share, cfg.val_max_groups, cfg.seed)
    ce = _cross_encoder(base_path, cfg, device)
    model, tokenizer = ce.model, ce.tokenizer
    if cfg.loss not in ("listwise", "bce"):
        raise ValueError(f"loss must be listwise or bce, not {cfg.loss!r}")
    lists = _lists(train, cfg.negatives, rng) if cfg.loss == "listwise" else []
    if cfg.loss == "listwise" and not lists:
        raise ValueError("listwise training needs queries with a positive and a negative")
    opt, sched = _optimizer(model, cfg)

    history = []
    t0 = time.perf_counter()
    if val:
        history.append({"step": 0, **validate(model, tokenizer, val, cfg.max_length, device)})
    order: list[int] = []
    bar = tqdm(total=cfg.steps, desc="training reranker", unit="step", disable=not cfg.progress)
    # batch_size counts sequences in both modes: a listwise step takes batch_size // (1 + negatives) lists.
    per_step = max(1, cfg.batch_size // (1 + cfg.negatives)) if cfg.loss == "listwise" else cfg.batch_size
    source = lists if cfg.loss == "listwise" else train
    for step in range(1, cfg.steps + 1):
        model.train()
        picked = _next_batch(order, source, per_step, rng)
        loss = _loss(model, tokenizer, picked, cfg, device)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        bar.update(1)
        bar.set_postfix(loss=f"{loss.item():.3f}")
        if val and (step % cfg.eval_every == 0 or step == cfg.steps):
            v = {"step": step, **validate(model, tokenizer, val, cfg.max_length, device)}
            history.append(v)
            bar.write(f"step {step}: validation loss {v['loss']:.4f}, MRR {v['mrr']}, "
                      f"pairwise accuracy {v['pairwise_accuracy']}")
    bar.close()
    model.eval()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    ce.save(str(out))
    return TrainResult(out_dir=out, steps=cfg.steps, seconds=round(time.perf_counter() - t0, 1), device=device,
                       train_pairs=len(train), train_groups=len({p.group for p in train}), val_pairs=len(val),
                       val_groups=len({p.group for p in val}), validation=history)


def write_card(out_dir: Path, base: str, result: TrainResult, config: TrainConfig, data: dict) -> Path:
    """A small model card: what it was trained from and on, for how long, and how it validated."""
    out_dir = Path(out_dir)
    card = {"base_model": base, "trained_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "config": {k: v for k, v in asdict(config).items() if k != "progress"},
            "data": data, "result": result.as_dict()}
    (out_dir / "refindery_training.json").write_text(json.dumps(card, indent=2) + "\n")
    last = result.validation[-1] if result.validation else {}
    first = result.validation[0] if result.validation else {}
    layers = f" (its first {config.layers} layers)" if config.layers else ""
    lines = [f"# Refindery cross-encoder reranker: {out_dir.name}", "",
             f"- Base encoder: `{base}`{layers}, with a fresh one-logit scoring head (sigmoid at scoring time).",
             f"- Trained {result.steps} steps of {config.batch_size} pairs (lr {config.lr}, max length "
             f"{config.max_length} tokens, seed {config.seed}) on {result.device} in {result.seconds} s.",
             f"- Training pairs: {result.train_pairs} over {result.train_groups} queries; held-out validation: "
             f"{result.val_pairs} pairs over {result.val_groups} queries.", "", "## Data", ""]
    for k, v in data.items():
        if isinstance(v, dict):
            lines.append(f"- {k}:")
            lines += [f"  - {k2}: {json.dumps(v2, default=str)}" for k2, v2 in v.items()]
        else:
            lines.append(f"- {k}: {v}")
    lines += ["", "## Validation (held-out queries)", "", "| step | BCE loss | MRR | pairwise accuracy |",
              "|---|---|---|---|"]
    for v in result.validation:
        lines.append(f"| {v['step']} | {v.get('loss')} | {v.get('mrr')} | {v.get('pairwise_accuracy')} |")
    if first and last:
        lines += ["", f"MRR {first.get('mrr')} before training -> {last.get('mrr')} after."]
    lines += ["", "Load it with `sentence_transformers.CrossEncoder(path)`, or name it in Refindery's model "
              "registry under `[rerankers]`.", ""]
    path = out_dir / "README.md"
    path.write_text("\n".join(lines))
    return path


def export_onnx(out_dir: Path, max_length: int = 192, quantize: bool = True) -> Path:
    """Export the saved cross-encoder to `onnx/model.onnx` (dynamic batch and sequence axes) and,
    with `quantize`, an int8 dynamically quantised `onnx/model_qint8.onnx` for faster CPU scoring."""
    import torch
    from sentence_transformers import CrossEncoder

    ce = CrossEncoder(str(out_dir), device="cpu", local_files_only=True)
    model = ce.model.eval()
    enc = ce.tokenizer(["a query"], ["a passage"], return_tensors="pt", padding="max_length",
                       truncation=True, max_length=min(max_length, 32))
    names = [n for n in ("input_ids", "attention_mask", "token_type_ids") if n in enc]
    path = Path(out_dir) / "onnx" / "model.onnx"
    path.parent.mkdir(parents=True, exist_ok=True)

    class _Wrap(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, *args):
            return self.m(**dict(zip(names, args))).logits

    axes = {n: {0: "batch", 1: "sequence"} for n in names}
    axes["logits"] = {0: "batch"}
    torch.onnx.export(_Wrap(model), tuple(enc[n] for n in names), str(path), input_names=names,
                      output_names=["logits"], dynamic_axes=axes, opset_version=17, dynamo=False)
    if quantize:
        from onnxruntime.quantization import QuantType, quantize_dynamic

        quantize_dynamic(str(path), str(path.with_name("model_qint8.onnx")), weight_type=QuantType.QInt8)
    return path


# What a CPU deployment of an exported reranker needs: the tokenizer, the config (for the tokenizer's
# class) and the int8 graph — not the fp32 weights (60 MB for two layers) or the fp32 graph.
PACKAGE_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt",
                 "README.md", "refindery_training.json")


def package_onnx(src: Path, dest: Path, onnx_file: str = "onnx/model_qint8.onnx") -> dict:
    """Copy a trained, exported reranker's ONNX deployment (the files above that exist, and
    `onnx_file`) into `dest`, replacing what was there; returns the files and their total size."""
    import shutil

    src, dest = Path(src), Path(dest)
    if not (src / onnx_file).is_file():
        raise FileNotFoundError(f"{src / onnx_file} does not exist (train with --onnx first)")
    staging = dest.with_name(dest.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    (staging / Path(onnx_file).parent).mkdir(parents=True)
    files = [f for f in PACKAGE_FILES if (src / f).is_file()] + [onnx_file]
    for f in files:
        shutil.copy2(src / f, staging / f)
    shutil.rmtree(dest, ignore_errors=True)
    staging.rename(dest)
    return {"dir": str(dest), "files": files, "bytes": sum((dest / f).stat().st_size for f in files)}
