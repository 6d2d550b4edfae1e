"""Compaction: segments with deleted rows rewritten without them; the rest kept; unnamed files gone."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tests import store_workers
from tests.factories import AWKWARD_IDS
from rms_retrieval.stores.engine import compaction
from rms_retrieval.stores.engine.manifest import SEGMENTS_DIR, read_manifest
from rms_retrieval.stores.memory_store import MemoryStore
from rms_retrieval.stores.engine.edge_columns import MENTIONS, EdgeColumns, StoredEdge
from rms_retrieval.stores.engine.merging import MERGE_FACTOR
from rms_retrieval.stores.engine.scope_graph import dead_keys
from rms_retrieval.stores.protocols import Edge

NAMESPACE = store_workers.NAMESPACE


def _store(path, turns: int) -> MemoryStore:
    store = MemoryStore.open(path, store_workers.encoder(), retired_grace=3600)
    for number in range(turns):
        store.add([store_workers.turn(number)])
        store.wait_for_merges()  # each merge as soon as it is due, so the segments are known
    return store


def test_nothing_deleted_means_nothing_to_compact(tmp_path):
    with _store(tmp_path / "store", 3) as store:
        assert compaction.compact(store.path, store.snapshot()) is None


def test_only_the_segments_with_deleted_rows_are_rewritten(tmp_path):
    with _store(tmp_path / "store", MERGE_FACTOR + 3) as store:
        before = store.snapshot().manifest.segment_ids
        assert len(before) == 4  # one merged segment of ten, three single ones
        store.delete(NAMESPACE, [store_workers.turn(0).id, store_workers.turn(MERGE_FACTOR + 2).id])
        store.compact()
        after = read_manifest(store.path)
        assert after.segment_ids[1:3] == before[1:3] and after.segment_ids[0] != before[0]
        # the last single segment held only a deleted turn and is gone; turn 1, indexed with turn 0
        # before it (the store's `previous` expansion), was indexed again into a segment of its own
        assert [entry.rows for entry in after.segments] == [MERGE_FACTOR - 2, 1, 1, 1]
        assert [entry.deletions for entry in after.segments] == [None] * 4
        assert sorted(path.name for path in (store.path / SEGMENTS_DIR).iterdir()) == sorted(after.segment_ids)
        assert store_workers.live_problems(store.snapshot(), {store_workers.turn(n).id for n in range(1, MERGE_FACTOR + 2)}) == []


def test_a_merge_keeps_deleted_rows_deleted(tmp_path):
    with _store(tmp_path / "store", MERGE_FACTOR - 1) as store:
        store.delete(NAMESPACE, [store_workers.turn(MERGE_FACTOR - 2).id])  # the last turn: none is indexed with it
        store.add([store_workers.turn(MERGE_FACTOR - 1)])  # the tenth segment: the tail merges
        store.wait_for_merges()
        merged = store.snapshot().manifest.segments
        assert len(merged) == 1 and merged[0].rows == MERGE_FACTOR and merged[0].deletions.rows == 1
        wanted = {store_workers.turn(n).id for n in range(MERGE_FACTOR) if n != MERGE_FACTOR - 2}
        assert store_workers.live_problems(store.snapshot(), wanted) == []
    with MemoryStore.open(tmp_path / "store", create=False, read_only=True) as reader:
        assert store_workers.live_problems(reader.snapshot(), wanted) == []


def test_compaction_never_touches_a_directory_the_store_did_not_make(tmp_path):
    with _store(tmp_path / "store", 3) as store:
        backup = store.path / SEGMENTS_DIR / "my-backup"
        backup.mkdir()
        store.delete(NAMESPACE, [store_workers.turn(2).id])
        store.compact()
        assert backup.is_dir()




@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6), st.sampled_from(["a", "b"]), st.integers(-1, 3)), max_size=30),
       st.frozensets(st.tuples(st.sampled_from(["a", "b", "c"]), st.sampled_from(AWKWARD_IDS)), max_size=6))
def test_the_edges_naming_a_deleted_object_are_read_from_the_columns_as_from_the_edges(drawn, dead_ids):
    edges = [StoredEdge(Edge(number + 1, AWKWARD_IDS[source], AWKWARD_IDS[target], MENTIONS, 0.5), namespace, row)
             for number, (source, target, namespace, row) in enumerate(drawn)]
    expected = [(stored.namespace, stored.edge.source) in dead_ids or (stored.namespace, stored.edge.target) in dead_ids
                for stored in edges]
    assert compaction.naming_dead(EdgeColumns.from_stored(edges), dead_keys(dead_ids)).tolist() == expected


def test_compaction_decodes_no_edge_of_a_segment_it_keeps(tmp_path):
    names = ["Caroline", "Melanie", "Paris", "Oslo"]
    with MemoryStore.open(tmp_path / "store", store_workers.encoder(), retired_grace=3600) as store:
        for number in range(MERGE_FACTOR + 2):  # named turns: MENTIONS and SPOKEN_BY edges in each segment
            turn = store_workers.turn(number)
            store.add([turn.model_copy(update={"content": f"{turn.content} with {names[number % 4]} in {names[(number + 1) % 4]}",
                                               "metadata": {"speaker": names[number % 2]}})])
            store.wait_for_merges()
        store.delete(NAMESPACE, [store_workers.turn(MERGE_FACTOR + 1).id])
        kept = store.snapshot().segments[:2]
        assert all(len(segment.edge_columns) for segment in kept)
        # LoadedSegment.edges: a merge's segment decodes them on first use (a write's holds its own)
        decoded = ["edges" in segment.__dict__ for segment in kept]
        assert decoded == [False, True]
        store.compact()
        assert [segment.entry.id for segment in store.snapshot().segments[:2]] == [segment.entry.id for segment in kept]
        assert ["edges" in segment.__dict__ for segment in kept] == decoded
