"""A generation's BM25 index brought from the previous generation's (stores/engine/lexical_reading.py):
after deletes and updates it scores as a fresh reader's, keeping the changed segment's postings."""

from __future__ import annotations

from tests import store_workers
from rms_retrieval.stores.engine.lexical_reading import lexical_index
from rms_retrieval.stores.indexes.lexical import Bm25Index
from rms_retrieval.stores.memory_store import MemoryStore
from rms_retrieval.stores.protocols import FieldWeights

NAMESPACE = store_workers.NAMESPACE
OTHER = "other"
TEXTS = ("zeppelin", "turn river", "garden violin pottery", "turn 17", "hiking museum")


def _open(path) -> MemoryStore:
    return MemoryStore.open(path, store_workers.encoder(), retired_grace=0)


def _turns():
    turns = [store_workers.turn(number) for number in range(40)]
    return turns + [turn.model_copy(update={"namespace": OTHER}) for turn in turns[:12]]


def _searches(snapshot) -> list:
    return [snapshot.search_lexical(text, scope, 50, fields) for text in TEXTS for scope in ([NAMESPACE], [OTHER])
            for fields in (FieldWeights(), FieldWeights(value=2.0, entity_canonical_name=0.5))]


def _segments_of(index: Bm25Index) -> dict:
    """Each segment reading's key, and the postings it searches."""
    return {parts.key: parts.segment for held in index._parts.values() for parts in held}


def test_a_segment_read_with_a_later_deletion_file_keeps_its_postings_and_scores_as_a_fresh_reader(tmp_path):
    turns = _turns()
    with _open(tmp_path / "store") as store:
        store.add(turns)  # one segment of both namespaces
        before = store.snapshot()
        before.search_lexical("turn", [NAMESPACE], 5)  # the namespace's part made; OTHER's is not
        (segment,) = before.segments
        store.delete(NAMESPACE, [turns[3].id, turns[17].id])
        store.delete(OTHER, [turn.id for turn in turns[40:]])  # OTHER leaves the segment
        store.update(NAMESPACE, turns[5].id, content="turn 5 a zeppelin over the river")
        after = store.snapshot()
        found = _searches(after)
        changed = next(reading for reading in after.segments if reading.entry.id == segment.entry.id)
        assert changed.entry.key != segment.entry.key
        kept = _segments_of(after._lexical_index())[changed.entry.key]
        assert kept is _segments_of(before._lexical_index())[segment.entry.key]  # derived, not added again
        assert not any(parts.key == changed.entry.key for parts in after._lexical_index()._parts.get(OTHER, ()))
        with MemoryStore.open(tmp_path / "store", read_only=True) as fresh:
            assert found == _searches(fresh.snapshot())
        assert [hit.object_id for hit in found[0]][:1] == [turns[5].id]  # "zeppelin": the new version
        assert not any(hit.object_id in {turns[3].id, turns[17].id} for hits in found for hit in hits)


def test_an_index_without_the_earlier_reading_adds_the_segment_whole(tmp_path):
    turns = _turns()
    with _open(tmp_path / "store") as store:
        store.add(turns)
        store.delete(NAMESPACE, [turns[3].id])
        segments = store.snapshot().segments
        index = lexical_index(Bm25Index.empty(), segments)
        assert index.segment_keys == {segment.entry.key for segment in segments} and segments[0].dead is not None
        assert lexical_index(index, segments) is index  # nothing to bring
