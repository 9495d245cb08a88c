"""What a corpus store reads and writes, whichever database holds it (indexes/store.py: DuckDB,
indexes/pg_store.py: PostgreSQL): the rows of a write, what an index reads back, one read of the
search's in-memory view, and the store's errors."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import numpy as np
import pyarrow as pa

# An entity keeps at most this many aliases, each at most MAX_ALIAS_CHARS characters: a request that
# would pass either is refused (engine/ingest/entities.py, records.py); aliases that pages add to an
# entity already holding MAX_ALIASES keep the first MAX_ALIASES in sort order.
MAX_ALIASES = 100
MAX_ALIAS_CHARS = 300

@dataclass
class PageRow:
    page_id: str
    workspace_id: str
    url: str
    url_norm: str
    domain: str
    title: str | None
    body_text: str
    content_hash: str
    first_seen: datetime
    last_seen: datetime
    published: datetime | None = None
    visit_count: int = 1
    cluster_id: int | None = None
    scope: str | None = None


@dataclass
class ChunkRow:
    chunk_id: int
    page_id: str
    ordinal: int
    text: str
    char_start: int
    char_end: int
    section_path: list[str]
    n_tokens: int


@dataclass
class EntityRow:
    entity_id: str
    workspace_id: str
    canonical: str
    aliases: list[str] = field(default_factory=list)
    scope: str | None = None


@dataclass
class PageWrite:
    """Everything one changed or new page writes: the page row, its full chunk list (chunks it
    keeps are updated in place, so their vectors stay), the vectors of its new chunks, its entities."""
    page: PageRow
    chunks: list[ChunkRow]
    vectors: dict[str, dict[int, np.ndarray]] = field(default_factory=dict)  # model -> chunk_id -> vec
    entities: list[EntityRow] = field(default_factory=list)


@dataclass
class Touch:
    """A re-visit of an unchanged page: only last_seen (and the visit count) move."""
    page_id: str
    last_seen: datetime
    visits: int = 1


@dataclass
class ExistingPage:
    page_id: str
    content_hash: str
    first_seen: datetime
    last_seen: datetime
    visit_count: int
    chunk_ids: set[int]


@dataclass
class IndexDoc:
    """What an index needs to know about one chunk: its text and the page's filter fields."""
    chunk_id: int
    page_id: str
    workspace_id: str
    text: str
    title: str
    section: str
    domain: str
    first_seen: datetime
    last_seen: datetime
    published: datetime | None
    cluster_id: int | None
    scope: str | None
    entities: list[str]


@dataclass
class HotRead:
    """One read for the search's in-memory view (CorpusStore.hot_read)."""
    generation: int
    changed: list[str] | None          # None: a full read
    pages: dict[str, list]             # column -> values, by page id
    links: dict[str, list[str]]        # page id -> entity ids
    chunks: dict[str, np.ndarray]      # chunk_id, page_id, char_start, char_end (+ text, section_path)
    names: dict[str, str]              # entity id -> canonical
    texts: bool = False                # chunks has text and section_path
    last_seen_us: np.ndarray | None = None   # pages' last_seen as int64 microseconds since 1970 (naive UTC)
    spilled: bool = False              # a full read whose texts went to hot_read's `spill`


def pylist(col) -> list:
    """A fetched column as Python values (None for NULL; timestamps as datetime, as fetchall gives)."""
    if isinstance(col, np.ma.MaskedArray):
        return [None if m else v for v, m in zip(pylist(col.data), np.ma.getmaskarray(col).tolist())]
    if col.dtype.kind == "M":
        return col.astype("datetime64[us]").astype(object).tolist()
    return col.tolist()


class StoreError(RuntimeError):
    pass


class StoreUnavailable(StoreError):
    """The store's database did not answer (PostgreSQL down, restarting, unreachable): what failed
    wrote nothing, and the same call may succeed once it is back."""


class StoreBusy(StoreError):
    """Another process holds the store's file (DuckDB lets one process open it for writing)."""

    def __init__(self, path: Path, message: str):
        found = re.search(r"held in (.*?) \(PID (\d+)\)", message)
        self.pid = int(found.group(2)) if found else None
        who = f"process {self.pid} ({found.group(1)})" if found else "another process"
        super().__init__(f"the data dir {path.parent} is in use by {who}: one process may open it at a time. "
                         "If that is `refindery serve`, refindery commands go through it once it is up; "
                         "otherwise wait for that process to finish, or stop it.")


def entity_table(rows: list[EntityRow]) -> pa.Table:
    return pa.table({"entity_id": pa.array([e.entity_id for e in rows], pa.string()),
                     "workspace_id": pa.array([e.workspace_id for e in rows], pa.string()),
                     "canonical": pa.array([e.canonical for e in rows], pa.string()),
                     "aliases": pa.array([e.aliases for e in rows], pa.list_(pa.string())),
                     "scope": pa.array([e.scope for e in rows], pa.string())})


def merge_vectors(writes: list[PageWrite]) -> dict[str, tuple[list[int], list[np.ndarray]]]:
    out: dict[str, tuple[list[int], list[np.ndarray]]] = {}
    for w in writes:
        for model, by_id in w.vectors.items():
            ids, vecs = out.setdefault(model, ([], []))
            for cid, v in by_id.items():
                ids.append(cid)
                vecs.append(v)
    return out


def arrow_to_matrix(tbl: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    ids = tbl.column("chunk_id").to_numpy().astype(np.int64)
    if len(ids) == 0:
        return ids, np.zeros((0, 0), dtype=np.float32)
    col = tbl.column("vector").combine_chunks()
    flat = col.flatten().to_numpy(zero_copy_only=False).astype(np.float32, copy=False)
    return ids, np.ascontiguousarray(flat.reshape(len(ids), -1))


def duckdb_hash64(ids: np.ndarray) -> np.ndarray:
    """DuckDB's hash() of BIGINT values, as uint64: the order that sample_chunk_texts samples by, so
    that a store in PostgreSQL samples the same chunks as one in DuckDB."""
    x = np.asarray(ids, dtype=np.int64).view(np.uint64).copy()
    m = np.uint64(0xd6e8feb86659fd93)
    with np.errstate(over="ignore"):
        x ^= x >> np.uint64(32)
        x *= m
        x ^= x >> np.uint64(32)
        x *= m
        x ^= x >> np.uint64(32)
    return x


# What both stores compute alike in Python around their SQL ------------------------------------------
def page_filter(workspace: str, domains=(), after=None, before=None, cluster_ids=(), entity_ids=(), scopes=None,
                page_ids=None, ph: str = "?") -> tuple[str, list]:
    """The WHERE clause (over `pages p`) and parameters of filtered_pages; `ph` is the placeholder
    ("?" for DuckDB, "%s" for psycopg). `x IN (SELECT unnest(…))` is valid in both dialects."""
    where, params = [f"p.workspace_id = {ph}"], [workspace]
    for column, values, kind in (("p.page_id", page_ids, "VARCHAR"), ("p.domain", domains or None, "VARCHAR"),
                                 ("p.cluster_id", [int(c) for c in cluster_ids] if cluster_ids else None, "BIGINT"),
                                 ("p.scope", scopes, "VARCHAR")):
        if values is not None:
            where.append(f"{column} IN (SELECT unnest({ph}::{kind}[]))")
            params.append(list(values))
    if after is not None:
        where.append(f"p.last_seen >= {ph}")
        params.append(after)
    if before is not None:
        where.append(f"p.last_seen < {ph}")
        params.append(before)
    if entity_ids:
        where.append(f"p.page_id IN (SELECT page_id FROM page_entities WHERE entity_id IN (SELECT unnest({ph}::VARCHAR[])))")
        params.append(list(entity_ids))
    return " AND ".join(where), params


def facets_answer(n, lo, hi, domains, clusters, entities) -> dict:
    """facets' reply from its four queries' rows."""
    return {"pages": int(n), "last_seen": {"min": lo, "max": hi},
            "domains": [{"domain": d, "pages": int(c)} for d, c in domains],
            "clusters": [{"cluster_id": int(cid), "pages": int(c), "titles": list(t or [])} for cid, c, t in clusters],
            "entities": [{"entity_id": e, "canonical": name, "pages": int(c)} for e, name, c in entities]}


def cut_bodies(rows: list[tuple], max_chars: int) -> list[tuple]:
    """entity_pages' (page_id, url, title, body) rows, the bodies cut to `max_chars` characters in all."""
    out, left = [], max_chars
    for page_id, url, title, body in rows:
        if left <= 0:
            break
        out.append((page_id, url, title, (body or "")[:left]))
        left -= len(body or "")
    return out


def entity_answer(row: tuple | None) -> dict | None:
    """entity()'s reply from (entity_id, workspace, canonical, aliases, scope, pages)."""
    if row is None:
        return None
    return {"entity_id": row[0], "workspace": row[1], "scope": row[4], "canonical": row[2],
            "aliases": list(row[3] or []), "pages": row[5]}


def relinked_pages(before: dict[str, list[str]], links: list[tuple[str, str]], pages: dict[str, str]) -> list[str]:
    """rekey's pages, neither renamed old nor new, whose entity links differ before and after."""
    after: dict[str, list[str]] = {}
    for p, e in links:
        after.setdefault(p, []).append(e)
    renamed = set(pages.values())
    return sorted(p for p in set(before) | set(after)
                  if p not in renamed and p not in pages and sorted(set(after.get(p, []))) != before.get(p))


def batch_entities(writes: list[PageWrite]) -> tuple[dict[str, EntityRow], list[tuple[str, str]]]:
    """A write batch's entities (the first row of an entity names it, every row adds its aliases) and
    its (page_id, entity_id) links, sorted."""
    entities: dict[str, EntityRow] = {}
    links: set[tuple[str, str]] = set()
    for w in writes:
        for e in w.entities:
            row = entities.setdefault(e.entity_id, EntityRow(e.entity_id, e.workspace_id, e.canonical, [], e.scope))
            row.aliases = sorted(set(row.aliases) | set(e.aliases))
            links.add((w.page.page_id, e.entity_id))
    return entities, sorted(links)


def quarantined_answer(n: int, cols: list[str], rows: list[tuple]) -> dict:
    return {"pages": n, "recent": [dict(zip(cols, r)) | {"quarantined_at": r[4].isoformat()} for r in rows]}


def chunk_columns(cols: list[str], rows: list[tuple]) -> dict[str, np.ndarray]:
    """Fetched chunk rows as the columns the in-memory view reads (DuckDB's fetchnumpy shapes)."""
    kinds = {"chunk_id": np.int64, "char_start": np.int32, "char_end": np.int32}
    out: dict[str, np.ndarray] = {}
    for j, c in enumerate(cols):
        values = [r[j] for r in rows]
        if c in kinds:
            out[c] = np.array(values, dtype=kinds[c])
        else:
            arr = np.empty(len(values), dtype=object)
            for i, v in enumerate(values):
                arr[i] = v
            out[c] = arr
    return out


def vector_matrix(rows: list[tuple]) -> tuple[np.ndarray, np.ndarray]:
    """(chunk_id, float32 bytes) rows as (ids, a float32 matrix): how a PostgreSQL store keeps vectors."""
    ids = np.array([r[0] for r in rows], dtype=np.int64)
    if not len(ids):
        return ids, np.zeros((0, 0), dtype=np.float32)
    flat = np.frombuffer(b"".join(bytes(r[1]) for r in rows), dtype="<f4")
    return ids, np.ascontiguousarray(flat.reshape(len(ids), -1).astype(np.float32, copy=False))
