"""How sure a source is: the engine's own signals for a page a round returned, mapped to the
probability that a person would judge the page relevant by a logistic model fitted on the
development test collections (`refindery eval evidence`, written to configs/evidence_calibration.json).

Signals (all comparable across queries, unlike a raw BM25 score), taken against the *question* (the
sub-query), not against the expanded words a round searched for, so a page that only matches a
broadened round is judged by what was asked:
- dense_cosine: the embedder's cosine between the question and the page's best candidate chunk
  (from the stored chunk vectors);
- both_arms: whether both arms agree on the page: each ranks one of its chunks in its own top AGREE_TOP;
- log_rank: ln of the page's rank in the round;
- coverage: the share of the question's concepts found in the page's matched passages and title (a
  concept is a content word, or a dictionary entry met by its term or any alias, colloquial or related
  surface).

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

import numpy as np

from indexes.sparse import stems

from engine.core.settings import CONFIG_DIR
from engine.evidence.decompose import content_words

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


Concept = list[tuple[str, ...]]  # the stem sequences any one of which meets the concept


def word_concepts(question: str) -> list[Concept]:
    """One concept per distinct content word of the question (no dictionary)."""
    out: list[Concept] = []
    for w in dict.fromkeys(content_words(question)):
        st = tuple(stems(w))
        if st and [st] not in out:
            out.append([st])
    return out


def candidate_chunks(hit) -> list[int]:
    return [c.chunk_id for c in hit.explain.chunks] if hit.explain else [sn.chunk_id for sn in hit.snippets]


def chunk_cosines(store, model: str, vector: np.ndarray, chunk_ids: list[int]) -> dict[int, float]:
    """Cosine of `vector` (unit length) to each chunk's stored vector."""
    if not chunk_ids:
        return {}
    ids, vecs = store.embeddings_for(model, sorted(set(chunk_ids)))
    if not len(ids):
        return {}
    norms = np.linalg.norm(vecs, axis=1)
    sims = (vecs @ vector) / np.where(norms == 0, 1, norms)
    return {int(i): float(s) for i, s in zip(ids, sims)}


def signals(hit, concepts: list[Concept], cosines: dict[int, float]) -> Signals:
    """`hit` is a search PageHit with explain; `cosines` the question's cosine to its chunks."""
    chunks = hit.explain.chunks if hit.explain else []
    both = (any(c.dense is not None and c.dense.rank <= AGREE_TOP for c in chunks)
            and any(c.sparse is not None and c.sparse.rank <= AGREE_TOP for c in chunks))
    text = [s for sn in hit.snippets for s in stems(sn.text)] + [None] + stems(hit.title or "")
    bag = set(text)

    def met(alt: tuple[str, ...]) -> bool:
        if len(alt) == 1:
            return alt[0] in bag
        n = len(alt)
        return set(alt) <= bag and any(tuple(text[i:i + n]) == alt for i in range(len(text) - n + 1))

    covered = sum(1 for c in concepts if any(met(a) for a in c))
    coverage = covered / len(concepts) if concepts else 0.0
    cos = [cosines[c] for c in candidate_chunks(hit) if c in cosines]
    rr = [c.rerank for c in chunks if c.rerank is not None]
    return Signals(max(cos) if cos else 0.0, both, hit.rank, coverage, max(rr) if rr else None)


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
