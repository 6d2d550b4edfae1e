"""The store behind small protocols: `MemoryStore` opens, writes and hands out snapshots, and a
`StoreSnapshot` serves every read. Sub-packages: `engine` (segments, manifest, writer), `indexes`
(BM25, vectors, graph), `analysis` (ingest-time text analysis), `exact` (enumeration and
aggregation), `log` (the retrieval log) and `providers` (encoders and the reformulation provider)."""
