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
    body = ("# Manual\n\nIntro text about the manual.\n\n## Install\n\nRun the installer twice.\n\n"
            "### On Linux\n\nUse the package manager.\n\n## Usage\n\nCall the tool with a file.")
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
