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

import time
import uuid
from typing import Callable

import numpy as np

from engine.core.identity import named_workspace
from engine.core.clock import utcnow
from engine.core.corpus import Corpus
from engine.core.errors import EngineError
from engine.core.faults import maybe_crash
from engine.core.querylog import LogEntry
from engine.core.urls import InvalidURL, normalize_url
from engine.evidence.confidence import LEVELS, Calibration, load_calibration
from engine.evidence.decompose import content_words, decompose
from engine.evidence.dictionary import Dictionary, DictionaryError, VocabularyAxis, load_dictionary
from engine.evidence.maps import Maps, slug, workspace_maps
from engine.evidence.planning import Planning
from engine.evidence.packet import adopt_legacy, load_state, names, new_state, packet_dir, packet_lock, write_packet
from engine.evidence.rounds import RoundSpec, Run, Sub, bridged
# the wire schemas live in engine/evidence/schema.py; the faces import them from here too
from engine.evidence.schema import SESSION, EvidenceRequest, EvidenceResponse  # noqa: F401
from engine.evidence.vocabulary import corpus_vocabulary, unit
from engine.refind.search import SearchService
from indexes.sparse import stems



class DictionaryInvalid(EngineError):
    status, type = 422, "dictionary_invalid"


class PacketNotFound(EngineError):
    status, type = 404, "packet_not_found"


# The vocabularies of the named relation packs, as (pack name, axis) pairs: relations' `vocabulary_axes`,
# handed over by the Engine (this wing does not import the relations wing).
PackAxes = Callable[[list[str]], list[tuple[str, VocabularyAxis]]]


def workspace_dictionary(relation_store, dictionary_dir, workspace: str, pack_axes: PackAxes, packs: list[str]
                         ) -> Dictionary:
    """The workspace's own dictionary (in `dictionary_dir`) plus the vocabularies of `packs`
    (["workspace"]: those of the relation workspace of the same id, if there is one; ["*"]: every
    pack) — 422 when unreadable."""
    if packs == ["workspace"]:
        rel = relation_store.workspace(workspace)
        packs = list(rel["packs"]) if rel else []
    try:
        return load_dictionary(dictionary_dir, workspace, pack_axes(packs) if packs else [])
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




class EvidenceSearch(Planning):
    def __init__(self, corpus: Corpus, pages: SearchService, pack_axes: PackAxes,
                 calibration: Calibration | None = None, settings=None):
        """`pack_axes`: the relation packs' vocabularies (from the Engine); `settings` overrides the
        corpus's [evidence] settings."""
        self.corpus = corpus
        # the corpus's parts a call uses, named once here
        self.store, self.sparse, self.querylog = corpus.store, corpus.sparse, corpus.querylog
        self.map_notes, self.relation_store = corpus.map_notes, corpus.relations
        self.pages = pages
        self.pack_axes = pack_axes
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
        return workspace_dictionary(self.relation_store, self.corpus.settings.dictionary_dir, workspace, self.pack_axes,
                                    list(self.settings.packs))

    # The verb ----------------------------------------------------------------------------------
    def search(self, req: EvidenceRequest, scopes: tuple[str, ...] | None = None) -> EvidenceResponse:
        """`scopes`: the document scopes of the caller's key (None: every document). Every round is
        restricted to them, no map is consulted (maps are drawn over every document), and the packet
        records them: only a key reading at least those scopes may read or extend it."""
        t0 = time.perf_counter()
        scopes = tuple(sorted(set(scopes))) if scopes else None
        s = self.settings
        workspace = named_workspace(req.workspace)
        model = self.corpus.settings.models.active
        max_rounds = req.max_rounds or s.max_rounds
        k = req.k or s.round_k
        budget = req.line_budget or s.line_budget
        min_high = req.min_high_sources or s.min_high_sources
        session_id = req.session_id or uuid.uuid4().hex[:12]
        topic_slug = slug(req.topic) if req.topic else None
        query_id = uuid.uuid4().hex

        listed, unknown, maps, dec, subs, maps_accessed = self._planned(req, workspace, model, scopes)

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
            run = Run(self, req, workspace, model, k, maps, known, query_id, scopes)
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

    def _planned(self, req: EvidenceRequest, workspace: str, model: str, scopes: tuple[str, ...] | None) -> tuple:
        """What a call searches with: the pages it names (and those unknown), the maps — none for a key
        with document scopes (they are drawn over every document) or a request that names its pages
        (the seed: skip the maps when the file list is already precise) —, the question decomposed
        when asked, and each sub-query prepared through the dictionary and the maps."""
        dictionary = self.dictionary(workspace)
        listed, unknown = self.resolve_pages(req.pages, workspace, scopes) if req.pages is not None else (None, [])
        drawn = scopes is None and listed is None
        maps = workspace_maps(self.corpus, workspace, model) if drawn else Maps(workspace, -1, "", 0)
        embedder = self.corpus.embedder(model)

        def unit(text: str) -> np.ndarray:
            v = np.asarray(embedder.encode_query(text), dtype=np.float32)
            n = float(np.linalg.norm(v))
            return v / n if n else v

        def similarity(parts: list[str]) -> list[float]:
            vs = [unit(p) for p in parts]
            return [float(vs[i] @ vs[i + 1]) for i in range(len(vs) - 1)]

        dec = decompose(req.query, similarity, self.settings.distinct_max) if req.decompose else None
        subs, maps_accessed = self.prepare_subs(dec.sub_queries if dec else [req.query], dictionary, maps, listed,
                                                unit)
        return listed, unknown, maps, dec, subs, maps_accessed

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

    def write_maps(self, run: "Run", subs: list[Sub], workspace: str, session_id: str, query_id: str,
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
        version = self.map_notes.write(workspace, rows, utcnow())
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
        self.querylog.record(LogEntry(
            query_id=query_id, endpoint="evidence", workspace=state["workspace"], query=call["query"],
            params=run.req.model_dump(mode="json", exclude_none=True) | {"session_id": session_id},
            models=[run.model], timings=timings, total=nav["raw_files_scanned"], returned=len(call["sources"]),
            results=[(run.model, i, x["page_id"], x["p"], None) for i, x in enumerate(call["sources"], start=1)],
            scopes=state.get("scopes")))
        return resp


