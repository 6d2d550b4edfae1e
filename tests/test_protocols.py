"""RetrievalStore: a store that implements the four indexes and the log is one, by itself; a
MemoryStore is not (it writes and hands out snapshots), its snapshots are."""

from __future__ import annotations

from rms_retrieval.stores.memory_store import MemoryStore
from rms_retrieval.stores.protocols import (
    GraphIndex,
    LexicalIndex,
    ObjectStore,
    RetrievalLog,
    RetrievalStore,
    SnapshotSource,
    VectorIndex,
    snapshot_of,
)
from rms_retrieval.stores.snapshot import StoreSnapshot
from tests.factories import conversation_store


def test_a_class_with_all_five_parts_is_a_retrieval_store():
    assert issubclass(StoreSnapshot, RetrievalStore)

    class Everything(LexicalIndex, VectorIndex, GraphIndex, ObjectStore, RetrievalLog):
        pass

    assert issubclass(Everything, RetrievalStore)


def test_a_class_missing_a_part_is_not():
    class NoLog(LexicalIndex, VectorIndex, GraphIndex, ObjectStore):
        pass

    assert not issubclass(NoLog, RetrievalStore)
    assert not isinstance(object(), RetrievalStore)


def test_the_memory_store_serves_reads_only_through_its_snapshots(tmp_path):
    assert not issubclass(MemoryStore, RetrievalStore) and issubclass(MemoryStore, SnapshotSource)
    with MemoryStore.open(tmp_path / "store", encoder=None, create=True) as store:
        snapshot = snapshot_of(store)
        assert isinstance(snapshot, StoreSnapshot) and snapshot_of(snapshot) is snapshot
        assert not hasattr(store, "search_lexical") and not hasattr(store, "count_objects")
    fake = conversation_store()
    assert snapshot_of(fake) is fake
