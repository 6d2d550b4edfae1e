"""`retrieve()` end to end with the real model and store: the demo corpus, and one LoCoMo
conversation when the data is present."""

from __future__ import annotations

import pytest

from rms_retrieval.dataflows.retrieval import LOG_VERSION, retrieve
from rms_retrieval.nodes.pools import PathType
from rms_retrieval.stores.memory_store import MemoryStore


def test_retrieve_answers_from_the_demo_store_and_logs_the_request(demo_store, demo_copy):
    with MemoryStore.open(demo_copy, create=False) as store:
        before = len(store.retrieval_log())
        result = retrieve(store, "What did Priya and Anjali make at the studio?", namespaces=[demo_store.namespace],
                          reference_time=demo_store.reference_time, token_budget=300,
                          extra_nodes=["merged_candidates", "fused_scores"])
        [record] = store.retrieval_log()[before:]
    bundle = result.bundle
    assert "matching mugs" in bundle.context
    assert bundle.tokens_used <= 300 and all(i.namespace == demo_store.namespace for i in bundle.items)
    assert str(demo_store.other_namespace_id) not in bundle.to_json()
    assert set(result.nodes) == {"merged_candidates", "fused_scores"}
    assert record["request_id"] == str(result.request_id) and record["log_version"] == LOG_VERSION
    assert record["payload"]["bundle_sha256"] == result.log_record["payload"]["bundle_sha256"]
    assert len(record["payload"]["query_embedding"]) == 384


def test_a_failed_request_is_logged_with_its_failure(demo_store, demo_copy):
    with MemoryStore.open(demo_copy, create=False) as store:
        before = len(store.retrieval_log())
        with pytest.raises(ValueError, match="token_budget"):
            retrieve(store, "anything?", namespaces=[demo_store.namespace], token_budget=0)
        [record] = store.retrieval_log()[before:]
    assert record["payload"]["status"] == "failed" and "token_budget" in record["payload"]["error"]


def test_the_log_record_carries_backend_failures_the_skipped_floor_and_coverage(demo_store, demo_copy):
    from tests.factories import OtherModelEncoder

    with MemoryStore.open(demo_copy, create=False) as store:
        before = len(store.retrieval_log())
        result = retrieve(store, "How many mugs did Priya and Anjali make?", namespaces=[demo_store.namespace],
                          reference_time=demo_store.reference_time, token_budget=300, min_score=0.5,
                          encoder=OtherModelEncoder())
        [record] = store.retrieval_log()[before:]
    meta, payload = result.bundle.retrieval_metadata.model_dump(mode="json"), record["payload"]
    assert payload["backend_failures"] == meta["backend_failures"] == {"VECTOR": "embedding_mismatch"}
    assert payload["min_score_skipped"] is meta["min_score_skipped"] is True
    assert payload["aggregation_coverage"] == meta["aggregation_coverage"]
    assert payload["aggregation_coverage"]["kind"] == "COUNT"
    assert "backend_failure" in payload["aggregation_coverage"]["limitation_codes"]


@pytest.mark.locomo
@pytest.mark.slow
def test_locomo_smoke_on_one_conversation(locomo_first_conversation):
    from rms_retrieval.dataflows.locomo import evidence_object_ids, questions_for, reference_time

    dataset, path = locomo_first_conversation.dataset, locomo_first_conversation.path
    [conversation] = dataset.conversations
    questions = [q for q in questions_for(dataset) if q.sample_id == conversation.sample_id][:20]
    packed = 0
    with MemoryStore.open(path, create=False) as store:
        for question in questions:
            bundle = retrieve(store, question.question, namespaces=[conversation.sample_id],
                              reference_time=reference_time(conversation), token_budget=4000, log=False).bundle
            assert bundle.tokens_used <= 4000
            packed += set(evidence_object_ids(question)) <= {item.id for item in bundle.items}
    assert packed >= 12  # of 20 questions; 15 when this test was written (a floor, not a benchmark)


@pytest.mark.locomo
@pytest.mark.slow
def test_locomo_count_question_reports_its_coverage(locomo_first_conversation):
    from rms_retrieval.dataflows.locomo import reference_time
    from rms_retrieval.nodes.packing import COVERAGE_WARNING

    path = locomo_first_conversation.path
    [conversation] = locomo_first_conversation.dataset.conversations
    with MemoryStore.open(path, create=False) as store:
        result = retrieve(store, "How many times has Melanie gone to the beach?", namespaces=[conversation.sample_id],
                          reference_time=reference_time(conversation), token_budget=2000, log=False,
                          extra_nodes=["merged_candidates"])
        elapsed = retrieve(store, "How many days ago did Caroline go to the support group?",
                           namespaces=[conversation.sample_id], reference_time=reference_time(conversation),
                           token_budget=2000, log=False).bundle
    bundle = result.bundle
    coverage = bundle.retrieval_metadata.aggregation_coverage
    assert bundle.context.startswith(COVERAGE_WARNING)
    assert coverage.kind == "COUNT" and coverage.exhaustive is False
    assert coverage.unique_candidates >= coverage.returned >= coverage.packed == len(bundle.items) > 0
    assert "semantic_matching" in coverage.limitation_codes and "token_budget" in coverage.limitation_codes
    scanned = [c for c in result.nodes["merged_candidates"].candidates if PathType.KEYWORD_SCAN in c.paths]
    assert scanned and any("beach" in c.object.content.lower() for c in scanned)
    assert elapsed.retrieval_metadata.aggregation_coverage is None  # elapsed time is arithmetic, not a count


def test_a_bare_string_is_one_namespace_never_its_letters(demo_store, demo_copy):
    with MemoryStore.open(demo_copy, create=False) as store:
        kwargs = {"reference_time": demo_store.reference_time, "token_budget": 300, "log": False}
        as_string = retrieve(store, "Where does Tomas work now?", namespaces=demo_store.namespace, **kwargs)
        as_list = retrieve(store, "Where does Tomas work now?", namespaces=[demo_store.namespace], **kwargs)
    assert as_string.bundle.namespaces == (demo_store.namespace,)
    assert as_string.bundle.items and as_string.bundle.to_json() == as_list.bundle.to_json()


def test_retrieve_takes_a_whole_request(demo_store, demo_copy):
    from rms_retrieval.dataflows.retrieval import as_request

    request = as_request("Where does Tomas work now?", namespaces=[demo_store.namespace],
                         reference_time=demo_store.reference_time, token_budget=300)
    with MemoryStore.open(demo_copy, create=False) as store:
        whole = retrieve(store, request, log=False)
        fields = retrieve(store, request.query, namespaces=request.namespaces, reference_time=request.reference_time,
                          token_budget=300, log=False)
        with pytest.raises(TypeError, match="not both"):
            retrieve(store, request, namespaces=["other"])
    assert whole.bundle.to_json() == fields.bundle.to_json()


@pytest.mark.parametrize("question, budget, field", [
    ("why? " * 20_000, 300, "query"),           # 100,000 characters
    ("Where does Tomas work?", 10**12, "token_budget"),
])
def test_a_rejected_request_is_logged_with_the_question_capped(demo_store, demo_copy, question, budget, field):
    import hashlib
    import json

    from rms_retrieval.nodes.models import MAX_QUERY_CHARS

    with MemoryStore.open(demo_copy, create=False) as store:
        before = len(store.retrieval_log())
        with pytest.raises(ValueError, match=field):
            retrieve(store, question, namespaces=[demo_store.namespace], token_budget=budget)
        [record] = store.retrieval_log()[before:]
    payload = record["payload"]
    assert payload["status"] == "failed" and field in payload["error"]
    assert payload["query"] == question[:MAX_QUERY_CHARS] and payload["query_chars"] == len(question)
    assert payload["query_sha256"] == hashlib.sha256(question.encode()).hexdigest()
    assert payload["query_truncated"] is (len(question) > MAX_QUERY_CHARS)
    assert len(json.dumps(record)) < MAX_QUERY_CHARS + 8_000


def test_the_longest_question_is_documented_and_named_in_the_error(demo_store, demo_copy):
    from pathlib import Path

    from rms_retrieval.nodes.models import MAX_QUERY_CHARS

    assert MAX_QUERY_CHARS == 8192 and "8,192 characters" in (Path(__file__).parents[1] / "README.md").read_text()
    with MemoryStore.open(demo_copy, create=False) as store:
        with pytest.raises(ValueError, match="at most 8192 characters"):
            retrieve(store, "x" * (MAX_QUERY_CHARS + 1), namespaces=[demo_store.namespace], log=False)


def test_without_the_log_the_bundle_is_serialised_only_when_the_record_is_read(demo_store, demo_copy, monkeypatch):
    from rms_retrieval.nodes.bundle import MemoryBundle

    serialised = []
    to_json = MemoryBundle.to_json
    monkeypatch.setattr(MemoryBundle, "to_json", lambda self: serialised.append(self) or to_json(self))
    with MemoryStore.open(demo_copy, create=False) as store:
        before = len(store.retrieval_log())
        result = retrieve(store, "Where does Tomas work now?", namespaces=[demo_store.namespace],
                          reference_time=demo_store.reference_time, token_budget=300, log=False)
        assert serialised == [] and len(store.retrieval_log()) == before
        digest = result.log_record["payload"]["bundle_sha256"]
    assert serialised == [result.bundle] and len(digest) == 64
    assert result.log_record is result.log_record  # built once


def test_a_named_speakers_own_turns_are_lifted_through_their_spoken_by_edges(demo_store, demo_copy):
    from rms_retrieval.nodes.settings import RetrievalSettings

    question, namespace = "What does Tomas like to cook?", demo_store.namespace
    with MemoryStore.open(demo_copy, create=False) as store:
        result = retrieve(store, question, namespaces=[namespace], reference_time=demo_store.reference_time,
                          token_budget=2000, extra_nodes=["spoken_by_query_entities", "fused_scores"], log=False)
        off = retrieve(store, question, namespaces=[namespace], reference_time=demo_store.reference_time,
                       token_budget=2000, settings=RetrievalSettings(scoring={"speaker_boost": 0.0}),
                       extra_nodes=["spoken_by_query_entities"], log=False)
    spoken = {obj.id.int for obj in demo_store.corpus.objects if obj.content.startswith("Tomas: ")}
    assert spoken and result.nodes["spoken_by_query_entities"] == spoken
    assert off.nodes["spoken_by_query_entities"] == frozenset()  # boost 0: the graph is not read for it
    pool = result.nodes["fused_scores"]
    factor = {obj.id.int in spoken: set() for obj in pool.objects}
    for obj, value in zip(pool.objects, pool.factors.speaker_factor.tolist()):
        factor[obj.id.int in spoken].add(value)
    assert factor == {True: {1.0}, False: {1 / (1 + RetrievalSettings().scoring.speaker_boost)}}


def test_the_result_carries_its_validated_request():
    from rms_retrieval.dataflows.retrieval import as_request
    from tests.factories import BASE_TIME, FakeEncoder, conversation_store

    request = as_request("Where does Caroline work?", namespaces="ns", reference_time=BASE_TIME, limit=3)
    result = retrieve(conversation_store(), request, encoder=FakeEncoder(), log=False)
    assert result.request is request
    built = retrieve(conversation_store(), "Where does Caroline work?", namespaces="ns", reference_time=BASE_TIME,
                     limit=3, encoder=FakeEncoder(), log=False)
    assert built.request == request


def test_a_vector_search_that_runs_and_finds_nothing_is_neither_a_failure_nor_a_mismatch(demo_store, demo_copy):
    """RFC 4.2: an empty successful search reports nothing, so a positive floor keeps applying."""
    from rms_retrieval.nodes.candidate_settings import CandidateSettings
    from rms_retrieval.nodes.settings import RetrievalSettings

    no_vectors = RetrievalSettings(candidates=CandidateSettings(vector_k=0))
    with MemoryStore.open(demo_copy, create=False) as store:
        for namespaces, settings in (([demo_store.namespace], no_vectors), (["nobody-wrote-here"], None)):
            result = retrieve(store, "Where does Tomas work?", namespaces=namespaces, settings=settings,
                              reference_time=demo_store.reference_time, min_score=0.3, log=False,
                              extra_nodes=["vector_candidates"])
            meta = result.bundle.retrieval_metadata
            assert result.nodes["vector_candidates"].failure is None and result.nodes["vector_candidates"].hits == ()
            assert meta.backend_failures == {} and meta.embedding_mismatch is False
            assert meta.min_score_skipped is False
            assert result.bundle.items == ()


def test_request_options_never_change_the_shared_settings_or_the_next_answer(demo_store, demo_copy):
    from rms_retrieval.nodes.settings import RetrievalSettings

    settings = RetrievalSettings()
    snapshot = settings.model_dump_json()
    question = dict(namespaces=[demo_store.namespace], reference_time=demo_store.reference_time, log=False,
                    settings=settings, token_budget=300)
    with MemoryStore.open(demo_copy, create=False) as store:
        before = retrieve(store, "Where does Tomas work now?", **question).bundle.to_json()
        optioned = retrieve(store, "Where does Tomas work now?", limit=1, min_score=0.2, max_per_source=1,
                            retrieval_mode="AUDIT", **question)
        after = retrieve(store, "Where does Tomas work now?", **question).bundle.to_json()
    assert len(optioned.bundle.items) == 1
    assert settings.model_dump_json() == snapshot and after == before
    with pytest.raises(ValueError, match="frozen"):
        settings.session.window = 9


def test_natural_language_retrieval_never_reaches_the_exact_operations():
    """RFC: exact aggregation and enumeration are their own entry points; no code a bundle is made
    by imports them (the modules are those the replay fingerprint hashes)."""
    from rms_retrieval.dataflows.code_identity import dependency_modules
    from rms_retrieval.dataflows.pipeline import STAGE_MODULES

    from rms_retrieval.stores.protocols import _RETRIEVAL_STORE_PARTS, RecordReader

    modules = dependency_modules([m.__name__ for m in STAGE_MODULES])
    assert "rms_retrieval.nodes.packing" in modules and "rms_retrieval.stores.protocols" in modules
    assert [m for m in modules if m.startswith(("rms_retrieval.stores.exact", "rms_retrieval.dataflows.quantity"))] == []
    # and the store the nodes are handed offers none of the exact operations' reads
    offered = set().union(*(part.__abstractmethods__ for part in _RETRIEVAL_STORE_PARTS))
    assert offered & RecordReader.__abstractmethods__ == {"state_fingerprint"}
