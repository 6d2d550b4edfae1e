"""Term postings as DuckDB's create_fts_index writes them, and their arrays on disk."""

from __future__ import annotations

import os

import numpy as np
import pytest

from rms_retrieval.stores.indexes import postings as postings_module
from rms_retrieval.stores.indexes.postings import TermPostings, indexed_terms, query_terms, term_postings
from tests.lexical_corpus import CORPUS, make_ids, reference_database


def test_postings_match_the_fts_index_tables():
    """Terms, tf and document lengths are those create_fts_index writes."""
    ids = make_ids(len(CORPUS))
    connection = reference_database(CORPUS, ids)
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


def test_name_counts_are_each_postings_tf_within_the_entity_name():
    postings = term_postings(CORPUS)
    names = term_postings([("", name) for _, name in CORPUS])
    in_names = {(term, row): tf for term, row, tf in zip(names.terms, names.rows.tolist(), names.tfs.tolist())}
    expected = [in_names.get((term, row), 0) for term, row in zip(postings.terms, postings.rows.tolist())]
    assert postings.name_counts.tolist() == expected and sum(expected) == 6
    assert term_postings([("no names here", None)]).name_tfs is None


def test_names_come_back_after_the_arrays_a_merge_and_a_subset():
    names = [name for _, name in CORPUS]
    whole = term_postings(CORPUS)
    loaded = TermPostings.from_arrays(whole.to_arrays(), "segment.npz")
    assert loaded.name_tfs is None and loaded.with_names(names).name_counts.tolist() == whole.name_counts.tolist()
    merged = TermPostings.concatenate([term_postings(CORPUS[:4]), term_postings(CORPUS[4:])])
    assert merged.name_counts.tolist() == whole.name_counts.tolist()
    kept = np.asarray([1, 4, 6])
    assert whole.subset(kept).name_counts.tolist() == term_postings([CORPUS[row] for row in kept.tolist()]).name_counts.tolist()


def test_names_the_postings_were_not_made_with_are_refused():
    postings = term_postings(CORPUS[:2])
    with pytest.raises(ValueError, match="do not hold the names' terms"):
        postings.with_names([None, "Zanzibar"])
    with pytest.raises(ValueError, match="2 postings rows need as many names, got 1"):
        postings.with_names([None])


ASCII_TEXTS = ["", "   ", "The kilns were FIRING, firing!", "it's A-B_C 3rd `tick` \"quoted\" 'single'",
               "a\x0bb x\x1cy\x1fz tab\there\r\nnew\fform", "\\back\\slash|pipe/slash~tilde^caret",
               "e-mail someone@example.com https://example.com/path?q=1&r=2", "running runners ran; RUNS",
               "the and of", "generously caring relational abilities 10:00 8th", "x" * 40 + " y"]


@pytest.mark.parametrize("text", ASCII_TEXTS)
def test_ascii_text_is_analysed_as_duckdbs_statements_analyse_it(text):
    connection = postings_module._ANALYZER._ready()
    query = {term for (term,) in connection.execute(postings_module.QUERY_TERMS, {"text": text}).fetchall() if term}
    assert set(postings_module._ANALYZER.query_terms(text)) == query
    tokens = connection.execute(postings_module.DOCUMENT_TERMS,
                                {"rows": [0], "contents": [text], "names": ["Mixed-Case Name"]}).fetchall()
    stopwords = set(connection.execute(postings_module.STOPWORDS).fetchnumpy()["sw"].tolist())
    expected = sorted(term for _, word, term in tokens if word and word not in stopwords)
    rows, terms = postings_module._ANALYZER.document_terms([text], ["Mixed-Case Name"])
    assert sorted(terms.to_pylist()) == expected and rows.tolist() == [0] * len(expected)


def test_a_batch_of_ascii_and_other_rows_keeps_each_rows_terms():
    rows, terms = postings_module._ANALYZER.document_terms(["Café runs", "dogs run", "Ünïcödé"], [None, "Ann", "Zoë"])
    found: dict[int, list[str]] = {}
    for row, term in zip(rows.tolist(), terms.to_pylist()):
        found.setdefault(row, []).append(term)
    assert {row: sorted(each) for row, each in found.items()} == {0: ["cafe", "run"], 1: ["ann", "dog", "run"], 2: ["unicod", "zoe"]}
