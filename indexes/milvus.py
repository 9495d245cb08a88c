"""Both search arms in a Milvus server: the same interfaces as `SparseIndex` (tantivy) and
`DenseIndex` (FAISS), so everything above the arms — RRF, rerank, rollup, recency, pinning,
explain, paging, compare's shared sparse arm — is unchanged.

Collections (one Milvus database; `<prefix>` from [milvus] collection_prefix):
  <prefix>_sparse          chunk_id (primary key), the page's filter fields, `text` (analysed: the
                           standard tokenizer, lower case, English stop words, the Snowball English
                           stemmer — as tantivy's en_refind) and `sparse`, filled by Milvus's own
                           BM25 function from `text`; searched with the query's words (full-text
                           search, BM25 k1 = 1.2, b = 0.75 as tantivy's).
  <prefix>_dense_<model>   chunk_id, the same filter fields, and the model's vector (inner product;
                           the index type and its params are settings).
Filter fields: page_id, workspace, domain, scope ("" for none), entities (an array), last_seen
(microseconds since the epoch, UTC) and cluster_id (-1 for none). A search's filters become one
Milvus boolean expression, every value a quoted literal (strings JSON-escaped, integers as
integers; milvus-lite 2.5 has no expression templates), pushed into both arms — never a cut after ranking.

The generation each collection holds is recorded in a marker file in the data dir, as the
embedded indexes' are, so start-up repair replays the store's change log into Milvus the same
way (the store is the truth; a collection without a marker is rebuilt from it).

Milvus is addressed by URI only (`MilvusClient(uri, token)`), so the same code talks to a
cluster and to a local Milvus (milvus-lite's server on loopback in the tests).
"""
from __future__ import annotations

import hashlib
import math
import re
import string
import threading
from pathlib import Path
from typing import Callable, Iterable

import numpy as np

from .generation import read_marker, write_marker
from .milvus_filters import _list, _row, expression
from .sparse import K3, SparseFilter, plain_query
from .store import IndexDoc

MAX_TEXT_BYTES = 60_000          # Milvus VARCHAR holds 65,535 bytes
BATCH = 1000
# As tantivy's en_refind (indexes/sparse.py): English stop words and one-character tokens dropped,
# long tokens dropped, the Snowball English stemmer.
ANALYZER = {"tokenizer": "standard",
            "filter": ["lowercase",
                       {"type": "stop", "stop_words": ["_english_", *string.ascii_lowercase, *string.digits]},
                       {"type": "length", "max": 40}, {"type": "stemmer", "language": "english"}]}
FORMAT = 2          # the sparse collection's analyser: a marker of another format asks for a rebuild
FIELDS = ["page_id", "workspace", "domain", "scope", "entities", "last_seen", "cluster_id"]


class MilvusUnavailable(RuntimeError):
    """pymilvus is not installed, or the server does not answer."""


def _answered(call, what: str):
    """Run a Milvus call; a server that does not answer (or refuses) becomes MilvusUnavailable."""
    try:
        return call()
    except Exception as exc:  # pymilvus's MilvusException and gRPC errors alike
        raise MilvusUnavailable(f"Milvus did not answer {what}: {str(exc)[:300]}") from exc


class _Timed:
    """A MilvusClient whose every server call carries `timeout`: pymilvus retries a failed call
    until the call's own timeout, and without one it retries for minutes."""
    RPC = {"search", "query", "insert", "upsert", "delete", "has_collection", "create_collection",
           "create_index", "load_collection", "drop_collection", "list_collections", "flush"}

    def __init__(self, inner, timeout: float):
        # an int: pymilvus's retry loop honours only an integer timeout (a float falls back to
        # 75 retries with back-off, minutes)
        self._inner, self._timeout = inner, max(1, math.ceil(timeout))

    def __getattr__(self, name):
        attr = getattr(self._inner, name)
        if name not in self.RPC:
            return attr

        def call(*args, **kwargs):
            kwargs.setdefault("timeout", self._timeout)
            return attr(*args, **kwargs)
        return call


def client(uri: str, token: str = "", timeout: float = 30.0):
    try:
        from pymilvus import MilvusClient
    except ImportError as exc:  # an optional extra
        raise MilvusUnavailable("index.backend = \"milvus\" needs pymilvus: pip install 'refindery[milvus]'") from exc
    try:
        return _Timed(MilvusClient(uri=uri, token=token or "", timeout=timeout), timeout)
    except Exception as exc:  # MilvusException: the server does not answer
        raise MilvusUnavailable(f"no Milvus server answers at {uri}: {exc}") from exc


def default_prefix(data_dir: Path) -> str:
    return "rf_" + hashlib.sha1(str(Path(data_dir).resolve()).encode()).hexdigest()[:10]


def collection_name(prefix: str, kind: str, model: str | None = None) -> str:
    name = f"{prefix}_{kind}" + (f"_{model}" if model else "")
    return re.sub(r"[^A-Za-z0-9_]", "_", name)[:255]


def _clip(text: str, limit: int = MAX_TEXT_BYTES) -> str:
    raw = text.encode("utf-8")
    return text if len(raw) <= limit else raw[:limit].decode("utf-8", "ignore")


def _filter_schema(c, schema) -> None:
    from pymilvus import DataType

    schema.add_field("chunk_id", DataType.INT64, is_primary=True)
    schema.add_field("page_id", DataType.VARCHAR, max_length=128)
    schema.add_field("workspace", DataType.VARCHAR, max_length=512)
    schema.add_field("domain", DataType.VARCHAR, max_length=1024)
    schema.add_field("scope", DataType.VARCHAR, max_length=512)
    schema.add_field("entities", DataType.ARRAY, element_type=DataType.VARCHAR, max_capacity=1000, max_length=1024)
    schema.add_field("last_seen", DataType.INT64)
    schema.add_field("cluster_id", DataType.INT64)


def _scalar_indexes(ip) -> None:
    for f in ("page_id", "workspace", "scope", "domain"):
        ip.add_index(field_name=f, index_type="INVERTED")


def _create(c, name: str, schema, ip) -> None:
    """A new collection, its indexes, loaded. Not `create_collection(index_params=...)`: pymilvus then
    waits for each index to be built by polling every 0.5 s (five indexes: 2.5 s a collection, 5 s an
    empty data dir), while a new collection is empty and its indexes have nothing to build; so they are
    asked for without that wait, and `load_collection` (which waits for its own readiness, polling every
    0.2 s) makes the collection searchable before this returns."""
    c.create_collection(name, schema=schema, consistency_level="Strong")
    c.create_index(name, ip, sync=False)
    c.load_collection(name)


class _Collection:
    """What both arms share: the client, the collection, the generation marker, a write lock."""

    def __init__(self, milvus, name: str, marker: Path):
        self.c = milvus
        self.name = name
        self.marker_path = marker
        self._lock = threading.RLock()

    @property
    def generation(self) -> int:
        m = read_marker(self.marker_path)
        if not m or "generation" not in m or m.get("collection") != self.name:
            return -1
        try:
            if not self.c.has_collection(self.name):   # dropped behind our back: rebuild
                return -1
        except Exception:   # not answering: nothing can be said to be applied
            return -1
        return int(m["generation"])

    def mark(self, generation: int, **extra) -> None:
        self.marker_path.parent.mkdir(parents=True, exist_ok=True)
        write_marker(self.marker_path, {"generation": generation, "collection": self.name, **extra})

    def count(self) -> int:
        if not self.c.has_collection(self.name):
            return 0
        res = self.c.query(self.name, filter="", output_fields=["count(*)"], consistency_level="Strong")
        return int(res[0]["count(*)"])

    def ids(self) -> np.ndarray:
        """Every chunk id in the collection, sorted (consistency checks and repair, not a hot path).
        Read in buckets of the primary key's remainder (one query each stays under Milvus's
        16,384-row window; pymilvus 2.5's query iterator fails on collections with an array field)."""
        n = self.count()
        if n == 0:
            return np.zeros(0, dtype=np.int64)
        buckets = max(1, -(-n // 8_000))
        out: list[int] = []
        for k in range(buckets):
            expr = (f"chunk_id % {buckets} == 0" if k == 0
                    else f"chunk_id % {buckets} == {k} or chunk_id % {buckets} == {-k}")
            rows = self.c.query(self.name, filter=expr, output_fields=["chunk_id"], limit=16_384,
                                consistency_level="Strong")
            if len(rows) >= 16_384:
                raise RuntimeError(f"{self.name}: a bucket of chunk ids over Milvus's query window")
            out += [int(r["chunk_id"]) for r in rows]
        ids = np.unique(np.asarray(out, dtype=np.int64))
        if len(ids) != n:
            raise RuntimeError(f"{self.name}: read {len(ids)} chunk ids of {n}")
        return ids

    def delete_pages(self, page_ids: list[str]) -> None:
        for i in range(0, len(page_ids), BATCH):
            self.c.delete(self.name, filter=f"page_id in {_list(page_ids[i:i + BATCH])}")

    def delete_ids(self, ids: list[int]) -> None:
        for i in range(0, len(ids), BATCH):
            self.c.delete(self.name, ids=[int(x) for x in ids[i:i + BATCH]])


class MilvusSparseIndex(_Collection):
    """The BM25 arm as Milvus full-text search (SparseIndex's interface)."""

    def __init__(self, milvus, name: str, marker: Path):
        super().__init__(milvus, name, marker)
        self._ensure()

    @property
    def generation(self) -> int:
        m = read_marker(self.marker_path) or {}
        return super().generation if m.get("format") == FORMAT else -1   # another analyser: rebuild

    def mark(self, generation: int, **extra) -> None:
        super().mark(generation, format=FORMAT, **extra)

    def _ensure(self) -> None:
        from pymilvus import DataType, Function, FunctionType

        if self.c.has_collection(self.name):
            return
        schema = self.c.create_schema(auto_id=False)
        _filter_schema(self.c, schema)
        schema.add_field("text", DataType.VARCHAR, max_length=65_535, enable_analyzer=True,
                         analyzer_params=ANALYZER, enable_match=True)
        schema.add_field("sparse", DataType.SPARSE_FLOAT_VECTOR)
        schema.add_function(Function(name="bm25", function_type=FunctionType.BM25, input_field_names=["text"],
                                     output_field_names=["sparse"]))
        ip = self.c.prepare_index_params()
        ip.add_index(field_name="sparse", index_type="SPARSE_INVERTED_INDEX", metric_type="BM25",
                     params={"bm25_k1": 1.2, "bm25_b": 0.75})
        _scalar_indexes(ip)
        _create(self.c, self.name, schema, ip)

    def _insert(self, docs: Iterable[IndexDoc]) -> None:
        rows = [{**_row(d), "text": _clip("\n".join(x for x in (d.title, d.section, d.text) if x))} for d in docs]
        for i in range(0, len(rows), BATCH):
            self.c.insert(self.name, rows[i:i + BATCH])

    def replace_pages(self, page_ids: Iterable[str], docs: Iterable[IndexDoc], generation: int) -> dict[str, str]:
        """Drop every chunk of `page_ids`, add `docs`, then record `generation` (idempotent)."""
        with self._lock:
            self._ensure()
            self.delete_pages(list(page_ids))
            self._insert(docs)
            self.mark(generation)
        return {}

    def rebuild(self, batches: Iterable[list[IndexDoc]], generation: int) -> dict[str, str]:
        with self._lock:
            if self.c.has_collection(self.name):
                self.c.drop_collection(self.name)
            self._ensure()
            for batch in batches:
                self._insert(batch)
            self.mark(generation)
        return {}

    def ids(self) -> list[int]:
        """Every chunk id, sorted (a list, as SparseIndex.ids gives)."""
        return super().ids().tolist()

    def search(self, text: str, top_n: int, flt: SparseFilter | None = None, k3: float = K3
               ) -> list[tuple[int, float]]:
        """[(chunk_id, bm25)] best first; ties broken by chunk id. Milvus's BM25 function weighs a
        word the query repeats by its count, where the embedded arm saturates it (k3): `k3` has no
        effect here. (Sending a repeated word once, or round(k3-saturated) times, moved nDCG@10 on
        one collection closer and on the other away: bench/backends.md.)"""
        words = plain_query(text)
        if not words.strip() or top_n <= 0:
            return []
        expr = expression(flt)
        kw = {"filter": expr} if expr else {}
        hits = _answered(lambda: self.c.search(self.name, data=[words], anns_field="sparse",
                                               limit=min(top_n, 16_384), output_fields=[],
                                               consistency_level="Strong", **kw)[0], "a BM25 search")
        out = [(int(h["id"]), float(h["distance"])) for h in hits]
        out.sort(key=lambda t: (-t[1], t[0]))
        return out

    DF_CAP = 1000

    def doc_freqs(self, words: Iterable[str]) -> dict[str, int]:
        """How many chunks hold each word's stem, counted up to DF_CAP (the evidence searcher only
        asks which of a query's words is the rarest): the hits of a BM25 search for the word, which
        Milvus analyses as it analysed the text. (milvus-lite 2.5 refuses TEXT_MATCH, the exact
        count, as an invalid parameter.)"""
        out = {}
        for w in words:
            hits = _answered(lambda: self.c.search(self.name, data=[w], anns_field="sparse", limit=self.DF_CAP,
                                                   output_fields=[], consistency_level="Strong")[0], "a term count")
            out[w] = len(hits)
        return out


class MilvusDenseIndex(_Collection):
    """One embedder's vectors as a Milvus collection (DenseIndex's interface). A vector's filter
    fields are its page's, read from the store when it is added (`fields`), and re-written when a
    page's fields change without its text (`refresh_pages`)."""

    needs_compaction = False
    deleted: set = frozenset()       # Milvus deletes for real: no tombstones

    def __init__(self, milvus, name: str, marker: Path, dim: int, index_type: str, index_params: dict,
                 search_params: dict, fields: Callable[[list[int]], dict[int, IndexDoc]],
                 vectors: Callable[[list[str]], tuple[np.ndarray, np.ndarray]]):
        super().__init__(milvus, name, marker)
        self.dim, self.kind = dim, f"milvus:{index_type}"
        self.index_type, self.index_params, self.search_params = index_type, index_params, search_params
        self.fields, self.vectors = fields, vectors
        self.dirty = False
        self._ensure()

    def _ensure(self) -> None:
        from pymilvus import DataType

        if self.c.has_collection(self.name):
            return
        schema = self.c.create_schema(auto_id=False)
        _filter_schema(self.c, schema)
        schema.add_field("vector", DataType.FLOAT_VECTOR, dim=self.dim)
        ip = self.c.prepare_index_params()
        ip.add_index(field_name="vector", index_type=self.index_type, metric_type="IP", params=self.index_params)
        _scalar_indexes(ip)
        _create(self.c, self.name, schema, ip)

    @property
    def generation(self) -> int:
        g = super().generation
        m = read_marker(self.marker_path) or {}
        return g if m.get("dim") == self.dim else -1

    def total(self) -> int:
        return self.count()

    def add(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        if not len(ids):
            return
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        if vectors.shape[1] != self.dim:
            raise ValueError(f"vectors have dim {vectors.shape[1]}, index has {self.dim}")
        ids = [int(i) for i in ids]
        with self._lock:
            self._ensure()
            docs = self.fields(ids)
            rows = [{**_row(docs[cid]), "vector": vectors[k].tolist()} for k, cid in enumerate(ids) if cid in docs]
            for i in range(0, len(rows), BATCH):
                self.c.upsert(self.name, rows[i:i + BATCH])
            self.dirty = True

    def refresh_pages(self, page_ids: list[str]) -> None:
        """Re-write the filter fields of these pages' vectors (a page re-visited, re-clustered or
        re-linked keeps its vectors; the fields the filters read moved)."""
        if not page_ids:
            return
        ids, vecs = self.vectors(page_ids)
        if len(ids):
            self.add(ids, vecs)

    def remove(self, ids) -> None:
        ids = [int(i) for i in ids]
        if not ids:
            return
        with self._lock:
            self.delete_ids(ids)
            self.dirty = True

    def reset(self) -> None:
        with self._lock:
            if self.c.has_collection(self.name):
                self.c.drop_collection(self.name)
            self._ensure()
            self.dirty = True

    def save(self, generation: int) -> None:
        self.mark(generation, dim=self.dim, kind=self.kind)
        self.dirty = False

    def search(self, query: np.ndarray, top_n: int, allowed_ids: np.ndarray | None = None,
               flt: SparseFilter | None = None) -> list[tuple[int, float]]:
        """[(chunk_id, inner product)] best first. `flt` (the search's filters) is pushed into Milvus
        as an expression; `allowed_ids` is used only when no filter is given (a list of chunks)."""
        if top_n <= 0:
            return []
        expr = expression(flt)
        if flt is None and allowed_ids is not None:
            if len(allowed_ids) == 0:
                return []
            expr = f"chunk_id in {_list(int(i) for i in allowed_ids)}"
        kw = {"filter": expr} if expr else {}
        q = np.asarray(query, dtype=np.float32).reshape(-1).tolist()
        hits = _answered(lambda: self.c.search(self.name, data=[q], anns_field="vector", limit=min(top_n, 16_384),
                                               search_params={"metric_type": "IP", "params": self.search_params},
                                               consistency_level="Strong", **kw)[0], "a vector search")
        best: dict[int, float] = {}
        for h in hits:
            best.setdefault(int(h["id"]), float(h["distance"]))
        return sorted(best.items(), key=lambda t: (-t[1], t[0]))
