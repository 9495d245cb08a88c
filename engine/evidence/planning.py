"""A call's preparation, before any round runs: each sub-query's dictionary matches and concepts, and
its plan of rounds — the question as asked (or with its dictionary terms bridged in), each alias,
colloquial and related wording, the question without its rarest word, its keywords; the request's
pages and the pages earlier calls noted in the maps go first."""
from __future__ import annotations

import re
from collections import deque

from indexes.backends import SparseArm
from indexes.sparse import stems

from engine.core.settings import EvidenceSettings
from engine.evidence.confidence import Concept
from engine.evidence.decompose import content_words
from engine.evidence.dictionary import Dictionary, Match
from engine.evidence.maps import Group, Maps
from engine.evidence.rounds import RoundSpec, Sub, _replace_span, bridged, forms


class Planning:
    """What EvidenceSearch (engine/evidence/search.py) plans with: the BM25 arm's document frequencies
    and its [evidence] settings."""
    sparse: SparseArm
    settings: EvidenceSettings

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
            df = self.sparse.doc_freqs(droppable)
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

    def prepare_subs(self, texts: list[str], dictionary: Dictionary, maps: Maps, listed: list[str] | None,
                     unit) -> tuple[list[Sub], list[str]]:
        """Each sub-query with its dictionary matches, concepts, the map groups it consults and its plan
        of rounds: the request's pages first (when it lists some), then the pages earlier calls wrote
        into the maps for a question like it, then the planned wordings, the corpus's nearest words
        just before the keywords round. With it, the maps' paths consulted, the overview first."""
        s = self.settings
        subs: list[Sub] = []
        maps_accessed: list[str] = [maps.overview_path] if maps.pages else []
        for i, text in enumerate(texts):
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
        return subs, maps_accessed
