"""The search's hot path, served from memory: what a result page needs of the store, at one generation.

A result page needs, per query, each chunk's page, last_seen for recency, the page rows and their
entities: asked of DuckDB that is three or four queries. `HotPages` keeps those columns in memory — every page's url, title, domain,
workspace, scope, timestamps, visit count, cluster and entity links; every chunk's page and character
offsets — and keeps them coherent with the store's generation: a search reads the generation (one
small query) and, when it moved, the view is brought forward from the store's `changes` rows (only
the pages changed since are re-read, in one transaction) or, when those rows were pruned or the
change is large, read again whole. A view is immutable once published, so a search holds one for
the whole request without a lock.

The chunks' texts and section paths (what the k returned pages show as snippets) are held too while
all the texts take at most `[search] snippet_texts_mb` (default 256 MB): then a search reads nothing
of the store at all. Above it — decided at each full read; a view brought forward past it moves its
texts — they are in a `TextFile` (indexes/hot_texts.py): an unlinked file in the data dir written by
the full read straight from DuckDB's Arrow buffers (~2.6 s for 1M chunks, 415 MB), appended to by the
views brought forward, read with os.pread per snippet (from the OS's page cache, which holds the parts
read often outside the process: no RSS). At 0 the texts are neither held nor on file, and read from
the store (one query per search).

Memory: about 1.2 KB per page plus 28 bytes per chunk; texts held add their size plus ~60 bytes a
chunk, texts on file 32 bytes a chunk (measured in docs/benchmarks.md, "The hot view").
"""
from __future__ import annotations

import json
import tempfile
import threading
from operator import itemgetter
from pathlib import Path
from dataclasses import dataclass, field

import numpy as np

from .hot_texts import TextFile, _append_texts, _Spill
from .store import CorpusStore, HotRead

# Above this share of the pages changed since a view, the view is read again whole.
FULL_RELOAD_SHARE = 0.2
# Dead rows (deleted pages) kept in a view before it is compacted by a full read.
MAX_DEAD_SHARE = 0.25

PAGE_COLUMNS = ("page_id", "workspace_id", "url", "domain", "title", "first_seen", "last_seen", "published",
                "visit_count", "cluster_id", "scope")


@dataclass(frozen=True)
class HotView:
    """The store's hot columns at `generation` (immutable: refreshing builds a new view)."""
    generation: int
    row_of: dict[str, int]                   # page id -> row in the page columns (live pages only)
    cols: dict[str, list]                    # PAGE_COLUMNS, one list each (dead rows keep stale values)
    page_entities: list[tuple[str, ...]]     # entity ids of each page row
    entity_names: dict[str, str]             # entity id -> canonical form
    chunk_ids: np.ndarray                    # int64, sorted
    chunk_row: np.ndarray                    # int32: the page row of each chunk
    chunk_start: np.ndarray                  # int32 char offsets of each chunk in its page
    chunk_end: np.ndarray
    workspace_pages: dict[str, int]          # workspace -> live pages
    dead: int = 0
    chunk_text: np.ndarray | None = None     # object: each chunk's text (None: texts not held)
    chunk_section: np.ndarray | None = None  # object: each chunk's section path, a tuple (None for NULL)
    text_bytes: int = 0                      # UTF-8 bytes of the held texts
    seen_us: np.ndarray | None = None        # int64: each page row's last_seen in microseconds since 1970
    text_file: "TextFile | None" = None     # the texts not held, on disk (None: in memory or not at all)
    text_at: np.ndarray | None = None        # int64 (chunks, 4): each chunk's text and section in text_file
    _memo: dict = field(default_factory=dict, compare=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, compare=False, repr=False)

    # Reads (every one without a store round trip) -----------------------------------------------
    @property
    def populated(self) -> frozenset[str]:
        """The workspaces that hold pages."""
        return frozenset(w for w, n in self.workspace_pages.items() if n > 0)

    @property
    def pages(self) -> int:
        return len(self.row_of)

    def _positions(self, chunk_ids) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        q = np.asarray(chunk_ids, dtype=np.int64)
        if not len(self.chunk_ids) or not len(q):
            return q, np.zeros(0, dtype=np.int64), np.zeros(len(q), dtype=bool)
        pos = np.minimum(np.searchsorted(self.chunk_ids, q), len(self.chunk_ids) - 1)
        return q, pos, self.chunk_ids[pos] == q

    def chunk_pages(self, chunk_ids) -> dict[int, str]:
        """chunk id -> page id, for the chunks that exist."""
        q, pos, hit = self._positions(chunk_ids)
        if not hit.any():
            return {}
        rows = self.chunk_row[pos[hit]].tolist()
        pages = itemgetter(*rows)(self.cols["page_id"])   # one C-level gather from the list
        return dict(zip(q[hit].tolist(), pages if len(rows) > 1 else (pages,)))

    def chunk_rows(self, chunk_ids) -> np.ndarray:
        """The page row of each chunk id (int32; -1 for a chunk the view does not hold)."""
        q, pos, hit = self._positions(chunk_ids)
        if not len(pos):
            return np.full(len(q), -1, dtype=np.int32)
        return np.where(hit, self.chunk_row[pos], np.int32(-1))

    def page_ids_of(self, rows) -> list[str]:
        """The page id of each page row."""
        rows = rows.tolist() if isinstance(rows, np.ndarray) else list(rows)
        if len(rows) < 2:
            return [self.cols["page_id"][r] for r in rows]
        return list(itemgetter(*rows)(self.cols["page_id"]))

    def last_seen_us(self, rows) -> np.ndarray:
        """Each page row's last_seen, int64 microseconds since 1970 (naive UTC, as stored)."""
        return self.seen_us[rows]

    def chunk_offsets(self, chunk_ids) -> dict[int, tuple[int, int]]:
        """chunk id -> (char_start, char_end) in its page, for the chunks that exist."""
        return self._offsets(*self._positions(chunk_ids))

    def snippet_chunks(self, chunk_ids) -> dict[int, tuple[str, list[str] | None]] | None:
        """chunk id -> (text, section path) for the chunks that exist — CorpusStore.snippet_chunks's
        answer — from memory or the view's text file, or None when this view has neither."""
        return self._texts(*self._positions(chunk_ids))

    def snippets(self, chunk_ids) -> tuple[dict[int, tuple[str, list[str] | None]] | None, dict[int, tuple[int, int]]]:
        """snippet_chunks and chunk_offsets of the same chunks, with one lookup of their positions."""
        found = self._positions(chunk_ids)
        return self._texts(*found), self._offsets(*found)

    def _offsets(self, q, pos, hit) -> dict[int, tuple[int, int]]:
        p = pos[hit]
        return {int(c): (int(s), int(e)) for c, s, e in zip(q[hit].tolist(), self.chunk_start[p].tolist(),
                                                           self.chunk_end[p].tolist())}

    def _texts(self, q, pos, hit) -> dict[int, tuple[str, list[str] | None]] | None:
        if self.chunk_text is None:
            if self.text_file is None:
                return None
            read = self.text_file.read
            return {c: (read(tp, tl).decode(), json.loads(read(sp, sl)) if sl else None)
                    for c, (tp, tl, sp, sl) in zip(q[hit].tolist(), self.text_at[pos[hit]].tolist())}
        p = pos[hit]
        return {c: (t, None if sec is None else list(sec)) for c, t, sec in
                zip(q[hit].tolist(), self.chunk_text[p].tolist(), self.chunk_section[p].tolist())}

    def page_rows(self, page_ids) -> dict[str, dict]:
        """Page rows (without body) with their entities' canonical forms, sorted — the shape of
        CorpusStore.pages_by_id."""
        out = {}
        names = self.entity_names
        for pid in page_ids:
            r = self.row_of.get(pid)
            if r is None:
                continue
            row = {c: self.cols[c][r] for c in PAGE_COLUMNS}
            row["entities"] = sorted(names[e] for e in self.page_entities[r] if e in names)
            out[pid] = row
        return out

    def workspace_page_ids(self, workspace: str) -> list[str]:
        """The pages of a workspace, sorted (memoised per view)."""
        key = ("ws", workspace)
        with self._lock:
            if key not in self._memo:
                ws, ids = self.cols["workspace_id"], self.cols["page_id"]
                self._memo[key] = sorted(ids[r] for r in self.row_of.values() if ws[r] == workspace)
            return self._memo[key]

    def chunk_ids_of_pages(self, page_ids) -> np.ndarray:
        """The chunk ids of these pages, sorted."""
        rows = np.fromiter((r for pid in page_ids if (r := self.row_of.get(pid)) is not None), dtype=np.int32)
        if not len(rows) or not len(self.chunk_ids):
            return np.zeros(0, dtype=np.int64)
        return self.chunk_ids[np.isin(self.chunk_row, rows)]


class HotPages:
    """Publishes the HotView of the store's current generation (see the module's docstring)."""

    def __init__(self, store: CorpusStore, text_budget: int = 0):
        """`text_budget`: the most bytes of chunk text the views hold in memory (0: none, and no text
        file either; see the module's docstring)."""
        self.store = store
        self.text_budget = text_budget
        self._view: HotView | None = None
        self._lock = threading.Lock()
        self.full_reads = 0      # how the views were made (for tests and /v1/status)
        self.delta_reads = 0

    def view(self, generation: int | None = None) -> HotView:
        """The view at the store's generation (`generation`: already read by the caller)."""
        gen = self.store.generation() if generation is None else generation
        v = self._view
        if v is not None and v.generation == gen:
            return v
        with self._lock:
            v = self._view
            if v is None or v.generation != gen:
                v = self._refresh(v)
                self._view = v
            return v

    def _refresh(self, old: HotView | None) -> HotView:
        """One read of the store, in one transaction: the changed pages when `old` can be brought
        forward, everything otherwise."""
        since = max_changed = None
        if old is not None and not _text_file_wasteful(old):
            since = old.generation
            max_changed = int(min(max(1000, FULL_RELOAD_SHARE * old.pages),
                                  max(0, MAX_DEAD_SHARE * max(old.pages, 1000) - old.dead)))
        spill = _Spill(self.store.scratch_dir) if self.text_budget > 0 else None
        read = self.store.hot_read(since, max_changed, self.text_budget, spill)
        if read.changed is None:
            self.full_reads += 1
            return _build(read, spill if read.spilled else None)
        self.delta_reads += 1
        return _apply_delta(old, read, self.text_budget, self.store.scratch_dir)


def _sections(col) -> np.ndarray:
    """A fetched section_path column as an object array of tuples (None for NULL)."""
    mask = np.ma.getmaskarray(col).tolist() if isinstance(col, np.ma.MaskedArray) else None
    data = col.data if mask is not None else col
    out = np.empty(len(data), dtype=object)
    for i, v in enumerate(data):   # one by one: a slice assignment would read the tuples as rows
        out[i] = None if (mask and mask[i]) or v is None else tuple(str(x) for x in v)
    return out


def _text_bytes(texts) -> int:
    return sum(len(t.encode()) for t in texts if t is not None)


def _text_file_wasteful(view: HotView) -> bool:
    """Whether most of a view's text file is what later views replaced (then the next read is whole,
    and writes a new file)."""
    if view.text_file is None:
        return False
    live = int(view.text_at[:, 1].sum() + view.text_at[:, 3].sum()) if len(view.text_at) else 0
    return view.text_file.size > 2 * live + 2**26


def _build(read: HotRead, spill: _Spill | None = None) -> HotView:
    pages, chunks = read.pages, read.chunks
    cols = {c: list(pages[c]) for c in PAGE_COLUMNS}
    row_of = {pid: i for i, pid in enumerate(cols["page_id"])}
    ents = [tuple(read.links.get(pid, ())) for pid in cols["page_id"]]
    chunk_row = np.fromiter((row_of.get(p, -1) for p in chunks["page_id"]), dtype=np.int32,
                            count=len(chunks["page_id"]))
    keep = chunk_row >= 0   # a chunk is only as visible as its page (one snapshot: always all of them)
    order = np.argsort(chunks["chunk_id"][keep], kind="stable")
    ws: dict[str, int] = {}
    for w in cols["workspace_id"]:
        ws[w] = ws.get(w, 0) + 1
    text = section = None
    text_bytes = 0
    if read.texts:
        text = np.asarray(chunks["text"], dtype=object)[keep][order]
        section = _sections(chunks["section_path"])[keep][order]
        text_bytes = _text_bytes(text)
    chunk_ids = np.asarray(chunks["chunk_id"][keep][order], dtype=np.int64)
    text_file = text_at = None
    if spill is not None and spill.file is not None:
        text_file, text_at = spill.file, spill.positions(chunk_ids)
    return HotView(read.generation, row_of, cols, ents, read.names, chunk_ids, chunk_row[keep][order],
                   np.asarray(chunks["char_start"][keep][order], dtype=np.int32),
                   np.asarray(chunks["char_end"][keep][order], dtype=np.int32), ws,
                   chunk_text=text, chunk_section=section, text_bytes=text_bytes,
                   seen_us=np.asarray(read.last_seen_us, dtype=np.int64), text_file=text_file, text_at=text_at)


def _pages_delta(old: HotView, read: HotRead) -> tuple:
    """The page rows of `old` brought to the read: every changed page dropped first (a deleted page
    stays dropped, its row dead), then each page read put back in its old row or a new one. (page
    columns, row of each page, entity links, pages per workspace, dead rows, last seen in
    microseconds, the changed pages' old rows.)"""
    pages = read.pages
    cols = {c: list(v) for c, v in old.cols.items()}
    row_of = dict(old.row_of)
    ents = list(old.page_entities)
    ws = dict(old.workspace_pages)
    dead = old.dead
    seen_us = old.seen_us.tolist()
    old_rows: dict[str, int] = {}
    for pid in read.changed:                  # drop them all first (a deleted page stays dropped)
        r = row_of.pop(pid, None)
        if r is not None:
            old_rows[pid] = r
            ws[cols["workspace_id"][r]] -= 1
            dead += 1
    for i, pid in enumerate(pages["page_id"]):
        r = old_rows.get(pid)                 # a page keeps its row
        if r is None:
            r = len(cols["page_id"])
            for c in PAGE_COLUMNS:
                cols[c].append(pages[c][i])
            ents.append(())
            seen_us.append(0)
        else:
            for c in PAGE_COLUMNS:
                cols[c][r] = pages[c][i]
            dead -= 1
        seen_us[r] = int(read.last_seen_us[i])
        ents[r] = tuple(read.links.get(pid, ()))
        row_of[pid] = r
        w = pages["workspace_id"][i]
        ws[w] = ws.get(w, 0) + 1
    return cols, row_of, ents, ws, dead, seen_us, old_rows


def _apply_delta(old: HotView, read: HotRead, text_budget: int = 0, folder: Path | None = None) -> HotView:
    """`old` brought to the read's generation: the changed pages' rows replaced (a deleted page's row
    goes dead), their chunks dropped and read again; every other row and chunk is kept, never re-read.
    Texts stay held while they fit `text_budget`; grown past it, they move to a text file in `folder`
    (the new ones are appended to the file of a view that has one)."""
    chunks = read.chunks
    cols, row_of, ents, ws, dead, seen_us, old_rows = _pages_delta(old, read)
    # Chunks: drop those of the changed pages' old rows, insert the fresh ones in order.
    chunk_ids, chunk_row, start, end = old.chunk_ids, old.chunk_row, old.chunk_start, old.chunk_end
    texts = old.chunk_text is not None and read.texts
    text, section = (old.chunk_text, old.chunk_section) if texts else (None, None)
    text_bytes = old.text_bytes if texts else 0
    on_file = old.text_file is not None and read.texts
    text_file, text_at = (old.text_file, old.text_at) if on_file else (None, None)
    if old_rows:
        keep = ~np.isin(chunk_row, np.fromiter(old_rows.values(), dtype=np.int32, count=len(old_rows)))
        chunk_ids, chunk_row, start, end = chunk_ids[keep], chunk_row[keep], start[keep], end[keep]
        if texts:
            text_bytes -= _text_bytes(text[~keep])
            text, section = text[keep], section[keep]
        if on_file:
            text_at = text_at[keep]
    new_rows = np.fromiter((row_of.get(p, -1) for p in chunks["page_id"]), dtype=np.int32,
                           count=len(chunks["page_id"]))
    if (new_rows >= 0).any():
        k = new_rows >= 0
        new_ids = np.asarray(chunks["chunk_id"], dtype=np.int64)[k]
        o = np.argsort(new_ids, kind="stable")
        at = np.searchsorted(chunk_ids, new_ids[o])
        chunk_ids = np.insert(chunk_ids, at, new_ids[o])
        chunk_row = np.insert(chunk_row, at, new_rows[k][o])
        start = np.insert(start, at, np.asarray(chunks["char_start"], dtype=np.int32)[k][o])
        end = np.insert(end, at, np.asarray(chunks["char_end"], dtype=np.int32)[k][o])
        if texts:
            new_text = np.asarray(chunks["text"], dtype=object)[k][o]
            text_bytes += _text_bytes(new_text)
            text = np.insert(text, at, new_text)
            section = np.insert(section, at, _sections(chunks["section_path"])[k][o])
        if on_file:
            new_at = _append_texts(text_file, np.asarray(chunks["text"], dtype=object)[k][o].tolist(),
                                   _sections(chunks["section_path"])[k][o].tolist())
            text_at = np.insert(text_at, at, new_at, axis=0)
    if texts and text_bytes > text_budget:   # grown past the budget: to a file (once; a full read then spills)
        text_file = TextFile(folder if folder is not None else tempfile.gettempdir())
        text_at = _append_texts(text_file, text.tolist(), section.tolist())
        text, section, text_bytes = None, None, 0
    return HotView(read.generation, row_of, cols, ents, read.names, chunk_ids, chunk_row, start, end, ws, dead,
                   chunk_text=text, chunk_section=section, text_bytes=text_bytes,
                   seen_us=np.asarray(seen_us, dtype=np.int64), text_file=text_file, text_at=text_at)
