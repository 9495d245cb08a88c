"""Maps of a workspace, drawn from the corpus: a structural overview and one group map per group.

Groups are folders — the domains, when a workspace holds more than one — and the clusters of the
last `POST /v1/clusters/refit`. Each group has a label (the words of its pages' titles that are most
particular to it, df·idf), its pages, and a centroid (the mean of its page vectors), so a question
can be placed on the map: groups ranked by the cosine of the question to their centroid.

The maps are files an agent can read too — ``<data_dir>/maps/<workspace>/corpus_overview.md`` and
``groups/<group>/map.md`` — drawn again when the store's generation has moved.
"""
from __future__ import annotations

import math
import re
import threading
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from engine.core.corpus import Corpus
from engine.core.page_vectors import page_vectors
from engine.evidence.decompose import content_words

GROUP_PAGES_LISTED = 500
LABEL_WORDS = 5


def slug(text: str, limit: int = 60) -> str:
    s = re.sub(r"[^a-z0-9]+", "-", str(text).lower()).strip("-")
    return s[:limit].strip("-")


@dataclass
class Group:
    kind: str                    # "domain" | "cluster"
    value: str | int
    label: str
    pages: list[str]
    path: str                    # the group map, relative to the data dir
    centroid: np.ndarray | None = None

    @property
    def key(self) -> str:
        return f"{self.kind}:{self.value}"

    def filters(self) -> dict:
        return {"domain": [self.value]} if self.kind == "domain" else {"cluster_id": [int(self.value)]}


@dataclass
class Maps:
    workspace: str
    generation: int
    overview_path: str
    pages: int
    groups: list[Group] = field(default_factory=list)
    _of_page: dict[tuple[str, str], Group] = field(default_factory=dict)

    def group_of(self, page_id: str, kind: str) -> Group | None:
        return self._of_page.get((kind, page_id))

    def rank(self, vector: np.ndarray) -> list[tuple[Group, float]]:
        """Groups by cosine of `vector` to their centroid, best first (ties by key)."""
        scored = [(g, float(g.centroid @ vector)) for g in self.groups if g.centroid is not None]
        return sorted(scored, key=lambda t: (-t[1], t[0].key))


def _label(titles: list[str], df: Counter, n_pages: int) -> str:
    tf = Counter(w for t in titles for w in set(content_words(t)))
    scored = sorted(tf, key=lambda w: (-tf[w] * math.log(1 + n_pages / df[w]), w))
    return ", ".join(scored[:LABEL_WORDS])


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


_cache: dict[tuple[str, str, str], Maps] = {}
_lock = threading.Lock()


def workspace_maps(corpus: Corpus, workspace: str, model: str | None = None) -> Maps:
    """The workspace's maps, drawn (and written) again when the store's generation has moved."""
    model = model or corpus.settings.models.active
    gen = corpus.store.generation()
    key = (str(corpus.data_dir), workspace, model)
    with _lock:
        hit = _cache.get(key)
        if hit is not None and hit.generation == gen:
            return hit
        maps = _draw(corpus, workspace, model, gen)
        _cache[key] = maps
        return maps


def _draw(corpus: Corpus, workspace: str, model: str, gen: int) -> Maps:
    rows = corpus.store.page_outline(workspace)
    base = Path("maps") / (slug(workspace) or "workspace")
    root = corpus.data_dir
    maps = Maps(workspace, gen, str(base / "corpus_overview.md"), len(rows))
    titles = {pid: (title or url) for pid, url, title, _, _ in rows}
    df = Counter(w for t in titles.values() for w in set(content_words(t)))
    by: dict[tuple[str, str | int], list[str]] = {}
    domains = {d for _, _, _, d, _ in rows}
    for pid, _url, _title, domain, cluster in rows:
        if len(domains) > 1:
            by.setdefault(("domain", domain or ""), []).append(pid)
        if cluster is not None:
            by.setdefault(("cluster", int(cluster)), []).append(pid)
    pv = page_vectors(corpus, model, workspace) if by else None
    for (kind, value), pids in sorted(by.items(), key=lambda t: (t[0][0], str(t[0][1]))):
        path = base / "groups" / f"{kind}-{slug(value) or 'none'}" / "map.md"
        g = Group(kind, value, _label([titles[p] for p in pids], df, len(rows)), pids, str(path))
        if pv is not None:
            idx = [pv.row[p] for p in pids if p in pv.row]
            if idx:
                c = pv.matrix[idx].mean(axis=0)
                n = float(np.linalg.norm(c))
                g.centroid = c / n if n else None
        maps.groups.append(g)
        for p in pids:
            maps._of_page[(kind, p)] = g
        lines = [f"# Group map: {kind} {value}", "",
                 f"workspace: {workspace} · pages: {len(pids)} · generation: {gen}", f"label: {g.label}", "",
                 "| page_id | title | url |", "|---|---|---|"]
        urls = {pid: url for pid, url, _, _, _ in rows}
        for p in pids[:GROUP_PAGES_LISTED]:
            lines.append(f"| {p} | {titles[p].replace('|', '/')} | {urls[p]} |")
        if len(pids) > GROUP_PAGES_LISTED:
            lines.append(f"\n… and {len(pids) - GROUP_PAGES_LISTED} more pages.")
        _write(root / path, "\n".join(lines) + "\n")
    lines = [f"# Corpus overview: {workspace}", "", f"pages: {len(rows)} · domains: {len(domains)} · "
             f"clusters: {sum(1 for g in maps.groups if g.kind == 'cluster')} · generation: {gen}", ""]
    if not maps.groups:
        lines.append("One folder and no clusters: no group maps (refit clusters to draw some).")
    else:
        lines += ["| group | pages | label | map |", "|---|---|---|---|"]
        lines += [f"| {g.kind} {g.value} | {len(g.pages)} | {g.label} | {g.path} |" for g in maps.groups]
    _write(root / maps.overview_path, "\n".join(lines) + "\n")
    return maps
