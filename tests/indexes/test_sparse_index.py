"""The BM25 arm on a real tantivy index: what it indexes, how a query's words weigh, and that an index
written in an older format is rebuilt rather than read."""
from __future__ import annotations

import json
import math
from datetime import datetime

import pytest

from indexes.sparse import FORMAT_VERSION, SparseIndex, index_terms, qtf_weight, stems
from indexes.store import IndexDoc


def doc(cid: int, text: str, title: str = "", section: str = "") -> IndexDoc:
    t = datetime(2026, 1, 1)
    return IndexDoc(cid, f"p{cid}", "default", text, title, section, "x.example", t, t, None, None, None, [])


@pytest.fixture
def index(tmp_path):
    idx = SparseIndex(tmp_path / "sparse")
    idx.replace_pages([], [doc(1, "apple banana banana"), doc(2, "apple cherry cherry"),
                           doc(3, "the of and to is", title="Orchard notes"),
                           doc(4, "durian", title="Fruit", section="Tropical")], generation=1)
    return idx


def test_stop_words_and_single_characters_are_not_indexed(index):
    assert index_terms("The 3 apples of a Kind") == ["appl", "kind"]
    assert stems("The apples") == ["the", "appl"]              # stems keep stop words (highlighting, concepts)
    assert index.search("the of and", 10) == []                 # nothing left to search for
    assert index.search("a 3 x", 10) == []
    assert index.doc_freqs(["apples", "the", "cherries"]) == {"apples": 2, "the": 0, "cherries": 1}


def test_title_and_section_are_searched_with_the_body(index):
    assert [c for c, _ in index.search("orchard", 10)] == [3]
    assert [c for c, _ in index.search("tropical fruit", 10)] == [4]


def test_a_repeated_query_word_weighs_by_query_term_saturation(index):
    assert qtf_weight(1, 8.0) == 1.0
    assert qtf_weight(2, 8.0) == pytest.approx(18 / 10)
    assert qtf_weight(3, 0.0) == pytest.approx(1.0)
    assert qtf_weight(3, 1e9) == pytest.approx(3.0)
    once = dict(index.search("banana cherry", 10))
    assert once[1] == pytest.approx(once[2])                     # the two documents mirror each other
    twice = dict(index.search("banana banana cherry", 10, k3=8.0))
    assert twice[1] == pytest.approx(once[1] * qtf_weight(2, 8.0), rel=1e-5)
    assert twice[2] == pytest.approx(once[2], rel=1e-5)
    assert dict(index.search("banana banana cherry", 10, k3=0.0)) == pytest.approx(once)


def test_an_index_of_an_older_format_starts_empty_at_generation_minus_one(index, tmp_path):
    assert index.generation == 1 and index.count() == 4
    marker = tmp_path / "sparse.json"
    data = json.loads(marker.read_text())
    assert data["format"] == FORMAT_VERSION
    marker.write_text(json.dumps({**data, "format": FORMAT_VERSION - 1}))
    again = SparseIndex(tmp_path / "sparse")
    assert again.generation == -1 and again.count() == 0       # the corpus then rebuilds it from the store
    marker.write_text(json.dumps({"generation": 7}))            # a marker from before formats were written: format 1
    assert SparseIndex(tmp_path / "sparse").generation == -1


def test_scores_are_bm25_of_the_one_text_field(index):
    # one matching term in a one-term document: idf * (k1 + 1) * tf / (tf + k1 * (1 - b + b * dl / avgdl))
    (cid, score), = index.search("durian", 10)
    n, df = 4, 1
    idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
    assert cid == 4 and score > 0 and score == pytest.approx(idf * 2.2 / (1 + 1.2 * (1 - 0.75 + 0.75 * 3 / 2.75)),
                                                             rel=0.02)  # tantivy stores lengths coarsely
