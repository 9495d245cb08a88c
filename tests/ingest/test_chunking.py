import pytest

from engine.ingest.chunking import chunk_text


@pytest.fixture(scope="module")
def tokenizer(pool):
    return pool.get("all-minilm-l6-v2").tokenizer


def ntok(tokenizer, text):
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


def long_section(word, n):
    return " ".join(f"The {word} sentence number {i} says something about {word}s." for i in range(n))


def test_chunks_are_verbatim_slices_within_the_token_budget(tokenizer):
    body = "# Guide\n\n" + "\n\n".join(long_section(w, 12) for w in ("apple", "pear", "plum", "fig"))
    chunks = chunk_text(body, tokenizer, max_tokens=64, overlap=8)
    assert len(chunks) > 4
    for c in chunks:
        assert body[c.char_start:c.char_end] == c.text
        assert ntok(tokenizer, c.text) <= 64 + 1  # re-tokenising a slice may shift by one at the edges
        assert c.n_tokens <= 64
    assert [c.ordinal for c in chunks] == list(range(len(chunks)))
    # Nothing is lost: every word of the body is in some chunk.
    covered = "".join(body[c.char_start:c.char_end] for c in chunks)
    assert set(body.split()) <= set(covered.split())


def test_a_heading_starts_a_new_chunk_and_sections_are_recorded(tokenizer):
    body = (f"# Manual\n\n{long_section('manual', 5)}\n\n## Install\n\n{long_section('installer', 5)}\n\n"
            f"### On Linux\n\n{long_section('package', 5)}\n\n## Usage\n\n{long_section('tool', 5)}")
    chunks = chunk_text(body, tokenizer, max_tokens=200, overlap=16)
    starts = [c.text.splitlines()[0] for c in chunks]
    assert starts == ["# Manual", "## Install", "### On Linux", "## Usage"]
    assert [c.section_path for c in chunks] == [
        ["Manual"], ["Manual", "Install"], ["Manual", "Install", "On Linux"], ["Manual", "Usage"]]


def test_cuts_prefer_paragraph_boundaries(tokenizer):
    paras = [long_section(w, 3) for w in ("oak", "elm", "ash", "yew", "box", "fir")]
    body = "\n\n".join(paras)
    chunks = chunk_text(body, tokenizer, max_tokens=90, overlap=10)
    for c in chunks:
        # every chunk starts at the start of a paragraph (clean cut, no overlap needed)
        assert c.char_start == 0 or body[c.char_start - 2:c.char_start] == "\n\n"


def test_a_long_paragraph_is_split_with_overlap(tokenizer):
    body = long_section("stone", 60)  # one paragraph, far over the budget
    chunks = chunk_text(body, tokenizer, max_tokens=64, overlap=16)
    assert len(chunks) >= 5
    for a, b in zip(chunks, chunks[1:]):
        assert b.char_start < a.char_end  # windows overlap inside a paragraph
        assert b.char_start > a.char_start


def test_empty_body_gives_no_chunks(tokenizer):
    assert chunk_text("  \n\n ", tokenizer) == []


def test_the_number_of_chunks_follows_the_size_not_the_headings(tokenizer):
    """Issue 57, #9: 20,000 one-line sections made 20,000 chunks (the cost of a page followed its
    headings). Tiny sections are merged: the chunks average at least a quarter of max_tokens."""
    body = "# h\n\nx\n\n" * 2000
    n = ntok(tokenizer, body)
    chunks = chunk_text(body, tokenizer, max_tokens=256, overlap=32)
    assert len(chunks) <= n // 64 + 2 < 2000   # every cut keeps the average; then the last chunk
    assert all(c.n_tokens <= 256 for c in chunks)
    assert "".join(body[c.char_start:c.char_end] for c in chunks).count("x") == 2000   # nothing lost
    # short sections among ordinary ones still start chunks of their own while the page's budget allows
    mixed = (f"# Intro\n\nA short opening line.\n\n## Body\n\n{long_section('oak', 12)}\n\n"
             f"## Tail\n\nA short closing line.")
    assert [c.text.splitlines()[0] for c in chunk_text(mixed, tokenizer, max_tokens=256, overlap=32)] == \
        ["# Intro", "## Body", "## Tail"]


def test_chunking_a_page_leaves_the_tokenizer_the_model_encodes_with_as_it_was(pool, tmp_path):
    """A fast tokenizer holds its padding and truncation on one shared object and sets them before each
    call: the ingest's chunking (neither) used to switch off the padding the model's encoding had set,
    so a write encoding on one thread while another chunked got ragged batches ("unable to create
    tensor", a 500 on a busy server). Chunking now runs on a copy of its own."""
    from engine.core.corpus import open_corpus
    from engine.core.settings import load_settings
    from engine.ingest.pipeline import Ingester

    corpus = open_corpus(load_settings(data_dir=str(tmp_path)), pool)
    try:
        ing = Ingester(corpus, "default", progress=False)
        body = "Gannets dive from thirty metres. " * 200
        ing.ingest([(1, "test", {"url": "https://example.org/a", "body_text": body, "seen_at": "2026-01-01T00:00:00Z"})])
        model_tokenizer = ing.embedder.model.tokenizer
        ing.embedder.encode_documents(["a short text", "and a rather longer one to pad the other to"])
        padding = model_tokenizer._tokenizer.padding
        assert padding is not None
        # the page again, its text changed by a trailing space only: chunked again, nothing new to embed
        report = ing.ingest([(1, "test", {"url": "https://example.org/a", "body_text": body + " ",
                                          "seen_at": "2026-02-01T00:00:00Z"})])
        assert report.count("updated") == 1 and report.chunks_embedded == 0
        assert model_tokenizer._tokenizer.padding == padding
    finally:
        corpus.close()
