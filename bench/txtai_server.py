"""txtai's hybrid search behind the same HTTP shape as ours, for bench/load.py --throughput.

    .venv/bin/python bench/txtai_server.py --collection med --uds /tmp/txtai.sock

One development collection indexed as peers.py indexes it (title + text per document, txtai's
hybrid Embeddings: its BM25 + all-MiniLM-L6-v2 through sentence-transformers + FAISS, its default
fusion), served by uvicorn (one process, FastAPI's thread pool, as `refindery serve`) at
POST /v1/search {"query", "k"} -> {"pages": [{"page_id", "score"}]}. Prints "ready" when it listens.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pydantic import BaseModel, Field

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


class Query(BaseModel):   # at module level: FastAPI resolves the (string) annotation here
    query: str = Field(min_length=1, max_length=2000)
    k: int = Field(10, ge=1, le=1000)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--collection", default="med")
    ap.add_argument("--uds", required=True)
    args = ap.parse_args()
    import uvicorn
    from fastapi import FastAPI
    from txtai import Embeddings

    from engine.core.settings import load_settings
    from eval import collections
    from eval.ir import DEFAULT_IR_DIR
    from models.registry import ModelRegistry
    from peers import doc_text

    base = load_settings()
    path = ModelRegistry(base.registry_path, base.models_cache_dir, data_dir=base.data_dir).resolve(base.models.active)
    coll = collections.load(DEFAULT_IR_DIR / args.collection)
    emb = Embeddings(path=str(path), method="sentence-transformers", content=False, hybrid=True)
    emb.index([(d["id"], doc_text(d), None) for d in coll.docs])

    app = FastAPI()

    @app.get("/healthz")
    def healthz():
        return {"ok": True}

    @app.post("/v1/search")
    def search(q: Query):
        return {"pages": [{"page_id": str(i), "score": float(s)} for i, s in emb.search(q.query, q.k)]}

    print("ready", flush=True)
    uvicorn.run(app, uds=args.uds, log_level="warning")


if __name__ == "__main__":
    main()
