"""The search's in-memory view of the store (indexes/hot.py) stays what the store says.

Every step writes to a real store — DuckDB, and PostgreSQL (the `new_store` fixture) — the way the product does (page writes, re-visits, deletes,
entity edits, cluster refits, quarantine); after each, the view brought forward from the change rows
must equal a view read whole, and both must equal what the store's own queries return."""
from __future__ import annotations

import os
from datetime import datetime, timedelta

import numpy as np
import pytest

from indexes.hot import HotPages
from indexes.store import ChunkRow, CorpusStore, EntityRow, PageRow, PageWrite, Touch

T0 = datetime(2026, 3, 1, 12, 0, 0, 123456)


def _write(n: int, ws: str = "default", version: int = 0, first_chunk: int = 1) -> PageWrite:
    pid = f"{ws}:p{n}"
    chunks = [ChunkRow(first_chunk + o, pid, o, f"text {n} {o} v{version}", o * 100, o * 100 + 90 + version,
                       ["A", "B"] if o else None, 5) for o in range(1 + n % 3)]
    page = PageRow(pid, ws, f"https://ex.org/{ws}/{n}", f"ex.org/{ws}/{n}", "ex.org",
                   None if n % 4 == 0 else f"Title {n} v{version}", "body", f"h{n}{version}", T0,
                   T0 + timedelta(days=n), published=None if n % 2 else T0 - timedelta(days=3), scope=None
                   if n % 5 else "hr")
    return PageWrite(page, chunks, {})


def _views_agree(store: CorpusStore, hot: HotPages) -> None:
    delta = hot.view()
    full = HotPages(store, hot.text_budget).view()
    assert delta.generation == full.generation == store.generation()
    assert set(delta.row_of) == set(full.row_of)
    assert delta.page_rows(sorted(full.row_of)) == full.page_rows(sorted(full.row_of)) \
        == store.pages_by_id(sorted(full.row_of)) | {}  # the store's own hydrate query, same shape
    assert np.array_equal(delta.chunk_ids, full.chunk_ids)
    ids = full.chunk_ids.tolist()
    assert delta.chunk_pages(ids) == full.chunk_pages(ids) == store.chunk_pages(ids)
    assert delta.chunk_offsets(ids) == {c: (m["char_start"], m["char_end"]) for c, m in store.chunks_by_id(ids).items()}
    assert delta.populated == full.populated == store.workspaces_with_pages()
    for ws in ("default", "other"):
        assert delta.workspace_page_ids(ws) == store.filtered_pages(ws)
        assert np.array_equal(delta.chunk_ids_of_pages(store.filtered_pages(ws)),
                              store.chunk_ids_of_pages(store.filtered_pages(ws)))
    pids = sorted(full.row_of)   # recency reads last_seen as microseconds since 1970, by page row
    us = delta.last_seen_us(np.array([delta.row_of[p] for p in pids], dtype=np.int64)).tolist()
    epoch = datetime(1970, 1, 1)
    assert dict(zip(pids, us)) == {p: (t - epoch) // timedelta(microseconds=1)
                                   for p, t in store.last_seen_of(pids).items()}
    rows = delta.chunk_rows(ids + [max(ids, default=0) + 1])   # a chunk the view does not hold: -1
    pages = store.chunk_pages(ids)
    assert rows[-1] == -1 and delta.page_ids_of(rows[:-1]) == [pages[c] for c in ids]
    if hot.text_budget:   # the snippets' texts and section paths, in memory or the text file, are the store's
        assert delta.snippet_chunks(ids) == full.snippet_chunks(ids) == store.snippet_chunks(ids)
        size = sum(len(t.encode()) for t, _ in store.snippet_chunks(ids).values())
        if size <= hot.text_budget:
            assert delta.chunk_text is not None and full.chunk_text is not None
            assert delta.text_bytes == full.text_bytes == size
        else:   # past the budget: on disk (the one read whole spilled them; the delta's were moved)
            assert delta.chunk_text is None and full.chunk_text is None
            assert delta.text_file is not None and full.text_file is not None


@pytest.mark.parametrize("text_budget", [0, 2**20, 64])
def test_the_view_brought_forward_from_change_rows_equals_one_read_whole(new_store, tmp_path, text_budget):
    store = new_store()
    for ws in ("default", "other"):
        store.ensure_workspace(ws)
    hot = HotPages(store, text_budget)
    hot.view()                                            # the first view is a full read
    store.apply([_write(n, first_chunk=10 * n) for n in range(1, 9)], [])
    _views_agree(store, hot)
    # a page rewritten (new chunks, one chunk fewer), a re-visit, a delete, a new workspace's page
    store.apply([_write(2, version=1, first_chunk=500), _write(3, "other", first_chunk=600)],
                [Touch("default:p4", T0 + timedelta(days=40), 2)], deletes=["default:p5"])
    _views_agree(store, hot)
    # entity links, and an entity renamed (no change row for the pages it already names)
    store.upsert_entity(EntityRow("e1", "default", "SQLite", ["sqlite"]), ["default:p1", "default:p2"])
    _views_agree(store, hot)
    store.upsert_entity(EntityRow("e1", "default", "SQLite 3", []), [])
    store.upsert_entity(EntityRow("e2", "default", "Alpha", []), ["default:p2"])
    _views_agree(store, hot)
    assert hot.view().page_rows(["default:p2"])["default:p2"]["entities"] == ["Alpha", "SQLite 3"]
    # a cluster refit, then quarantine of a page; a deleted page's id written again
    store.replace_clusters("default", "m", {"default:p1": 7, "default:p2": 7, "default:p3": 8}, {7: 2, 8: 1})
    _views_agree(store, hot)
    store.quarantine({"default:p6": "test"}, T0)
    store.apply([_write(5, version=2, first_chunk=900)], [])
    _views_agree(store, hot)
    assert hot.delta_reads >= 6 and hot.full_reads == 1   # it was brought forward, never re-read whole
    # the other workspace emptied: it is no longer populated
    store.apply([], [], deletes=["other:p3"])
    _views_agree(store, hot)
    assert hot.view().populated == {"default"}


def test_a_view_older_than_the_pruned_change_rows_is_read_whole(new_store, tmp_path):
    store = new_store()
    store.ensure_workspace("default")
    store.ensure_workspace("other")
    hot = HotPages(store)
    store.apply([_write(n, first_chunk=10 * n) for n in range(1, 4)], [])
    hot.view()
    store.apply([_write(1, version=1, first_chunk=700)], [])
    store.prune_changes(store.generation())       # the rows that would bring the view forward are gone
    before = hot.full_reads
    _views_agree(store, hot)
    assert hot.full_reads == before + 1


@pytest.mark.parametrize("deleted", [300])
def test_many_deleted_rows_are_compacted_by_a_full_read(new_store, tmp_path, deleted):
    store = new_store()
    store.ensure_workspace("default")
    store.ensure_workspace("other")
    store.apply([_write(n, first_chunk=10 * n) for n in range(1, 1001)], [])
    hot = HotPages(store)
    hot.view()
    for start in range(1, deleted + 1, 50):      # deletes in batches: dead rows pile up in the view
        store.apply([], [], deletes=[f"default:p{n}" for n in range(start, start + 50)])
        _views_agree(store, hot)
    assert hot.full_reads >= 2 and hot.view().dead < 250


def test_texts_are_held_only_while_they_fit_the_budget(new_store, tmp_path):
    store = new_store()
    store.ensure_workspace("default")
    store.ensure_workspace("other")
    store.apply([_write(n, first_chunk=10 * n) for n in range(1, 4)], [])
    ids = HotPages(store).view().chunk_ids.tolist()
    size = sum(len(t.encode()) for t, _ in store.snippet_chunks(ids).values())
    assert HotPages(store).view().snippet_chunks(ids) is None            # 0: neither held nor on file
    short = HotPages(store, size - 1).view()                               # one byte short: on file
    assert short.chunk_text is None and short.text_file is not None
    assert short.snippet_chunks(ids) == store.snippet_chunks(ids)
    assert not [f for f in os.listdir(tmp_path) if f.startswith(".hot-texts")]   # unlinked: nothing left behind
    hot = HotPages(store, size)                                          # exactly: held
    assert hot.view().snippet_chunks(ids) == store.snippet_chunks(ids)
    assert hot.view().text_bytes == size and hot.view().text_file is None
    # a write that takes them past the budget: the view brought forward moves them to a file ...
    store.apply([_write(7, first_chunk=700)], [])
    v = hot.view()
    assert hot.full_reads == 1 and v.chunk_text is None and v.text_bytes == 0 and v.text_file is not None
    ids7 = v.chunk_ids.tolist()
    assert v.snippet_chunks(ids7) == store.snippet_chunks(ids7) and 700 in ids7
    assert v.chunk_pages([700]) == {700: "default:p7"}                    # ... and keeps everything else
    # ... until a full read finds they fit again (the budget raised here by hand)
    hot.text_budget = 2**20
    store.apply([], [], deletes=["default:p7"])
    store.prune_changes(store.generation())
    assert hot.view().snippet_chunks(ids) == store.snippet_chunks(ids) and hot.full_reads == 2
