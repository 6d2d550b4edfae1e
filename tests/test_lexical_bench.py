"""The lexical benchmark on tiny corpora: it builds, searches and prints its figures."""

from __future__ import annotations

import pytest

from rms_retrieval.dataflows.bench.lexical_bench import build_index, locomo_corpus, main, measure, synthetic_corpus


def test_synthetic_corpus_spreads_over_ten_namespaces_and_finds_its_queries():
    corpus = synthetic_corpus(500, queries=20)
    assert len(corpus.documents) == 500 and len(set(corpus.namespaces)) == 10
    index = build_index(corpus)
    assert index.num_docs(index.namespaces) == 500
    assert sum(bool(index.search(text, [namespace], 10)) for text, namespace in corpus.queries) >= 10


def test_measure_times_every_query_cold_and_warm():
    report = measure(synthetic_corpus(300, queries=7))
    assert report.documents == 300 and report.cold_ms["n"] == report.warm_ms["n"] == report.warm_cpu_ms["n"] == 7
    assert "300 documents" in report.lines("synthetic")[0]


@pytest.mark.locomo
@pytest.mark.slow
def test_locomo_corpus_asks_each_question_of_its_own_conversation(locomo_path):
    corpus = locomo_corpus(locomo_path)
    assert {namespace for _, namespace in corpus.queries} == set(corpus.namespaces)
    assert len(corpus.documents) > 5_000


def test_main_prints_the_figures_once_per_segment_size(capsys):
    assert main(["--synthetic", "120", "--segment-rows", "7", "1000"]) == 0
    out = capsys.readouterr().out
    assert "synthetic: 120 documents" in out and "warm per query (ms): p50" in out
    assert "(7-row segments)" in out and "(1,000-row segments)" in out


def test_a_small_vocabulary_makes_every_query_match_most_documents():
    corpus = synthetic_corpus(400, queries=10, vocabulary=24)
    index = build_index(corpus)
    assert all(len(index.search(text, [namespace], 1_000)) > 40 / 3 for text, namespace in corpus.queries)


@pytest.mark.parametrize("arguments", [["--synthetic", "-1"], ["--segment-rows", "0"], ["--vocabulary", "0"]])
def test_main_rejects_bad_sizes(arguments):
    with pytest.raises(SystemExit):
        main(arguments)
