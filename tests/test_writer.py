"""The write path: segments per add, tiered merges, segmentation-independent answers, id clashes."""

from __future__ import annotations

from datetime import timedelta
from uuid import UUID

import pytest

from rms_retrieval.dataflows.bench import store_workers
from rms_retrieval.dataflows.retrieval import retrieve
from rms_retrieval.stores.entity_graph import entity_id
from rms_retrieval.stores.manifest import SegmentEntry
from rms_retrieval.stores.memory_store import MemoryStore
from rms_retrieval.stores.models import MemoryObject
from rms_retrieval.stores.writer import MERGE_FACTOR, merge_run

QUESTIONS = ("which turn was about the river?", "guitar and pottery", "turn 17", "museum violin hiking")


def _entries(*rows: int) -> list[SegmentEntry]:
    return [SegmentEntry(f"s{position}", count, {}) for position, count in enumerate(rows)]


def test_merge_run_takes_a_full_tier_at_the_tail_only():
    assert merge_run(_entries(*[1] * (MERGE_FACTOR - 1))) == 0
    assert merge_run(_entries(*[1] * MERGE_FACTOR)) == MERGE_FACTOR
    assert merge_run(_entries(500, *[3] * MERGE_FACTOR)) == MERGE_FACTOR
    assert merge_run(_entries(*[10] * 9, 5)) == 0  # 5 is tier 0, the tens before it are tier 1
    assert merge_run(_entries()) == 0


def test_one_add_is_one_small_segment_and_merges_keep_few(tmp_path):
    with MemoryStore.open(tmp_path / "store", store_workers.encoder(), retired_grace=0) as store:
        for number in range(120):
            store.add([store_workers.turn(number)])
        sizes = [entry.rows for entry in store.snapshot().manifest.segments]
        assert sizes == [100, 10, 10]
        assert store_workers.snapshot_problems(store.snapshot()) == []
        directories = sorted(path.name for path in (tmp_path / "store" / "segments").iterdir())
        manifest = store.snapshot().manifest
        assert set(directories) <= set(manifest.segment_ids) | set(manifest.retired)


def _bundles(store: MemoryStore) -> list[str]:
    when = store_workers.turn(0).created_at + timedelta(days=3)
    return [retrieve(store, question, namespaces=[store_workers.NAMESPACE], encoder=store_workers.encoder(),
                     reference_time=when, log=False).bundle.to_json() for question in QUESTIONS]


def test_one_batch_and_500_small_batches_give_byte_identical_bundles(tmp_path):
    turns = [store_workers.turn(number) for number in range(500)]
    with MemoryStore.open(tmp_path / "one", store_workers.encoder()) as one, \
            MemoryStore.open(tmp_path / "many", store_workers.encoder()) as many:
        one.add(turns)
        for turn in turns:
            many.add([turn])
        assert many.snapshot().generation == 500 and len(many.snapshot().segments) > 1
        assert _bundles(one) == _bundles(many)


def test_a_user_id_equal_to_a_derived_entity_id_never_blocks_another_namespace(tmp_path):
    """Issue 10 #5: b holds an object with the id a's extracted "Zorro" would get."""
    squatter = MemoryObject(id=entity_id("a", "Zorro"), namespace="b", content="an unrelated note")
    with MemoryStore.open(tmp_path / "store", store_workers.encoder()) as store:
        store.add([squatter])
        store.add([MemoryObject(id=UUID(int=1), namespace="a", content="Zorro rode through town")])
        [zorro] = [ref for ref in store.entity_catalog(["a"]) if ref.alias == "Zorro"]
        assert zorro.object_id not in (squatter.id, UUID(int=1)) and zorro.namespace == "a"
        assert zorro.object_id == entity_id("a", "Zorro", 1)
        [mention] = store.adjacency(["a"]).touching([UUID(int=1)], 0.0)
        assert mention.target == zorro.object_id
        assert store.get_objects([squatter.id])[squatter.id].namespace == "b"
        store.add([MemoryObject(id=UUID(int=2), namespace="a", content="Zorro again")])  # found by name
        assert [ref.object_id for ref in store.entity_catalog(["a"]) if ref.alias == "Zorro"] == [zorro.object_id]


def test_a_user_id_in_the_same_batch_is_never_reused(tmp_path):
    squatter = MemoryObject(id=entity_id("a", "Zorro"), namespace="a", content="a note")
    with MemoryStore.open(tmp_path / "store", store_workers.encoder()) as store:
        store.add([squatter, MemoryObject(namespace="a", content="Zorro rode by")])
        [zorro] = [ref for ref in store.entity_catalog(["a"]) if ref.alias == "Zorro"]
        assert zorro.object_id == entity_id("a", "Zorro", 1)


def test_an_existing_id_is_refused_and_nothing_is_written(tmp_path):
    with MemoryStore.open(tmp_path / "store", store_workers.encoder()) as store:
        store.add([store_workers.turn(0)])
        with pytest.raises(Exception, match="already in the store"):
            store.add([store_workers.turn(1), store_workers.turn(0)])
        assert store.count_objects() == 1 and store.state_fingerprint() == "g1-o1-e0"
