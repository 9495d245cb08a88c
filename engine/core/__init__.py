"""core: what every wing stands on — settings, refusals (errors), access (keys, grants, document
scopes), URLs, the values every store and index can hold, the clock, the query-log writer, the
relation packs every wing may read, and the **corpus**: the DuckDB store (the source of truth) with
the tantivy and FAISS indexes built from it, kept in step by generation numbers.

Words: a *grant* is what a request's key lets it read and write; a *scope* is a document's label that
a key may be limited to; a *generation* counts the store's writes, and an index that records a lower
one is repaired from the store; *quarantine* holds pages no index could hold, moved out whole.
Every other wing may import core; core imports no wing.
"""
