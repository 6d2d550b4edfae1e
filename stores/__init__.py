"""Storage adapters behind small protocols: DuckDB (rows, FTS, graph, log) and FAISS (exact vectors)."""
