"""Training our own cross-encoder: pair mining, the training loop, the model card, registration,
ONNX export, loading any CrossEncoder folder, and `refindery reranker train` end to end."""
from __future__ import annotations

import json
import tomllib

import numpy as np
import pytest
from conftest import QUERIES, TOPICS, ingest, page, tiny_pairs

SECTIONS = {
    "Tide pools": ("Tide pools form where rock holds sea water at low tide. Anemones close their tentacles when "
                   "the water drains away. Crabs hide under loose stones until the tide returns. Starfish pry "
                   "open mussels with slow steady pressure."),
    "Glacier retreat": ("Glaciers retreat when summer melt exceeds winter snowfall. Meltwater carves channels "
                        "under the ice sheet. Moraines mark where the ice front once stood. Exposed bedrock shows "
                        "long scratches left by dragged boulders."),
    "Sourdough starters": ("A starter is flour and water colonised by wild yeast. Feeding it daily keeps the "
                           "culture active and sour. Bakers keep a small portion back for the next loaf. A "
                           "sluggish starter rises slowly and smells of acetone."),
    "Bicycle gearing": ("Gear ratios trade pedalling speed for force on the pedals. A small front ring makes "
                        "hills easier to climb. Derailleurs move the chain between sprockets while pedalling. "
                        "Worn chains skip under load and wear the cassette."),
}


@pytest.fixture(scope="module")
def mining_corpus(pool, tmp_path_factory):
    from engine.core.corpus import open_corpus
    from engine.core.settings import load_settings

    s = load_settings(data_dir=str(tmp_path_factory.mktemp("mining") / "data"))
    c = open_corpus(s, pool)
    ingest(c, [page(f"https://notes.example/{i}", f"# {h}\n\n{body}", title=f"Notes on {h.lower()}")
               for i, (h, body) in enumerate(SECTIONS.items())])
    yield c
    c.close()


def test_mined_pairs_are_headings_and_cut_sentences_with_hard_negatives_from_other_pages(mining_corpus):
    from engine.refind.rerank_pairs import NegativePlan, PassageIndex, mined_pairs
    from engine.refind.search import SearchService

    pairs = mined_pairs(SearchService(mining_corpus), mining_corpus.store, "default", n=20,
                        plan=NegativePlan(hard=2, random=1), seed=3)
    index = PassageIndex(mining_corpus.store, "default")
    page_of = {ch["text"]: pid for pid, chs in index.by_page.items() for ch in chs}
    groups: dict[str, list] = {}
    for p in pairs:
        groups.setdefault(p.group, []).append(p)
    assert len(groups) == len(index.by_page)  # one chunk per page here, every one mined
    sources = set()
    for g, ps in groups.items():
        (pos,) = [p for p in ps if p.label == 1.0]
        sources.add(pos.source)
        if pos.source == "mined-heading":
            assert pos.query in SECTIONS and pos.passage.startswith(SECTIONS[pos.query][:30])
        else:
            assert pos.source == "mined-sentence"
            assert pos.query not in pos.passage  # the sentence is cut out of its passage
            body = next(b for b in SECTIONS.values() if pos.query in b)
            assert set(pos.passage.split()) < set(body.split())
        own = next(pid for pid, chs in index.by_page.items()
                   if any(pos.query in ch["text"] or pos.passage[:40] in ch["text"] for ch in chs))
        negs = [p for p in ps if p.label == 0.0]
        assert [p.source for p in negs].count("hard") == 2 and [p.source for p in negs].count("random") == 1
        assert all(page_of.get(p.passage) != own for p in negs)  # never a passage of the same page
    assert sources == {"mined-heading", "mined-sentence"}
    again = mined_pairs(SearchService(mining_corpus), mining_corpus.store, "default", n=20,
                        plan=NegativePlan(hard=2, random=1), seed=3)
    assert again == pairs  # deterministic with a seed


def test_feedback_pairs_come_from_the_query_log(mining_corpus):
    from engine.refind.rerank_pairs import feedback_pairs
    from engine.refind.search import SearchRequest, SearchService

    res = SearchService(mining_corpus).search(SearchRequest(workspace="default", query="how glaciers melt and retreat", k=4))
    mining_corpus.querylog.flush()
    by_url = {h.url: h.page_id for h in res.pages}
    glacier, bike = by_url["https://notes.example/1"], by_url["https://notes.example/3"]
    mining_corpus.record_feedback(res.query_id, glacier, "found")
    mining_corpus.record_feedback(res.query_id, bike, "irrelevant")
    pairs = feedback_pairs(SearchService(mining_corpus), mining_corpus.store, mining_corpus.querylog, "default", seed=1)
    pos = [p for p in pairs if p.label == 1.0]
    assert [p.source for p in pos] == ["feedback"] and "Glaciers retreat" in pos[0].passage
    assert pos[0].query == "how glaciers melt and retreat"
    irrelevant = [p for p in pairs if p.source == "feedback-irrelevant"]
    assert len(irrelevant) == 1 and "Gear ratios" in irrelevant[0].passage and irrelevant[0].label == 0.0
    assert all("Glaciers retreat" not in p.passage for p in pairs if p.label == 0.0)


def test_judgment_pairs_use_the_collection_qrels(mining_corpus, tmp_path):
    import ir_measures

    from engine.app import Engine
    from engine.refind.rerank_pairs import judgment_pairs
    from engine.refind.search import SearchService
    from eval import collections, run

    coll = collections.Collection(
        "tiny", "ours", [{"id": f"d{i}", "title": "", "text": b} for i, b in enumerate(SECTIONS.values())],
        {"q1": "wild yeast culture for bread", "q2": "ice sheets shrinking"},
        [ir_measures.Qrel("q1", "d2", 1), ir_measures.Qrel("q2", "d1", 2), ir_measures.Qrel("q2", "d0", 0)])
    run.ingest(Engine(corpus=mining_corpus), coll, "tiny")
    mining_corpus.sync()
    pairs = judgment_pairs(SearchService(mining_corpus), mining_corpus.store, coll, "tiny", seed=0)
    pos = {p.group: p.passage for p in pairs if p.label == 1.0}
    assert set(pos) == {"tiny:q1", "tiny:q2"}
    assert pos["tiny:q1"].startswith("A starter is flour") and pos["tiny:q2"].startswith("Glaciers retreat")
    for p in pairs:
        if p.label == 0.0:
            assert p.passage != pos[p.group] and p.source in {"hard", "random"}


def test_validation_holds_out_whole_queries():
    from models.reranker_train import split_by_group

    pairs = tiny_pairs()
    train, val = split_by_group(pairs, 0.25, 100, seed=5)
    assert {p.group for p in train}.isdisjoint({p.group for p in val})
    assert len({p.group for p in val}) == 3 and len(train) + len(val) == len(pairs)
    assert split_by_group(pairs, 0.25, 100, seed=5) == (train, val)


def test_training_lowers_the_held_out_loss_and_writes_a_crossencoder_folder(tiny_training):
    from sentence_transformers import CrossEncoder

    out, cfg, result = tiny_training
    first, last = result.validation[0], result.validation[-1]
    assert first["step"] == 0 and last["step"] == cfg.steps
    assert last["loss"] < first["loss"]
    assert result.val_groups == 3 and result.train_groups == 9
    ce = CrossEncoder(str(out), local_files_only=True)  # a normal CrossEncoder folder
    q = QUERIES["seabirds"]
    s = ce.predict([(q, TOPICS["seabirds"][0]), (q, "Filler sentence 9 about municipal tax paperwork.")])
    assert s[0] > s[1]


def test_training_is_deterministic_with_a_seed(pool, tmp_path):
    from sentence_transformers import CrossEncoder

    from models.reranker_train import TrainConfig, train_cross_encoder

    scored = []
    for run_ in ("a", "b", "c"):
        cfg = TrainConfig(steps=2, batch_size=8, max_length=48, seed=7 if run_ != "c" else 8, device="cpu",
                          val_share=0.0, progress=False)
        train_cross_encoder(pool.get("all-minilm-l6-v2").path, tiny_pairs(), tmp_path / run_, cfg)
        ce = CrossEncoder(str(tmp_path / run_), local_files_only=True)
        scored.append(ce.predict([(p.query, p.passage) for p in tiny_pairs()[:8]]))
    np.testing.assert_allclose(scored[0], scored[1], atol=1e-6)
    assert not np.allclose(scored[0], scored[2], atol=1e-4)  # another seed, another head and order


def test_any_crossencoder_folder_loads_by_path_and_onnx_scores_match(pool, tiny_reranker, tmp_path):
    """A folder saved by sentence-transformers itself (not our trainer) loads through the registry;
    the ONNX export of a trained one scores like its torch original."""
    import shutil

    import torch
    from sentence_transformers import CrossEncoder

    from engine.core.settings import CONFIG_DIR
    from models.registry import ModelRegistry
    from models.reranker import load_reranker
    from models.reranker_train import export_onnx

    torch.manual_seed(0)
    plain = tmp_path / "plain-ce"
    CrossEncoder(str(pool.get("all-minilm-l6-v2").path), num_labels=1, local_files_only=True).save(str(plain))
    onnx_copy = tmp_path / "tiny-onnx"
    shutil.copytree(tiny_reranker, onnx_copy)
    export_onnx(onnx_copy, max_length=64)
    reg = tmp_path / "models.toml"
    reg.write_text((CONFIG_DIR / "models.toml").read_text() + f"""
[rerankers.plain]
source = "path"
path = "{plain}"
[rerankers.tiny]
source = "path"
path = "{tiny_reranker}"
max_seq_length = 64
[rerankers.tiny-onnx]
source = "path"
path = "{onnx_copy}"
max_seq_length = 64
backend = "onnx"
[rerankers.tiny-int8]
source = "path"
path = "{onnx_copy}"
max_seq_length = 64
backend = "onnx"
onnx_file = "onnx/model_qint8.onnx"
""")
    registry = ModelRegistry(reg, tmp_path / "cache")
    passages = [s for t in TOPICS.values() for s in t]
    q = QUERIES["astronomy"]
    raw = CrossEncoder(str(plain), local_files_only=True, activation_fn=torch.nn.Identity()).predict(
        [(q, p) for p in passages])  # logits
    plain_scores = load_reranker(registry, "plain", "cpu").score(q, passages)
    np.testing.assert_allclose(plain_scores, 1 / (1 + np.exp(-np.asarray(raw, dtype=np.float64))), atol=1e-5)
    torch_scores = load_reranker(registry, "tiny", "cpu").score(q, passages)
    onnx_rr = load_reranker(registry, "tiny-onnx", "cpu")
    assert onnx_rr.backend == "onnx"
    np.testing.assert_allclose(onnx_rr.score(q, passages), torch_scores, atol=1e-4)
    int8 = load_reranker(registry, "tiny-int8", "cpu").score(q, passages)
    assert np.corrcoef(int8, torch_scores)[0, 1] > 0.9  # quantised: close, not equal

    # `refindery reranker package`: the int8 deployment alone (what the repository ships) scores the same
    from server.cli import main

    shipped = tmp_path / "shipped"
    assert main(["reranker", "package", "--out", str(onnx_copy), "--to", str(shipped)]) == 0
    assert not (shipped / "model.safetensors").exists() and not (shipped / "onnx" / "model.onnx").exists()
    assert (shipped / "onnx" / "model_qint8.onnx").is_file() and (shipped / "tokenizer.json").is_file()
    with open(reg, "a") as f:
        f.write(f'[rerankers.shipped]\nsource = "path"\npath = "{shipped}"\nmax_seq_length = 64\n'
                'backend = "onnx"\nonnx_file = "onnx/model_qint8.onnx"\n')
    packaged = load_reranker(ModelRegistry(reg, tmp_path / "cache"), "shipped", "cpu").score(q, passages)
    np.testing.assert_allclose(packaged, int8, atol=1e-6)
    assert main(["reranker", "package", "--out", str(plain), "--to", str(tmp_path / "x")]) == 2  # not exported


def test_register_reranker_keeps_comments_and_replaces_its_own_block(tmp_path):
    from models.registry import ModelRegistry, register_reranker

    reg = tmp_path / "models.toml"
    reg.write_text("# my models\n[embedders.e]\nsource = \"path\"\npath = \"x\"\n\n[rerankers.old]\n"
                   "source = \"path\"\npath = \"/nowhere\"\n\n[rerankers.keep]\nsource = \"path\"\npath = \"k\"\n")
    model = tmp_path / "models" / "old"
    model.mkdir(parents=True)
    assert register_reranker(reg, "old", model, 128)
    text = reg.read_text()
    assert text.startswith("# my models") and text.count("[rerankers.old]") == 1
    parsed = tomllib.loads(text)
    assert parsed["rerankers"]["old"] == {"source": "path", "path": "models/old", "max_seq_length": 128}
    assert parsed["rerankers"]["keep"]["path"] == "k"
    assert not register_reranker(reg, "old", model, 128)  # already so: untouched
    assert ModelRegistry(reg, tmp_path / "c").resolve("old") == model.resolve()
    with pytest.raises(ValueError):
        register_reranker(reg, "bad name]", model)


def test_cli_reranker_train_end_to_end(mining_corpus, tmp_path, capsys):
    """`refindery reranker train` mines the workspace, trains, writes the card, registers the name;
    the registered model then reranks a search."""
    from engine.core.corpus import open_corpus
    from engine.refind.search import SearchRequest, SearchService
    from engine.core.settings import CONFIG_DIR, load_settings
    from server.cli import main

    reg = tmp_path / "models.toml"
    reg.write_text((CONFIG_DIR / "models.toml").read_text())
    data_dir = tmp_path / "data"
    import shutil

    mining_corpus.flush()
    mining_corpus.close()  # the module fixture is done with; its folder is copied as a user's data dir
    shutil.copytree(mining_corpus.settings.data_dir, data_dir)
    cfg = tmp_path / "user.toml"
    cfg.write_text(f'data_dir = "{data_dir}"\n[models]\nregistry = "{reg}"\nreranker = "mine"\n')
    assert main(["--config", str(cfg), "reranker", "train", "--name", "mine", "--steps", "3", "--mined", "4",
                 "--max-length", "64", "--no-progress", "--device", "cpu"]) == 0
    out = json.loads(capsys.readouterr().out)
    model_dir = data_dir / "rerankers" / "mine"
    assert out["out_dir"] == str(model_dir.resolve()) and out["steps"] == 3
    assert out["data"]["sources"]["mined"]["queries"] == 4 and out["registered"]["changed"] is True
    card = (model_dir / "README.md").read_text()
    assert "all-minilm-l6-v2" in card and "| step | BCE loss | MRR | pairwise accuracy |" in card
    assert json.loads((model_dir / "refindery_training.json").read_text())["config"]["steps"] == 3
    assert tomllib.loads(reg.read_text())["rerankers"]["mine"]["max_seq_length"] == 64
    # a second run with --if-missing leaves the model alone
    assert main(["--config", str(cfg), "reranker", "train", "--name", "mine", "--if-missing"]) == 0
    assert json.loads(capsys.readouterr().out)["trained"] is False
    corpus = open_corpus(load_settings(str(cfg)))
    try:
        res = SearchService(corpus).search(SearchRequest(workspace="default", query="glacier meltwater", rerank=True, explain=True),
                                           log=False)
        chunks = [ch for p in res.pages for ch in p.explain.chunks]
        assert chunks and all(ch.rerank is not None and 0 < ch.rerank < 1 for ch in chunks)
    finally:
        corpus.close()


def test_cli_reranker_train_refuses_an_empty_workspace_and_a_bad_base(tmp_path, capsys):
    from server.cli import main

    cfg = tmp_path / "user.toml"
    cfg.write_text(f'data_dir = "{tmp_path / "data"}"\n')
    assert main(["--config", str(cfg), "reranker", "train", "--steps", "1", "--no-progress"]) == 2
    assert "no training pairs" in capsys.readouterr().err


def _squad_file(tmp_path, gz: bool):
    import gzip

    arts = [{"title": "Tides", "paragraphs": [
                {"context": "Spring tides happen at new and full moon, when sun and moon align.",
                 "qas": [{"question": "When do spring tides happen?", "answers": ["at new and full moon"]}]},
                {"context": "Neap tides come at the quarter moons and have the smallest range.",
                 "qas": [{"question": "Which tides have the smallest range?", "answers": ["Neap tides"]}]},
                {"context": "A tide table lists high water at new and full moon for each harbour.", "qas": []},
                {"context": "Tidal bores form in funnel-shaped estuaries.", "qas": []}]},
            {"title": "Bread", "paragraphs": [
                {"context": "Sourdough rises with wild yeast.",
                 "qas": [{"question": "What makes sourdough rise?", "answers": [{"text": "wild yeast"}]}]}]}]
    path = tmp_path / ("squad.jsonl.gz" if gz else "squad.json")
    if gz:
        with gzip.open(path, "wt") as f:
            f.write("\n".join(json.dumps(a) for a in arts) + "\n")
    else:  # the official one-object layout
        path.write_text(json.dumps({"version": "1.1", "data": arts}))
    return path


@pytest.mark.parametrize("gz", [True, False])
def test_squad_pairs_take_answerless_paragraphs_of_the_same_article_as_negatives(tmp_path, gz):
    from eval.squad import squad_pairs

    pairs = squad_pairs(_squad_file(tmp_path, gz), negatives=2, seed=5)
    groups: dict[str, list] = {}
    for p in pairs:
        groups.setdefault(p.group, []).append(p)
    assert len(groups) == 3 and all(len(ps) == 3 for ps in groups.values())
    by_q = {ps[0].query: ps for ps in groups.values()}
    spring = by_q["When do spring tides happen?"]
    assert spring[0].label == 1.0 and spring[0].passage.startswith("Spring tides")
    negs = [p for p in spring if p.label == 0.0]
    # the tide table holds the answer string: never a negative; the two answerless tide paragraphs are
    assert {p.passage[:10] for p in negs} == {"Neap tides", "Tidal bore"}
    assert {p.source for p in negs} == {"squad-same-article"}
    # a one-paragraph article tops up from another article
    bread = by_q["What makes sourdough rise?"]
    assert {p.source for p in bread if p.label == 0.0} == {"squad-other-article"}
    assert all("wild yeast" not in p.passage for p in bread if p.label == 0.0)
    assert len(squad_pairs(_squad_file(tmp_path, gz), questions=2, negatives=1)) == 4


def test_squad_pairs_refuse_a_missing_file(tmp_path, capsys):
    from eval.squad import squad_pairs
    from server.cli import main

    with pytest.raises(FileNotFoundError, match="no SQuAD file"):
        squad_pairs(tmp_path / "nope.jsonl.gz")
    cfg = tmp_path / "user.toml"
    cfg.write_text(f'data_dir = "{tmp_path / "data"}"\n')
    code = main(["--config", str(cfg), "reranker", "train", "--squad", str(tmp_path / "nope.jsonl.gz"),
                 "--mined", "0", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and "error: --squad:" in err and "no SQuAD file" in err and "Traceback" not in err
