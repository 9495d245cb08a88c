"""How sure a source is: the engine's own signals for a page a round returned, mapped to the
probability that a person would judge the page relevant by a logistic model fitted on the
development test collections (`refindery eval evidence`, written to configs/evidence_calibration.json).

Signals (all comparable across queries, unlike a raw BM25 score):
- dense_cosine: the embedder's cosine between the round's query and the page's best chunk (0 when the
  dense arm did not return the page);
- both_arms: whether both arms agree on the page: each ranks one of its chunks in its own top AGREE_TOP;
- log_rank: ln of the page's rank in the round;
- coverage: the share of the query's distinct content stems found in the page's matched passages.

Levels: high when the probability is at least thresholds.high, medium at least .medium, low at least
.low; below .low the page is not a source (it counts as scanned, not read). A page that shares no word
with the question (coverage 0) is a source only at medium or above: like a grep match, a low-confidence
source must at least hold one of the words asked for.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

from indexes.sparse import stems

from ...settings import CONFIG_DIR
from .decompose import content_words

FEATURES = ("dense_cosine", "both_arms", "log_rank", "coverage")
CALIBRATION_FILE = CONFIG_DIR / "evidence_calibration.json"
LEVELS = ("high", "medium", "low")
AGREE_TOP = 10


@dataclass
class Signals:
    dense_cosine: float
    both_arms: bool
    rank: int
    coverage: float
    rerank: float | None = None

    def vector(self) -> list[float]:
        return [self.dense_cosine, float(self.both_arms), math.log(max(self.rank, 1)), self.coverage]

    def as_dict(self) -> dict:
        d = asdict(self)
        d["dense_cosine"] = round(self.dense_cosine, 4)
        d["coverage"] = round(self.coverage, 4)
        return d


def query_stems(query: str) -> set[str]:
    return {s for w in content_words(query) for s in stems(w)}


def signals(hit, q_stems: set[str]) -> Signals:
    """`hit` is a search PageHit with explain."""
    chunks = hit.explain.chunks if hit.explain else []
    dense = [c.dense.score for c in chunks if c.dense is not None]
    both = (any(c.dense is not None and c.dense.rank <= AGREE_TOP for c in chunks)
            and any(c.sparse is not None and c.sparse.rank <= AGREE_TOP for c in chunks))
    text_stems = {s for sn in hit.snippets for s in stems(sn.text)} | set(stems(hit.title or ""))
    coverage = len(q_stems & text_stems) / len(q_stems) if q_stems else 0.0
    rr = [c.rerank for c in chunks if c.rerank is not None]
    return Signals(max(dense) if dense else 0.0, both, hit.rank, coverage, max(rr) if rr else None)


@dataclass
class Calibration:
    weights: dict[str, float]
    bias: float
    thresholds: dict[str, float] = field(default_factory=lambda: {"high": 0.5, "medium": 0.25, "low": 0.1})
    fitted_on: dict = field(default_factory=dict)

    def probability(self, s: Signals) -> float:
        z = self.bias + sum(self.weights[f] * x for f, x in zip(FEATURES, s.vector()))
        return 1.0 / (1.0 + math.exp(-z))

    def level(self, p: float, coverage: float = 1.0) -> str | None:
        for lvl in LEVELS:
            if p >= self.thresholds[lvl]:
                return None if lvl == "low" and coverage <= 0 else lvl
        return None

    def assess(self, s: Signals) -> tuple[float, str | None]:
        p = self.probability(s)
        return p, self.level(p, s.coverage)

    def as_dict(self) -> dict:
        return {"features": list(FEATURES), "weights": self.weights, "bias": self.bias,
                "thresholds": self.thresholds, "fitted_on": self.fitted_on}


def load_calibration(path: Path = CALIBRATION_FILE) -> Calibration:
    data = json.loads(Path(path).read_text())
    if list(data["weights"]) != list(FEATURES):
        raise ValueError(f"{path}: weights must be given for {FEATURES}")
    return Calibration({k: float(v) for k, v in data["weights"].items()}, float(data["bias"]),
                       {k: float(data["thresholds"][k]) for k in LEVELS}, data.get("fitted_on", {}))
