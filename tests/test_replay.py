"""Replay from the retrieval log: identical bundles without the embedding model, honest differences."""

from __future__ import annotations

import copy
from itertools import cycle, islice

import numpy as np
import pytest

from rms_retrieval.dataflows import retrieval
from rms_retrieval.dataflows.code_identity import code_fingerprint
from rms_retrieval.dataflows.replay import RefusingEncoder, ReplayError, find_record, replay, replay_record
from rms_retrieval.dataflows.retrieval import retrieve
from rms_retrieval.nodes.settings import RankFusionScoring, RetrievalSettings, ScoringSettings, SessionSettings
from rms_retrieval.stores import snapshot
from rms_retrieval.stores.memory_store import LOG_DIRECTORY, MemoryStore
from rms_retrieval.stores.log.retrieval_log import EMBEDDING_ENCODING, RetrievalLogWriter

CONFIGS = [
    RetrievalSettings(),
    RetrievalSettings(scoring=ScoringSettings(fusion="weighted")),
    RetrievalSettings(scoring=ScoringSettings(rank_fusion=RankFusionScoring(rrf_k=10, graph_as_ranked_list=True))),
    RetrievalSettings(session=SessionSettings(window=0)),
]


@pytest.fixture(scope="module")
def store(demo_store):
    with MemoryStore.open(demo_store.path, create=False) as opened:
        yield opened


@pytest.fixture(scope="module")
def logged(store, demo_store):
    """Twenty logged requests across questions, budgets, formulas and request options."""
    options = cycle([{}, {"limit": 3}, {"min_score": 0.2}, {"max_per_source": 1}, {"retrieval_mode": "AUDIT"}])
    questions = cycle(demo_store.corpus.sample_questions + ["How is Priya's sister?", "What happened in June 2025?"])
    ids = []
    for i, (question, extra) in enumerate(islice(zip(questions, options), 20)):
        result = retrieve(store, question, namespaces=[demo_store.namespace], reference_time=demo_store.reference_time,
                          token_budget=60 + 45 * i, settings=CONFIGS[i % len(CONFIGS)], **extra)
        ids.append(str(result.request_id))
    return ids


def test_twenty_logged_requests_replay_to_identical_bundles(store, logged):
    reports = [replay(store, request_id) for request_id in logged]
    assert [r.request_id for r in reports] == logged
    assert all(r.identical for r in reports), [r.to_text() for r in reports if not r.identical]
    assert all(r.replayed_bundle_sha256 == r.logged_bundle_sha256 and not r.differences for r in reports)
    assert {r.bundle.retrieval_metadata.formula_version for r in reports} == {1, 2}
    assert "identical bundle" in reports[0].to_text()


def test_replay_does_not_log_and_never_embeds(store, logged):
    before = len(store.retrieval_log())
    replay(store, logged[0])
    assert len(store.retrieval_log()) == before
    refusing = RefusingEncoder(store.snapshot().embedding_identity)
    assert refusing.identity == store.snapshot().embedding_identity
    with pytest.raises(ReplayError, match="must use the logged query embedding"):
        refusing.encode(["anything"])


def test_the_logged_vector_is_what_the_model_made(store, logged):
    from rms_retrieval.stores.providers.onnx_encoder import default_encoder

    record = find_record(store, logged[0])
    vector = np.asarray(record["payload"]["query_embedding"], dtype=np.float32)
    np.testing.assert_array_equal(vector, default_encoder().encode([record["payload"]["query"]])[0])


def test_a_changed_bundle_is_reported_with_the_index_state_and_the_differences(store, logged):
    record = copy.deepcopy(find_record(store, logged[0]))
    payload = record["payload"]
    payload["bundle_sha256"] = "0" * 64
    payload["index_state"] = "g0-o1-e0"
    first = next(iter(payload["scores"]))
    payload["scores"][first] += 0.5
    payload["scores"]["00000000-0000-0000-0000-000000000001"] = 0.9
    payload["tokens_used"] += 7
    report = replay_record(store, record)
    assert not report.identical and report.index_state_changed
    assert report.differences[0] == (
        f"the index state changed since the request was logged: g0-o1-e0 -> {store.snapshot().state_fingerprint()}")
    text = "\n".join(report.differences)
    assert "tokens_used" in text and "scores: 1 no longer present (00000000-0000-0000-0000-000000000001)" in text
    assert f"{first}: " in text
    assert "DIFFERENT bundle" in report.to_text()


def test_a_changed_configuration_is_named(store, logged):
    record = copy.deepcopy(find_record(store, logged[0]))
    record["payload"]["configuration"]["scoring"]["rank_fusion"]["rrf_k"] = 5
    report = replay_record(store, record)
    assert not report.identical
    assert any("the logged configuration reads back with fingerprint" in d for d in report.differences)


def test_unknown_and_failed_requests_cannot_be_replayed(store, demo_store):
    with pytest.raises(ReplayError, match="no retrieval record 1234"):
        replay(store, "1234")
    with pytest.raises(ValueError):
        retrieve(store, "   ", namespaces=[demo_store.namespace], reference_time=demo_store.reference_time)
    failed = store.retrieval_log()[-1]
    assert failed["payload"]["status"] == "failed"
    with pytest.raises(ReplayError, match="failed when it ran"):
        replay(store, failed["request_id"])


def test_a_record_names_the_code_that_answered_and_replay_says_when_it_changed(store, logged):
    record = copy.deepcopy(find_record(store, logged[0]))
    payload = record["payload"]
    assert payload["package_version"] and len(payload["dag_fingerprint"]) == 64
    current = payload["dag_fingerprint"]
    payload["dag_fingerprint"] = "f" * 64
    payload["bundle_sha256"] = "0" * 64
    report = replay_record(store, record)
    assert not report.identical
    assert report.differences[0] == (f"the code of every module a bundle depends on changed since the request was "
                                     f"logged: {'f' * 64} -> {current}")
    # The fingerprint covers the helpers of the stages and the store's own modules (tests/test_code_identity.py).
    assert current == code_fingerprint((retrieval.__name__, snapshot.__name__))


def test_a_record_is_found_newest_first_without_reading_older_records(demo_store, demo_copy):
    with MemoryStore.open(demo_copy, create=False) as store:
        # An older record whose embedding cannot be decoded: reading the whole log would fail on it.
        with RetrievalLogWriter(demo_copy / LOG_DIRECTORY) as writer:
            writer.append({"request_id": "old", "payload": {"query_embedding": {EMBEDDING_ENCODING: "QUJD"}}},
                          logged_at_ns=1)
        result = retrieve(store, "Where does Tomas work now?", namespaces=[demo_store.namespace],
                          reference_time=demo_store.reference_time)
        assert find_record(store, result.request_id)["payload"]["bundle_sha256"] == \
            result.log_record["payload"]["bundle_sha256"]
        with pytest.raises(ValueError):
            store.retrieval_log()
