"""The corpus's own vocabulary, placed by the embedder: term expansion beyond the dictionary.

The words of a workspace's chunks (a deterministic sample of at most `[evidence] vocabulary_sample_chunks`
chunks; content words of three letters or more held by at least two chunks, the `vocabulary_size` most
common, one surface per stem) are encoded once each by the active embedder; a question's word is then
expanded by its nearest corpus words (cosine at least `vocabulary_min_cosine`, none sharing a stem with
the question). The list is drawn again when the store's generation moves; a word already encoded is
never encoded again in this process.
"""
from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass

import numpy as np

from engine.core.corpus import Corpus
from engine.evidence.decompose import stop_words
from indexes.sparse import stems, words

MIN_CHARS = 3


@dataclass
class Vocabulary:
    generation: int
    words: list[str]
    stems: list[str]
    matrix: np.ndarray          # float32 [words, dim], rows normalised

    def nearest(self, vector: np.ndarray, exclude_stems: set[str], k: int, min_cosine: float
                ) -> list[tuple[str, float]]:
        """The k corpus words nearest `vector` (cosine, best first; ties by word), at least `min_cosine`,
        none of whose stem is excluded."""
        if not self.words or k <= 0:
            return []
        cos = self.matrix @ vector
        order = sorted(range(len(self.words)), key=lambda i: (-float(cos[i]), self.words[i]))
        out = []
        for i in order:
            if float(cos[i]) < min_cosine:
                break
            if self.stems[i] not in exclude_stems:
                out.append((self.words[i], float(cos[i])))
                if len(out) == k:
                    break
        return out


_cache: dict[tuple[str, str, str], Vocabulary] = {}
_vectors: dict[tuple[str, str], dict[str, np.ndarray]] = {}
_lock = threading.Lock()


def unit(v: np.ndarray) -> np.ndarray:
    v = np.asarray(v, dtype=np.float32)
    n = float(np.linalg.norm(v))
    return v / n if n else v


def corpus_words(texts: list[str], size: int) -> list[str]:
    """The `size` most common content words of `texts` (counted by stem: the texts holding any of its
    forms) held by two or more of them, each as its stem's most common surface; by count, then word."""
    df: Counter = Counter()        # stem -> texts
    surfaces: Counter = Counter()  # (stem, surface) -> texts
    stop = stop_words()
    for t in texts:
        seen = {w for w in words(t) if len(w) >= MIN_CHARS and w.isalpha() and w not in stop}
        forms = {((stems(w) or [w])[0], w) for w in seen}
        df.update({st for st, _ in forms})
        surfaces.update(forms)
    best: dict[str, str] = {}
    for (st, w), n in sorted(surfaces.items(), key=lambda t: (-t[1], t[0][1])):
        best.setdefault(st, w)
    kept = sorted((st for st, n in df.items() if n >= 2), key=lambda st: (-df[st], best[st]))
    return [best[st] for st in kept[:size]]


def corpus_vocabulary(corpus: Corpus, workspace: str, model: str | None = None) -> Vocabulary:
    """The workspace's vocabulary, with each word's vector (see the module's docstring)."""
    model = model or corpus.settings.models.active
    s = corpus.settings.evidence
    gen = corpus.store.generation()
    key = (str(corpus.data_dir), workspace, model)
    with _lock:
        hit = _cache.get(key)
        if hit is not None and hit.generation == gen:
            return hit
        vocab = corpus_words(corpus.store.sample_chunk_texts(workspace, s.vocabulary_sample_chunks),
                             s.vocabulary_size)
        known = _vectors.setdefault((str(corpus.data_dir), model), {})
        new = [w for w in vocab if w not in known]
        if new:
            for w, v in zip(new, corpus.embedder(model).encode_documents(new)):
                known[w] = unit(v)
        matrix = np.stack([known[w] for w in vocab]) if vocab else np.zeros((0, 1), dtype=np.float32)
        out = Vocabulary(gen, vocab, [(stems(w) or [w])[0] for w in vocab], matrix)
        _cache[key] = out
        return out
