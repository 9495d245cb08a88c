"""The optional rerank stage: a cross-encoder over the top fused chunks, as one more arm in the fusion
(`rerank_fusion: rrf`) or alone (`replace`)."""
from __future__ import annotations

from models.reranker import RerankerUnavailable, load_reranker

from engine.core.devices import on_device
from engine.core.errors import RerankerNotConfigured
from engine.core.settings import ModelsSettings
from engine.refind.candidates import Candidates
from engine.refind.fusion import extra_arm
from engine.refind.schema import Params


def rerank_chunks(store, registry, models: ModelsSettings, query: str, p: Params, cands: Candidates
                  ) -> tuple[dict[int, float], dict[int, float]]:
    """The cross-encoder (`models.reranker`, from the registry) over the top rerank_n candidate chunks,
    their texts read from `store`: (chunk scores, rerank scores). With rerank on, the ranked candidate
    set is the reranked chunks."""
    top = [f for f in cands.fused if f.chunk_id in cands.chunk_page][: p.rerank_n]
    texts = store.chunks_by_id([f.chunk_id for f in top])
    try:
        with on_device(models.device):
            rr = load_reranker(registry, models.reranker, models.device)
    except RerankerUnavailable as exc:
        raise RerankerNotConfigured(str(exc)) from exc
    scores = rr.score(query, [texts[f.chunk_id]["text"] for f in top])
    rerank_scores = {f.chunk_id: float(x) for f, x in zip(top, scores)}
    if p.rerank_fusion == "rrf":
        arm = extra_arm(rerank_scores, p.rerank_weight, p.fusion, p.rrf_k, p.normalizer)
        return {f.chunk_id: f.score + arm[f.chunk_id] for f in top}, rerank_scores
    return dict(rerank_scores), rerank_scores
