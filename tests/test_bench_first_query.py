"""The first query on a namespace after an open, against the same question warm."""

from __future__ import annotations

from rms_retrieval.dataflows.bench.first_query import REPEATS, first_query_line, first_query_report
from rms_retrieval.dataflows.bench.locomo_bench import benchmark_questions
from rms_retrieval.dataflows.bench.speed_bench import locomo_bench_queries
from rms_retrieval.dataflows.locomo import parse_locomo
from tests.factories import FakeEncoder


def _two_conversations():
    """`_dataset()`'s conversation twice, as conv-x and conv-y."""
    turns = [{"speaker": "Ann", "dia_id": f"D1:{i}", "text": text} for i, text in
             enumerate(["I adopted a puppy named Rex.", "Rex loves the beach.", "We went hiking in May."], 1)]
    return parse_locomo([{"sample_id": sample, "conversation": {
        "speaker_a": "Ann", "speaker_b": "Bo", "session_1_date_time": "1:56 pm on 8 May, 2023", "session_1": turns},
        "qa": [{"question": "What is the puppy called?", "answer": "Rex", "evidence": ["D1:1"], "category": 1},
               {"question": "Where does Rex like to go?", "answer": "beach", "evidence": ["D1:2"], "category": 4}]}
        for sample in ("conv-x", "conv-y")], source="test")


def test_each_other_namespace_s_first_question_is_timed_once_then_warm(tmp_path):
    from rms_retrieval.dataflows.ingest import locomo_objects
    from rms_retrieval.stores.memory_store import MemoryStore

    dataset = _two_conversations()
    with MemoryStore.open(tmp_path / "store", encoder=FakeEncoder()) as store:
        store.add(locomo_objects(dataset), progress=False)
        assert sorted(store.snapshot().namespaces()) == ["conv-x", "conv-y"]
    queries = locomo_bench_queries(dataset, benchmark_questions(dataset)["main"])
    report = first_query_report(tmp_path / "store", queries, FakeEncoder())
    assert report["namespaces"] == 1 and report["first_ms"]["n"] == 1 and report["warm_ms"]["n"] == REPEATS
    assert report["first_over_warm"] > 0
    assert "over a warm one" in first_query_line("LoCoMo", report) and "1 namespaces" in first_query_line("LoCoMo", report)
    one = [query for query in queries if query.namespaces == ("conv-x",)]
    assert first_query_report(tmp_path / "store", one, FakeEncoder()) is None
    assert "not timed" in first_query_line("LoCoMo", None)
