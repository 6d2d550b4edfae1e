"""The token counts a segment keeps per row: what they count, that writes, merges and compaction
keep them, that older segments go without, and that packing takes them for the counts it makes."""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta, timezone
from uuid import UUID

import numpy as np
import pytest

from rms_retrieval.nodes.settings import PackingSettings, RetrievalSettings
from rms_retrieval.stores.analysis.speakers import spoken_text
from rms_retrieval.stores.analysis.text_tokens import TEXT_TOKENS, spoken_tokens, token_count
from rms_retrieval.stores.engine.manifest import SegmentEntry
from rms_retrieval.stores.engine.merging import MERGE_FACTOR
from rms_retrieval.stores.engine.segment_vectors import SegmentVectors
from rms_retrieval.stores.engine.segment_writing import segment_text_tokens, write_segment
from rms_retrieval.stores.engine.segments import LoadedSegment
from rms_retrieval.stores.errors import StoreError
from rms_retrieval.stores.memory_store import MemoryStore
from rms_retrieval.stores.models import MemoryObject, NodeType
from tests import store_workers

T0 = datetime(2024, 5, 8, tzinfo=timezone.utc)
TEXTS = ["Caroline went to the LGBTQ support group.", " \n  indented after a newline", "\nA line after a newline", " leading space", "5 cats, 12 dogs",
         "(laughs) ok", "'s fine", "\t\ttabs", "]] brackets [x]", "😀 naïve café", "<|endoftext|> as text", "x" * 300]


def _turns(namespace: str = "a") -> list[MemoryObject]:
    return [MemoryObject(id=UUID(int=number + 1), namespace=namespace, content=text, node_type=NodeType.TURN,
                         created_at=T0 + timedelta(days=number), metadata={"speaker": "Mel"} if number % 2 else {})
            for number, text in enumerate(TEXTS)]


def test_a_rows_count_is_its_packed_line_under_the_default_and_plain_formats():
    from rms_retrieval.nodes.helpers.formatting import format_item

    turns = _turns()
    for memory, tokens in zip(turns, spoken_tokens(turns).tolist()):
        assert tokens == token_count(spoken_text(memory)) == token_count(format_item(memory, "dated_groups"))
        assert tokens == token_count(format_item(memory, "plain"))
    assert spoken_text(turns[1]).startswith("Mel: ")  # a named speaker is counted with the text


def test_a_segment_keeps_each_rows_count_and_reads_it_back(tmp_path):
    rows = _turns()
    written = write_segment(tmp_path, "g1-x", rows, SegmentVectors.dense(np.eye(len(rows), 8, dtype=np.float32)), [])
    expected = spoken_tokens(written.objects()).tolist()
    assert written.text_tokens.tolist() == expected
    assert LoadedSegment(tmp_path, written.entry).text_tokens.tolist() == expected


def _without_counts(tmp_path, written) -> LoadedSegment:
    """`written` as a segment written before rows' counts were kept."""
    index = written.directory / "index.npz"
    with np.load(index) as arrays:
        kept = {name: arrays[name] for name in arrays.files if name != TEXT_TOKENS}
    np.savez(index, **kept)
    files = {**written.entry.files, "index.npz": hashlib.sha256(index.read_bytes()).hexdigest()}
    return LoadedSegment(tmp_path, SegmentEntry(written.entry.id, written.entry.rows, files))


def test_an_older_segment_has_no_counts_and_a_rewrite_counts_them(tmp_path):
    rows = _turns()
    written = write_segment(tmp_path, "g1-x", rows, SegmentVectors.dense(np.eye(len(rows), 8, dtype=np.float32)), [])
    older = _without_counts(tmp_path, written)
    assert older.text_tokens is None
    assert segment_text_tokens(older).tolist() == segment_text_tokens(written).tolist() == written.text_tokens.tolist()


def test_counts_that_do_not_match_the_rows_are_named(tmp_path):
    rows = _turns()
    written = write_segment(tmp_path, "g1-x", rows, SegmentVectors.dense(np.eye(len(rows), 8, dtype=np.float32)), [])
    index = written.directory / "index.npz"
    with np.load(index) as arrays:
        kept = {name: arrays[name] for name in arrays.files} | {TEXT_TOKENS: np.zeros(3, dtype=np.uint8)}
    np.savez(index, **kept)
    files = {**written.entry.files, "index.npz": hashlib.sha256(index.read_bytes()).hexdigest()}
    with pytest.raises(StoreError, match="text token counts do not match"):
        LoadedSegment(tmp_path, SegmentEntry(written.entry.id, written.entry.rows, files))


def test_merges_and_compaction_carry_the_counts_of_the_live_rows(tmp_path):
    with MemoryStore.open(tmp_path / "store", store_workers.encoder()) as store:
        for number in range(MERGE_FACTOR + 2):
            store.add([store_workers.turn(number)])
        store.wait_for_merges()
        store.delete(store_workers.NAMESPACE, [store_workers.turn(3).id])
        for stage in ("merged", "compacted"):
            snapshot = store.snapshot()
            for segment in snapshot.segments:
                objects = [segment.object_at(row) for row in range(segment.entry.rows)]
                assert segment.text_tokens.tolist() == spoken_tokens(objects).tolist(), stage
            sources = [len(segment.entry.sources) for segment in snapshot.segments]
            assert max(sources) == (MERGE_FACTOR if stage == "merged" else 1), stage  # a merge, then its rewrite
            store.compact()


def test_a_snapshot_gives_the_kept_counts_of_the_live_objects_of_its_namespaces(tmp_path):
    with MemoryStore.open(tmp_path / "store", store_workers.encoder()) as store:
        store.add(_turns("a") + _turns("b")[:2])
        store.delete("a", [UUID(int=1)])
        snapshot = store.snapshot()
        wanted = [UUID(int=number) for number in (1, 2, 3, 999)]
        counts = snapshot.text_tokens(wanted, ["a"])
        objects = snapshot.get_objects(wanted, ["a"])
        assert sorted(counts) == sorted(objects) == [UUID(int=2), UUID(int=3)]  # the deleted and the unknown left out
        assert counts == {object_id: int(spoken_tokens([memory])[0]) for object_id, memory in objects.items()}
        assert snapshot.text_tokens([UUID(int=5)], ["b"]) == {}  # another namespace's id


def _store_of_fresh_turns(path, marker: str) -> MemoryStore:
    """A store of turns no earlier test packed (their texts carry `marker`), so no count is cached."""
    store = MemoryStore.open(path, store_workers.encoder())
    store.add([MemoryObject(id=UUID(int=number + 1), namespace="a", node_type=NodeType.TURN, created_at=T0 + timedelta(days=number),
                            content=f"{marker} turn {number}: Caroline painted a {['red', 'blue', 'green'][number % 3]} lake.")
               for number in range(12)])
    return store


def test_packing_takes_the_counts_the_store_keeps_for_what_it_would_count(tmp_path):
    from rms_retrieval.dataflows.retrieval import retrieve
    from rms_retrieval.nodes.helpers.formatting import format_item
    from rms_retrieval.nodes.helpers.tokens import count_tokens

    marker = f"m{UUID(int=hash(str(tmp_path)) & (2**64 - 1)).hex[:12]}"
    with _store_of_fresh_turns(tmp_path / "store", marker) as store:
        ask = dict(namespaces=["a"], encoder=store_workers.encoder(), reference_time=T0 + timedelta(days=30), log=False)
        first = retrieve(store, "What did Caroline paint?", extra_nodes=("stored_item_tokens", "selected_candidates"), **ask)
        stored = first.nodes["stored_item_tokens"]
        pool = first.nodes["selected_candidates"].pool.objects
        assert stored and set(stored) == {obj.id.int for obj in pool}  # none cached yet: every item from the store
        assert stored == {obj.id.int: count_tokens(format_item(obj, "dated_groups")) for obj in pool}  # what counting gives
        again = retrieve(store, "What did Caroline paint?", extra_nodes=("stored_item_tokens",), **ask)
        assert again.nodes["stored_item_tokens"] == {} and again.bundle.to_json() == first.bundle.to_json()
        given = retrieve(store, "What did Caroline paint in blue?", overrides={"stored_item_tokens": {key: 1 for key in stored}},
                         **ask)
        assert given.bundle.items and {item.tokens for item in given.bundle.items} == {1}  # taken as the store gives them
        reader = RetrievalSettings(packing=PackingSettings(item_format="reader"))
        assert retrieve(store, "What did Caroline paint in red?", settings=reader, extra_nodes=("stored_item_tokens",),
                        **ask).nodes["stored_item_tokens"] == {}  # a reader line starts with its day: counted
