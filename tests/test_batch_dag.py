"""The outer batch DAG's nodes, called directly: routing, sharding, batched query vectors, the store cache."""

from __future__ import annotations

import shutil
from datetime import datetime, timezone

import pytest

from rms_retrieval.dataflows import batch_dag
from rms_retrieval.dataflows.batch_dag import BatchRequest, StoreRouting
from rms_retrieval.nodes.models import RetrievalRequest
from rms_retrieval.nodes.candidate_settings import CandidateSettings
from rms_retrieval.nodes.settings import RetrievalSettings

WHEN = datetime(2025, 6, 1, tzinfo=timezone.utc)


@pytest.fixture(scope="module")
def store_copy(demo_store, tmp_path_factory):
    """A private copy of the demo store: read-only openers here never hold the shared one."""
    return shutil.copytree(demo_store.path, tmp_path_factory.mktemp("batch-dag") / "store")


def _item(request_id: str, *namespaces: str, query: str = "Who moved?") -> BatchRequest:
    return BatchRequest(request_id=request_id,
                        request=RetrievalRequest(query=query, namespaces=namespaces, reference_time=WHEN))


def test_routing_sends_each_scope_to_its_store_and_reports_requests_with_no_single_store():
    routing = StoreRouting(by_namespace={"a": "/s1", "b": "/s1", "c": "/s2"})
    items = [_item("1", "a"), _item("2", "c"), _item("3", "a", "b"), _item("4", "a", "c"), _item("5", "z"), _item("6", "a")]
    routed = batch_dag.routed_requests(items, routing)
    assert {scope: [i.request_id for i in group] for scope, group in routed.by_scope.items()} == {
        ("/s1", ("a",)): ["1", "6"], ("/s2", ("c",)): ["2"], ("/s1", ("a", "b")): ["3"]}
    errors = {result.request_id: result.error for result in routed.unroutable}
    assert errors.keys() == {"4", "5"}
    assert "span stores /s1, /s2" in errors["4"] and "namespace z is in no store" in errors["5"]
    assert all(result.bundle_json is None for result in routed.unroutable)


def test_shards_pack_whole_scopes_per_store_and_split_only_a_scope_larger_than_a_shard():
    items = ([_item(f"a{i}", "a") for i in range(3)] + [_item(f"b{i}", "b") for i in range(2)]
             + [_item(f"c{i}", "c") for i in range(7)] + [_item("d0", "d")])
    routing = StoreRouting(by_namespace={"a": "/s1", "b": "/s1", "c": "/s1", "d": "/s2"})
    shards = batch_dag.request_shards(batch_dag.routed_requests(items, routing), shard_size=5)
    assert [(s.number, s.store, [i.request_id for i in s.requests]) for s in shards] == [
        (0, "/s1", ["a0", "a1", "a2", "b0", "b1"]),
        (1, "/s1", ["c0", "c1", "c2", "c3", "c4"]),
        (2, "/s1", ["c5", "c6"]),
        (3, "/s2", ["d0"]),
    ]
    assert list(batch_dag.shard(shards)) == shards


def test_batch_results_come_back_in_request_order_with_the_unroutable_ones(store_copy, demo_store):
    items = [_item("x", "nowhere"), _item("y", demo_store.namespace)]
    routed = batch_dag.routed_requests(items, StoreRouting(by_namespace={demo_store.namespace: str(store_copy)}))
    answered = batch_dag.shard_results(batch_dag.request_shards(routed, 8)[0], RetrievalSettings())
    results = batch_dag.batch_results([answered], routed, items)
    assert [r.request_id for r in results] == ["x", "y"]
    assert results[0].error and results[1].error is None and results[1].bundle_sha256
    batch_dag.close_cached_stores()


def test_a_shard_reuses_the_open_store_and_reopens_it_after_a_commit(demo_store, tmp_path, encoder):
    from rms_retrieval.stores.memory_store import MemoryStore
    from rms_retrieval.stores.models import MemoryObject

    path = shutil.copytree(demo_store.path, tmp_path / "store")
    first, _ = batch_dag.cached_store(str(path))
    assert batch_dag.cached_store(str(path))[0] is first
    batch_dag.close_cached_stores()
    with MemoryStore.open(path, encoder=encoder) as writable:
        before = writable.snapshot().state_fingerprint()
    opened, _ = batch_dag.cached_store(str(path))
    assert opened.snapshot().state_fingerprint() == before
    batch_dag.close_cached_stores()
    with MemoryStore.open(path, encoder=encoder) as writable:
        writable.add([MemoryObject(namespace="late", node_type="FACT", content="Ines keeps bees.")])
    reopened, _ = batch_dag.cached_store(str(path))
    assert reopened.snapshot().state_fingerprint() != before and "late" in reopened.snapshot().namespaces()
    batch_dag.close_cached_stores()


def test_only_the_most_recently_used_stores_stay_open(store_copy, tmp_path, monkeypatch):
    monkeypatch.setattr(batch_dag, "MAX_OPEN_STORES", 1)
    second = shutil.copytree(store_copy, tmp_path / "second")
    first, _ = batch_dag.cached_store(str(store_copy))
    batch_dag.cached_store(str(second))
    assert batch_dag.cached_store(str(store_copy))[0] is not first
    batch_dag.close_cached_stores()


def test_a_store_that_cannot_be_opened_fails_every_request_of_its_shard(tmp_path):
    shard = batch_dag.Shard(0, str(tmp_path / "missing"), (_item("1", "a"), _item("2", "a")))
    results = batch_dag.shard_results(shard, RetrievalSettings())
    assert [r.request_id for r in results] == ["1", "2"]
    assert all(r.error.startswith("StoreError: no memory store at") and r.bundle_json is None for r in results)


def test_without_the_vector_path_the_bundle_is_the_one_retrieve_gives(store_copy, demo_store):
    from rms_retrieval.dataflows.retrieval import retrieve
    from rms_retrieval.stores.memory_store import MemoryStore

    settings = RetrievalSettings(candidates=CandidateSettings(enabled_paths=frozenset({"LEXICAL"})))
    item = _item("1", demo_store.namespace, query="Where does Priya live?")
    [result] = batch_dag.shard_results(batch_dag.Shard(0, str(store_copy), (item,)), settings)
    batch_dag.close_cached_stores()
    with MemoryStore.open(store_copy, create=False, read_only=True) as store:
        alone = retrieve(store, item.request.query, namespaces=item.request.namespaces, reference_time=WHEN,
                         settings=settings, log=False)
    assert result.error is None and result.bundle_json == alone.bundle.to_json()


@pytest.mark.parametrize("size", [0, -1])
def test_shard_size_must_be_positive(size):
    from rms_retrieval.dataflows.batch import BatchInputError, retrieve_many

    with pytest.raises(BatchInputError, match="shard_size must be at least 1"):
        retrieve_many("/nowhere", [], shard_size=size)
