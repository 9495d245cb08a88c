"""Everything that stores searchable state: corpus store (DuckDB), sparse (tantivy), dense (FAISS)."""
