"""Exact BM25 checked against DuckDB's own match_bm25 over a real FTS index, and the field weights."""

from __future__ import annotations

import threading
from uuid import UUID

import pytest
from hypothesis import given, strategies as st

from rms_retrieval.stores.indexes.adjacency import uuid_keys
from rms_retrieval.stores.indexes.lexical import Bm25Index, FieldWeights, rows_added
from rms_retrieval.stores.indexes.postings import TermPostings, query_terms, term_postings
from tests.lexical_corpus import CORPUS, QUERIES, make_ids, reference_database, reference_scores, reference_search


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
    ids = make_ids(len(CORPUS))
    index = _index(CORPUS, ids, ["n"] * len(CORPUS))
    _assert_matches_reference(index.search(text, ["n"], 100), reference_scores(CORPUS, ids, text))


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
    connection = reference_database(documents, ids)
    for question in questions:
        reference = reference_search(connection, question.question)
        _assert_matches_reference(index.search(question.question, [conversation.sample_id], 10_000), reference)


def test_one_segment_and_many_segments_give_identical_results():
    documents = CORPUS * 7
    ids = make_ids(len(documents))
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
    ours_ids, theirs_ids = make_ids(len(ours), "ours"), make_ids(len(theirs), "theirs")
    alone = _index(ours, ours_ids, ["ours"] * len(ours))
    together = _index(ours + theirs, ours_ids + theirs_ids, ["ours"] * len(ours) + ["theirs"] * len(theirs),
                      segment_size=5)
    assert together.search("biscuit", ["ours"], 10) == alone.search("biscuit", ["ours"], 10)
    _assert_matches_reference(together.search("biscuit", ["ours"], 10), reference_scores(ours, ours_ids, "biscuit"))
    both = together.search("biscuit", ["ours", "theirs"], 100)
    _assert_matches_reference(both, reference_scores(ours + theirs, ours_ids + theirs_ids, "biscuit"))


def test_limit_keeps_the_best_with_ties_broken_by_object_id():
    documents = [("the same dog", None)] * 20 + [("dog dog", None)]
    ids = make_ids(len(documents))
    index = _index(documents, ids, ["n"] * len(documents), segment_size=6)
    full = index.search("dog", ["n"], 100)
    assert full[0][0] == ids[-1] and len(full) == 21
    assert [hit[0] for hit in full[1:]] == sorted(ids[:-1])
    assert index.search("dog", ["n"], 5) == full[:5]
    assert index.search("dog", ["n"], 0) == []


@pytest.mark.parametrize("text", ["", "   ", "?!.,", "the and of", "123 456"])
def test_queries_without_indexed_terms_find_nothing(text):
    index = _index(CORPUS, make_ids(len(CORPUS)), ["n"] * len(CORPUS))
    assert index.search(text, ["n"], 10) == []


def test_unknown_namespaces_and_empty_indexes_find_nothing():
    index = _index(CORPUS, make_ids(len(CORPUS)), ["n"] * len(CORPUS))
    assert index.search("run", ["elsewhere"], 10) == []
    assert index.search("run", [], 10) == []
    assert Bm25Index.empty().search("run", ["n"], 10) == []
    assert index.search("run", ["n", "elsewhere", "n"], 10) == index.search("run", ["n"], 10)


def test_with_segment_leaves_the_old_index_unchanged():
    ids = make_ids(4)
    first = Bm25Index.empty().with_segment(term_postings(CORPUS[:2]), ["n", "n"], ids[:2])
    before = first.search("biscuit world", ["n"], 10)
    second = first.with_segment(term_postings(CORPUS[7:9]), ["n", "n"], ids[2:])
    assert first.search("biscuit world", ["n"], 10) == before
    assert second.num_docs(["n"]) == 4 and first.num_docs(["n"]) == 2
    assert second.search("biscuit world", ["n"], 10) != before


def test_with_segment_rejects_misaligned_rows():
    with pytest.raises(ValueError, match="one namespace and one object id per row"):
        Bm25Index.empty().with_segment(term_postings(CORPUS[:3]), ["n"] * 2, make_ids(3))
    with pytest.raises(ValueError, match="has 3 rows, got deleted rows up to 3"):
        Bm25Index.empty().with_segment_columns(term_postings(CORPUS[:3]), ["n"], [0, 0, 0], uuid_keys(make_ids(3)),
                                               [1, 3], key="s")


def test_threads_search_one_index_at_once():
    documents = CORPUS * 5
    ids = make_ids(len(documents))
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


def test_a_merge_swaps_segments_without_changing_scores():
    documents = CORPUS * 3
    ids = make_ids(len(documents))
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
        merged.with_segment(term_postings(CORPUS[:1]), ["a"], make_ids(1, "x"), key="0-19")
    assert merged.without_segments([key for key in range(20, len(documents), 5)] + ["0-19"]).namespaces == ()


def _doubled_content(documents):
    return [(f"{content} {content}", name) for content, name in documents]


@pytest.mark.parametrize("text", QUERIES)
def test_field_weights_count_each_fields_terms_times_its_weight(text):
    """A content weight of 2 scores as match_bm25 over every content written twice; a weight of 0
    leaves that field out, as an index without it would."""
    ids = make_ids(len(CORPUS))
    index = _index(CORPUS, ids, ["n"] * len(CORPUS), segment_size=3)
    _assert_matches_reference(index.search(text, ["n"], 100, FieldWeights(value=2.0)),
                              reference_scores(_doubled_content(CORPUS), ids, text))
    _assert_matches_reference(index.search(text, ["n"], 100, FieldWeights(entity_canonical_name=0.0)),
                              reference_scores([(content, None) for content, _ in CORPUS], ids, text))
    _assert_matches_reference(index.search(text, ["n"], 100, FieldWeights(value=0.0)),
                              reference_scores([("", name) for _, name in CORPUS], ids, text))


def test_a_heavier_name_field_puts_the_named_entity_first():
    documents = [("Caroline said Caroline went to the Caroline support group", None), ("a counsellor", "Caroline")]
    ids = make_ids(2)
    index = _index(documents, ids, ["n", "n"])
    assert [object_id for object_id, _ in index.search("Caroline", ["n"], 2)] == ids
    assert [object_id for object_id, _ in index.search("Caroline", ["n"], 2, FieldWeights(entity_canonical_name=5.0))] == ids[::-1]


@pytest.mark.parametrize("weights", [(float("nan"), 1.0), (1.0, float("inf")), (-1.0, 1.0), (0.0, 0.0)])
def test_field_weights_must_be_finite_non_negative_and_not_all_zero(weights):
    with pytest.raises(ValueError, match="field weights must be finite, at least 0 and not all 0"):
        FieldWeights(*weights)


@pytest.mark.parametrize("interleaved", [False, True])
def test_deleted_rows_score_as_a_segment_without_them(interleaved):
    """`with_segment_columns` with deleted rows equals an index of the live rows alone, whether a
    namespace's rows are one run (read as slices of the segment's postings) or interleaved."""
    import numpy as np

    documents = CORPUS * 3
    ids = make_ids(len(documents))
    names = ["a", "b"]
    codes = np.asarray([index % 2 if interleaved else index * 2 // len(documents) for index in range(len(documents))])
    alive = np.ones(len(documents), dtype=bool)
    alive[[1, 4, 5, 17]] = False
    postings = term_postings(documents)
    keys = uuid_keys(ids)
    mapped = Bm25Index.empty().with_segment_columns(postings, names, codes, keys, np.flatnonzero(~alive))
    kept = np.flatnonzero(alive)
    alone = Bm25Index.empty().with_segment(postings.subset(kept), [names[codes[row]] for row in kept], [ids[row] for row in kept])
    for text in QUERIES:
        for scope in (["a"], ["b"], ["a", "b"]):
            for fields in (FieldWeights(), FieldWeights(value=2.0, entity_canonical_name=0.5)):
                assert mapped.search(text, scope, 100, fields) == alone.search(text, scope, 100, fields), (text, scope)
    whole = Bm25Index.empty().with_segment_columns(postings, names, codes, keys)
    part = whole._parts["a"][0].part("a")
    hit = part.postings_of("caroline") or part.postings_of("run")
    assert (part.members is None) == (not interleaved)
    if not interleaved:  # one run of rows: the segment's own postings, not a copy
        assert np.shares_memory(hit.tfs, postings.tfs)


def test_name_counts_given_later_are_asked_for_by_weighted_searches_only():
    """A reader's segment passes its postings as stored and makes the entity-name counts only when
    a weighted search needs them: a plain search never asks, and a weighted one scores as if the
    counts had come with the postings."""
    import dataclasses

    import numpy as np

    postings = term_postings(CORPUS)
    ids = make_ids(len(CORPUS))
    keys = uuid_keys(ids)
    codes = np.zeros(len(CORPUS), dtype=np.int64)
    asked = []

    def counts():
        asked.append(True)
        return postings.name_tfs

    stored = dataclasses.replace(postings, name_tfs=None)
    later = Bm25Index.empty().with_segment_columns(stored, ["n"], codes, keys, name_tfs=counts)
    given = Bm25Index.empty().with_segment_columns(postings, ["n"], codes, keys)
    for text in QUERIES:
        assert later.search(text, ["n"], 100) == given.search(text, ["n"], 100)
    assert asked == [] and postings.name_tfs is not None
    weighted = FieldWeights(value=2.0, entity_canonical_name=0.5)
    for text in QUERIES:
        assert later.search(text, ["n"], 100, weighted) == given.search(text, ["n"], 100, weighted)
    assert asked == [True]


@pytest.mark.parametrize("interleaved", [False, True])
def test_a_segment_that_hands_out_its_ids_gets_its_own_uuid_objects_back(interleaved):
    import numpy as np

    documents = CORPUS * 2
    ids = make_ids(len(documents))
    codes = np.asarray([index % 2 if interleaved else index * 2 // len(documents) for index in range(len(documents))])
    alive = np.ones(len(documents), dtype=bool)
    alive[[2, 7]] = False
    keys = uuid_keys(ids)
    handed: dict[int, UUID] = {}

    def id_at(row: int) -> UUID:
        return handed.setdefault(row, UUID(bytes=ids[row].bytes))

    postings = term_postings(documents)
    own = Bm25Index.empty().with_segment_columns(postings, ["a", "b"], codes, keys, np.flatnonzero(~alive), id_at=id_at)
    made = Bm25Index.empty().with_segment_columns(postings, ["a", "b"], codes, keys, np.flatnonzero(~alive))
    found = 0
    for text in QUERIES:
        for scope in (["a"], ["b"], ["a", "b"]):
            hits = own.search(text, scope, 100)
            assert hits == made.search(text, scope, 100)
            assert all(object_id is handed[ids.index(object_id)] for object_id, _ in hits)
            found += len(hits)
    assert found and all(alive[row] for row in handed)


@pytest.mark.parametrize("interleaved", [False, True])
def test_a_segment_read_with_more_rows_deleted_scores_as_one_added_with_them_left_out(interleaved):
    """`with_deletions` equals taking the segment out and adding it again with the later deletions,
    whether a namespace's parts were made before (by a search) or not, shares the segment's
    postings, and drops a namespace left with no live row."""
    import numpy as np

    documents = CORPUS * 3
    ids = make_ids(len(documents))
    names = ["a", "b", "c"]
    codes = np.asarray([index % 2 if interleaved else index * 2 // len(documents) for index in range(len(documents))])
    codes[-2:] = 2  # namespace c: two rows, both deleted later
    keys = uuid_keys(ids)
    postings = term_postings(documents)
    before = np.ones(len(documents), dtype=bool)
    before[[1, 4]] = False
    after = before.copy()
    after[[0, 5, 6, 17, len(documents) - 2, len(documents) - 1]] = False
    other = Bm25Index.empty().with_segment(term_postings(CORPUS), ["a"] * len(CORPUS), make_ids(len(CORPUS), salt="other"))
    for asked in ([], ["a"], ["a", "b", "c"]):
        index = other.with_segment_columns(postings, names, codes, keys, np.flatnonzero(~before), key="s/d1")
        for namespace in asked:  # parts made before the deletions
            index.search("caroline run", [namespace], 10)
        derived = index.with_deletions("s/d1", np.flatnonzero(~after), "s/d2")
        again = other.with_segment_columns(postings, names, codes, keys, np.flatnonzero(~after), key="s/d2")
        assert derived.segment_keys == again.segment_keys and derived.namespaces == again.namespaces == ("a", "b")
        for text in QUERIES:
            for scope in (["a"], ["b"], ["c"], ["a", "b"]):
                for fields in (FieldWeights(), FieldWeights(value=2.0, entity_canonical_name=0.5)):
                    assert derived.search(text, scope, 100, fields) == again.search(text, scope, 100, fields), (text, scope)
        (segment,) = {parts.segment for held in index._parts.values() for parts in held if parts.key == "s/d1"}
        assert {parts.segment for held in derived._parts.values() for parts in held if parts.key == "s/d2"} == {segment}
    index = other.with_segment_columns(postings, names, codes, keys, np.flatnonzero(~after), key="s/d2")
    assert index.with_deletions("s/d2", np.flatnonzero(~before), "s/d3") is None  # a deletion file only grows
    assert index.with_deletions("s/none", np.flatnonzero(~after), "s/d3") is None
    with pytest.raises(ValueError, match="has 30 rows, got deleted rows up to 30"):
        index.with_deletions("s/d2", np.array([3, 30]), "s/d3")
    with pytest.raises(ValueError, match="in the index already"):
        index.with_deletions("s/d2", np.flatnonzero(~after), "s/d2")


@given(st.sets(st.integers(0, 60)), st.sets(st.integers(0, 60)))
def test_rows_added_are_the_later_rows_missing_from_the_earlier_or_none_where_those_are_not_kept(later, earlier):
    """`rows_added` equals `np.setdiff1d` where every earlier row is still there, else None."""
    import numpy as np

    rows, before = np.asarray(sorted(later), dtype=np.int64), np.asarray(sorted(earlier), dtype=np.int64)
    found = rows_added(rows, before)
    if earlier <= later:
        assert found is not None and found.tolist() == np.setdiff1d(rows, before).tolist()
    else:
        assert found is None


def test_a_deletion_in_one_namespace_keeps_the_other_namespaces_parts():
    """Deriving an index after deletions in one namespace hands every other namespace's part over as
    it is (no part made again), and searches as the segment added again with them."""
    import numpy as np

    documents = CORPUS * 2
    codes = np.asarray([index % 2 for index in range(len(documents))])
    keys, postings = uuid_keys(make_ids(len(documents))), term_postings(documents)
    index = Bm25Index.empty().with_segment_columns(postings, ["a", "b"], codes, keys, np.array([1]), key="s/d1")
    for namespace in ("a", "b"):
        index.search("caroline run", [namespace], 10)
    derived = index.with_deletions("s/d1", np.array([1, 2, 4]), "s/d2")  # rows of "a" only
    again = Bm25Index.empty().with_segment_columns(postings, ["a", "b"], codes, keys, np.array([1, 2, 4]), key="s/d2")
    (before,), (after,) = index._parts["b"], derived._parts["b"]
    assert after._parts["b"] is before._parts["b"] and after._parts["a"] is not before._parts["a"]
    for text in QUERIES:
        for scope in (["a"], ["b"], ["a", "b"]):
            assert derived.search(text, scope, 100) == again.search(text, scope, 100)
