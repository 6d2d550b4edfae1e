"""What the integrations share: the retriever's request fields and one item's metadata."""

from __future__ import annotations

from datetime import datetime, timezone
from uuid import UUID

import pytest
from pydantic import ValidationError

from rms_retrieval.dataflows.retrieval import retrieve
from rms_retrieval.integration import RetrieverFields, bundle_items, item_metadata
from rms_retrieval.nodes.bundle import BundleItem
from rms_retrieval.nodes.pools import PathType
from rms_retrieval.stores.memory_store import MemoryStore

ITEM = BundleItem(id=UUID(int=7), namespace="ns", node_type="TURN", content="Tomas: hi", text="Tomas: hi", score=0.5,
                  paths=(PathType.VECTOR, PathType.LEXICAL), path_count=2, tier=2, tokens=4,
                  event_time=datetime(2025, 4, 19, 10, tzinfo=timezone.utc))


def test_item_metadata_is_json_ready():
    assert item_metadata(ITEM, 3, "r1", False) == {
        "id": "00000000-0000-0000-0000-000000000007", "score": 0.5, "paths": ["VECTOR", "LEXICAL"], "tier": 2,
        "tokens": 4, "event_time": "2025-04-19T10:00:00+00:00", "namespace": "ns", "node_type": "TURN",
        "position": 3, "request_id": "r1", "min_score_skipped": False}
    assert item_metadata(ITEM.model_copy(update={"event_time": None}), 1, "r", True)["event_time"] is None


def test_fields_open_a_path_take_one_namespace_and_follow_the_bundle(demo_store, demo_copy):
    fields = RetrieverFields(store=str(demo_copy), namespaces=demo_store.namespace, token_budget=200,
                             reference_time=demo_store.reference_time, request_options={"limit": 3})
    assert isinstance(fields.store, MemoryStore) and fields.namespaces == (demo_store.namespace,)
    result = fields.retrieve("Where does Tomas work now?")
    expected = retrieve(fields.store, "Where does Tomas work now?", namespaces=[demo_store.namespace], limit=3,
                        reference_time=demo_store.reference_time, token_budget=200, log=False).bundle
    pairs = bundle_items(result)
    assert [item.id for item, _ in pairs] == [item.id for item in expected.items]
    assert [metadata["position"] for _, metadata in pairs] == list(range(1, len(pairs) + 1))
    assert {metadata["request_id"] for _, metadata in pairs} == {str(result.request_id)}
    assert {metadata["min_score_skipped"] for _, metadata in pairs} == {False}
    fields.close()


def test_bad_request_fields_fail_when_built(demo_store, demo_copy):
    with pytest.raises(ValidationError, match="limit"):
        RetrieverFields(store=str(demo_copy), namespaces=[demo_store.namespace], request_options={"limit": -1})
