"""Exact in-memory BM25 checked against DuckDB's own match_bm25 over a real FTS index."""

from __future__ import annotations

import os
import threading
from uuid import NAMESPACE_URL, UUID, uuid5

import duckdb
import numpy as np
import pytest

from rms_retrieval.stores.engine.duckdb_process import DUCKDB_CONFIG
from rms_retrieval.stores.indexes.lexical import (
    FTS_EXTENSION,
    Bm25Index,
    TermPostings,
    indexed_terms,
    query_terms,
    term_postings,
)

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


def _ids(count: int, salt: str = "") -> list[UUID]:
    return [uuid5(NAMESPACE_URL, f"{salt}{index}") for index in range(count)]


def _reference(documents, ids, text: str) -> dict[UUID, float]:
    connection = duckdb.connect(":memory:", config=DUCKDB_CONFIG)
    connection.load_extension(FTS_EXTENSION)
    connection.execute(REFERENCE_TABLE)
    connection.executemany(REFERENCE_INSERT, [(str(i), c, n) for i, (c, n) in zip(ids, documents)])
    connection.execute(REFERENCE_INDEX)
    rows = connection.execute(REFERENCE_SEARCH, {"text": text}).fetchall()
    connection.close()
    return {UUID(object_id): score for object_id, score in rows}


def _index(documents, ids, namespaces, segment_size: int | None = None) -> Bm25Index:
    index = Bm25Index.empty()
    size = segment_size or max(1, len(documents))
    for start in range(0, len(documents), size):
        stop = start + size
        index = index.with_segment(term_postings(documents[start:stop]), namespaces[start:stop], ids[start:stop])
    return index


def _assert_matches_reference(hits: list[tuple[UUID, float]], reference: dict[UUID, float]) -> None:
    assert {object_id for object_id, _ in hits} == set(reference)
    for object_id, score in hits:
        # Both sides round to 9 decimals; summation order may move the last decimal by one.
        assert score == pytest.approx(reference[object_id], abs=1.01e-9)
    scores = [score for _, score in hits]
    assert hits == sorted(hits, key=lambda hit: (-hit[1], hit[0])) and scores == sorted(scores, reverse=True)


@pytest.mark.parametrize("text", QUERIES)
def test_scores_equal_duckdb_match_bm25(text):
    ids = _ids(len(CORPUS))
    index = _index(CORPUS, ids, ["n"] * len(CORPUS))
    _assert_matches_reference(index.search(text, ["n"], 100), _reference(CORPUS, ids, text))


def test_postings_match_the_fts_index_tables():
    """Terms, tf and document lengths are those create_fts_index writes."""
    ids = _ids(len(CORPUS))
    connection = duckdb.connect(":memory:", config=DUCKDB_CONFIG)
    connection.load_extension(FTS_EXTENSION)
    connection.execute(REFERENCE_TABLE)
    connection.executemany(REFERENCE_INSERT, [(str(i), c, n) for i, (c, n) in zip(ids, CORPUS)])
    connection.execute(REFERENCE_INDEX)
    expected = connection.execute(
        "SELECT docs.name, dict.term, count(*) FROM fts_main_objects.terms AS terms "
        "JOIN fts_main_objects.dict AS dict USING (termid) JOIN fts_main_objects.docs AS docs USING (docid) "
        "GROUP BY ALL"
    ).fetchall()
    lengths = dict(connection.execute("SELECT name, len FROM fts_main_objects.docs").fetchall())
    postings = term_postings(CORPUS)
    actual = {(str(ids[row]), term, tf) for term, row, tf in zip(postings.terms, postings.rows, postings.tfs)}
    assert actual == set(expected)
    assert postings.lengths.tolist() == [lengths[str(object_id)] for object_id in ids]
    assert postings.lengths[2] == 0 and postings.num_rows == len(CORPUS)


@pytest.mark.locomo
@pytest.mark.slow
def test_locomo_questions_match_duckdb(locomo_path):
    from rms_retrieval.dataflows.locomo import conversation_objects, load_locomo

    dataset = load_locomo(locomo_path)
    conversation = dataset.conversations[0]
    objects = conversation_objects(conversation)
    documents = [(obj.content, obj.entity_canonical_name) for obj in objects]
    ids = [obj.id for obj in objects]
    index = _index(documents, ids, [obj.namespace for obj in objects], segment_size=97)
    questions = [q for q in dataset.questions if q.sample_id == conversation.sample_id][:100]
    assert len(questions) == 100
    connection = duckdb.connect(":memory:", config=DUCKDB_CONFIG)
    connection.load_extension(FTS_EXTENSION)
    connection.execute(REFERENCE_TABLE)
    connection.executemany(REFERENCE_INSERT, [(str(i), c, n) for i, (c, n) in zip(ids, documents)])
    connection.execute(REFERENCE_INDEX)
    for question in questions:
        rows = connection.execute(REFERENCE_SEARCH, {"text": question.question}).fetchall()
        reference = {UUID(object_id): score for object_id, score in rows}
        _assert_matches_reference(index.search(question.question, [conversation.sample_id], 10_000), reference)


def test_one_segment_and_many_segments_give_identical_results():
    documents = CORPUS * 7
    ids = _ids(len(documents))
    namespaces = ["a" if index % 3 else "b" for index in range(len(documents))]
    whole = _index(documents, ids, namespaces)
    for size in (1, 4, 13):
        pieces = _index(documents, ids, namespaces, segment_size=size)
        for text in QUERIES:
            for scope in (["a"], ["b"], ["a", "b"]):
                everything = whole.search(text, scope, 1_000)
                assert pieces.search(text, scope, 1_000) == everything
                for limit in (1, 3, 8):
                    assert pieces.search(text, scope, limit) == everything[:limit]


def test_statistics_cover_the_requested_namespaces_only():
    """Issue 10 #4: a namespace full of "Biscuit" must not lower Biscuit's idf in another one."""
    ours = [("My dog is called Biscuit", None), ("We walked to the park", None), ("Tea and biscuits", None)]
    theirs = [(f"Biscuit number {index} is a biscuit", None) for index in range(50)]
    ours_ids, theirs_ids = _ids(len(ours), "ours"), _ids(len(theirs), "theirs")
    alone = _index(ours, ours_ids, ["ours"] * len(ours))
    together = _index(ours + theirs, ours_ids + theirs_ids, ["ours"] * len(ours) + ["theirs"] * len(theirs),
                      segment_size=5)
    assert together.search("biscuit", ["ours"], 10) == alone.search("biscuit", ["ours"], 10)
    _assert_matches_reference(together.search("biscuit", ["ours"], 10), _reference(ours, ours_ids, "biscuit"))
    both = together.search("biscuit", ["ours", "theirs"], 100)
    _assert_matches_reference(both, _reference(ours + theirs, ours_ids + theirs_ids, "biscuit"))


def test_limit_keeps_the_best_with_ties_broken_by_object_id():
    documents = [("the same dog", None)] * 20 + [("dog dog", None)]
    ids = _ids(len(documents))
    index = _index(documents, ids, ["n"] * len(documents), segment_size=6)
    full = index.search("dog", ["n"], 100)
    assert full[0][0] == ids[-1] and len(full) == 21
    assert [hit[0] for hit in full[1:]] == sorted(ids[:-1])
    assert index.search("dog", ["n"], 5) == full[:5]
    assert index.search("dog", ["n"], 0) == []


@pytest.mark.parametrize("text", ["", "   ", "?!.,", "the and of", "123 456"])
def test_queries_without_indexed_terms_find_nothing(text):
    index = _index(CORPUS, _ids(len(CORPUS)), ["n"] * len(CORPUS))
    assert index.search(text, ["n"], 10) == []


def test_unknown_namespaces_and_empty_indexes_find_nothing():
    index = _index(CORPUS, _ids(len(CORPUS)), ["n"] * len(CORPUS))
    assert index.search("run", ["elsewhere"], 10) == []
    assert index.search("run", [], 10) == []
    assert Bm25Index.empty().search("run", ["n"], 10) == []
    assert index.search("run", ["n", "elsewhere", "n"], 10) == index.search("run", ["n"], 10)


def test_with_segment_leaves_the_old_index_unchanged():
    ids = _ids(4)
    first = Bm25Index.empty().with_segment(term_postings(CORPUS[:2]), ["n", "n"], ids[:2])
    before = first.search("biscuit world", ["n"], 10)
    second = first.with_segment(term_postings(CORPUS[7:9]), ["n", "n"], ids[2:])
    assert first.search("biscuit world", ["n"], 10) == before
    assert second.num_docs(["n"]) == 4 and first.num_docs(["n"]) == 2
    assert second.search("biscuit world", ["n"], 10) != before


def test_with_segment_rejects_misaligned_rows():
    with pytest.raises(ValueError, match="one namespace and one object id per row"):
        Bm25Index.empty().with_segment(term_postings(CORPUS[:3]), ["n"] * 2, _ids(3))


def test_postings_are_immutable():
    postings = term_postings(CORPUS)
    with pytest.raises(ValueError):
        postings.tfs[0] = 99


def test_arrays_round_trip_through_an_npz_file(tmp_path):
    postings = term_postings(CORPUS)
    np.savez(tmp_path / "segment.npz", **postings.to_arrays())
    with np.load(tmp_path / "segment.npz", allow_pickle=False) as arrays:
        loaded = TermPostings.from_arrays(arrays, "segment.npz")
    for name in ("vocabulary", "term_ids", "rows", "tfs", "lengths"):
        assert np.array_equal(getattr(loaded, name), getattr(postings, name))
    assert all(type(term) is str for term in loaded.vocabulary)


def test_damaged_arrays_name_their_file():
    arrays = term_postings(CORPUS).to_arrays()
    del arrays["tfs"]
    with pytest.raises(ValueError, match="segment.npz is not a readable TermPostings file"):
        TermPostings.from_arrays(arrays, "segment.npz")


def test_a_batch_without_indexed_terms_still_counts_its_rows():
    postings = term_postings([("the and of", None), ("", None)])
    assert postings.num_rows == 2 and postings.lengths.tolist() == [0, 0] and len(postings.vocabulary) == 0


def test_concatenate_equals_analysing_the_rows_together():
    whole = term_postings(CORPUS)
    merged = TermPostings.concatenate([term_postings(CORPUS[:3]), term_postings(CORPUS[3:4]), term_postings(CORPUS[4:])])
    for name in ("vocabulary", "term_ids", "rows", "tfs", "lengths"):
        assert np.array_equal(getattr(merged, name), getattr(whole, name))


def test_query_terms_are_distinct_porter_stems_of_the_fts_tokens():
    assert query_terms("Running runs RUN, ran!") == ("ran", "run")
    assert query_terms("") == ()
    assert query_terms("Café") == ("cafe",)


def test_threads_search_one_index_at_once():
    documents = CORPUS * 5
    ids = _ids(len(documents))
    index = _index(documents, ids, ["n"] * len(documents), segment_size=7)
    texts = [f"{text} extra{index}" for index, text in enumerate(QUERIES * 4)]  # uncached: DuckDB analyses each
    expected = {text: index.search(text, ["n"], 20) for text in texts}
    query_terms.cache_clear()
    results: dict[str, list] = {}

    def search(chunk: list[str]) -> None:
        for text in chunk:
            results[text] = index.search(text, ["n"], 20)

    threads = [threading.Thread(target=search, args=(texts[start::6],)) for start in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == expected


def test_a_forked_child_analyses_with_its_own_connection():
    expected = term_postings(CORPUS)
    read, write = os.pipe()
    child = os.fork()
    if child == 0:
        try:
            postings = term_postings(CORPUS)
            same = all(np.array_equal(getattr(postings, n), getattr(expected, n))
                       for n in ("vocabulary", "term_ids", "rows", "tfs", "lengths"))
            os.write(write, b"1" if same else b"0")
        finally:
            os._exit(0)
    os.close(write)
    os.waitpid(child, 0)
    assert os.read(read, 1) == b"1"
    os.close(read)


def test_a_merge_swaps_segments_without_changing_scores():
    documents = CORPUS * 3
    ids = _ids(len(documents))
    namespaces = ["a" if index % 4 else "b" for index in range(len(documents))]
    index = Bm25Index.empty()
    for start in range(0, len(documents), 5):
        stop = start + 5
        index = index.with_segment(term_postings(documents[start:stop]), namespaces[start:stop], ids[start:stop], key=start)
    before = {(text, scope): index.search(text, [scope], 50) for text in QUERIES for scope in ("a", "b")}
    sources = [0, 5, 10, 15]
    merged_postings = TermPostings.concatenate([term_postings(documents[start:start + 5]) for start in sources])
    merged = index.without_segments(sources).with_segment(merged_postings, namespaces[:20], ids[:20], key="0-19")
    assert {(text, scope): merged.search(text, [scope], 50) for text in QUERIES for scope in ("a", "b")} == before
    assert len(merged._parts["a"]) == len(index._parts["a"]) - 3
    with pytest.raises(ValueError, match="are not in the index"):
        merged.without_segments([0])
    with pytest.raises(ValueError, match="is in the index already"):
        merged.with_segment(term_postings(CORPUS[:1]), ["a"], _ids(1, "x"), key="0-19")
    assert merged.without_segments([key for key in range(20, len(documents), 5)] + ["0-19"]).namespaces == ()


def test_a_subset_of_rows_scores_as_postings_of_those_rows_alone():
    documents = [("the river was cold", None), ("pottery class", None), ("river pottery", "Tom"), ("cold tea", None)]
    kept = np.asarray([0, 2, 3])
    subset = term_postings(documents).subset(kept)
    alone = term_postings([documents[row] for row in kept.tolist()])
    for name in ("term_ids", "rows", "tfs", "lengths"):
        assert getattr(subset, name).tolist() == getattr(alone, name).tolist()
    assert subset.vocabulary.tolist() == alone.vocabulary.tolist()


def test_indexed_terms_are_a_documents_stems_without_stopwords_repeats_kept():
    assert indexed_terms(["The kilns were firing, firing!", "", "Cone six"]) == [("fire", "fire", "kiln"), (), ("cone",)]
    assert indexed_terms([]) == []
