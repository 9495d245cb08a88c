"""The dense index kinds: HNSW tombstones and compaction, exact answers under selective filters,
and the "auto" kind switching by corpus size (real FAISS, real store)."""
from __future__ import annotations

import faiss
import numpy as np
import pytest
from conftest import STORE_BACKENDS

from indexes.dense import DenseIndex


def _unit(rng, n, d=16):
    x = rng.standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _exact(vecs, ids, q, k, allowed=None):
    keep = np.ones(len(ids), bool) if allowed is None else np.isin(ids, allowed)
    s = vecs[keep] @ q
    return [int(i) for i in ids[keep][np.argsort(-s)[:k]]]


def test_hnsw_tombstones_hide_removed_ids_and_survive_a_reopen(tmp_path):
    rng = np.random.default_rng(0)
    vecs, ids = _unit(rng, 500), np.arange(1000, 1500, dtype=np.int64)
    ix = DenseIndex(tmp_path / "m.faiss", 16, "hnsw", ef_search=200)
    ix.add(ids, vecs)
    gone = ids[:50]
    ix.remove(gone)
    q = vecs[10]  # the best match of a removed vector is itself
    hits = [i for i, _ in ix.search(q, 20)]
    assert not set(hits) & set(gone.tolist())
    assert hits == _exact(vecs[50:], ids[50:], q, 20)
    assert ix.count() == 450 and len(ix.ids()) == 450
    ix.save(3)
    again = DenseIndex(tmp_path / "m.faiss", 16, "hnsw", ef_search=200)
    assert again.generation == 3 and again.count() == 450
    assert [i for i, _ in again.search(q, 20)] == hits
    # Added again, an id lives again, and is returned once.
    again.add(ids[10:11], vecs[10:11])
    top = again.search(q, 5)
    assert top[0][0] == 1010 and [i for i, _ in top].count(1010) == 1
    assert again.count() == 451


def test_hnsw_filtered_search_is_exact_for_small_allowed_sets(tmp_path):
    rng = np.random.default_rng(1)
    vecs, ids = _unit(rng, 3000), np.arange(1, 3001, dtype=np.int64)
    ix = DenseIndex(tmp_path / "m.faiss", 16, "hnsw", hnsw_m=8, ef_construction=16, ef_search=16)
    ix.add(ids, vecs)
    allowed = rng.choice(ids, 40, replace=False)
    ix.remove(allowed[:5])
    for q in vecs[:20]:
        got = [i for i, _ in ix.search(q, 10, allowed_ids=allowed)]
        assert got == _exact(vecs, ids, q, 10, allowed[5:])
    # Larger than the exact limit: the graph walk with a widened beam, still within the filter.
    ix.EXACT_BELOW = 100
    wide = rng.choice(ids, 1500, replace=False)
    got = [i for i, _ in ix.search(vecs[0], 10, allowed_ids=wide)]
    assert len(got) == 10 and set(got) <= set(wide.tolist())


def test_hnsw_asks_for_compaction_past_a_fifth_dead(tmp_path):
    rng = np.random.default_rng(2)
    vecs, ids = _unit(rng, 100), np.arange(1, 101, dtype=np.int64)
    ix = DenseIndex(tmp_path / "m.faiss", 16, "hnsw")
    ix.add(ids, vecs)
    ix.remove(ids[:20])
    assert not ix.needs_compaction
    ix.remove(ids[20:21])
    assert ix.needs_compaction
    flat = DenseIndex(tmp_path / "f.faiss", 16, "flat")
    flat.add(ids, vecs)
    flat.remove(ids[:90])
    assert flat.count() == 10 and not flat.needs_compaction


# on PostgreSQL too: a replica's indexes follow the store's writes, and stayed flat (and uncompacted)
# however large they grew until the follow step kept them fit as a single process's writes do
@pytest.mark.parametrize("store_backend", STORE_BACKENDS, indirect=True)
def test_auto_kind_switches_to_hnsw_by_corpus_size_and_stays_consistent(store_backend, make_corpus):
    from conftest import index_ids, ingest, page

    corpus = make_corpus(index={"dense_kind": "auto", "hnsw_above": 5})
    assert corpus.dense("all-minilm-l6-v2").kind == "flat"  # empty store: below the line
    rep = ingest(corpus, [page(f"https://example.org/{i}", f"Page {i} tells of harbour number {i}.")
                          for i in range(8)])
    # Crossed the line during the ingest: rebuilt as HNSW in the same process.
    dense = corpus.dense("all-minilm-l6-v2")
    assert dense.kind == "hnsw" and isinstance(faiss.downcast_index(dense.index.index), faiss.IndexHNSWFlat)
    assert dense.count() == 8 and corpus.consistency()["dense"]["all-minilm-l6-v2"]["kind"] == "hnsw"
    corpus.flush()
    corpus.close()
    again = make_corpus(corpus.data_dir, index={"dense_kind": "auto", "hnsw_above": 5})
    dense = again.dense("all-minilm-l6-v2")
    assert dense.kind == "hnsw" and again.repairs == []
    ids = index_ids(again)
    assert ids["store"] == ids["dense:all-minilm-l6-v2"]
    # Deletes and changes go through tombstones (and a compaction once a fifth is dead).
    for o in rep.outcomes[:3]:
        assert again.delete_page(o.page_id)
    ingest(again, [page("https://example.org/7", "Page seven now tells of a lighthouse keeper.")])
    ids = index_ids(again)
    assert ids["store"] == ids["sparse"] == ids["dense:all-minilm-l6-v2"]
    top = again.dense("all-minilm-l6-v2").search(again.embedder().encode_query("lighthouse keeper"), 1)[0][0]
    assert again.store.chunks_by_id([top])[top]["text"] == "Page seven now tells of a lighthouse keeper."
    assert again.dense("all-minilm-l6-v2").kind == "hnsw"  # 5 left: at the line
    assert again.delete_page(rep.outcomes[3].page_id)  # 4 = 80% of 5: stays (the band between)
    assert again.dense("all-minilm-l6-v2").kind == "hnsw"
    assert again.delete_page(rep.outcomes[4].page_id)  # 3: below the band, flat again
    assert again.dense("all-minilm-l6-v2").kind == "flat" and again.dense("all-minilm-l6-v2").count() == 3
    again.flush()
    again.close()
    # Reopened with another line: the kind follows it and the index still matches the store.
    third = make_corpus(corpus.data_dir, index={"dense_kind": "auto", "hnsw_above": 100})
    assert third.dense("all-minilm-l6-v2").kind == "flat"
    assert third.consistency()["consistent"]
    ids = index_ids(third)
    assert ids["store"] == ids["dense:all-minilm-l6-v2"]
    third.close()


def test_a_kind_switch_builds_beside_the_live_index(make_corpus):
    from conftest import ingest, page

    corpus = make_corpus(index={"dense_kind": "auto", "hnsw_above": 100})
    ingest(corpus, [page(f"https://example.org/{i}", f"Page {i} is about quay number {i}.") for i in range(6)])
    live = corpus.dense("all-minilm-l6-v2")
    assert live.kind == "flat"
    corpus.settings.index.hnsw_above = 6
    corpus.maintain_dense("all-minilm-l6-v2")
    fresh = corpus.dense("all-minilm-l6-v2")
    # The old object was never emptied (a search holding it kept its answers); the new one is whole.
    assert fresh is not live and live.count() == 6 and live.kind == "flat"
    assert fresh.kind == "hnsw" and sorted(fresh.ids().tolist()) == sorted(live.ids().tolist())
    corpus.flush()
    assert corpus.consistency()["consistent"]


def test_search_threads_are_set_per_thread(shared_corpus):
    """index.search_threads holds on the search's arm threads only: FAISS's OpenMP setting is per
    thread, so the caller's (and ingest's) threads keep FAISS's default."""
    import threading

    import faiss

    from engine.refind.search import SearchService
    from indexes.dense import set_search_threads

    default = faiss.omp_get_max_threads()
    svc = SearchService(shared_corpus)
    assert shared_corpus.settings.index.search_threads == 1
    assert svc._pool.submit(faiss.omp_get_max_threads).result() == 1
    seen = []
    t = threading.Thread(target=lambda: (set_search_threads(0), seen.append(faiss.omp_get_max_threads())))
    t.start()
    t.join()
    assert seen == [default] and faiss.omp_get_max_threads() == default   # 0 leaves it; others untouched


def test_the_dense_arm_on_the_calling_thread_searches_with_one_thread_and_restores_the_callers(shared_corpus):
    """The dense arm runs on the calling thread (the sparse arm on the pool): FAISS's threads are
    index.search_threads during its call and the caller's own setting again after it."""
    import threading

    import faiss

    from engine.refind.search import SearchRequest, SearchService

    svc = SearchService(shared_corpus)
    default = faiss.omp_get_max_threads()
    seen = []
    dense = shared_corpus.dense(shared_corpus.settings.models.active)
    original = dense.search

    def spy(*a, **k):
        seen.append((threading.get_ident(), faiss.omp_get_max_threads()))
        return original(*a, **k)

    dense.search = spy
    try:
        svc.search(SearchRequest(workspace="default", query="python"), log=False)
    finally:
        del dense.search
    assert seen and set(seen) == {(threading.get_ident(), 1)} and faiss.omp_get_max_threads() == default
