"""Test collections in three layouts, loaded into one shape (docs, judged queries, qrels).

- ours (`../shared/data/ir/<name>/`): docs.jsonl {id, title, text}, queries.jsonl {id, text},
  qrels.tsv "query_id<TAB>doc_id<TAB>grade";
- BEIR: corpus.jsonl {_id, title, text}, queries.jsonl {_id, text}, qrels/test.tsv (a header
  line "query-id corpus-id score", tab-separated);
- TREC: docs.jsonl (as ours), topics.tsv "qid<TAB>text", qrels in TREC format "qid iter docid rel".
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import ir_measures


@dataclass
class Collection:
    name: str
    format: str
    docs: list[dict]  # {"id", "title", "text"}
    queries: dict[str, str]  # judged queries only
    qrels: list[ir_measures.Qrel]


class CollectionError(ValueError):
    pass


def _jsonl(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def detect_format(path: Path) -> str:
    if (path / "corpus.jsonl").exists() and (path / "qrels").is_dir():
        return "beir"
    if (path / "topics.tsv").exists():
        return "trec"
    if (path / "docs.jsonl").exists() and (path / "qrels.tsv").exists():
        return "ours"
    raise CollectionError(f"{path}: not a collection (expected docs.jsonl + queries.jsonl + qrels.tsv, "
                          "a BEIR folder with corpus.jsonl and qrels/, or docs.jsonl + topics.tsv + qrels)")


def load(path: str | Path, name: str | None = None) -> Collection:
    path = Path(path)
    fmt = detect_format(path)
    qrels: list[ir_measures.Qrel] = []
    if fmt == "beir":
        docs = [{"id": str(d["_id"]), "title": d.get("title") or "", "text": d.get("text") or ""}
                for d in _jsonl(path / "corpus.jsonl")]
        queries = {str(q["_id"]): q["text"] for q in _jsonl(path / "queries.jsonl")}
        split = path / "qrels" / "test.tsv"
        if not split.exists():
            split = sorted((path / "qrels").glob("*.tsv"))[0]
        for i, line in enumerate(split.open(encoding="utf-8")):
            parts = line.rstrip("\n").split("\t")
            if i == 0 and not parts[-1].strip().lstrip("-").isdigit():
                continue  # header
            qrels.append(ir_measures.Qrel(parts[0], parts[1], int(parts[2])))
    else:
        docs = [{"id": str(d["id"]), "title": d.get("title") or "", "text": d.get("text") or ""}
                for d in _jsonl(path / "docs.jsonl")]
        if fmt == "trec":
            queries = {}
            for line in (path / "topics.tsv").open(encoding="utf-8"):
                if line.strip():
                    qid, text = line.rstrip("\n").split("\t", 1)
                    queries[qid] = text
            qrels_file = next(p for p in (path / "qrels.trec", path / "qrels.txt", path / "qrels") if p.is_file())
            for line in qrels_file.open(encoding="utf-8"):
                if line.strip():
                    qid, _iter, did, rel = line.split()[:4]
                    qrels.append(ir_measures.Qrel(qid, did, int(rel)))
        else:
            queries = {str(q["id"]): q["text"] for q in _jsonl(path / "queries.jsonl")}
            for line in (path / "qrels.tsv").open(encoding="utf-8"):
                if line.strip():
                    qid, did, grade = line.split()[:3]
                    qrels.append(ir_measures.Qrel(qid, did, int(grade)))
    judged = {q.query_id for q in qrels if q.relevance > 0}
    return Collection(name or path.name, fmt, docs, {k: v for k, v in queries.items() if k in judged}, qrels)
