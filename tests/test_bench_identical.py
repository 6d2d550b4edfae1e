"""`rms bench identical`: the comparison of recorded and current bundles, and one real run over a tiny store."""

from __future__ import annotations

from rms_retrieval.dataflows.bench.identical import VARIANTS, bundles, compare, first_difference
from rms_retrieval.dataflows.locomo import parse_locomo
from tests.factories import FakeEncoder


def _record(key, variant, budget, bundle):
    return {"key": key, "variant": variant, "budget": budget, "bundle": bundle}


def test_compare_reports_different_missing_and_new_bundles():
    baseline = [_record("q1", "pipeline", 4000, "a"), _record("q2", "pipeline", 4000, "b"),
                _record("q3", "pipeline", 4000, "c")]
    current = [_record("q1", "pipeline", 4000, "a"), _record("q2", "pipeline", 4000, "B"),
               _record("q4", "pipeline", 4000, "d")]
    report = compare(baseline, current)
    assert report["compared"] == 2 and report["identical"] == 1
    assert report["different"] == [["q2", "pipeline", 4000]]
    assert report["missing"] == [["q3", "pipeline", 4000]] and report["new"] == [["q4", "pipeline", 4000]]
    assert compare(baseline, baseline)["identical"] == 3


def test_first_difference_names_the_position_and_both_texts():
    text = first_difference('{"score": 0.51}', '{"score": 0.52}', context=3)
    assert text == "at 13: baseline ...'0.51}' / now ...'0.52}'"


def _dataset():
    turns = [{"speaker": "Ann", "dia_id": f"D1:{i}", "text": text} for i, text in
             enumerate(["I adopted a puppy named Rex.", "Rex loves the beach.", "We went hiking in May."], 1)]
    raw = [{"sample_id": "conv-x",
            "conversation": {"speaker_a": "Ann", "speaker_b": "Bo", "session_1_date_time": "1:56 pm on 8 May, 2023",
                             "session_1": turns},
            "qa": [{"question": "What is the puppy called?", "answer": "Rex", "evidence": ["D1:1"], "category": 1},
                   {"question": "Where does Rex like to go?", "answer": "beach", "evidence": ["D1:2"], "category": 4},
                   {"question": "What did Ann adopt?", "answer": "a puppy", "evidence": ["D1:1"], "category": 1}]}]
    return parse_locomo(raw, source="test")


def test_bundles_covers_every_variant_and_repeats_byte_for_byte(tmp_path):
    from rms_retrieval.dataflows.ingest import locomo_objects
    from rms_retrieval.stores.memory_store import MemoryStore

    dataset = _dataset()
    with MemoryStore.open(tmp_path / "store", encoder=FakeEncoder()) as store:
        store.add(locomo_objects(dataset), progress=False)
        first = list(bundles(store, dataset, FakeEncoder(), count=3))
        second = list(bundles(store, dataset, FakeEncoder(), count=3))
    assert {r["variant"] for r in first} == set(VARIANTS)
    assert compare(first, second)["identical"] == len(first) > 0
