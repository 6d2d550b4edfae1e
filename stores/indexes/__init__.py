"""The indexes a request searches: exact BM25, exact vectors (FAISS flat) and the entity graph."""
