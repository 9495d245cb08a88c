"""Criteria read by the configured model ([compiler]), in place of the embedder's thresholds.

1. Decomposition: one forced tool call (`decompose_criterion`) splits a criterion into facets, each
   typed by the axis that types it — place, length, time, or substance — with the criterion's own
   words (`quote`, `span`) it comes from; the brief compiler's checker places every quote (a facet
   from nowhere is dropped with the reason). Stored per (criterion, model): a repeated criterion
   costs nothing.
2. Judgment: one forced tool call (`judge_facets`) per candidate reads the candidate's own
   documents (their pages, up to `criteria.model_chars` characters) for every facet: stated,
   stated_not_verified or not_stated, a stated one with the documents' exact words as quote — a
   quote that does not re-slice to a document is not evidence, and the facet is not_stated (listed
   under the block's `dropped`). Judgments are stored keyed as the embedder's are (facet, model,
   scopes; entity; the documents' content), so a repeat reads nothing until a document changes.
3. Reads run while a call is open: a call starts at most `reads_per_call` reads, waits
   `model_wait_s`, and returns; a read still running finishes behind it and stores its judgments
   (`reading` says how many), one not yet started is cancelled — nothing new starts until the next
   call, which picks up what finished.
"""
from __future__ import annotations

import hashlib
import json
import threading
from concurrent.futures import Future, ThreadPoolExecutor, wait

from engine.core.clock import utcnow
from engine.core.errors import CompileFailed
from engine.relations.compile import _whole_words, locate
from engine.relations.criteria import QUOTE_MAX, CriterionReader, Facet, Judgment

DECOMPOSE_TOOL, JUDGE_TOOL = "decompose_criterion", "judge_facets"
TYPES = ("place", "length", "time", "substance")
STATES = ("stated", "stated_not_verified", "not_stated")

DECOMPOSE_SYSTEM = (
    "You split one search criterion about a person (or company) into its facets by calling the tool "
    "decompose_criterion exactly once: one facet per condition it states, each typed by what types it — place "
    "(a region, country, market), length (a duration such as 'twenty years'), time (a date or period), or "
    "substance (what the work or experience was) — with the criterion's own words as `quote` and their "
    "[start, end) character offsets as `span`.")
JUDGE_SYSTEM = (
    "You judge, from a candidate's own documents only, whether each facet of a criterion holds, by calling the "
    "tool judge_facets exactly once with one entry per facet: `stated` when a sentence of the documents says it, "
    "`stated_not_verified` when a sentence suggests it without establishing it, `not_stated` otherwise. For "
    "stated and stated_not_verified give that sentence's exact words as `quote` (at most 160 characters). "
    "Never infer beyond what the documents say.")

_POOL: ThreadPoolExecutor | None = None
_INFLIGHT: dict[tuple, Future] = {}   # reads still running, shared by every call of this process
_LOCK = threading.RLock()


def _pool(size: int) -> ThreadPoolExecutor:
    global _POOL
    with _LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(max_workers=size, thread_name_prefix="criterion-read")
        return _POOL


def decompose_tool() -> dict:
    return {"name": DECOMPOSE_TOOL, "description": "The facets of one criterion, each with its type and quote.",
            "input_schema": {"type": "object", "required": ["facets"], "additionalProperties": False,
                             "properties": {"facets": {"type": "array", "items": {
                                 "type": "object", "required": ["facet", "types", "quote", "span"],
                                 "additionalProperties": False,
                                 "properties": {"facet": {"type": "string"}, "types": {"enum": list(TYPES)},
                                                "quote": {"type": "string"},
                                                "span": {"type": "array", "items": {"type": "integer"},
                                                         "minItems": 2, "maxItems": 2}}}}}}}


def judge_tool(n: int) -> dict:
    return {"name": JUDGE_TOOL, "description": "One judgment per facet, from the candidate's documents only.",
            "input_schema": {"type": "object", "required": ["facets"], "additionalProperties": False,
                             "properties": {"facets": {"type": "array", "items": {
                                 "type": "object", "required": ["index", "state"], "additionalProperties": False,
                                 "properties": {"index": {"type": "integer", "minimum": 0, "maximum": n - 1},
                                                "state": {"enum": list(STATES)},
                                                "quote": {"type": "string"}}}}}}}


def read_decomposition(criterion: str, said: dict) -> tuple[list[Facet], list[dict]]:
    """The facets the model's call names that the checker keeps, and the dropped with reasons."""
    facets, dropped = [], []
    for raw in (said.get("facets") if isinstance(said, dict) else None) or []:
        if not isinstance(raw, dict) or not isinstance(raw.get("facet"), str) or not raw["facet"].strip():
            dropped.append({"facet": raw, "reason": "malformed"})
            continue
        if raw.get("types") not in TYPES:
            dropped.append({"facet": raw.get("facet"), "reason": f"type_unknown:{raw.get('types')}"})
            continue
        quote = raw.get("quote") if isinstance(raw.get("quote"), str) else ""
        span, why = locate(criterion, quote, raw.get("span"))
        if span is None:
            dropped.append({"facet": raw["facet"], "reason": why.replace("_brief", "_criterion")})
            continue
        facets.append(Facet(raw["facet"].strip(), None if raw["types"] == "substance" else raw["types"], quote))
    return facets, dropped


def _place(quote: str, pages: list[tuple]) -> tuple | None:
    """(page_id, url, start, end) of the quote's first whole-word occurrence in the documents."""
    q = quote.strip().rstrip("…").strip()
    if not q:
        return None
    for page_id, url, _title, body in pages:
        at = body.find(q)
        while at >= 0:
            if _whole_words(body, at, at + len(q)):
                return page_id, url, at, at + len(q)
            at = body.find(q, at + 1)
    return None


class ModelCriterionReader(CriterionReader):
    def __init__(self, corpus, pages, scopes, compiler):
        super().__init__(corpus, pages, scopes)
        self.compiler = compiler
        self.spent = {"calls": 0, "reads": 0, "prompt_tokens": 0, "completion_tokens": 0}
        self.dropped: list[dict] = []
        self.running = 0

    @property
    def judged_by(self) -> list[str]:
        return [f"model:{self.compiler.model}"]

    def key(self, criterion: str) -> str:
        basis = (f"{' '.join(criterion.split()).lower()}|model:{self.compiler.model}"
                 + (f"|scopes:{','.join(self.scopes)}" if self.scopes else ""))
        return hashlib.md5(basis.encode()).hexdigest()

    def _call(self, system: str, user: str, tool: dict) -> dict:
        try:
            call = self.compiler.call(system, user, tool)
        except Exception as exc:   # CompilerFailed: refused, unreachable, or no tool call
            raise CompileFailed(f"the criterion reader's model failed: {exc}",
                                compiler=self.compiler.describe()) from exc
        with _LOCK:
            for k in ("prompt_tokens", "completion_tokens"):
                v = (call.usage or {}).get(k)
                if isinstance(v, (int, float)):
                    self.spent[k] += v
        return call.arguments

    # Facets ----------------------------------------------------------------------------------
    def facets_of(self, workspace_id: str, criterion: str) -> tuple[list[Facet], dict]:
        rstore = self.relation_store
        text = " ".join(criterion.split())
        stored = rstore.records.criterion_facets(text, self.compiler.model)
        if stored is not None:
            facets = [Facet(f["facet"], f["types"], f["quote"]) for f in json.loads(stored[0])]
            return facets, {"model": self.compiler.model, "stored": True, "dropped": json.loads(stored[1])}
        self.spent["calls"] += 1
        facets, dropped = read_decomposition(text, self._call(DECOMPOSE_SYSTEM, text, decompose_tool()))
        if not facets:   # nothing the checker keeps: the criterion is read whole, as one facet of substance
            facets = [Facet(text)]
        rstore.records.store_criterion_facets(text, self.compiler.model, json.dumps([
            {"facet": f.facet, "types": f.types, "quote": f.quote} for f in facets]), json.dumps(dropped), utcnow())
        return facets, {"model": self.compiler.model, "stored": False, "dropped": dropped}

    # Judgments -------------------------------------------------------------------------------
    def _read_one(self, workspace_id: str, criterion: str, facets: list[Facet], keys: list[str],
                  entity_id: str, doc: str) -> list[Judgment]:
        pages = self.store.entity_pages(workspace_id, entity_id, list(self.scopes) if self.scopes else None,
                                               self.settings.model_chars)
        listing = "\n".join(f"{i}. {f.facet} ({f.types or 'substance'})" for i, f in enumerate(facets))
        docs = "\n\n".join(f"[document {i + 1}: {url}]\n{body}" for i, (_, url, _, body) in enumerate(pages))
        said = self._call(JUDGE_SYSTEM, f"Criterion: {criterion}\nFacets:\n{listing}\n\nDocuments:\n{docs}",
                          judge_tool(len(facets)))
        given = {}
        for raw in (said.get("facets") if isinstance(said, dict) else None) or []:
            if isinstance(raw, dict) and isinstance(raw.get("index"), int) and 0 <= raw["index"] < len(facets) \
                    and raw.get("state") in STATES:
                given.setdefault(raw["index"], raw)
        out = []
        for i, f in enumerate(facets):
            raw = given.get(i, {"state": "not_stated"})
            j = Judgment(entity_id, "not_stated")
            if raw["state"] != "not_stated":
                quote = raw.get("quote") if isinstance(raw.get("quote"), str) else ""
                placed = _place(quote[:QUOTE_MAX], pages)
                if placed is None:
                    with _LOCK:
                        self.dropped.append({"entity_id": entity_id, "facet": f.facet, "state": raw["state"],
                                             "reason": "quote_not_in_documents"})
                else:
                    page_id, url, start, end = placed
                    j = Judgment(entity_id, raw["state"], pages_quote(pages, page_id, start, end), page_id, url,
                                 None, start, end, None)
            out.append(j)
        now = utcnow()
        for key, j in zip(keys, out):
            self.relation_store.records.replace_judgments(workspace_id, key, [
                [j.entity_id, doc, j.state, j.quote, j.page_id, j.url, j.chunk_id, j.char_start, j.char_end,
                 j.score]], now)
        return out

    def read_facets(self, workspace_id: str, criterion: str, facets: list[Facet], ids: list[str],
                    budget: int) -> tuple[list[dict], int]:
        """Per facet a judgment per candidate (stored ones reused); at most `budget` reads are started,
        each one model call for every facet; returns (per-facet judgments, reads started now)."""
        keys = [self.key(f.facet) for f in facets]
        docs = self.doc_keys(workspace_id, ids)
        rstore = self.relation_store
        stored = [{(r[0], r[1]): r for r in rstore.records.judgments(workspace_id, k, list(docs))} if docs else {}
                  for k in keys]
        out: list[dict] = [{} for _ in facets]
        waiting: list[tuple[str, Future]] = []
        started = 0
        for eid in ids:
            if eid not in docs:
                for o in out:
                    o[eid] = Judgment(eid, "no_documents")
                continue
            rows = [s.get((eid, docs[eid])) for s in stored]
            if all(r is not None for r in rows):
                for o, r in zip(out, rows):
                    o[eid] = Judgment(eid, r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9], cached=True)
                continue
            tag = (workspace_id, tuple(keys), eid, docs[eid])
            with _LOCK:
                fut = _INFLIGHT.get(tag)
                if fut is None and started < budget:
                    fut = _pool(self.settings.model_parallel).submit(
                        self._read_one, workspace_id, criterion, facets, keys, eid, docs[eid])
                    fut.add_done_callback(lambda _f, tag=tag: _INFLIGHT.pop(tag, None))
                    _INFLIGHT[tag] = fut
                    started += 1
            if fut is None:
                for o in out:
                    o[eid] = Judgment(eid, "not_read")
            else:
                waiting.append((eid, fut))
        self.spent["calls"] += started
        self.spent["reads"] += started
        if waiting:
            wait([f for _, f in waiting], timeout=self.settings.model_wait_s)
        failure = None
        for eid, fut in waiting:
            if fut.done() and not fut.cancelled() and fut.exception() is None:
                for o, j in zip(out, fut.result()):
                    o[eid] = j
                continue
            if fut.done() and not fut.cancelled():
                failure = failure or fut.exception()
            elif not fut.cancel():       # running: it finishes behind this call and stores its judgments
                self.running += 1
            for o in out:
                o[eid] = Judgment(eid, "not_read")
        if failure is not None and not any(j.state != "not_read" for o in out for j in o.values()):
            raise failure if isinstance(failure, CompileFailed) else CompileFailed(str(failure))
        return out, started

    def priced(self) -> dict:
        """`spent` as the reply carries it: {calls, reads, cost_usd, cost_basis}."""
        prices = self.corpus.settings.compiler.price_usd_per_mtok
        s = self.spent
        if not prices:
            cost, basis = None, "not priced: set [compiler] price_usd_per_mtok = [input, output]"
        else:
            pin, pout = prices
            cost = round((s["prompt_tokens"] * pin + s["completion_tokens"] * pout) / 1e6, 6)
            basis = (f"{s['prompt_tokens']} input + {s['completion_tokens']} output tokens of the calls finished "
                     f"in this call, at {pin} / {pout} USD per million ([compiler] price_usd_per_mtok)")
        return {"calls": s["calls"], "reads": s["reads"], "cost_usd": cost, "cost_basis": basis}


def pages_quote(pages: list[tuple], page_id: str, start: int, end: int) -> str:
    """The documents' own words at a placed span (what the judgment quotes)."""
    body = next(b for p, _, _, b in pages if p == page_id)
    return body[start:end]
