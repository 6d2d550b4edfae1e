"""The write path: segments per add, tiered merges, segmentation-independent answers, id clashes."""

from __future__ import annotations

from datetime import timedelta
from uuid import UUID

import pytest

from tests import store_workers
from rms_retrieval.dataflows.retrieval import retrieve
from rms_retrieval.stores.indexes.entity_graph import entity_id
from rms_retrieval.stores.engine.manifest import SegmentEntry
from rms_retrieval.stores.errors import StoreError
from rms_retrieval.stores.memory_store import MemoryStore
from rms_retrieval.stores.models import MemoryObject
from rms_retrieval.stores.engine.merging import MERGE_FACTOR, merge_run

QUESTIONS = ("which turn was about the river?", "guitar and pottery", "turn 17", "museum violin hiking")


def _entries(*rows: int) -> list[SegmentEntry]:
    return [SegmentEntry(f"s{position}", count, {}) for position, count in enumerate(rows)]


def test_merge_run_takes_the_last_full_run_of_one_tier():
    assert merge_run(_entries(*[1] * (MERGE_FACTOR - 1))) is None
    assert merge_run(_entries(*[1] * MERGE_FACTOR)) == (0, MERGE_FACTOR)
    assert merge_run(_entries(500, *[3] * MERGE_FACTOR)) == (1, MERGE_FACTOR + 1)
    assert merge_run(_entries(*[10] * 9, 5)) is None  # 5 is tier 0, the tens before it are tier 1
    assert merge_run(_entries()) is None
    # merges behind the writes: a full run of tens before a few single rows still merges, in place
    assert merge_run(_entries(500, *[10] * MERGE_FACTOR, 1, 1)) == (1, MERGE_FACTOR + 1)
    assert merge_run(_entries(*[10] * MERGE_FACTOR, *[1] * MERGE_FACTOR)) == (MERGE_FACTOR, 2 * MERGE_FACTOR)


def test_one_add_is_one_small_segment_and_merges_keep_few(tmp_path):
    with MemoryStore.open(tmp_path / "store", store_workers.encoder(), retired_grace=0) as store:
        for number in range(120):
            store.add([store_workers.turn(number)])
        store.wait_for_merges()
        sizes = [entry.rows for entry in store.snapshot().manifest.segments]
        assert sum(sizes) == 120 and merge_run(store.snapshot().manifest.segments) is None
        assert len(sizes) <= 2 * (MERGE_FACTOR - 1)  # at most nine of each tier, give or take a run merged late
        assert store_workers.snapshot_problems(store.snapshot()) == []
        directories = sorted(path.name for path in (tmp_path / "store" / "segments").iterdir())
        manifest = store.snapshot().manifest
        assert set(directories) <= set(manifest.segment_ids) | set(manifest.retired)


def _bundles(store: MemoryStore) -> list[str]:
    when = store_workers.turn(0).created_at + timedelta(days=3)
    return [retrieve(store, question, namespaces=[store_workers.NAMESPACE], encoder=store_workers.encoder(),
                     reference_time=when, log=False).bundle.to_json() for question in QUESTIONS]


@pytest.mark.parametrize("count", [60, pytest.param(250, marks=pytest.mark.slow)])
def test_one_batch_and_many_small_batches_give_byte_identical_bundles(tmp_path, count):
    turns = [store_workers.turn(number) for number in range(count)]
    with MemoryStore.open(tmp_path / "one", store_workers.encoder()) as one, \
            MemoryStore.open(tmp_path / "many", store_workers.encoder()) as many:
        one.add(turns)
        for turn in turns:
            many.add([turn])
        many.wait_for_merges()
        assert many.snapshot().generation > count and len(many.snapshot().segments) > 1  # merges committed too
        assert _bundles(one) == _bundles(many)


def test_ids_are_unique_per_namespace_so_another_namespace_is_never_an_oracle(tmp_path):
    """Issue 21 #2, as a hostile writer of namespace a tries it: every id b holds (its own and the
    store-made entity ids of what it mentions) is accepted in a, exactly like an id nobody holds."""
    victim = MemoryObject(id=UUID(int=50), namespace="b", content="Hunter called about the audit")
    with MemoryStore.open(tmp_path / "store", store_workers.encoder()) as store:
        store.add([victim])
        hunter = [ref.object_id for ref in store.snapshot().entity_catalog(["b"]) if ref.alias == "Hunter"]
        assert hunter == [entity_id("b", "Hunter", victim.id)]
        guesses = [victim.id, *hunter, entity_id("b", "Hunter", UUID(int=1))]
        for number, guess in enumerate(guesses):
            store.add([MemoryObject(id=guess, namespace="a", content=f"probe {number}")])
        assert store.snapshot().count_objects(["a"]) == len(guesses)
        assert store.snapshot().get_objects([victim.id], ["b"])[victim.id] == victim  # b is untouched
        assert store.snapshot().get_objects([victim.id], ["a"])[victim.id].content == "probe 0"
        with pytest.raises(StoreError, match="already in namespace 'a'"):
            store.add([MemoryObject(id=victim.id, namespace="a", content="twice")])


def test_store_made_ids_depend_on_the_namespace_anchor_not_only_on_public_names(tmp_path):
    with MemoryStore.open(tmp_path / "store", store_workers.encoder()) as store:
        store.add([MemoryObject(id=UUID(int=7), namespace="b", content="Hunter called")])
        [hunter] = [ref.object_id for ref in store.snapshot().entity_catalog(["b"]) if ref.alias == "Hunter"]
    assert hunter == entity_id("b", "Hunter", UUID(int=7)) != entity_id("b", "Hunter", UUID(int=8))


def test_a_user_id_equal_to_a_derived_entity_id_moves_the_entity_to_the_next_free_id(tmp_path):
    anchor = UUID(int=1)
    squatter = MemoryObject(id=entity_id("a", "Zorro", anchor), namespace="a", content="an unrelated note")
    with MemoryStore.open(tmp_path / "store", store_workers.encoder()) as store:
        store.add([MemoryObject(id=anchor, namespace="a", content="the first note"), squatter])
        store.add([MemoryObject(id=UUID(int=2), namespace="a", content="Zorro rode through town")])
        [zorro] = [ref for ref in store.snapshot().entity_catalog(["a"]) if ref.alias == "Zorro"]
        assert zorro.object_id == entity_id("a", "Zorro", anchor, 1)
        [mention] = store.snapshot().adjacency(["a"]).touching([UUID(int=2)], 0.0)
        assert mention.target == zorro.object_id
        store.add([MemoryObject(id=UUID(int=3), namespace="a", content="Zorro again")])  # found by name
        assert [ref.object_id for ref in store.snapshot().entity_catalog(["a"]) if ref.alias == "Zorro"] == [zorro.object_id]


def test_a_user_id_in_the_same_batch_is_never_reused(tmp_path):
    first = MemoryObject(namespace="a", content="a note")
    squatter = MemoryObject(id=entity_id("a", "Zorro", first.id), namespace="a", content="another note")
    with MemoryStore.open(tmp_path / "store", store_workers.encoder()) as store:
        store.add([first, squatter, MemoryObject(namespace="a", content="Zorro rode by")])
        [zorro] = [ref for ref in store.snapshot().entity_catalog(["a"]) if ref.alias == "Zorro"]
        assert zorro.object_id == entity_id("a", "Zorro", first.id, 1)


def test_an_existing_id_is_refused_and_nothing_is_written(tmp_path):
    with MemoryStore.open(tmp_path / "store", store_workers.encoder()) as store:
        store.add([store_workers.turn(0)])
        with pytest.raises(Exception, match="already in namespace"):
            store.add([store_workers.turn(1), store_workers.turn(0)])
        assert store.snapshot().count_objects() == 1 and store.snapshot().state_fingerprint() == "g1-o1-e0"
