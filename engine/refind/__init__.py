"""refind: the page search pipeline (seed 001) — candidates from the BM25 and dense arms (deepened
until enough pages), reciprocal-rank *fusion*, an optional cross-encoder *rerank* of chunks, *rollup*
of chunks to pages, *recency* decay, *pinning* of exact URL/domain matches, hydrate, highlight and
explain, and only then the slice [offset : offset+k]; plus similar pages (by vector, cluster or
entity), compare (the pipeline once per embedder) with its *agreement* figures, and the reranker's
training pairs.

Words: *rollup* turns ranked chunks into ranked pages (a page scores by its best chunks); *RRF*
scores an item 1/(k + rank) in each arm it appears in; a *mediation* is how similar pages are
related (vector, cluster, entity). Uses core only.
"""
