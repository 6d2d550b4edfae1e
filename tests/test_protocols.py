"""RetrievalStore: a store that implements the four indexes and the log is one, by itself."""

from __future__ import annotations

from rms_retrieval.stores.memory_store import MemoryStore
from rms_retrieval.stores.protocols import (
    GraphIndex,
    LexicalIndex,
    ObjectStore,
    RetrievalLog,
    RetrievalStore,
    VectorIndex,
)


def test_a_class_with_all_five_parts_is_a_retrieval_store():
    assert issubclass(MemoryStore, RetrievalStore)

    class Everything(LexicalIndex, VectorIndex, GraphIndex, ObjectStore, RetrievalLog):
        pass

    assert issubclass(Everything, RetrievalStore)


def test_a_class_missing_a_part_is_not():
    class NoLog(LexicalIndex, VectorIndex, GraphIndex, ObjectStore):
        pass

    assert not issubclass(NoLog, RetrievalStore)
    assert not isinstance(object(), RetrievalStore)
