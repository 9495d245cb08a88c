"""Shortcuts: the page you chose last time, first — as a browser's address bar learns which address
you pick for what you type.

A *choice* is a page marked `found` or `click` for a logged search (the query log's feedback, its
latest judgment of that page for that query; `irrelevant` later takes the choice back). A search
takes a shortcut when a choice's query is close to its own, by words or by meaning:

    words    |terms(q) ∩ terms(c)| / |terms(q) ∪ terms(c)| >= shortcut_min_overlap
             (the BM25 arm's terms: stemmed, no stop words)
    meaning  cos(vec(q), vec(c)) >= shortcut_min_similarity   (the search's own embedder)

and the chosen page is among the search's candidates — the pages its arms returned under its
filters and the caller's scopes — so a shortcut never lifts a page that matches nothing, nor one
outside the caller's walls. Of the choices that qualify, the closest wins (the larger of the two
measures that passed), then the most recent. Only choices on queries of the search's workspace run
within the caller's scopes count (a key with document scopes: queries run inside them), so no
choice's query, shown in `explain`, crosses a wall. A choice is forgotten with its page (deleted),
or by `DELETE /v1/feedback` / `refindery feedback clear`.

Whom a choice serves (`[search] shortcut_scope`): by default the key that made it ("key": one key's
feedback never reorders another key's results; with no key — an open server, the owner's socket —
those calls share theirs); with "workspace", every key's searches of its workspace. Each key keeps
its newest `shortcut_max_choices`; a choice older than `shortcut_max_age_days` stops counting. A
choice is kept per key: two keys choosing for one query each keep their own.

The choices of a workspace are read once per change of the feedback (QueryLog.feedback_version)
and their queries encoded once per embedder; a search then costs one matrix-vector product and a
walk of the choices that share a term with it.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import datetime
from typing import Callable

import numpy as np

from models.registry import ModelNotFound

from engine.core.clock import utcnow
from engine.refind.highlight import query_terms

_MAX_VECTORS = 200_000   # (model, query text) -> vector entries kept before the cache starts over


@dataclass(frozen=True, slots=True)
class Choice:
    query_id: str
    query: str
    scopes: tuple[str, ...] | None   # the document scopes its search ran within (None: every scope)
    page_id: str
    kind: str                        # found / click
    chosen_at: datetime
    terms: frozenset[str]
    key_id: str | None = None        # the key that made it (None: no key)


@dataclass(frozen=True, slots=True)
class Shortcut:
    """A choice a search takes: how close its query came, and by which measure."""
    choice: Choice
    closeness: float
    by: str                          # "words" or "meaning"

    def reason(self) -> str:
        return f"chosen on {self.choice.chosen_at:%Y-%m-%d} for {self.choice.query!r}"


@dataclass
class _Workspace:
    version: int
    choices: list[Choice]
    by_term: dict[str, list[int]]
    unit: dict[str, np.ndarray] = field(default_factory=dict)     # model -> the queries' unit vectors
    allowed: dict[tuple | None, np.ndarray] = field(default_factory=dict)   # scopes -> which choices count
    keys: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=object))   # each choice's key id
    newest: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # rank in its key's, newest 0
    at: np.ndarray = field(default_factory=lambda: np.zeros(0))    # when it was made (POSIX seconds)


@dataclass(frozen=True, slots=True)
class Serving:
    """Whose choices a search may take (engine/refind/shortcuts.py, [search] shortcut_*)."""
    key_id: str | None = None        # the searching key (None: no key)
    shared: bool = False             # "workspace": every key's choices
    max_choices: int = 200           # per key, newest first
    max_age_s: float = 0.0           # 0: never ages

    @classmethod
    def of(cls, search_settings, key_id: str | None) -> "Serving":
        """Whose choices a search by `key_id` takes under these [search] settings (shortcut_*)."""
        d = search_settings
        return cls(key_id, d.shortcut_scope == "workspace", d.shortcut_max_choices, d.shortcut_max_age_days * 86400.0)


class Shortcuts:
    def __init__(self, querylog, embedder: Callable[[str], object]):
        """`querylog`: the engine's QueryLog (its tables and feedback_version); `embedder(model)`:
        the Embedder of that name."""
        self.querylog = querylog
        self.embedder = embedder
        self._lock = threading.Lock()
        self._spaces: dict[str, _Workspace] = {}
        self._vectors: dict[tuple[str, str], np.ndarray] = {}

    def choices(self, workspace: str) -> list[Choice]:
        return self._space(workspace).choices

    def _space(self, workspace: str) -> _Workspace:
        version = self.querylog.feedback_version
        space = self._spaces.get(workspace)
        if space is not None and space.version == version:
            return space
        rows = self.querylog.tables.choices(workspace)
        choices = [Choice(qid, text, tuple(scopes) if scopes is not None else None, pid, kind, ts,
                          query_terms(text), key) for qid, text, scopes, pid, kind, ts, key in rows]
        by_term: dict[str, list[int]] = {}
        for i, c in enumerate(choices):
            for t in c.terms:
                by_term.setdefault(t, []).append(i)
        keys = np.empty(len(choices), dtype=object)
        keys[:] = [c.key_id for c in choices]
        newest = np.zeros(len(choices), dtype=np.int64)
        seen: dict[str | None, int] = {}
        for i in range(len(choices) - 1, -1, -1):   # rows come oldest first
            newest[i] = seen.get(choices[i].key_id, 0)
            seen[choices[i].key_id] = newest[i] + 1
        at = np.fromiter((c.chosen_at.timestamp() for c in choices), dtype=np.float64, count=len(choices))
        space = _Workspace(version, choices, by_term, keys=keys, newest=newest, at=at)
        with self._lock:
            if len(self._spaces) > 1024:
                self._spaces.clear()
            self._spaces[workspace] = space
        return space

    def _unit(self, space: _Workspace, model: str) -> np.ndarray:
        """The choices' queries as unit vectors of `model`, each text encoded once per process."""
        mat = space.unit.get(model)
        if mat is not None:
            return mat
        texts = [c.query for c in space.choices]
        known = {t: v for t in dict.fromkeys(texts) if (v := self._vectors.get((model, t))) is not None}
        missing = [t for t in dict.fromkeys(texts) if t not in known]
        if missing:
            known.update(zip(missing, self.embedder(model).encode_queries(missing)))
            with self._lock:
                if len(self._vectors) + len(missing) > _MAX_VECTORS:
                    self._vectors.clear()
                self._vectors.update({(model, t): known[t] for t in missing})
        mat = np.vstack([known[t] for t in texts]).astype(np.float32)
        mat /= np.maximum(np.linalg.norm(mat, axis=1, keepdims=True), 1e-12)
        space.unit[model] = mat
        return mat

    @staticmethod
    def _allowed(space: _Workspace, scopes: tuple[str, ...] | None) -> np.ndarray:
        """Which choices a search within `scopes` may use: those made in searches run inside them."""
        key = tuple(sorted(scopes)) if scopes is not None else None
        mask = space.allowed.get(key)
        if mask is None:
            mine = set(scopes or ())
            mask = np.fromiter((scopes is None or (c.scopes is not None and set(c.scopes) <= mine)
                                for c in space.choices), dtype=bool, count=len(space.choices))
            space.allowed[key] = mask
        return mask

    def serving(self, workspace: str, scopes: tuple[str, ...] | None, serving: "Serving") -> list[Choice]:
        """The workspace's choices a search within `scopes` by `serving.key_id` may take, oldest first."""
        space = self._space(workspace)
        return [c for c, ok in zip(space.choices, self._serving(space, scopes, serving).tolist()) if ok]

    def _serving(self, space: _Workspace, scopes: tuple[str, ...] | None, serving: "Serving") -> np.ndarray:
        mask = self._allowed(space, scopes) & (space.newest < serving.max_choices)
        if not serving.shared:
            mask &= np.array([k == serving.key_id for k in space.keys], dtype=bool)
        if serving.max_age_s > 0:   # (naive UTC on both sides: chosen_at is stored so)
            mask &= space.at >= utcnow().timestamp() - serving.max_age_s
        return mask

    def match(self, workspace: str, query: str, model: str, scopes: tuple[str, ...] | None,
              is_candidate: Callable[[list[str]], np.ndarray], min_similarity: float,
              min_overlap: float, serving: Serving = Serving()) -> Shortcut | None:
        """The shortcut a search of `query` takes, or None. `is_candidate(page_ids)`: which of these
        pages are among the search's candidates (a boolean per page); `serving`: whose choices count."""
        space = self._space(workspace)
        if not space.choices:
            return None
        allowed = self._serving(space, scopes, serving)
        if not allowed.any():
            return None
        closeness: dict[int, tuple[float, str]] = {}
        try:
            mine = self.embedder(model).encode_query(query)   # the search's own vector: from its cache
        except ModelNotFound:   # (a search with its dense arm off and its model absent: words only)
            mine = None
        if mine is not None:
            sims = self._unit(space, model) @ (mine / max(float(np.linalg.norm(mine)), 1e-12))
            for i in np.flatnonzero((sims >= min_similarity) & allowed).tolist():
                closeness[i] = (float(sims[i]), "meaning")
        terms = query_terms(query)
        for i in {i for t in terms for i in space.by_term.get(t, ())}:
            if not allowed[i]:
                continue
            c = space.choices[i]
            overlap = len(terms & c.terms) / len(terms | c.terms)
            if overlap >= min_overlap and overlap > closeness.get(i, (-1.0, ""))[0]:
                closeness[i] = (overlap, "words")
        if not closeness:
            return None
        ranked = sorted(closeness, key=lambda i: (-closeness[i][0], -space.choices[i].chosen_at.timestamp(),
                                                  space.choices[i].query_id, space.choices[i].page_id))
        held = is_candidate([space.choices[i].page_id for i in ranked])
        for i, ok in zip(ranked, held.tolist()):
            if ok:
                return Shortcut(space.choices[i], round(closeness[i][0], 4), closeness[i][1])
        return None
