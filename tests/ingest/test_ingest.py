"""Ingestion semantics over the real store and indexes — the store in DuckDB and in PostgreSQL."""
from __future__ import annotations

import json
from datetime import datetime

import pytest
from conftest import STORE_BACKENDS, index_ids, ingest, page

from engine.ingest.records import read_source


pytestmark = pytest.mark.parametrize("store_backend", STORE_BACKENDS, indirect=True)


def snapshot(corpus):
    sql = corpus.store.sql()
    pages = sql.rows("""SELECT page_id, url, title, body_text, content_hash, first_seen, last_seen,
                               published, visit_count, scope FROM pages ORDER BY page_id""")
    chunks = sql.rows("SELECT * FROM chunks ORDER BY chunk_id")
    vectors = sql.rows("SELECT model, chunk_id, vector FROM embeddings ORDER BY model, chunk_id")
    return pages, chunks, vectors


def test_reingesting_the_same_file_changes_nothing_but_last_seen(make_corpus, demo_subset, tmp_path):
    corpus = make_corpus()
    src = tmp_path / "pages.jsonl"
    recs = demo_subset[:6]
    src.write_text("".join(json.dumps(r) + "\n" for r in recs))
    first = corpus.ingest_report = ingest_file(corpus, src)
    assert first.count("created") == 6 and not first.errors
    before, ids_before = snapshot(corpus), index_ids(corpus)
    gen_before = corpus.store.generation()

    again = ingest_file(corpus, src)
    assert again.count("unchanged") == 6 and again.chunks_embedded == 0
    assert snapshot(corpus) == before and index_ids(corpus) == ids_before
    assert corpus.store.generation() == gen_before  # nothing to write, nothing written

    # The same file with later visit times: only last_seen (and the visit count) move.
    for r in recs:
        r = dict(r)
    later = [dict(r, seen_at="2026-12-01T08:00:00Z") for r in recs]
    src.write_text("".join(json.dumps(r) + "\n" for r in later))
    third = ingest_file(corpus, src)
    assert third.count("revisited") == 6 and third.chunks_embedded == 0
    pages_after, chunks_after, vectors_after = snapshot(corpus)
    assert chunks_after == before[1] and vectors_after == before[2]
    for old, new in zip(before[0], pages_after):
        assert new[6] == datetime(2026, 12, 1, 8, 0, 0)  # last_seen
        assert new[8] == old[8] + 1  # one more visit
        assert old[:6] == new[:6] and old[7] == new[7] and old[9] == new[9]
    assert index_ids(corpus) == ids_before


def ingest_file(corpus, path):
    from engine.ingest.pipeline import Ingester

    return Ingester(corpus, "default", progress=False).ingest(read_source(str(path)))


def test_a_changed_page_has_only_its_new_chunks_everywhere(make_corpus):
    corpus = make_corpus()
    url = "https://example.org/notes"
    old_body = "# Notes\n\nThe zanzibar protocol handles ferrets.\n\n## Second\n\nKept paragraph about otters."
    ingest(corpus, [page(url, old_body)])
    pid = corpus.store.sql().row("SELECT page_id FROM pages")[0]
    old_chunks = {c["chunk_id"]: c["text"] for c in corpus.store.page_chunks(pid)}
    assert corpus.sparse.search("zanzibar", 10)

    new_body = "# Notes\n\nThe quokka protocol handles wombats.\n\n## Second\n\nKept paragraph about otters."
    rep = ingest(corpus, [page(url, new_body, seen_at="2026-07-01T00:00:00Z")])
    assert rep.count("updated") == 1
    new_chunks = {c["chunk_id"]: c["text"] for c in corpus.store.page_chunks(pid)}
    assert set(new_chunks.values()) == {"# Notes\n\nThe quokka protocol handles wombats.",
                                        "## Second\n\nKept paragraph about otters."}
    kept = set(old_chunks) & set(new_chunks)
    assert len(kept) == 1 and rep.chunks_embedded == 1  # the surviving chunk was not re-embedded
    ids = index_ids(corpus)
    assert ids["store"] == ids["sparse"] == ids["dense:all-minilm-l6-v2"] == sorted(new_chunks)
    assert corpus.sparse.search("zanzibar", 10) == []
    assert [c for c, _ in corpus.sparse.search("quokka", 10)] == [c for c, t in new_chunks.items() if "quokka" in t]
    row = corpus.store.page(pid)
    assert row["first_seen"] == datetime(2026, 6, 1, 10) and row["last_seen"] == datetime(2026, 7, 1)


def test_older_content_does_not_overwrite_newer(make_corpus):
    corpus = make_corpus()
    url = "https://example.org/a"
    ingest(corpus, [page(url, "Fresh text about herons.", seen_at="2026-08-01T00:00:00Z")])
    rep = ingest(corpus, [page(url, "Stale text about egrets.", seen_at="2026-07-01T00:00:00Z")])
    assert rep.count("unchanged") == 1
    assert corpus.sparse.search("egrets", 5) == [] and corpus.sparse.search("herons", 5)


def test_a_deleted_page_is_in_no_index(make_corpus):

    corpus = make_corpus()
    ingest(corpus, [page("https://example.org/keep", "Pelicans are large water birds."),
                    page("https://example.org/drop", "Flamingos stand on one leg.")])
    pid = next(p for p, u in corpus.store.sql().rows("SELECT page_id, url FROM pages")
               if u.endswith("drop"))
    assert corpus.delete_page(pid) is True
    assert corpus.delete_page(pid) is False
    assert corpus.store.page(pid) is None
    ids = index_ids(corpus)
    assert ids["store"] == ids["sparse"] == ids["dense:all-minilm-l6-v2"] == ids["vectors:all-minilm-l6-v2"]
    assert len(ids["store"]) == 1
    assert corpus.sparse.search("flamingos", 5) == []
    # Nothing of it survives a restart either.
    corpus.flush()
    assert corpus.consistency()["consistent"]


def test_malformed_records_are_reported_by_line_and_the_rest_lands(make_corpus, tmp_path):
    corpus = make_corpus()
    src = tmp_path / "mixed.jsonl"
    lines = [
        json.dumps(page("https://example.org/1", "Good page one about lighthouses.")),
        "{not json",
        json.dumps({"title": "no url", "body_text": "x"}),
        json.dumps(page("ftp://example.org/2", "Bad scheme.")),
        json.dumps({"url": "https://example.org/3", "seen_at": "yesterday-ish", "body_text": "x"}),
        "[1, 2]",
        json.dumps(page("https://example.org/4", "Good page four about harbours.")),
    ]
    src.write_text("\n".join(lines) + "\n")
    rep = ingest_file(corpus, src)
    assert sorted(e.line for e in rep.errors) == [2, 3, 4, 5, 6]
    by_line = {e.line: e.error for e in rep.errors}
    assert "invalid JSON" in by_line[2] and "url" in by_line[3] and "scheme" in by_line[4]
    assert "seen_at" in by_line[5] and "object" in by_line[6]
    assert rep.count("created") == 2
    assert corpus.store.counts()["pages"] == 2


def test_entities_scope_and_html_records(make_corpus):
    corpus = make_corpus()
    html = ("<html><head><title>Kites</title></head><body><article><h1>Kites</h1>"
            "<p>A kite is a tethered craft that flies on the wind, held by a long string.</p>"
            "<p>Kites were first flown in China more than two thousand years ago.</p></article></body></html>")
    rep = ingest(corpus, [
        {"url": "https://example.org/kites", "html": html, "seen_at": "2026-06-02T00:00:00Z",
         "entities": ["China", {"canonical": "Kite", "aliases": ["kites", "tethered craft"]}],
         "scope": "team-a", "published": "2020-01-01"},
    ])
    assert rep.count("created") == 1, rep.errors
    pid = rep.outcomes[0].page_id
    row = corpus.store.page(pid)
    assert row["title"] == "Kites" and row["scope"] == "team-a" and row["domain"] == "example.org"
    assert "tethered craft" in row["body_text"]
    assert {e["canonical"] for e in row["entities"]} == {"China", "Kite"}
    kite = next(e for e in row["entities"] if e["canonical"] == "Kite")
    assert kite["aliases"] == ["kites", "tethered craft"]


def test_sparse_filter_fields_restrict_results(make_corpus):
    from indexes.sparse import SparseFilter

    corpus = make_corpus()
    ingest(corpus, [
        page("https://a.example/1", "Gannets dive for fish.", seen_at="2026-05-01T00:00:00Z", entities=["Birds"],
             scope="s1"),
        page("https://b.example/2", "Gannets nest on cliffs.", seen_at="2026-09-01T00:00:00Z", scope="s2"),
    ])

    def urls(flt):
        hits = corpus.sparse.search("gannets", 10, flt)
        chunks = corpus.store.chunks_by_id([c for c, _ in hits])
        pages = corpus.store.pages_by_id([c["page_id"] for c in chunks.values()])
        return sorted(p["url"] for p in pages.values())

    assert urls(None) == ["https://a.example/1", "https://b.example/2"]
    assert urls(SparseFilter(domains=("b.example",))) == ["https://b.example/2"]
    assert urls(SparseFilter(after=datetime(2026, 8, 1))) == ["https://b.example/2"]
    assert urls(SparseFilter(before=datetime(2026, 8, 1))) == ["https://a.example/1"]
    assert urls(SparseFilter(entities=("default/s1:birds",))) == ["https://a.example/1"]
    assert urls(SparseFilter(scopes=("s2",))) == ["https://b.example/2"]
    assert urls(SparseFilter(scopes=())) == []
    # Filters never change the BM25 score of what they keep.
    plain = dict(corpus.sparse.search("gannets", 10))
    filtered = dict(corpus.sparse.search("gannets", 10, SparseFilter(domains=("b.example",))))
    for cid, score in filtered.items():
        assert abs(plain[cid] - score) < 1e-6


def test_workspaces_keep_the_same_url_apart(make_corpus):
    corpus = make_corpus()
    ingest(corpus, [page("https://example.org/x", "Shared URL, workspace one: puffins.")])
    ingest(corpus, [page("https://example.org/x", "Shared URL, workspace two: terns.")], workspace="two")
    assert corpus.store.counts()["pages_per_workspace"] == {"default": 1, "two": 1}


def test_adding_a_model_embeds_only_what_it_lacks(make_corpus):
    """Vectors are stored per (model, chunk): a model that lacks some gets only those."""

    corpus = make_corpus()
    ingest(corpus, [page("https://example.org/m1", "Cormorants dry their wings."),
                    page("https://example.org/m2", "Shearwaters glide low.")])
    m = corpus.settings.models.active
    sql = corpus.store.sql()
    victim = sql.row("SELECT min(chunk_id) FROM chunks")[0]
    sql.run("DELETE FROM embeddings WHERE chunk_id = ?", [victim])
    assert corpus.embed_missing(m) == 1
    assert corpus.embed_missing(m) == 0
    corpus.sync()
    ids = index_ids(corpus)
    assert ids["store"] == ids[f"vectors:{m}"] == ids[f"dense:{m}"]


def test_embedding_what_a_model_lacks_leaves_the_write_lock_free_while_it_encodes(make_corpus):
    """Issue 54: a server embeds a slow model's missing vectors in its background (the quality
    profile's catch-up) while writes go on. The write lock is taken to read a batch's texts and to
    store its vectors, never across the encoding, so a write waits for an insert, not for the model;
    a page written meanwhile gets its own vectors, and every chunk ends with exactly one vector of the
    model (the queue is what the store lacks: read again after every batch)."""
    import threading

    from conftest import page

    corpus = make_corpus()
    words = "petrels shearwaters albatrosses fulmars prions storm-petrels diving gliding ocean wind ".split()
    ingest(corpus, [page(f"https://example.org/s{i}", " ".join(words[(i + j) % len(words)] for j in range(220)))
                    for i in range(48)])
    m = corpus.settings.models.active
    corpus.store.sql().run("DELETE FROM embeddings WHERE model = ?", [m])
    before = corpus.store.counts()["chunks"]
    done = []
    worker = threading.Thread(target=lambda: done.append(corpus.embed_missing(m, batch=8)))
    free = held = 0
    worker.start()
    wrote = False
    while worker.is_alive():
        if corpus.write_lock.acquire(blocking=False):
            corpus.write_lock.release()
            free += 1
        else:
            held += 1
        if not wrote and free + held >= 20:
            ingest(corpus, [page("https://example.org/new", "A new page about gannets written mid-embedding.")])
            wrote = True
        worker.join(0.005)
    assert wrote and done and done[0] >= before
    assert free > 2 * held, (free, held)   # on the lock across encoding: held nearly all of the time
    n, distinct = corpus.store.sql().row("SELECT count(*), count(DISTINCT chunk_id) FROM embeddings WHERE model = ?", [m])
    assert n == distinct == corpus.store.counts()["chunks"] == before + 1
    assert corpus.embed_missing(m) == 0
