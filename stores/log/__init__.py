"""The retrieval log: per-process append-only files, written off the request path, and their compaction."""
