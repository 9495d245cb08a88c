"""Reranker training pairs from SQuAD (v1.1 layout: one article a line, `title` and `paragraphs`,
each paragraph a `context` and its `qas`), the supervised data in ../shared/data/train/.

For passage ranking each question's positive is its own paragraph; its negatives are other
paragraphs of the same article that contain none of its answer strings (same topic, no answer: the
hard negatives a reranker sees among a hybrid search's top chunks), topped up with paragraphs of
other articles when an article is short. Training data only: never an evaluation set here.
"""
from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

from engine.refind.reranker_training import Pair

from .paths import DEFAULT_SQUAD_PATH

DEFAULT_SQUAD = DEFAULT_SQUAD_PATH


def read_articles(path: str | Path) -> list[dict]:
    """The articles of a SQuAD file (`.jsonl`, `.jsonl.gz`, or the official one-object `.json`)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no SQuAD file there")
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        text = f.read()
    stripped = text.lstrip()
    if stripped.startswith("{") and '"data"' in stripped[:200]:
        return json.loads(text)["data"]
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def squad_pairs(path: str | Path, questions: int | None = None, negatives: int = 3, seed: int = 13) -> list[Pair]:
    """(question, paragraph) pairs: one positive and `negatives` negatives per question, for
    `questions` questions drawn at random (all when None). Groups are `squad:<article>:<q index>`."""
    if negatives < 1:
        raise ValueError("negatives must be at least 1")
    articles = read_articles(path)
    rng = random.Random(seed)
    items = []  # (article index, paragraph index, question, answers)
    for ai, art in enumerate(articles):
        for pi, para in enumerate(art.get("paragraphs", [])):
            for qa in para.get("qas", []):
                answers = [a["text"] if isinstance(a, dict) else str(a) for a in qa.get("answers", [])]
                items.append((ai, pi, qa["question"], [a.lower() for a in answers if a.strip()]))
    if questions is not None and questions < len(items):
        items = rng.sample(items, questions)
    pairs: list[Pair] = []
    for n, (ai, pi, question, answers) in enumerate(items):
        paras = articles[ai]["paragraphs"]
        own = paras[pi]["context"]
        same = [p["context"] for j, p in enumerate(paras)
                if j != pi and not any(a in p["context"].lower() for a in answers)]
        negs = rng.sample(same, min(negatives, len(same)))
        while len(negs) < negatives:  # a short article: paragraphs of another one
            other = articles[rng.randrange(len(articles))]
            if other is not articles[ai] and other.get("paragraphs"):
                negs.append(rng.choice(other["paragraphs"])["context"])
        group = f"squad:{articles[ai].get('title', ai)}:{n}"
        pairs.append(Pair(question, own, 1.0, group, "squad"))
        pairs += [Pair(question, neg, 0.0, group, "squad-same-article" if neg in same else "squad-other-article")
                  for neg in negs]
    return pairs
