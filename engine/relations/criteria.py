"""Criteria: a condition no relation expresses ("twenty years marketing baby formula in European
markets"), read from each candidate's own documents — the workspace's pages linked to the entity.

The reader works offline: the hybrid search pipeline, restricted to the candidate's pages, finds
the passages nearest the criterion; each of their sentences is scored against the criterion by the
active embedder (cosine), whose calibrated thresholds decide — stated, stated_not_verified, or
not_stated — and among the sentences at that strength the configured cross-encoder (when one can be
loaded) picks the quote, at most 160 characters. A candidate with no documents is its own state.
Judgments are stored keyed by the criterion (with the thresholds and model that judged it), the
entity and a key of its documents' content, so a repeated call reads nothing until a document
changes.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from models.reranker import RerankerUnavailable, load_reranker

from engine.core.corpus import Corpus
from engine.core.devices import on_device
from engine.refind.search import SearchFilters, SearchRequest, SearchService
from engine.relations.ideas import split_sentences
from engine.core.clock import utcnow

QUOTE_MAX = 160
STATES = ("stated", "stated_not_verified", "not_stated", "no_documents", "not_read")
CODE = {s: i for i, s in enumerate(STATES)}
_UNSET = object()


@dataclass
class Judgment:
    entity_id: str
    state: str
    quote: str | None = None
    page_id: str | None = None
    url: str | None = None
    chunk_id: int | None = None
    char_start: int | None = None
    char_end: int | None = None
    score: float | None = None
    cached: bool = False

    def as_dict(self) -> dict:
        out = {"entity_id": self.entity_id, "state": self.state}
        if self.quote is not None:
            out.update(quote=self.quote, page_id=self.page_id, url=self.url,
                       location={"chunk_id": self.chunk_id, "char_start": self.char_start, "char_end": self.char_end},
                       score=None if self.score is None else round(self.score, 4))
        return out


def _quote(sentence: str) -> str:
    return sentence if len(sentence) <= QUOTE_MAX else sentence[:QUOTE_MAX - 1].rsplit(" ", 1)[0] + "…"


class CriterionReader:
    def __init__(self, corpus: Corpus, pages: SearchService, scopes: tuple[str, ...] | None = None):
        """`scopes`: read only documents of these scopes (a key's grant); judgments are kept apart
        per set of scopes, so no reader sees a judgment drawn from documents it may not read."""
        self.corpus = corpus
        # the corpus's parts a reader uses, named once here
        self.store, self.relation_store, self.registry = corpus.store, corpus.relations, corpus.registry
        self.pages = pages
        self.scopes = tuple(sorted(set(scopes))) if scopes else None
        self.settings = corpus.settings.criteria
        self.model = corpus.settings.models.active
        self._cross = _UNSET

    def cross_encoder(self):
        """The configured cross-encoder when it can be loaded, else None (the embedder judges alone)."""
        if self._cross is _UNSET:
            try:
                with on_device(self.corpus.settings.models.device):   # a missing device is refused, not skipped
                    self._cross = load_reranker(self.registry, self.corpus.settings.models.reranker,
                                                self.corpus.settings.models.device)
            except RerankerUnavailable:
                self._cross = None
        return self._cross

    @property
    def judged_by(self) -> list[str]:
        return [f"embedder:{self.model}"] + (
            [f"cross-encoder:{self.corpus.settings.models.reranker}"] if self.cross_encoder() is not None else [])

    def key(self, criterion: str) -> str:
        s = self.settings
        basis = (f"{' '.join(criterion.split()).lower()}|{'|'.join(self.judged_by)}|{s.stated_min}|"
                 f"{s.plausible_min}|{s.passages}" + (f"|scopes:{','.join(self.scopes)}" if self.scopes else ""))
        return hashlib.md5(basis.encode()).hexdigest()

    def doc_keys(self, workspace_id: str, entity_ids: list[str]) -> dict[str, str]:
        """Per entity with documents, a key of their content (ids and content hashes): a changed
        or added document changes it. Entities linked to no page are absent."""
        if not entity_ids:
            return {}
        return self.store.entity_document_keys(workspace_id, entity_ids,
                                                      list(self.scopes) if self.scopes else None)

    def judge(self, workspace_id: str, criterion: str, entity_id: str) -> Judgment:
        res = self.pages.search(SearchRequest(query=criterion, workspace=workspace_id, k=self.settings.passages,
                                              filters=SearchFilters(entity=[entity_id])), scopes=self.scopes)
        found = []
        for page in res.pages:
            for snip in page.snippets:
                for sentence, at in split_sentences(snip.text):
                    found.append((sentence, page, snip, at))
        if not found:
            return Judgment(entity_id, "not_stated")
        embedder = self.corpus.embedder()
        q = embedder.encode_query(criterion)
        vectors = embedder.encode_documents([s for s, *_ in found])
        scores = vectors @ q
        top = float(scores.max())
        if top >= self.settings.stated_min:
            state, floor = "stated", self.settings.stated_min
        elif top >= self.settings.plausible_min:
            state, floor = "stated_not_verified", self.settings.plausible_min
        else:
            return Judgment(entity_id, "not_stated", score=top)
        # The embedder says how strongly the documents state it (its thresholds are the calibrated
        # ones); among the sentences at that strength, a cross-encoder, when one is configured,
        # picks the one that says it best.
        tier = [i for i in np.argsort(-scores) if scores[i] >= floor]
        best = int(tier[0])
        cross = self.cross_encoder()
        if cross is not None and len(tier) > 1:
            ce = cross.score(criterion, [found[i][0] for i in tier])
            best = int(tier[int(np.argmax(ce))])
        sentence, page, snip, at = found[best]
        score = float(scores[best])
        quote = _quote(sentence)
        start = snip.char_start + at
        return Judgment(entity_id, state, quote, page.page_id, page.url, snip.chunk_id, start,
                        start + len(quote.rstrip("…")), score)

    def facets_of(self, workspace_id: str, criterion: str) -> tuple[list["Facet"], dict | None]:
        """The embedder reads a criterion whole: one facet of substance, decomposed by nobody."""
        return [Facet(criterion)], None

    def read_facets(self, workspace_id: str, criterion: str, facets: list["Facet"], ids: list[str],
                    budget: int) -> tuple[list[dict], int]:
        """Per facet a judgment per candidate; at most `budget` new reads. (per-facet, reads now)"""
        per_facet, total = [], 0
        for f in facets:
            judged, n = self.read(workspace_id, f.facet, ids, budget - total)
            total += n
            per_facet.append(judged)
        return per_facet, total

    def read(self, workspace_id: str, criterion: str, entity_ids: list[str], budget: int) -> tuple[dict, int]:
        """A judgment per entity (stored ones reused), reading at most `budget` new ones; the rest
        are not_read. Returns (judgments, how many were read now)."""
        key = self.key(criterion)
        docs = self.doc_keys(workspace_id, entity_ids)
        out: dict[str, Judgment] = {}
        rstore = self.relation_store
        stored = {(row[0], row[1]): row for row in rstore.records.judgments(workspace_id, key, list(docs))} if docs else {}
        fresh: list[tuple[Judgment, str]] = []
        for eid in entity_ids:
            if eid not in docs:
                out[eid] = Judgment(eid, "no_documents")
                continue
            row = stored.get((eid, docs[eid]))
            if row is not None:
                out[eid] = Judgment(eid, row[2], row[3], row[4], row[5], row[6], row[7], row[8], row[9], cached=True)
            elif len(fresh) < budget:
                j = self.judge(workspace_id, criterion, eid)
                out[eid] = j
                fresh.append((j, docs[eid]))
            else:
                out[eid] = Judgment(eid, "not_read")
        if fresh:
            rstore.records.replace_judgments(workspace_id, key, [
                [j.entity_id, doc, j.state, j.quote, j.page_id, j.url, j.chunk_id, j.char_start, j.char_end, j.score]
                for j, doc in fresh], utcnow())
        return out, len(fresh)


# Facets ------------------------------------------------------------------------------------------
@dataclass
class Facet:
    """One condition of a criterion, and what it is about: `types` names a vocabulary axis, "length"
    or "time"; None is a condition of substance. Without a decomposition (not built: the embedder's
    thresholds, calibrated on whole criteria, do not carry over to short facets) a criterion is one
    facet of substance."""
    facet: str
    types: str | None = None
    quote: str | None = None

    @property
    def substance(self) -> bool:
        return self.types is None

    def as_dict(self) -> dict:
        return {"facet": self.facet, "types": self.types, "substance": self.substance, "quote": self.quote}


def combine(entity_id: str, facets: list[Facet], judged: list[Judgment]) -> Judgment:
    """One criterion's state for an entity from its facets' states."""
    states = [j.state for j in judged]
    if all(s == "stated" for s in states):
        best = next((j for f, j in zip(facets, judged) if f.substance), judged[0])
        return Judgment(**{**best.__dict__, "entity_id": entity_id, "state": "stated"})
    for state in ("no_documents", "not_read", "not_stated"):
        if state in states:
            return Judgment(entity_id, state)
    return next(j for j in judged if j.state == "stated_not_verified")


def read_criteria(reader: CriterionReader, workspace_id: str, criteria: list[str],
                  ids: list[str]) -> tuple[list[dict], list[dict]]:
    """Every criterion read for the candidates: per criterion its facets, per facet the judgments,
    and the combined judgment per candidate; then close.matches — candidates with exactly one facet
    open whose documents establish a facet of substance."""
    budget = reader.settings.reads_per_call
    blocks = []
    for i, text in enumerate(criteria):
        facets, decomposed_by = reader.facets_of(workspace_id, text)
        dropped_before = len(getattr(reader, "dropped", []))
        per_facet, read_now = reader.read_facets(workspace_id, text, facets, ids, budget)
        budget -= read_now
        combined = {e: combine(e, facets, [pf[e] for pf in per_facet]) for e in ids}
        blocks.append({"index": i, "criterion": text, "facets": facets, "candidates": len(ids), "read_now": read_now,
                       "judgments": combined, "facet_judgments": per_facet, "judged_by": reader.judged_by,
                       "decomposed_by": decomposed_by,
                       "dropped": list(getattr(reader, "dropped", [])[dropped_before:])})
    close = []
    for e in ids:
        open_, established = [], []
        for b in blocks:
            for f, pf in zip(b["facets"], b["facet_judgments"]):
                j = pf[e]
                if j.state in ("stated_not_verified", "not_stated"):
                    open_.append((b, f, j))
                elif j.state == "stated":
                    established.append(f)
        if len(open_) == 1 and any(f.substance for f in established):
            b, f, j = open_[0]
            entry = {"entity_id": e, "criterion": b["index"], "facet": f.facet, "because": j.state}
            if j.state == "stated_not_verified":
                entry["quote"] = j.quote
            close.append(entry)
    return blocks, close
