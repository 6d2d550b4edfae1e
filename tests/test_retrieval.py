"""`retrieve()` end to end with the real model and store: the demo corpus, and one LoCoMo
conversation when the data is present."""

from __future__ import annotations

import pytest

from dataflows.retrieval import LOG_VERSION, retrieve
from stores.memory_store import MemoryStore


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


@pytest.mark.locomo
def test_locomo_smoke_on_one_conversation(locomo_path, tmp_path, encoder):
    from dataflows.ingest import locomo_objects
    from dataflows.locomo import evidence_object_ids, load_locomo, questions_for, reference_time

    dataset = load_locomo(locomo_path)
    conversation = dataset.conversations[0]
    objects = [o for o in locomo_objects(dataset) if o.namespace == conversation.sample_id]
    questions = [q for q in questions_for(dataset) if q.sample_id == conversation.sample_id][:20]
    with MemoryStore.open(tmp_path / "store", encoder=encoder) as store:
        report = store.add(objects)
        assert report.objects_added == len(objects)
        packed = 0
        for question in questions:
            bundle = retrieve(store, question.question, namespaces=[conversation.sample_id],
                              reference_time=reference_time(conversation), token_budget=4000, log=False).bundle
            assert bundle.tokens_used <= 4000
            packed += set(evidence_object_ids(question)) <= {item.id for item in bundle.items}
    assert packed >= 12  # of 20 questions; 15 when this test was written (a floor, not a benchmark)
