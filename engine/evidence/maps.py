"""Maps of a workspace, drawn from the corpus: a structural overview and one group map per group.

Groups are folders — the URL-path and file-path folders of the pages (below what every page of a
domain shares, at most `[evidence] folder_depth` levels deep), the domains when a workspace holds more
than one — and the clusters of the last `POST /v1/clusters/refit`. Each group has a label (the words of
its pages' titles that are most particular to it, df·idf), its pages, and a centroid (the mean of its
page vectors), so a question can be placed on the map: groups ranked by the cosine of the question to
their centroid.

A search granted `map_write` writes what it found into the maps (indexes/map_notes.py): each new
source, the sub-query that found it, the group it sits in. The group's map lists those connections
(a source in no group goes to the `found` map), and the next search places its sub-queries against
them (`Maps.noted`): pages written for a question like its own are searched first.

The maps are files an agent can read too — ``<data_dir>/maps/<workspace>/corpus_overview.md`` and
``groups/<group>/map.md`` — drawn again when the store's generation or the notes' version has moved.
The workspace's folder is its name escaped (engine/core/identity.py), so two workspaces never share
one, and every text a client wrote (a title, a URL, a question) is written as one escaped line: it
cannot add a heading, a section or a link to a map (engine/core/markdown.py).
"""
from __future__ import annotations

import math
import re
import threading
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from urllib.parse import unquote, urlsplit

import numpy as np

from engine.core.corpus import Corpus
from engine.core.identity import workspace_folder
from engine.core.markdown import inline
from engine.core.page_vectors import page_vectors
from engine.evidence.decompose import content_words
from indexes.map_notes import MapNote

GROUP_PAGES_LISTED = 500
NOTES_LISTED = 200
LABEL_WORDS = 5
# Groups a source's siblings are looked for in, most particular first.
NEIGHBOURHOODS = ("folder", "domain", "cluster")


def slug(text: str, limit: int = 60) -> str:
    s = re.sub(r"[^a-z0-9]+", "-", str(text).lower()).strip("-")
    return s[:limit].strip("-")


def folder_parts(url: str) -> tuple[str, list[str]]:
    """(the site — scheme and host, or "file" — and the folders of a page's URL or file path)."""
    parts = urlsplit(url)
    dirs = [unquote(d) for d in parts.path.split("/")[:-1] if d]
    site = parts.netloc.lower() if parts.netloc else (parts.scheme.lower() or "file")
    return site, dirs


def page_directory(url: str) -> str:
    """The folder a page sits in, whole: its site and every folder of its URL or file path."""
    site, dirs = folder_parts(url)
    return "/".join([site, *dirs]) + "/"


def page_folders(urls: dict[str, str], depth: int) -> dict[str, str]:
    """page id -> its folder: the site and at most `depth` folders below the folders every page of
    the site shares (a site's common root says nothing; an absolute file path's least of all)."""
    parts = {pid: folder_parts(u) for pid, u in urls.items()}
    common: dict[str, list[str]] = {}
    for site, dirs in parts.values():
        if site not in common:
            common[site] = list(dirs)
            continue
        c = common[site]
        n = 0
        while n < min(len(c), len(dirs)) and c[n] == dirs[n]:
            n += 1
        del c[n:]
    out = {}
    for pid, (site, dirs) in parts.items():
        rest = dirs[len(common[site]):][:depth]
        out[pid] = "/".join([site, *rest]) + "/"
    return out


@dataclass
class Group:
    kind: str                    # "folder" | "domain" | "cluster" | "found" (notes of pages in no group);
    value: str | int             # for one search only: "pages" (the request's list), "notes" (pages noted)
    label: str
    pages: list[str]
    path: str                    # the group map, relative to the data dir ("" for a search's own list)
    centroid: np.ndarray | None = None

    @property
    def key(self) -> str:
        return f"{self.kind}:{self.value}"

    def filters(self) -> dict:
        if self.kind == "domain":
            return {"domain": [self.value]}
        if self.kind == "cluster":
            return {"cluster_id": [int(self.value)]}
        return {"page_id": list(self.pages)}   # a folder, or a list of pages


@dataclass
class Maps:
    workspace: str
    generation: int
    overview_path: str
    pages: int
    groups: list[Group] = field(default_factory=list)
    notes: list[MapNote] = field(default_factory=list)
    notes_version: int = 0
    _of_page: dict[tuple[str, str], Group] = field(default_factory=dict)
    _by_key: dict[str, Group] = field(default_factory=dict)

    def group_of(self, page_id: str, kind: str) -> Group | None:
        return self._of_page.get((kind, page_id))

    def neighbourhood(self, page_id: str) -> Group | None:
        """The most particular group a page sits in (its folder, else its domain, else its cluster)."""
        for kind in NEIGHBOURHOODS:
            g = self.group_of(page_id, kind)
            if g is not None:
                return g
        return None

    def group(self, key: str) -> Group | None:
        return self._by_key.get(key)

    def rank(self, vector: np.ndarray) -> list[tuple[Group, float]]:
        """Groups by cosine of `vector` to their centroid, best first (ties by key)."""
        scored = [(g, float(g.centroid @ vector)) for g in self.groups
                  if g.centroid is not None and g.kind != "found"]
        return sorted(scored, key=lambda t: (-t[1], t[0].key))

    def noted(self, vector: np.ndarray, min_cosine: float) -> list[tuple[MapNote, float]]:
        """The notes written for sub-queries within `min_cosine` of `vector`, nearest first (one per
        page: its nearest), ties by version then page."""
        best: dict[str, tuple[MapNote, float]] = {}
        for n in self.notes:
            c = float(n.vector @ vector)
            if c >= min_cosine and (n.page_id not in best or c > best[n.page_id][1]):
                best[n.page_id] = (n, c)
        return sorted(best.values(), key=lambda t: (-t[1], t[0].version, t[0].page_id))


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
    """The workspace's maps, drawn (and written) again when the store's generation or the version of
    the notes searches wrote into them has moved."""
    model = model or corpus.settings.models.active
    gen = corpus.store.generation()
    version = corpus.map_notes.version(workspace)
    key = (str(corpus.data_dir), workspace, model)
    with _lock:
        hit = _cache.get(key)
        if hit is not None and hit.generation == gen and hit.notes_version == version:
            return hit
        maps = _draw(corpus, workspace, model, gen, version)
        _cache[key] = maps
        return maps


def _draw(corpus: Corpus, workspace: str, model: str, gen: int, notes_version: int) -> Maps:
    rows = corpus.store.page_outline(workspace)
    base = Path("maps") / workspace_folder(workspace)
    root = corpus.data_dir
    maps = Maps(workspace, gen, str(base / "corpus_overview.md"), len(rows), notes_version=notes_version)
    titles = {pid: (title or url) for pid, url, title, _, _ in rows}
    urls = {pid: url for pid, url, _, _, _ in rows}
    df = Counter(w for t in titles.values() for w in set(content_words(t)))
    domains = {d for _, _, _, d, _ in rows}
    by = _groups(rows, urls, domains, corpus.settings.evidence.folder_depth)
    maps.notes = corpus.map_notes.read(workspace)
    noted: dict[str, list[MapNote]] = {}
    for n in maps.notes:
        noted.setdefault(n.group_key, []).append(n)
    drawn = {f"{kind}:{value}" for kind, value in by}
    homeless = sorted({n.page_id for k, ns in noted.items() if k not in drawn for n in ns})
    if homeless:   # notes of pages in no group now (or then): the found map
        by[("found", "retrieval")] = homeless
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
        maps._by_key[g.key] = g
        if kind != "found":
            for p in pids:
                maps._of_page[(kind, p)] = g
    for g in maps.groups:   # a note whose group is gone (a refit, a page moved) goes to the found map
        if g.kind == "found":
            notes = [n for k, ns in noted.items() if k not in maps._by_key or k == g.key for n in ns]
        else:
            notes = noted.get(g.key, [])
        _write(root / g.path, _group_map(g, workspace, gen, titles, urls, notes, notes_version))
    _write(root / maps.overview_path, _overview(maps, workspace, gen, len(rows), len(domains), notes_version))
    return maps


def _groups(rows: list[tuple], urls: dict[str, str], domains: set, folder_depth: int
            ) -> dict[tuple[str, str | int], list[str]]:
    """The pages by group: by domain (when there are several), by folder — one that holds more than
    one page and is not its whole site (its domain's group) — and by cluster."""
    by: dict[tuple[str, str | int], list[str]] = {}
    folders = page_folders(urls, folder_depth)
    for pid, _url, _title, domain, cluster in rows:
        if len(domains) > 1:
            by.setdefault(("domain", domain or ""), []).append(pid)
        by.setdefault(("folder", folders[pid]), []).append(pid)
        if cluster is not None:
            by.setdefault(("cluster", int(cluster)), []).append(pid)
    sites = {}
    for pid, _url, _title, domain, _ in rows:
        sites.setdefault(domain or "", set()).add(pid)
    for key in [k for k in by if k[0] == "folder"]:
        pids = by[key]
        if len(pids) < 2 or len(pids) == len(rows) or any(set(pids) == s for s in sites.values()):
            del by[key]
    return by


def _overview(maps: Maps, workspace: str, gen: int, pages: int, domains: int, notes_version: int) -> str:
    """The corpus overview's text: the counts, and a table of the group maps."""
    lines = [f"# Corpus overview: {inline(workspace)}", "", f"pages: {pages} · domains: {domains} · "
             f"folders: {sum(1 for g in maps.groups if g.kind == 'folder')} · "
             f"clusters: {sum(1 for g in maps.groups if g.kind == 'cluster')} · generation: {gen}"
             + (f" · notes written by searches: {len(maps.notes)} (version {notes_version})" if maps.notes else ""), ""]
    if not maps.groups:
        lines.append("One folder and no clusters: no group maps (refit clusters to draw some).")
    else:
        lines += ["| group | pages | label | map |", "|---|---|---|---|"]
        lines += [f"| {g.kind} {inline(str(g.value))} | {len(g.pages)} | {inline(g.label)} | {inline(g.path)} |"
                  for g in maps.groups]
    return "\n".join(lines) + "\n"


def _group_map(g: Group, workspace: str, gen: int, titles: dict, urls: dict, notes: list[MapNote],
               version: int) -> str:
    lines = [f"# Group map: {g.kind} {inline(str(g.value))}", "",
             f"workspace: {inline(workspace)} · pages: {len(g.pages)} · generation: {gen}", f"label: {inline(g.label)}",
             "", "| page_id | title | url |", "|---|---|---|"]
    for p in g.pages[:GROUP_PAGES_LISTED]:
        lines.append(f"| {p} | {inline(titles[p])} | {inline(urls[p])} |")
    if len(g.pages) > GROUP_PAGES_LISTED:
        lines.append(f"\n… and {len(g.pages) - GROUP_PAGES_LISTED} more pages.")
    if notes:
        lines += ["", f"## Connections found by retrieval (map_write; notes version {version})", "",
                  "| version | sub-query | page_id | title | confidence | session |", "|---|---|---|---|---|---|"]
        for n in notes[-NOTES_LISTED:]:
            lines.append(f"| {n.version} | {inline(n.sub_query)} | {inline(n.page_id)} | "
                         f"{inline(n.title or n.url or '')} | {inline(n.confidence)} | {inline(n.session_id)} |")
    return "\n".join(lines) + "\n"
