"""The documents and queries the BM25 tests share, and DuckDB's own FTS index over them."""

from __future__ import annotations

from uuid import NAMESPACE_URL, UUID, uuid5

import duckdb

from rms_retrieval.stores.engine.duckdb_process import DUCKDB_CONFIG
from rms_retrieval.stores.indexes.postings import FTS_EXTENSION

# DuckDB's match_bm25 over an index of exactly the given documents: the reference the index must equal.
REFERENCE_TABLE = "CREATE TABLE objects (id VARCHAR, content VARCHAR, entity_canonical_name VARCHAR)"
REFERENCE_INSERT = "INSERT INTO objects VALUES (?, ?, ?)"
REFERENCE_INDEX = "PRAGMA create_fts_index('objects', 'id', 'content', 'entity_canonical_name', overwrite=1)"
REFERENCE_SEARCH = """
SELECT id, score FROM (
    SELECT id, round(fts_main_objects.match_bm25(id, $text), 9) AS score FROM objects
) WHERE score IS NOT NULL ORDER BY score DESC, id
"""

CORPUS = [
    ("Café déjà-vu! The 2nd run of runners, ran.", None),
    ("Hello world", "Biscuit"),
    ("the and of", None),  # stopwords only: a document of length 0 that still counts
    ("", None),
    ("running RUNNING runs; run-run", "Run"),
    ("Naïve résumé: 42 apples, 7 pears & 3.5 kg of oranges (ORANGES).", "Résumé Naïve"),
    ("Caroline’s LGBTQ support group met on 8 May 2023 at 10:00.", "Caroline"),
    ("I'm going to the dog park with my dogs; the dog's name is Biscuit.", None),
    ("e-mail me at someone@example.com or visit https://example.com/path?q=1", None),
    ("Ünïcödé ÀÉÎÕÜ stays letters; tabs\tand\nnewlines split too", "Ünïcödé"),
]
QUERIES = [
    "run", "running runners", "Biscuit", "dog park", "résumé naive", "oranges apples pears",
    "Caroline's support group", "example.com", "unicode", "the", "8 May 2023", "hello world",
    "What did Caroline do at the LGBTQ group?", "newlines tabs", "nothing matches zzzz",
]


def make_ids(count: int, salt: str = "") -> list[UUID]:
    return [uuid5(NAMESPACE_URL, f"{salt}{index}") for index in range(count)]


def reference_database(documents, object_ids) -> duckdb.DuckDBPyConnection:
    """An in-memory database whose FTS index holds exactly `documents`, keyed by `object_ids`."""
    connection = duckdb.connect(":memory:", config=DUCKDB_CONFIG)
    connection.load_extension(FTS_EXTENSION)
    connection.execute(REFERENCE_TABLE)
    connection.executemany(REFERENCE_INSERT, [(str(i), c, n) for i, (c, n) in zip(object_ids, documents)])
    connection.execute(REFERENCE_INDEX)
    return connection


def reference_scores(documents, object_ids, text: str) -> dict[UUID, float]:
    """DuckDB's match_bm25 over an index of exactly `documents`: what the BM25 index must equal."""
    connection = reference_database(documents, object_ids)
    try:
        return reference_search(connection, text)
    finally:
        connection.close()


def reference_search(connection: duckdb.DuckDBPyConnection, text: str) -> dict[UUID, float]:
    """match_bm25 for `text` over `reference_database`'s index, rounded as the store rounds."""
    return {UUID(object_id): score for object_id, score in connection.execute(REFERENCE_SEARCH, {"text": text}).fetchall()}
