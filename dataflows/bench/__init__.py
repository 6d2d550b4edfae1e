"""Benchmark support: retrieval metrics, summaries and paired comparisons on plain Python data."""
