"""EvidenceSearch.search — seed 002's searcher workflow over the engine.

    dictionary ─▶ maps (or a known page list) ─▶ decompose ─▶ rounds (one expanded term each; early-stop
    checks; the packet written after every round) ─▶ packet ─▶ map_write (when granted)

A round is one run of the hybrid pipeline (BM25 + dense, RRF) for one expanded form of a sub-query,
k pages, explain on. Every page it returns is scanned; a page whose calibrated confidence reaches the
low threshold is a source, and its best passage is read (its lines count against the line budget).
The round plan of a sub-query: its words with dictionary surfaces replaced by their canonical terms;
then each alias, colloquial surface and related term in turn; then, broadening, the sub-query without
its most specific word (the one fewest chunks hold), its words with their nearest corpus words (the
*vocabulary* round: by default only while the sub-query has found no source) and its content words
alone. Rounds inserted ahead of the plan: a *pages* round within the request's own page list (the
maps are then not consulted); a *map* round within the pages earlier searches wrote into the maps
for a question like this one (map_write); a *sibling* round (the same words within the folder,
domain or cluster of a new source not yet explored there); and a *map* round when a sub-query's first
round found nothing (the same words within the group its maps put nearest the question).
"""
from __future__ import annotations

import math
import re
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from datetime import date

import numpy as np
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from engine.core.clock import utcnow
from engine.core.corpus import Corpus
from engine.core.errors import EngineError
from engine.core.faults import maybe_crash
from engine.core.querylog import LogEntry
from engine.core.urls import InvalidURL, normalize_url
from engine.refind.search import SearchFilters, SearchRequest, SearchService
from engine.evidence.confidence import LEVELS, Calibration, Concept, candidate_chunks, chunk_cosines, load_calibration, signals
from engine.evidence.decompose import content_words, decompose
from engine.evidence.dictionary import Dictionary, DictionaryError, Match, load_dictionary
from engine.evidence.maps import Group, Maps, slug, workspace_maps
from engine.evidence.packet import adopt_legacy, load_state, names, new_state, packet_dir, packet_lock, write_packet
from engine.evidence.vocabulary import corpus_vocabulary, unit
from indexes.sparse import stems

SESSION = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,79}$"
# A round within a list of pages (the request's, or those the maps noted) asks for them all, up to this.
LIST_ROUND_K = 50


class DictionaryInvalid(EngineError):
    status, type = 422, "dictionary_invalid"


class PacketNotFound(EngineError):
    status, type = 404, "packet_not_found"


def workspace_dictionary(corpus: Corpus, workspace: str) -> Dictionary:
    """The workspace's own dictionary plus the configured packs' vocabularies (422 when unreadable)."""
    packs = list(corpus.settings.evidence.packs)
    if packs == ["workspace"]:  # the packs of the relation workspace of the same id, if there is one
        rel = corpus.relations.workspace(workspace)
        packs = list(rel["packs"]) if rel else []
    try:
        return load_dictionary(corpus.settings.dictionary_dir, workspace, packs)
    except DictionaryError as exc:
        raise DictionaryInvalid(f"the dictionary of workspace {workspace!r} cannot be read: {exc}",
                                workspace=workspace) from exc


def packet_visible(state: dict, workspace: str | None, scopes: tuple[str, ...] | None) -> bool:
    """Whether a caller in `workspace` reading `scopes` (None: every document) may read or extend a
    packet: same workspace, and the packet was written from no more than the scopes it reads."""
    if workspace is not None and state["workspace"] != workspace:
        return False
    written = state.get("scopes")
    return scopes is None or (written is not None and set(written) <= set(scopes))


class EvidenceRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    query: str = Field(min_length=1, max_length=2000, description="The question to gather evidence for.")
    workspace: str | None = Field(default=None, max_length=200)
    session_id: str | None = Field(default=None, pattern=SESSION, description=(
        "Names the packet (evidence_packet_{session_id}.md); a later call with the same session appends to "
        "it. Letters, digits, _ and -; a new id is made when absent."))
    topic: str | None = Field(default=None, min_length=1, max_length=120, description=(
        "For parallel searchers of one session: the packet becomes evidence_packet_{session_id}_{topic-slug}.md."))
    max_rounds: int | None = Field(default=None, ge=1, le=20,
                                   description="Searches in this call, all sub-queries together.")
    k: int | None = Field(default=None, ge=1, le=50, description="Pages each round asks of the search pipeline.")
    line_budget: int | None = Field(default=None, ge=1, le=1_000_000,
                                    description="Lines of excerpts read before stopping.")
    min_high_sources: int | None = Field(default=None, ge=1, le=50, description=(
        "High-confidence sources (distinct pages) that are sufficient evidence for a sub-query."))
    decompose: bool = Field(default=True, description="Split comparative or multi-part questions into sub-queries.")
    siblings: bool = Field(default=True, description="Explore the folder or cluster of a new source.")
    filters: SearchFilters | None = Field(default=None, description="Restrictions applied to every round.")
    pages: list[str] | None = Field(default=None, max_length=1000, description=(
        "Pages already known to matter (page ids or URLs): each sub-query searches within them first and the "
        "maps are not consulted (the seed: skip the maps when the graph already gave a precise file list). "
        "Names the workspace does not hold are listed in the packet as `pages_unknown`."))
    route_constraints: list[Literal["map_write"]] = Field(default_factory=list, max_length=10, description=(
        "Permissions the caller grants the search. \"map_write\": write what this call found (each new "
        "source, the sub-query that found it, its group) into the workspace's group maps, where the next "
        "call's map consultation reads it. Off by default."))

    @field_validator("topic")
    @classmethod
    def _topic(cls, v):
        if v is not None and not slug(v):
            raise ValueError("topic needs at least one letter or digit")
        return v


class EvidenceResponse(BaseModel):
    query_id: str
    session_id: str
    path: str = Field(description="The packet, relative to the data dir (agent_reports/…).")
    file: str = Field(exclude=True, description="The packet's absolute path: for local callers (the CLI prints "
                      "it), never serialised into a reply, which names `path` relative to the data dir.")
    appendix_path: str | None = None
    reports_written: int
    sources_found: int = Field(description="Sources in the packet (every call of the session so far).")
    new_sources: int = Field(description="Sources this call added.")
    confidence: dict[str, int]
    key_themes: str
    navigation: dict
    summary: str = Field(description="The seed's return text for an orchestrator.")


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


class EvidenceSearch:
    def __init__(self, corpus: Corpus, pages: SearchService, calibration: Calibration | None = None,
                 settings=None):
        """`settings` overrides the corpus's [evidence] settings."""
        self.corpus = corpus
        self.pages = pages
        self.settings = settings or corpus.settings.evidence
        self.calibration = calibration or load_calibration()
        # packets go where these settings say (a settings override may name its own folder)
        self.reports_dir = corpus.settings.model_copy(update={"evidence": self.settings}).reports_dir

    def session_state(self, workspace: str, session_id: str, topic: str | None = None,
                      scopes: tuple[str, ...] | None = None) -> dict | None:
        """A session's state (every call, every source), as written beside its packet (None: none)."""
        scopes = tuple(sorted(set(scopes))) if scopes else None
        name, _ = names(session_id, slug(topic) if topic else None)
        return load_state(packet_dir(self.reports_dir, workspace, scopes), name)

    # Preparation -------------------------------------------------------------------------------
    def dictionary(self, workspace: str) -> Dictionary:
        return workspace_dictionary(self.corpus, workspace)

    def plan(self, query: str, matches: list[Match]) -> deque:
        q1 = bridged(query, matches)
        plan = deque([RoundSpec("canonical" if q1 != query else "query", q1)])
        seen = {q1.lower()}
        alternatives = []
        for m in matches:
            alts = [(a, "alias") for a in m.entry.aliases] + [(c, "colloquial") for c in m.entry.colloquial]
            alts += [(r, "related") for r in m.entry.related]
            alternatives.append([(a, k) for a, k in alts if stems(a) != stems(m.surface)])
        for i in range(max((len(a) for a in alternatives), default=0)):
            for m, alts in zip(matches, alternatives):
                if i < len(alts):
                    term, kind = alts[i]
                    q = bridged(_replace_span(query, m, term), [x for x in matches if x is not m])
                    if q.lower() not in seen:
                        seen.add(q.lower())
                        plan.append(RoundSpec(kind, q))
        words = content_words(q1)
        protected = {s for m in matches for s in stems(m.entry.term)}
        droppable = [w for w in dict.fromkeys(words) if (stems(w) or [w])[0] not in protected]
        if len(words) >= 3 and droppable:
            df = self.corpus.sparse.doc_freqs(droppable)
            rare = min(droppable, key=lambda w: (df[w], -len(w), w))
            q = re.sub(rf"\b{re.escape(rare)}\b", "", q1, count=1, flags=re.I)
            q = " ".join(q.split())
            if q.lower() not in seen and content_words(q):
                seen.add(q.lower())
                plan.append(RoundSpec("drop_specific", q))
        kw = " ".join(words)
        if words and kw.lower() not in seen and kw.lower() != " ".join(q1.lower().split()):
            plan.append(RoundSpec("keywords", kw))
        return plan

    def concepts(self, query: str, matches: list[Match]) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        covered = set()
        for m in matches:
            e = m.entry
            exp = [x for x in [e.term, *e.aliases, *e.colloquial, *e.related] if x.lower() != m.surface.lower()]
            out[m.surface] = exp
            covered |= set(stems(m.surface))
        for w in content_words(query):
            if (stems(w) or [w])[0] not in covered and w not in out:
                out[w] = [f for f in forms(w) if f != w]
        return out

    @staticmethod
    def concept_stems(concepts: dict[str, list[str]]) -> list[Concept]:
        """Each concept as the stem sequences that meet it: its surface and every expansion."""
        out: list[Concept] = []
        for term, exp in concepts.items():
            alts = []
            for a in [term, *(e for e in exp if not e.endswith("*"))]:  # a stem pattern is the word's own
                st = tuple(stems(a))
                if st and st not in alts:
                    alts.append(st)
            if alts:
                out.append(alts)
        return out

    # The verb ----------------------------------------------------------------------------------
    def search(self, req: EvidenceRequest, scopes: tuple[str, ...] | None = None) -> EvidenceResponse:
        """`scopes`: the document scopes of the caller's key (None: every document). Every round is
        restricted to them, no map is consulted (maps are drawn over every document), and the packet
        records them: only a key reading at least those scopes may read or extend it."""
        t0 = time.perf_counter()
        scopes = tuple(sorted(set(scopes))) if scopes else None
        corpus, s = self.corpus, self.settings
        workspace = req.workspace or corpus.settings.default_workspace
        model = corpus.settings.models.active
        max_rounds = req.max_rounds or s.max_rounds
        k = req.k or s.round_k
        budget = req.line_budget or s.line_budget
        min_high = req.min_high_sources or s.min_high_sources
        session_id = req.session_id or uuid.uuid4().hex[:12]
        topic_slug = slug(req.topic) if req.topic else None
        query_id = uuid.uuid4().hex

        dictionary = self.dictionary(workspace)
        listed, unknown = self.resolve_pages(req.pages, workspace, scopes) if req.pages is not None else (None, [])
        # a key with document scopes reads no map (they are drawn over every document); a request that
        # names its pages needs none (the seed: skip the maps when the file list is already precise)
        drawn = scopes is None and listed is None
        maps = workspace_maps(corpus, workspace, model) if drawn else Maps(workspace, -1, "", 0)
        embedder = corpus.embedder(model)

        def unit(text: str) -> np.ndarray:
            v = np.asarray(embedder.encode_query(text), dtype=np.float32)
            n = float(np.linalg.norm(v))
            return v / n if n else v

        def similarity(parts: list[str]) -> list[float]:
            vs = [unit(p) for p in parts]
            return [float(vs[i] @ vs[i + 1]) for i in range(len(vs) - 1)]

        dec = decompose(req.query, similarity, s.distinct_max) if req.decompose else None
        sub_texts = dec.sub_queries if dec else [req.query]
        subs: list[Sub] = []
        maps_accessed: list[str] = [maps.overview_path] if maps.pages else []
        for i, text in enumerate(sub_texts):
            matches = dictionary.lookup(text)
            concepts = self.concepts(text, matches)
            sub = Sub(i, text, matches, self.plan(text, matches), concepts, unit(text),
                      self.concept_stems(concepts))
            sub.maps = maps.rank(sub.vector)[: s.maps_consulted]
            first = sub.plan[0].query
            sub.noted = maps.noted(sub.vector, s.map_note_min_cosine)[: s.map_note_pages]
            if sub.noted:   # pages earlier searches wrote into the maps for a question like this one: first
                written = []
                for note, cos in sub.noted:
                    g = maps.group(note.group_key) or maps.group("found:retrieval")
                    if g is not None and all(g is not x for x, _ in written):
                        written.append((g, cos))
                sub.maps = written + [(g, c) for g, c in sub.maps if all(g is not x for x, _ in written)]
                sub.plan.appendleft(RoundSpec("map", first, Group(
                    "notes", f"sub-query {i}", "pages written into the maps for questions like this one",
                    [n.page_id for n, _ in sub.noted], "")))
            if s.vocabulary_neighbours > 0:   # drawn when the plan gets there (most calls stop before)
                at = next((j for j, r in enumerate(sub.plan) if r.kind == "keywords"), len(sub.plan))
                sub.plan.insert(at, RoundSpec("neighbours", ""))
            if listed:
                sub.plan.appendleft(RoundSpec("pages", first, Group("pages", "request", "the request's pages",
                                                                    listed, "")))
            maps_accessed += [g.path for g, _ in sub.maps if g.path not in maps_accessed]
            subs.append(sub)

        packet_name, _ = names(session_id, topic_slug)
        # each workspace, and each set of scopes a key reads, has its own sessions (its own folder): an
        # id another caller used is simply a new session here, so nothing tells that it was used
        folder = packet_dir(self.reports_dir, workspace, scopes)
        with packet_lock(folder / packet_name):
            adopt_legacy(self.reports_dir, folder, packet_name, workspace, scopes)
            state = load_state(folder, packet_name)
            if state is not None and not packet_visible(state, workspace, scopes):
                raise PacketNotFound(f"no evidence session {session_id!r} in workspace {workspace!r}",
                                     ref=session_id)   # a state file moved in by hand, not by this engine
            state = state or new_state(session_id, req.topic, topic_slug, workspace, req.topic or req.query)
            state["scopes"] = None if scopes is None else list(scopes)
            known = {src["page_id"] for c in state["calls"] for src in c["sources"]}
            run = _Run(self, req, workspace, model, k, maps, known, query_id, scopes)
            extra = {"pages_listed": len(listed), "pages_unknown": unknown} if listed is not None else {}
            slot = len(state["calls"])
            state["calls"].append(None)

            def checkpoint(termination: str, map_write: dict | None = None) -> dict:
                """The call so far into the state and the packet (each file replaced atomically): after
                every round, so a call cut short leaves a valid packet of the rounds it finished."""
                call = run.call_record(slot + 1, subs, dec, termination, maps_accessed, req.query)
                call["navigation"].update(extra)
                if map_write is not None:
                    call["navigation"]["map_write"] = map_write
                state["calls"][slot] = call
                return write_packet(folder, state, s.split_chars)

            def after_round() -> None:
                checkpoint("in_progress")
                maybe_crash(f"evidence_round:{run.n}")   # test-only (engine/core/faults.py)

            termination = run.rounds(subs, max_rounds, budget, min_high, after_round)
            written = self.write_maps(run, subs, workspace, session_id, query_id, scopes) \
                if "map_write" in req.route_constraints else None
            paths = checkpoint(termination, written)
            call = state["calls"][slot]
        return self._reply(state, call, paths, query_id, session_id, run, t0)

    def resolve_pages(self, items: list[str], workspace: str, scopes: tuple[str, ...] | None
                      ) -> tuple[list[str], list[str]]:
        """A request's `pages` (page ids or URLs) as the workspace's page ids the caller may read, in
        the order given, and the names that are none of them (unknown, or outside the caller's scopes:
        the two are not told apart)."""
        store = self.corpus.store
        candidates: dict[str, list[str]] = {}
        for item in dict.fromkeys(items):
            try:
                by_url = store.pages_with_url(workspace, normalize_url(item))
            except InvalidURL:
                by_url = []
            candidates[item] = [item, *by_url]
        readable = set(store.filtered_pages(workspace, scopes=list(scopes) if scopes is not None else None,
                                            page_ids=[c for cs in candidates.values() for c in cs]))
        found = [c for cs in candidates.values() for c in cs if c in readable]
        unknown = [item for item, cs in candidates.items() if not any(c in readable for c in cs)]
        return list(dict.fromkeys(found)), unknown

    def neighbours_round(self, sub: Sub, workspace: str, model: str) -> RoundSpec | None:
        """One more broadening round: the sub-query's words (those no dictionary entry covers) with each
        one's nearest corpus words by the embedder; None when none is near enough."""
        s = self.settings
        covered = {st for m in sub.matches for st in stems(m.surface)}
        own = content_words(sub.query)
        exclude = {(stems(w) or [w])[0] for w in own} | covered
        vocab = corpus_vocabulary(self.corpus, workspace, model)
        embedder = self.corpus.embedder(model)
        for w in dict.fromkeys(own):
            if (stems(w) or [w])[0] in covered:
                continue
            near = vocab.nearest(unit(embedder.encode_query(w)), exclude, s.vocabulary_neighbours,
                                 s.vocabulary_min_cosine)
            if near:
                sub.neighbours[w] = near
                exclude |= {(stems(t) or [t])[0] for t, _ in near}
        if not sub.neighbours:
            return None
        terms = [t for near in sub.neighbours.values() for t, _ in near]
        return RoundSpec("neighbours", " ".join(content_words(bridged(sub.query, sub.matches)) + terms))

    def write_maps(self, run: "_Run", subs: list[Sub], workspace: str, session_id: str, query_id: str,
                   scopes: tuple[str, ...] | None) -> dict:
        """map_write: this call's new sources into the workspace's group maps (one version)."""
        if scopes is not None:
            return {"granted": True, "version": None, "notes": 0,
                    "reason": "a key with document scopes writes no maps (they are read over every document)"}
        rows = []
        for src in run.sources.values():
            sub = subs[src["sub_query"]]
            g = run.maps.neighbourhood(src["page_id"])
            rows.append({"group_key": g.key if g is not None else "found:retrieval", "page_id": src["page_id"],
                         "url": src["path"], "title": src["title"], "sub_query": sub.query, "vector": sub.vector,
                         "confidence": src["confidence"], "session_id": session_id, "query_id": query_id})
        version = self.corpus.map_notes.write(workspace, rows, utcnow())
        out = {"granted": True, "version": version or None, "notes": len(rows)}
        if rows:
            maps = workspace_maps(self.corpus, workspace, run.model)   # drawn again with the notes
            out["maps"] = sorted({(maps.group(r["group_key"]) or maps.group("found:retrieval")).path for r in rows})
        return out

    def _reply(self, state, call, paths, query_id, session_id, run, t0) -> EvidenceResponse:
        corpus = self.corpus
        sources = [src for c in state["calls"] for src in c["sources"]]
        conf = {lvl: sum(1 for x in sources if x["confidence"] == lvl) for lvl in LEVELS}
        def shown(p):  # relative to the data dir when the reports live under it
            return str(p.relative_to(corpus.data_dir) if p.is_relative_to(corpus.data_dir) else p)

        rel = shown(paths["packet"])
        app = paths["appendix"]
        app_rel = None if app is None else shown(app)
        nav = dict(call["navigation"])
        nav["maps_accessed"] = len(nav["maps_accessed"])
        top = sorted(sources, key=lambda x: (-x["p"], x["path"]))[:3]
        groups: dict[str, int] = {}
        for x in sources:
            groups[x["domain"] or "?"] = groups.get(x["domain"] or "?", 0) + 1
        themes = ("No source gave evidence." if not sources else
                  "Top sources: " + "; ".join(f"\"{x['title'] or x['path']}\" ({x['confidence']})" for x in top)
                  + ". Found in: " + ", ".join(f"{d} ({n})" for d, n in sorted(groups.items(), key=lambda t: -t[1])[:3])
                  + ".")
        summary = (f"Evidence written to {rel}\n- Sources found: {len(sources)}\n"
                   f"- Confidence breakdown: {conf['high']} high, {conf['medium']} medium, {conf['low']} low\n"
                   f"- Key themes: {themes}\n"
                   f"- Navigation: {nav['maps_accessed']} maps accessed, {nav['raw_files_scanned']} files scanned, "
                   f"{nav['raw_files_read']} files read, found via {nav['evidence_found_in']}")
        resp = EvidenceResponse(
            query_id=query_id, session_id=session_id, path=str(rel), file=str(paths["packet"]),
            appendix_path=app_rel, reports_written=1 + (app is not None), sources_found=len(sources),
            new_sources=len(call["sources"]), confidence=conf, key_themes=themes, navigation=nav, summary=summary)
        timings = {"total": round((time.perf_counter() - t0) * 1000, 3)}
        corpus.querylog.record(LogEntry(
            query_id=query_id, endpoint="evidence", workspace=state["workspace"], query=call["query"],
            params=run.req.model_dump(mode="json", exclude_none=True) | {"session_id": session_id},
            models=[run.model], timings=timings, total=nav["raw_files_scanned"], returned=len(call["sources"]),
            results=[(run.model, i, x["page_id"], x["p"], None) for i, x in enumerate(call["sources"], start=1)]))
        return resp


class _Run:
    """One call's rounds: what was scanned, read and found."""

    def __init__(self, owner: EvidenceSearch, req: EvidenceRequest, workspace: str, model: str, k: int,
                 maps: Maps, known: set[str], query_id: str, scopes: tuple[str, ...] | None = None):
        self.owner, self.req, self.workspace, self.model, self.k = owner, req, workspace, model, k
        self.scopes = scopes
        self.maps, self.known, self.query_id = maps, known, query_id
        self.sources: dict[str, dict] = {}      # page id -> source (new to the packet)
        self.refound: list[str] = []
        self.patterns: list[dict] = []
        self.scanned = 0
        self.lines = 0
        self.directories: set[str] = set()
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
        self.owner.corpus.querylog.record(entry)
        cosines = chunk_cosines(self.owner.corpus, self.model, sub.vector,
                                [c for h in resp.pages for c in candidate_chunks(h)])
        cal = self.owner.calibration
        new_here, above = [], 0
        for hit in resp.pages:
            self.scanned += 1
            self.directories.add(hit.domain or "")
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
            sn = hit.snippets[0] if hit.snippets else None
            excerpt = (sn.text if sn else "")[: self.owner.settings.excerpt_chars]
            self.lines += self.lines_of(excerpt)
            route = ROUTES.get(spec.kind, "search_hit")
            if self.first_via is None:
                self.first_via = "map" if spec.kind == "map" else "raw"
            self.sources[pid] = {
                "page_id": pid, "path": hit.url, "title": hit.title, "domain": hit.domain, "type": "raw_copy",
                "route": route,
                "excerpt": excerpt, "section": " > ".join(sn.section_path) if sn else "",
                "char_start": sn.char_start if sn else 0, "char_end": sn.char_end if sn else 0,
                "confidence": level, "p": round(p, 4), "signals": sig.as_dict(), "round": self.n,
                "kind": spec.kind, "found_by": spec.query, "within": spec.within.key if spec.within else None,
                "sub_query": sub.index}
        rec = {"round": self.n, "sub_query": sub.index, "kind": spec.kind, "pattern": spec.query,
               "within": spec.within.key if spec.within else None, "matches": len(resp.pages),
               "sources": above, "new_sources": len(new_here)}
        sub.rounds.append(rec)
        self.patterns.append(rec)
        return rec

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
                "raw_files_read": len(sources), "directories_seen": len(self.directories), "lines_read": self.lines,
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
