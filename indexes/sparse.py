"""BM25 over chunks with tantivy, with the page's filter fields on each chunk.

Fields: chunk_id (u64, stored, fast), page_id / workspace / domain / scope / entities (raw
strings, fast), text (the chunk's title, section path and body, analysed by `en_refind`),
first_seen / last_seen / published (dates, fast), cluster_id (i64, fast). Filters are wrapped in a
zero-score query so they never change BM25.

How the arm scores (format 2; measured against bm25s on the four development collections,
docs/search.md "BM25 arm"): one text field, not title + section + body summed as separate fields; the analyser
drops English stop words and one-character tokens before the Snowball stemmer; and a query is the
sum of its terms, each weighted by how often the query says it (a query's words are a bag with
counts, as BM25 defines it — tantivy's query parser counts a repeated word once), saturating as
Okapi BM25's k3 says (qtf_weight). k1 = 1.2 and b = 0.75 are tantivy's, and fixed.
"""
from __future__ import annotations

import re
import shutil
import string
import threading
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterable

import tantivy

from .generation import read_marker, write_marker
from .store import IndexDoc

_QUERY_SYNTAX = re.compile(r"[^\w\s]+", re.UNICODE)
TEXT = "text"
ANALYZER = "en_refind"
FORMAT_VERSION = 2   # 1: title/section/body en_stem fields; 2: one `text` field analysed by en_refind
K3 = 8.0             # query-term saturation (Okapi's k3; Robertson et al. at TREC used 7 to 1000)
# tantivy keeps dates as i64 nanoseconds: what lies outside cannot be indexed (the edge refuses it).
DATE_MIN, DATE_MAX = datetime(1678, 1, 1), datetime(2262, 1, 1)


@dataclass(frozen=True)
class SparseFilter:
    """Restrictions pushed into the BM25 query (all optional; all must hold)."""
    workspace: str | None = None
    domains: tuple[str, ...] = ()
    after: datetime | None = None
    before: datetime | None = None
    cluster_ids: tuple[int, ...] = ()
    entities: tuple[str, ...] = ()
    scopes: tuple[str, ...] | None = None
    page_ids: tuple[str, ...] | None = None


def _schema() -> tantivy.Schema:
    sb = tantivy.SchemaBuilder()
    sb.add_unsigned_field("chunk_id", stored=True, indexed=True, fast=True)
    for f in ("page_id", "workspace", "domain", "scope", "entities"):
        sb.add_text_field(f, stored=False, tokenizer_name="raw", fast=True)
    sb.add_text_field(TEXT, stored=False, tokenizer_name=ANALYZER)
    for f in ("first_seen", "last_seen", "published"):
        sb.add_date_field(f, stored=False, indexed=True, fast=True)
    sb.add_integer_field("cluster_id", stored=False, indexed=True, fast=True)
    return sb.build()


def _utc(dt: datetime) -> datetime:
    return dt.replace(tzinfo=timezone.utc) if dt.tzinfo is None else dt.astimezone(timezone.utc)


def qtf_weight(n: int, k3: float) -> float:
    """The weight of a term the query says `n` times: Robertson's query-term saturation
    (k3 + 1)·n / (k3 + n) — 1 for a term said once; k3 = 0 counts a repeat as nothing more,
    a large k3 counts every repeat in full (bm25s does)."""
    return (k3 + 1) * n / (k3 + n)


def plain_query(text: str) -> str:
    """A user's words as a bag of terms: query syntax (quotes, colons, +/-) is not ours to parse."""
    words = _QUERY_SYNTAX.sub(" ", text).split()
    return " ".join(w.lower() for w in words)


class SparseIndex:
    def __init__(self, path: Path | str, writer_heap: int = 128_000_000):
        self.path = Path(path)
        self.marker_path = self.path.parent / (self.path.name + ".json")
        self.writer_heap = writer_heap
        self._lock = threading.RLock()
        self.schema = _schema()
        self.index = self._open()

    def _open(self) -> tantivy.Index:
        self.path.mkdir(parents=True, exist_ok=True)
        marker = read_marker(self.marker_path) or {}
        if marker.get("format", 1) != FORMAT_VERSION:
            # Written by another format: start empty at generation -1, so the caller rebuilds it
            # from the store (the store is the truth; an index is always rebuildable).
            self._reset()
        try:
            index = tantivy.Index(self.schema, path=str(self.path), reuse=True)
        except ValueError:
            # Unreadable or from another schema: start empty; the caller rebuilds from the store.
            self._reset()
            index = tantivy.Index(self.schema, path=str(self.path), reuse=False)
        index.register_tokenizer(ANALYZER, _analyzer())   # analysers are not stored with the index
        return index

    def _reset(self) -> None:
        shutil.rmtree(self.path)
        self.path.mkdir(parents=True)
        write_marker(self.marker_path, {"generation": -1, "format": FORMAT_VERSION})

    # Generation marker --------------------------------------------------------------------------
    @property
    def generation(self) -> int:
        m = read_marker(self.marker_path)
        return int(m["generation"]) if m and "generation" in m else -1

    def mark(self, generation: int) -> None:
        write_marker(self.marker_path, {"generation": generation, "format": FORMAT_VERSION})

    # Writes -------------------------------------------------------------------------------------
    def _doc(self, d: IndexDoc) -> tantivy.Document:
        doc = tantivy.Document()
        doc.add_unsigned("chunk_id", int(d.chunk_id))
        doc.add_text("page_id", d.page_id)
        doc.add_text("workspace", d.workspace_id)
        doc.add_text("domain", d.domain or "")
        if d.scope:
            doc.add_text("scope", d.scope)
        for e in d.entities:
            doc.add_text("entities", e)
        doc.add_text(TEXT, "\n".join(x for x in (d.title, d.section, d.text) if x))
        doc.add_date("first_seen", _utc(d.first_seen))
        doc.add_date("last_seen", _utc(d.last_seen))
        if d.published is not None:
            doc.add_date("published", _utc(d.published))
        if d.cluster_id is not None:
            doc.add_integer("cluster_id", int(d.cluster_id))
        return doc

    def _docs(self, docs: Iterable[IndexDoc], rejected: dict[str, str]) -> list[tantivy.Document]:
        """tantivy documents for `docs`, built before a writer is opened (so a value the index cannot
        hold never leaves a writer, and its lock, behind). A page with any such chunk is left out
        whole and named in `rejected` (page id -> reason)."""
        out: list[tuple[str, tantivy.Document]] = []
        for d in docs:
            if d.page_id in rejected:
                continue
            try:
                out.append((d.page_id, self._doc(d)))
            except (ValueError, OverflowError, TypeError) as exc:  # out-of-range date/int, unencodable text
                rejected[d.page_id] = f"{type(exc).__name__}: {exc}"
        return [doc for pid, doc in out if pid not in rejected]

    def _write(self, fill: Callable[[tantivy.IndexWriter], None], generation: int) -> None:
        """One writer: `fill` it, commit, record `generation`; on any failure roll back and let the
        writer (and its lock) go at once, not with a traceback that still holds it."""
        with self._lock:
            writer = self.index.writer(self.writer_heap, 1)
            try:
                fill(writer)
                writer.commit()
                writer.wait_merging_threads()
            except BaseException:
                writer.rollback()
                raise
            finally:
                del writer
            self.index.reload()
            self.mark(generation)

    def replace_pages(self, page_ids: Iterable[str], docs: Iterable[IndexDoc], generation: int) -> dict[str, str]:
        """Drop every chunk of `page_ids`, add `docs`, commit, then record `generation`.
        Idempotent, so replaying it after a crash is always safe. Returns the pages left out because
        the index cannot hold one of their values (page id -> reason)."""
        page_ids = list(page_ids)
        rejected: dict[str, str] = {}
        built = self._docs(docs, rejected)

        def fill(writer):
            for pid in page_ids:
                writer.delete_documents_by_term("page_id", pid)
            for doc in built:
                writer.add_document(doc)

        self._write(fill, generation)
        return rejected

    def rebuild(self, batches: Iterable[list[IndexDoc]], generation: int) -> dict[str, str]:
        """Every chunk again from the store; returns the pages left out (as replace_pages)."""
        rejected: dict[str, str] = {}

        def fill(writer):
            writer.delete_all_documents()
            for batch in batches:
                for doc in self._docs(batch, rejected):
                    writer.add_document(doc)

        self._write(fill, generation)
        return rejected

    # Reads --------------------------------------------------------------------------------------
    def count(self) -> int:
        self.index.reload()
        return self.index.searcher().num_docs

    def ids(self) -> list[int]:
        """Every chunk id in the index, sorted (for consistency checks, not a hot path)."""
        self.index.reload()
        searcher = self.index.searcher()
        n = searcher.num_docs
        if n == 0:
            return []
        hits = searcher.search(tantivy.Query.all_query(), n).hits
        return sorted(int(searcher.doc(addr)["chunk_id"][0]) for _, addr in hits)

    def _filter_queries(self, f: SparseFilter) -> list[tantivy.Query]:
        s = self.schema
        out: list[tantivy.Query] = []
        if f.workspace:
            out.append(tantivy.Query.term_query(s, "workspace", f.workspace))
        if f.domains:
            out.append(tantivy.Query.term_set_query(s, "domain", list(f.domains)))
        if f.after or f.before:
            # after is inclusive, before exclusive: [after, before)
            lo = _utc(f.after) if f.after else None
            hi = _utc(f.before) if f.before else None
            out.append(tantivy.Query.range_query(s, "last_seen", tantivy.FieldType.Date, lo, hi,
                                                 include_lower=True, include_upper=hi is None))
        if f.cluster_ids:
            out.append(tantivy.Query.term_set_query(s, "cluster_id", [int(c) for c in f.cluster_ids]))
        if f.entities:
            out.append(tantivy.Query.term_set_query(s, "entities", list(f.entities)))
        if f.scopes is not None:
            out.append(tantivy.Query.term_set_query(s, "scope", list(f.scopes)) if f.scopes
                       else tantivy.Query.empty_query())
        if f.page_ids is not None:
            out.append(tantivy.Query.term_set_query(s, "page_id", list(f.page_ids)) if f.page_ids
                       else tantivy.Query.empty_query())
        return out

    def query(self, text: str, k3: float = K3) -> tantivy.Query | None:
        """The BM25 query of a user's words: every analysed term once, weighted by how often the
        words say it, saturating with `k3` (qtf_weight). None: no term left (only stop words)."""
        counts = Counter(_ANALYZER.analyze(plain_query(text)))
        if not counts:
            return None
        clauses = []
        for term, n in counts.items():
            q = tantivy.Query.term_query(self.schema, TEXT, term)
            clauses.append((tantivy.Occur.Should, q if n == 1 else tantivy.Query.boost_query(q, qtf_weight(n, k3))))
        return clauses[0][1] if len(clauses) == 1 else tantivy.Query.boolean_query(clauses)

    def search(self, text: str, top_n: int, flt: SparseFilter | None = None, k3: float = K3
               ) -> list[tuple[int, float]]:
        """[(chunk_id, bm25)] best first; ties broken by chunk id."""
        query = self.query(text, k3)
        if query is None:
            return []
        filters = self._filter_queries(flt) if flt else []
        if filters:
            query = tantivy.Query.boolean_query(
                [(tantivy.Occur.Must, query)]
                + [(tantivy.Occur.Must, tantivy.Query.const_score_query(q, 0.0)) for q in filters]
            )
        searcher = self.index.searcher()
        hits = searcher.search(query, top_n, count=False).hits   # no total count: nobody reads it
        if not hits:
            return []
        # chunk ids from the fast-field column, not each hit's stored document (a doc-store block read
        # and decompression per hit)
        ids = searcher.fast_field_values("chunk_id", [addr for _, addr in hits])
        out = [(int(c), float(score)) for c, (score, _) in zip(ids, hits)]
        out.sort(key=lambda t: (-t[1], t[0]))
        return out

    def doc_freqs(self, words: Iterable[str]) -> dict[str, int]:
        """How many chunks hold each word's stem (a word's specificity: the fewer, the more specific)."""
        searcher = self.index.searcher()
        return {w: int(searcher.doc_freq(TEXT, (stems(w) or [w])[0])) for w in words}


# One-character tokens (a letter or a digit alone) carry little and match nearly everything; the
# analyser drops them as it drops stop words (bm25s' default token pattern does the same).
_SINGLE = list(string.ascii_lowercase + string.digits)


def _analyzer() -> tantivy.TextAnalyzer:
    """en_refind: simple tokenizer, long tokens dropped, lower case, English stop words (tantivy's
    list), one-character tokens, Snowball English stemmer."""
    return (tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple()).filter(tantivy.Filter.remove_long(40))
            .filter(tantivy.Filter.lowercase()).filter(tantivy.Filter.stopword("english"))
            .filter(tantivy.Filter.custom_stopword(_SINGLE)).filter(tantivy.Filter.stemmer("english")).build())


_ANALYZER = _analyzer()
# Stems as the index holds them, but keeping stop words: highlighting and the evidence searcher's
# concepts compare a word's stem, and a stop word the user typed is still a word of theirs.
_EN_STEM = (tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple()).filter(tantivy.Filter.remove_long(40))
            .filter(tantivy.Filter.lowercase()).filter(tantivy.Filter.stemmer("english")).build())
_LOWER = (tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple()).filter(tantivy.Filter.remove_long(40))
          .filter(tantivy.Filter.lowercase()).build())


def stems(text: str) -> list[str]:
    """The stems of `text`'s words, in order, stop words kept (``"Magnetic reversals"`` -> ``["magnet", "revers"]``)."""
    return _EN_STEM.analyze(text)


def index_terms(text: str) -> list[str]:
    """The terms the index holds for `text` and a query of it searches for: stems without stop words
    or one-character tokens (``"The magnetic field"`` -> ``["magnet", "field"]``)."""
    return _ANALYZER.analyze(text)


def words(text: str) -> list[str]:
    """`text`'s tokens as the index splits them, lower-cased but not stemmed."""
    return _LOWER.analyze(text)
