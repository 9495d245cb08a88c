"""Ingestion: records -> pages -> chunks -> vectors -> one store transaction -> indexes.

Idempotent by normalised URL (within a workspace and a document scope): an unchanged page only moves
`last_seen` forward (a re-visit); a changed page keeps the chunks whose text survived (and their
vectors) and replaces the rest in every index; a malformed record is reported with its line number
and skipped. A page is written in the scope its caller may write (engine/core/access.py): a key with
document scopes never reaches, updates or learns of another scope's page of the same URL, which is
another page (engine/core/identity.py). A page over `[ingest] max_page_chars` or `max_page_entities`
is that item's error.

A batch is chunked and embedded before the corpus's write lock is taken, against the pages as the
store holds them then; under the lock the pages are read again, and only what another writer changed
meanwhile is chunked or embedded there. The lock is held for the writes themselves.
"""
from __future__ import annotations

import logging
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Callable, Iterable, Iterator

import numpy as np
from pydantic import ValidationError

from indexes.store import ChunkRow, ExistingPage, PageRow, PageWrite, Touch

from engine.core.access import OPEN, Grant
from engine.core.clock import utcnow
from engine.core.corpus import Corpus
from engine.core.errors import EngineError
from engine.core.faults import maybe_crash
from engine.core.identity import named_workspace, page_id_for
from engine.core.progress import Progress
from engine.core.urls import InvalidURL, domain_of, normalize_url
from engine.ingest.chunking import chunk_text
from engine.ingest.extract import ExtractionFailed
from engine.ingest.prepare import _Prepared, chunk_id_for, prepare
from engine.ingest.records import PageInput, RecordError, VisitInput, describe_validation_error

log = logging.getLogger("refindery.ingest")


def _maybe_crash(point: str, batch_no: int) -> None:
    """Test-only: SIGKILL at `point` of batch `batch_no` (engine/core/faults.py; tests/ingest/test_crash.py)."""
    maybe_crash(f"{point}:{batch_no}")


@dataclass
class PageOutcome:
    index: int  # line number (JSONL/folder) or position (API batch)
    page_id: str | None
    url: str | None
    status: str  # created | updated | unchanged | revisited | merged (another visit in the batch) | error
    #              | not_found (a visit without a body, of no page: Ingester.visit)
    error: str | None = None
    chunks: int = 0


@dataclass
class IngestReport:
    outcomes: list[PageOutcome] = field(default_factory=list)
    errors: list[RecordError] = field(default_factory=list)
    chunks_embedded: int = 0
    seconds: float = 0.0
    generation: int = 0

    def count(self, status: str) -> int:
        return sum(1 for o in self.outcomes if o.status == status)

    def pages(self, status: str) -> int:
        """Distinct pages with this outcome (a file may visit one page several times)."""
        return len({o.page_id for o in self.outcomes if o.status == status and o.page_id})

    def summary(self) -> dict[str, Any]:
        return {
            "records": len(self.outcomes),
            "created": self.pages("created"), "updated": self.pages("updated"),
            "revisited": self.pages("revisited"), "unchanged": self.pages("unchanged"),
            "errors": len(self.errors), "chunks_embedded": self.chunks_embedded,
            "seconds": round(self.seconds, 3), "generation": self.generation,
            **({"not_found": n} if (n := self.count("not_found")) else {}),
        }


# Chunks per encode call while progress is shown: a line can then come every few seconds.
PROGRESS_STEP = 128


class Ingester:
    def __init__(self, corpus: Corpus, workspace: str, progress: bool | None = None,
                 encode: Callable[[str, list[str]], np.ndarray] | None = None, batch_chunks: int | None = None,
                 caller: Grant = OPEN):
        """`encode(model, texts)`: how chunk texts are embedded (default: the model in this process;
        models/ray_embed.py embeds on Ray); `batch_chunks`: chunks per batch (default the setting);
        `caller`: whose grant decides each page's scope (Engine.ingest has checked its workspace)."""
        self.corpus = corpus
        # the corpus's parts the writer writes, named once here (the corpus's write lock and its
        # indexes' maintenance stay the corpus's)
        self.store, self.sparse = corpus.store, corpus.sparse
        self.caller = caller
        self.settings = corpus.settings
        self.encode = encode or (lambda model, texts: corpus.embedder(model).encode_documents(texts))
        self._local = encode is None
        self._tick: Callable[[int], None] | None = None
        self.batch_chunks = batch_chunks or self.settings.ingest.batch_chunks
        self.workspace = named_workspace(workspace)
        show = self.settings.ingest.progress if progress is None else progress
        self.progress = show
        self.embedder = corpus.embedder()
        self.max_tokens = min(self.settings.chunking.max_tokens, self.embedder.max_content_tokens)
        self._batch_no = 0

    # Public ------------------------------------------------------------------------------------
    def ingest(self, records: Iterable[tuple[int, str, dict[str, Any] | PageInput | RecordError]],
               total: int | None = None, flush: bool = True) -> IngestReport:
        """Ingest records; `flush=False` leaves saving the FAISS files to the caller (the server
        saves them periodically instead of once per request; a crash before that is repaired)."""
        report = IngestReport()
        t0 = time.perf_counter()
        self.store.ensure_workspace(self.workspace)
        bar = Progress("ingest", total, "pages") if self.progress else None
        # chunks embedded, told as they are (a batch of pages takes a while on a small machine)
        self._tick = (lambda n: bar.update(0, **{"chunks embedded": n})) if bar is not None and self._local else None
        try:
            for group in self._groups(records, report):
                before = report.chunks_embedded
                self._process(group, report)
                if bar is not None:
                    bar.update(len(group), **({} if self._tick else {"chunks embedded": report.chunks_embedded - before}))
        finally:
            if bar is not None:
                bar.close()
            if flush:
                self.corpus.flush()
        report.seconds = time.perf_counter() - t0
        report.generation = self.store.generation()
        report.outcomes.sort(key=lambda o: o.index)
        return report

    def visit(self, visits: list[tuple[int, VisitInput]]) -> IngestReport:
        """Visits without a body (the browser extension's re-visit of a page it sent unchanged): each
        moves its page's `last_seen` and visit count, as a re-visit does, with nothing extracted,
        chunked or embedded. A URL with no page in the caller's workspace and scope is that item's
        `not_found` (send the page itself); an older visit than the page's last is `unchanged`."""
        report, now, by_page = IngestReport(), utcnow(), defaultdict(list)
        t0 = time.perf_counter()
        for index, v in visits:
            try:
                pid = page_id_for(self.workspace, normalize_url(v.url), self.caller.write_scope(v.scope))
            except (EngineError, ValueError) as exc:   # InvalidURL, or urllib's ValueError (a bad IPv6 host)
                self._fail(report, index, "request", v.model_dump(), str(exc))
                continue
            by_page[pid].append((index, v))
        with self.corpus.write_lock:
            existing = self.store.existing_pages(by_page)
            touches = []
            for pid, items in by_page.items():
                old = existing.get(pid)
                later = [] if old is None else [s for s in ((v.seen_at or now) for _, v in items) if s > old.last_seen]
                status = "not_found" if old is None else "revisited" if later else "unchanged"
                if later:
                    touches.append(Touch(pid, max(later), len(later)))
                report.outcomes += [PageOutcome(i, pid if old else None, v.url, status, None if old else
                                    "no page at this URL in the workspace: send the page itself") for i, v in items]
            if touches:
                self._apply_to_indexes([], touches, existing, self.store.apply([], touches))
        report.seconds = time.perf_counter() - t0
        report.generation = self.store.generation()
        report.outcomes.sort(key=lambda o: o.index)
        return report

    # Grouping ----------------------------------------------------------------------------------
    def _groups(self, records, report: IngestReport) -> Iterator[list[_Prepared]]:
        budget_tokens = self.batch_chunks * self.max_tokens
        group: list[_Prepared] = []
        est = 0
        for index, source, raw in records:
            if isinstance(raw, RecordError):
                report.errors.append(raw)
                report.outcomes.append(PageOutcome(index, None, None, "error", raw.error))
                continue
            ing = self.settings.ingest
            try:
                prep = prepare(index, source, raw, self.workspace, self.caller, ing.max_page_chars,
                               ing.max_page_entities)
            except ValidationError as exc:
                self._fail(report, index, source, raw, describe_validation_error(exc))
                continue
            except (InvalidURL, ExtractionFailed, ValueError, EngineError) as exc:
                self._fail(report, index, source, raw, str(exc))
                continue
            group.append(prep)
            est += len(prep.body) // 4 + 1
            if est >= budget_tokens or len(group) >= 2000:
                yield group
                group, est = [], 0
        if group:
            yield group

    @staticmethod
    def _fail(report: IngestReport, index: int, source: str, raw: Any, msg: str) -> None:
        url = raw.get("url") if isinstance(raw, dict) else getattr(raw, "url", None)
        report.errors.append(RecordError(line=index, source=source, error=msg))
        report.outcomes.append(PageOutcome(index, None, url if isinstance(url, str) else None, "error", msg))
        log.warning("%s:%d: skipped: %s", source, index, msg)

    # One batch ---------------------------------------------------------------------------------
    def _process(self, group: list[_Prepared], report: IngestReport) -> None:
        corpus = self.corpus
        self._batch_no += 1
        # Several visits of one URL in a batch: the newest visit's content wins.
        by_page: dict[str, list[_Prepared]] = defaultdict(list)
        for p in group:
            by_page[p.page_id].append(p)
        now = utcnow()
        for visits in by_page.values():
            visits.sort(key=lambda p: (p.page.seen_at or datetime.min, p.index))
        # Outside the write lock: chunk and embed what the batch writes, against the pages as stored now.
        chunks: dict[str, list[ChunkRow]] = {}
        # (the embedders of the write path: a catch-up model is left to the background, engine/core/catch_up.py)
        vectors: dict[str, dict[int, np.ndarray]] = {m: {} for m in corpus.settings.write_models}
        before = self.store.existing_pages(by_page)
        self._embed(self._new_chunks(by_page, before, chunks, now), vectors)
        with corpus.write_lock:
            existing = self.store.existing_pages(by_page)   # again: another writer may have been first
            writes: list[PageWrite] = []
            touches: list[Touch] = []
            outcomes: list[PageOutcome] = []
            for pid, visits in by_page.items():
                seen = [p.page.seen_at or now for p in visits]
                newest = visits[-1]
                old = existing.get(pid)
                status, write, touch = self._classify(newest, visits, seen, old, chunks)
                n_chunks = 0
                if write is not None:
                    writes.append(write)
                    n_chunks = len(write.chunks)
                for p in visits:  # one status a page: the batch's other items of it are "merged" visits
                    outcomes.append(PageOutcome(p.index, pid, p.page.url, status if p is newest else "merged",
                                                chunks=n_chunks if p is newest else 0))
                if touch is not None:
                    touches.append(touch)
            report.outcomes += outcomes
            if not writes and not touches:
                return
            # only what a page changed by another writer meanwhile needs embedding here
            late = {c.chunk_id: c.text for w in writes for c in w.chunks
                    if (w.page.page_id not in existing or c.chunk_id not in existing[w.page.page_id].chunk_ids)
                    and any(c.chunk_id not in vectors[m] for m in vectors)}
            self._embed(late, vectors)
            fresh = 0
            for w in writes:
                old = existing.get(w.page.page_id)
                new = [c.chunk_id for c in w.chunks if old is None or c.chunk_id not in old.chunk_ids]
                fresh += len(new)
                for model, by_id in vectors.items():
                    w.vectors[model] = {cid: by_id[cid] for cid in new}
            report.chunks_embedded += fresh
            _maybe_crash("before_store", self._batch_no)
            gen = self.store.apply(writes, touches)
            _maybe_crash("after_store", self._batch_no)
            rejected = self._apply_to_indexes(writes, touches, existing, gen)
            _maybe_crash("after_indexes", self._batch_no)
            for o in outcomes:
                if o.page_id in rejected:  # stored, but no index could hold it: moved to quarantine
                    o.status, o.error, o.chunks = "error", f"quarantined: {rejected[o.page_id]}", 0
                    report.errors.append(RecordError(line=o.index, source="batch", error=o.error))

    def _new_chunks(self, by_page: dict[str, list[_Prepared]], before: dict[str, ExistingPage],
                    chunks: dict[str, list[ChunkRow]], now: datetime) -> dict[int, str]:
        """Chunk every page the batch will write as the store holds the pages now (into `chunks`);
        return the texts of the chunks they do not hold yet, by chunk id."""
        texts: dict[int, str] = {}
        for pid, visits in by_page.items():
            old = before.get(pid)
            newest = visits[-1]
            last = max(p.page.seen_at or now for p in visits)
            if old is not None and (newest.content_hash == old.content_hash or last < old.last_seen):
                continue   # a re-visit at most
            chunks[pid] = self._chunk_rows(newest)
            texts.update((c.chunk_id, c.text) for c in chunks[pid]
                         if old is None or c.chunk_id not in old.chunk_ids)
        return texts

    def _embed(self, texts: dict[int, str], vectors: dict[str, dict[int, np.ndarray]]) -> None:
        if not texts:
            return
        ids = list(texts)
        for n, model in enumerate(vectors):
            if self._tick is None or n:   # one call; or, for the first model with progress shown, in steps
                vecs = self.encode(model, [texts[i] for i in ids])
            else:
                parts = []
                for at in range(0, len(ids), PROGRESS_STEP):
                    parts.append(self.encode(model, [texts[i] for i in ids[at:at + PROGRESS_STEP]]))
                    self._tick(len(parts[-1]))
                vecs = np.concatenate(parts)
            vectors[model].update((cid, vecs[i]) for i, cid in enumerate(ids))

    def _classify(self, newest: _Prepared, visits: list[_Prepared], seen: list[datetime],
                  old: ExistingPage | None, chunks: dict[str, list[ChunkRow]]
                  ) -> tuple[str, PageWrite | None, Touch | None]:
        first, last = min(seen), max(seen)
        if old is None:
            return "created", self._page_write(newest, first, last, len(visits), chunks), None
        if newest.content_hash == old.content_hash or last < old.last_seen:
            # Same content (or content older than what is stored): a re-visit at most.
            later = [s for s in seen if s > old.last_seen]
            if not later:
                return "unchanged", None, None
            return "revisited", None, Touch(old.page_id, max(later), len(later))
        later = sum(1 for s in seen if s > old.last_seen)
        write = self._page_write(newest, old.first_seen, max(last, old.last_seen), old.visit_count + later, chunks)
        return "updated", write, None

    def _chunk_rows(self, p: _Prepared) -> list[ChunkRow]:
        chunks = chunk_text(p.body, self.embedder.chunk_tokenizer, self.max_tokens, self.settings.chunking.overlap_tokens)
        seen_text: dict[str, int] = defaultdict(int)
        rows = []
        for c in chunks:
            occ = seen_text[c.text]
            seen_text[c.text] += 1
            rows.append(ChunkRow(chunk_id_for(p.page_id, c.text, occ), p.page_id, c.ordinal, c.text,
                                 c.char_start, c.char_end, c.section_path, c.n_tokens))
        return rows

    def _page_write(self, p: _Prepared, first: datetime, last: datetime, visits: int,
                    chunks: dict[str, list[ChunkRow]]) -> PageWrite:
        if p.page_id not in chunks:   # a page another writer changed meanwhile: chunked under the lock
            chunks[p.page_id] = self._chunk_rows(p)
        page = PageRow(
            page_id=p.page_id, workspace_id=self.workspace, url=p.page.url.strip(), url_norm=p.url_norm,
            domain=domain_of(p.page.url), title=p.title, body_text=p.body, content_hash=p.content_hash,
            first_seen=first, last_seen=last, published=p.page.published, visit_count=visits,
            cluster_id=p.page.cluster_id, scope=p.scope,
        )
        return PageWrite(page=page, chunks=chunks[p.page_id], entities=p.entities)

    def _apply_to_indexes(self, writes: list[PageWrite], touches: list[Touch],
                          existing: dict[str, ExistingPage], gen: int) -> dict[str, str]:
        """Bring every index to `gen`; a page the sparse index cannot hold goes to quarantine (its
        id -> reason is returned). The edge's checks (engine/core/values.py) keep this empty in practice."""
        corpus = self.corpus
        if corpus.replicated:   # other replicas' writes may lie between the indexes' generation and `gen`
            rejected = corpus.follow()
            corpus.applied_moved()
            return rejected
        pages = [w.page.page_id for w in writes] + [t.page_id for t in touches]
        docs = [d for batch in self.store.index_docs(pages) for d in batch]
        rejected = self.sparse.replace_pages(pages, docs, gen)
        _maybe_crash("after_sparse", self._batch_no)
        gone = [cid for w in writes if w.page.page_id in existing
                for cid in existing[w.page.page_id].chunk_ids - {c.chunk_id for c in w.chunks}]
        for model in corpus.embedder_names:
            dense = corpus.dense(model)
            fresh = [(cid, v) for w in writes if w.page.page_id not in rejected
                     for cid, v in w.vectors.get(model, {}).items()]
            dense.remove(gone)
            if fresh:
                dense.add(np.array([f[0] for f in fresh], dtype=np.int64), np.vstack([f[1] for f in fresh]))
            # a backend holding filter fields beside the vectors re-reads them for the pages whose
            # kept vectors' fields moved (touched, or re-written with some chunks unchanged)
            dense.refresh_pages([p for p in [t.page_id for t in touches] + [w.page.page_id for w in writes
                                                                             if w.page.page_id in existing]
                                 if p not in rejected])
        corpus.quarantine(rejected)
        for model in corpus.embedder_names:
            corpus.maintain_dense(model)
        return rejected
