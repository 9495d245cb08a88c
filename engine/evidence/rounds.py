"""Evidence search's rounds: a round's spec (`RoundSpec`), a sub-query's state across its rounds
(`Sub`), one call's rounds over every sub-query with the seed's early stops (`Run`), and the query
rewriting a round plan uses (`forms`, `bridged`)."""
from __future__ import annotations

import math
import re
from collections import deque
from dataclasses import dataclass, field
from datetime import date
from typing import Protocol

import numpy as np

from indexes.sparse import stems
from indexes.store_protocol import Store

from engine.core.querylog import QueryLog
from engine.core.settings import EvidenceSettings
from engine.evidence.confidence import Calibration, Concept, candidate_chunks, chunk_cosines, signals
from engine.evidence.dictionary import Match
from engine.evidence.maps import Group, Maps, page_directory
from engine.evidence.schema import EvidenceRequest
from engine.refind.search import SearchFilters, SearchRequest, SearchService

# A round within a list of pages (the request's, or those the maps noted) asks for them all, up to this.
LIST_ROUND_K = 50

# How a source was reached, by the kind of round that found it (a source's `route`; its `type` is the
# seed's raw_copy: every excerpt is quoted from the page itself).
ROUTES = {"sibling": "sibling", "map": "map", "pages": "page_list"}


@dataclass
class RoundSpec:
    kind: str          # query | canonical | alias | colloquial | related | drop_specific | keywords | sibling
                       # | map | pages
    query: str
    within: Group | None = None


@dataclass
class Sub:
    index: int
    query: str
    matches: list[Match]
    plan: deque
    concepts: dict[str, list[str]]
    vector: np.ndarray
    concept_stems: list[Concept] = field(default_factory=list)
    maps: list[tuple[Group, float]] = field(default_factory=list)
    rounds: list[dict] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    high: set[str] = field(default_factory=set)
    explored: set[str] = field(default_factory=set)
    noted: list = field(default_factory=list)          # (MapNote, cosine): what earlier searches wrote
    neighbours: dict[str, list[tuple[str, float]]] = field(default_factory=dict)   # word -> corpus words
    termination: str | None = None


def forms(word: str) -> list[str]:
    """A word's other number and its stem (as a prefix pattern): the forms the sparse arm matches
    through its stemmer, listed for the reader."""
    w = word.lower()
    if w.endswith("ies") and len(w) > 4:
        other = w[:-3] + "y"
    elif w.endswith(("ses", "xes", "ches", "shes")):
        other = w[:-2]
    elif w.endswith("s") and not w.endswith("ss") and len(w) > 3:
        other = w[:-1]
    elif w.endswith("y") and len(w) > 2 and w[-2] not in "aeiou":
        other = w[:-1] + "ies"
    elif w.endswith(("s", "x", "ch", "sh")):
        other = w + "es"
    else:
        other = w + "s"
    st = (stems(w) or [w])[0]
    out = [w, other]
    if st not in out:
        out.append(st + "*")
    return out


def _replace_span(text: str, m: Match, by: str) -> str:
    """`text` with the words of match `m` replaced (the match's words, in any case and forms)."""
    toks = list(re.finditer(r"[^\W_]+", text))
    if m.end > len(toks):
        return text
    a, b = toks[m.start].start(), toks[m.end - 1].end()
    return text[:a] + by + text[b:]


def bridged(query: str, matches: list[Match]) -> str:
    """The query with every alias or colloquial surface replaced by its canonical term."""
    out = query
    for m in sorted(matches, key=lambda m: -m.start):
        if m.kind in ("alias", "colloquial"):
            out = _replace_span(out, m, m.entry.term)
    return out


class RoundOwner(Protocol):
    """What a call's rounds use of the searcher that runs them (EvidenceSearch)."""
    store: Store
    querylog: QueryLog
    pages: SearchService
    settings: EvidenceSettings
    calibration: Calibration

    def neighbours_round(self, sub: Sub, workspace: str, model: str) -> RoundSpec | None: ...


class Run:
    """One call's rounds: what was scanned, read and found."""

    def __init__(self, owner: RoundOwner, req: EvidenceRequest, workspace: str, model: str, k: int,
                 maps: Maps, known: set[str], query_id: str, scopes: tuple[str, ...] | None = None):
        self.owner, self.req, self.workspace, self.model, self.k = owner, req, workspace, model, k
        self.scopes = scopes
        self.maps, self.known, self.query_id = maps, known, query_id
        self.sources: dict[str, dict] = {}      # page id -> source (new to the packet)
        self.refound: list[str] = []
        self.patterns: list[dict] = []
        self.scanned = 0
        self.lines = 0
        self.directories: set[str] = set()   # the folders the scanned pages sit in
        self.domains: set[str] = set()
        self.first_via: str | None = None
        self.urls: dict[str, str] = {}
        self.n = 0

    def _filters(self, within: Group | None) -> SearchFilters | None:
        """The request's filters, narrowed to the group a sibling or map round looks within."""
        base = self.req.filters.model_dump(exclude_none=True) if self.req.filters else {}
        if within is not None:
            narrow = within.filters()  # allowed(): a domain or cluster group lies inside the request's filters
            if "page_id" in narrow and "page_id" in base:   # a page list within the request's own list
                allowed = set(base["page_id"])
                narrow["page_id"] = [p for p in narrow["page_id"] if p in allowed]
            base.update(narrow)
        return SearchFilters(**base) if base else None

    def allowed(self, group: Group) -> bool:
        """Whether a group lies inside the request's own domain / cluster filters (a sibling or map
        round never widens what the caller asked to search)."""
        f = self.req.filters
        if f is None:
            return True
        if group.kind == "domain" and f.domain:
            return group.value in {d.strip().lower().removeprefix("www.") for d in f.domain}
        if group.kind == "cluster" and f.cluster_id:
            return int(group.value) in set(f.cluster_id)
        return True

    def lines_of(self, text: str) -> int:
        w = self.owner.settings.line_width
        return sum(max(1, math.ceil(len(line) / w)) for line in text.splitlines()) or 1

    def one_round(self, sub: Sub, spec: RoundSpec) -> dict:
        self.n += 1
        k = self.k
        if spec.within is not None:  # look past what was already found there: the siblings
            members = set(spec.within.pages)
            k += sum(1 for p in sub.sources if p in members)
            if spec.within.kind in ("pages", "notes"):   # a list of pages known to matter: read them all
                k = max(k, min(len(members), LIST_ROUND_K))
        req = SearchRequest(query=spec.query[:2000], k=min(k, 200), workspace=self.workspace, pin=False,
                            explain=True, filters=self._filters(spec.within))
        trace: dict = {}
        resp = self.owner.pages.search(req, log=False, trace=trace, scopes=self.scopes)
        entry = self.owner.pages.log_entry("evidence_round", req, resp, trace)
        entry.params |= {"evidence_query_id": self.query_id, "round": self.n}
        self.owner.querylog.record(entry)
        cosines = chunk_cosines(self.owner.store, self.model, sub.vector,
                                [c for h in resp.pages for c in candidate_chunks(h)])
        cal = self.owner.calibration
        new_here, above = [], 0
        for hit in resp.pages:
            self.scanned += 1
            self.directories.add(page_directory(hit.url))
            self.domains.add(hit.domain or "")
            sig = signals(hit, sub.concept_stems, cosines)
            p, level = cal.assess(sig)
            if level is None:
                continue
            above += 1
            pid = hit.page_id
            self.urls[pid] = hit.url
            if pid not in sub.sources:
                sub.sources.append(pid)
                new_here.append(pid)
            if level == "high":
                sub.high.add(pid)
            if pid in self.known:
                if hit.url not in self.refound:
                    self.refound.append(hit.url)
                continue
            if pid in self.sources:
                src = self.sources[pid]
                if p > src["p"]:
                    src.update(p=round(p, 4), confidence=level, signals=sig.as_dict())
                continue
            self.sources[pid] = self._source(hit, p, level, sig, spec, sub)
        rec = {"round": self.n, "sub_query": sub.index, "kind": spec.kind, "pattern": spec.query,
               "within": spec.within.key if spec.within else None, "matches": len(resp.pages),
               "sources": above, "new_sources": len(new_here)}
        sub.rounds.append(rec)
        self.patterns.append(rec)
        return rec

    def _source(self, hit, p: float, level: str, sig, spec: RoundSpec, sub: Sub) -> dict:
        """A source this call found first: its excerpt (counted against the line budget), the route and
        round that found it, and its confidence with the signals behind it."""
        sn = hit.snippets[0] if hit.snippets else None
        excerpt = (sn.text if sn else "")[: self.owner.settings.excerpt_chars]
        self.lines += self.lines_of(excerpt)
        if self.first_via is None:
            self.first_via = "map" if spec.kind == "map" else "raw"
        return {
            "page_id": hit.page_id, "path": hit.url, "title": hit.title, "domain": hit.domain, "type": "raw_copy",
            "route": ROUTES.get(spec.kind, "search_hit"),
            "excerpt": excerpt, "section": " > ".join(sn.section_path) if sn else "",
            "char_start": sn.char_start if sn else 0, "char_end": sn.char_end if sn else 0,
            "confidence": level, "p": round(p, 4), "signals": sig.as_dict(), "round": self.n,
            "kind": spec.kind, "found_by": spec.query, "within": spec.within.key if spec.within else None,
            "sub_query": sub.index}

    def explore(self, sub: Sub, rec: dict, spec: RoundSpec) -> None:
        """Insert a sibling round for the best new source's folder or cluster, or a map round when a
        sub-query's first round found nothing."""
        whole = self.maps.pages
        if rec["new_sources"] and self.req.siblings and spec.kind not in ("sibling", "map", "pages"):
            ranked = sorted((p for p in sub.sources[-rec["new_sources"]:]),
                            key=lambda p: -(self.sources.get(p, {}).get("p", 0.0)))
            for pid in ranked:
                g = self.maps.neighbourhood(pid)   # its folder, else its domain, else its cluster
                if g is not None and g.key not in sub.explored and 1 < len(g.pages) < whole and self.allowed(g):
                    sub.explored.add(g.key)
                    sub.plan.appendleft(RoundSpec("sibling", spec.query, g))
                    return
        candidates = [g for g, _ in sub.maps if self.allowed(g)]
        if len(sub.rounds) == 1 and not sub.sources:
            g = candidates[0] if candidates else None
            if g is not None and len(g.pages) < whole and g.key not in sub.explored:
                sub.explored.add(g.key)
                sub.plan.appendleft(RoundSpec("map", spec.query, g))
            else:   # no map to turn to: the corpus's own words next (before diminishing returns ends it)
                lazy = next((r for r in sub.plan if r.kind == "neighbours" and not r.query), None)
                if lazy is not None:
                    sub.plan.remove(lazy)
                    sub.plan.appendleft(lazy)

    def rounds(self, subs: list[Sub], max_rounds: int, budget: int, min_high: int, after_round=None) -> str:
        """Sub-queries take turns, a round each. After a round the seed's checks run in order:
        (a) sufficient evidence and (b) diminishing returns end that sub-query; (c) the token budget
        and (d) max rounds end the call. Returns why the search ended: the reason of the sub-query
        that finished last, or (c)/(d) when they cut off sub-queries still searching."""
        active = deque(subs)
        last = "full"
        while active:
            sub = active.popleft()
            spec = sub.plan.popleft()
            if spec.kind == "neighbours" and not spec.query:   # drawn now, or skipped when nothing is near
                thin = not sub.sources or self.owner.settings.vocabulary_round == "always"
                spec = self.owner.neighbours_round(sub, self.workspace, self.model) if thin else None
                if spec is None:
                    if sub.plan:
                        active.appendleft(sub)
                    else:
                        sub.termination = last = "full"
                    continue
            rec = self.one_round(sub, spec)
            if len(sub.high) >= min_high:
                sub.termination = "sufficient_evidence"
            elif len(sub.rounds) >= 2 and sub.rounds[-1]["new_sources"] == 0 and sub.rounds[-2]["new_sources"] == 0:
                sub.termination = "diminishing_returns"
            overall = "token_budget" if self.lines > budget else "max_rounds" if self.n >= max_rounds else None
            if not sub.termination and not overall:
                self.explore(sub, rec, spec)
                if not sub.plan:
                    sub.termination = "full"
            if after_round is not None:
                after_round()
            if overall:
                cut = [x for x in (sub, *active) if not x.termination]
                for x in cut:
                    x.termination = overall
                return overall if cut else sub.termination
            if sub.termination:
                last = sub.termination
            else:
                active.append(sub)
        return last

    def call_record(self, number: int, subs: list[Sub], dec, termination: str, maps_accessed: list[str],
                    query: str) -> dict:
        """This call's record in the packet's state: the `number`-th search of the session."""
        sources = list(self.sources.values())
        gaps = []
        for sub in subs:
            if not sub.sources:
                gaps.append(f"no source for: {sub.query}")
                continue
            seen = set()
            for pid in sub.sources:
                src = self.sources.get(pid)
                if src:
                    seen |= set(stems(src["excerpt"])) | set(stems(src["title"] or ""))
            for term, exp in sub.concepts.items():
                alts = [term, *[e.rstrip("*") for e in exp]]
                if not any(set(stems(a)) and set(stems(a)) <= seen or a in seen for a in alts):
                    gaps.append(f"{term!r} appears in no source's excerpt")
        expansions: dict[str, list[str]] = {}
        sources_of: dict[str, dict[str, str]] = {}   # where each expansion came from
        for sub in subs:
            from_dictionary = {m.surface for m in sub.matches}
            for term, exp in sub.concepts.items():
                expansions.setdefault(term, list(exp))
                for e in exp:
                    sources_of.setdefault(term, {}).setdefault(e, "dictionary" if term in from_dictionary else "forms")
            for term, near in sub.neighbours.items():
                expansions.setdefault(term, [])
                for t, cos in near:
                    if t not in expansions[term]:
                        expansions[term].append(t)
                    sources_of.setdefault(term, {})[t] = f"embedding (cosine {cos:.2f})"
        failed = [p["pattern"] for p in self.patterns if p["sources"] == 0]
        nav_path = "page_list → raw_file" if self.req.pages is not None else \
            "overview → group_map → raw_file" if any(sub.maps for sub in subs) else (
                "overview → raw_file" if self.maps.pages else "raw_file")
        return {
            "n": number, "query_id": self.query_id, "query": query, "date": date.today().isoformat(),
            "navigation": {
                "maps_accessed": maps_accessed, "navigation_path": nav_path, "raw_files_scanned": self.scanned,
                "raw_files_read": len(sources), "directories_seen": len(self.directories),
                "domains_seen": len(self.domains), "lines_read": self.lines,
                "evidence_found_in": self.first_via or "raw", "search_rounds": self.n,
                "search_termination": termination},
            "decomposition": {
                "signal": dec.signal if dec else None,
                "sub_queries": [{"query": sub.query,
                                 "sources": [self.urls[p] for p in sub.sources],
                                 "rounds": len(sub.rounds), "termination": sub.termination,
                                 "maps": [{"map": g.path, "cosine": round(c, 4)} for g, c in sub.maps]}
                                for sub in subs]},
            "scratchpad_state": {"rounds_completed": self.n, "failed_searches": failed, "gaps_remaining": gaps},
            "keyword_expansions": expansions, "expansion_sources": sources_of, "patterns": self.patterns,
            "sources": sources,
            "refound": self.refound,
        }
