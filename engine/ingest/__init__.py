"""ingest: records (JSONL lines, folders, POST /v1/pages items) -> checked pages -> extracted text ->
chunks -> vectors -> one store transaction -> every index; plus entities (canonical names and aliases
linked to pages) and clusters (k-means over page vectors, refit with new ids, the old tombstoned).

Words: a *visit* is one sighting of a URL (a re-visit of unchanged content only moves `last_seen`);
a page is identified by its *normalised URL* within a workspace; a batch's items of one page are
*merged* into one write. Uses core only.
"""
