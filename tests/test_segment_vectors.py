"""A segment's vectors: one per row that has one; a bare entity has none, in new segments and,
to the vector search and to rewrites, in segments written before."""

from __future__ import annotations

import dataclasses
import hashlib
import zipfile
from datetime import datetime, timezone
from uuid import UUID

import numpy as np

from rms_retrieval.stores.engine.manifest import read_manifest, write_manifest
from rms_retrieval.stores.engine.segment_layout import INDEX_FILE, segment_directory
from rms_retrieval.stores.engine.segment_vectors import VECTOR_ROWS, SegmentVectors
from rms_retrieval.stores.memory_store import MemoryStore
from rms_retrieval.stores.models import MemoryObject, NodeType
from tests.factories import RandomEncoder

T0 = datetime(2025, 3, 1, tzinfo=timezone.utc)
ANN = MemoryObject(id=UUID(int=1), namespace="n", node_type=NodeType.ENTITY, content="Ann", entity_canonical_name="Ann",
                   created_at=T0, updated_at=T0)
BOB = MemoryObject(id=UUID(int=2), namespace="n", node_type=NodeType.ENTITY, content="Bob runs the tea shop",
                   entity_canonical_name="Bob", created_at=T0, updated_at=T0)
TURNS = [MemoryObject(id=UUID(int=3 + i), namespace="n", content=text, session_id="s", session_seq=i,
                      created_at=T0, updated_at=T0) for i, text in enumerate(["ann likes green tea", "tea time at four"])]


def _vectors(matrix_rows: int, rows: list[int] | None, num_rows: int) -> SegmentVectors:
    matrix = np.arange(matrix_rows * 2, dtype=np.float32).reshape(matrix_rows, 2)
    return SegmentVectors(matrix, None if rows is None else np.asarray(rows), num_rows)


def test_rows_without_a_vector_are_skipped_by_every_view():
    vectors = _vectors(3, [0, 2, 5], 6)
    assert vectors.problem() is None and vectors.has_vector().tolist() == [True, False, True, False, False, True]
    assert vectors.span(1, 5) == (1, 2) and vectors.span(0, 6) == (0, 3) and vectors.rows_at(np.asarray([2])).tolist() == [5]
    assert vectors.of(2).tolist() == [2.0, 3.0] and vectors.of(3) is None
    taken = vectors.take(np.asarray([5, 1, 0]))  # new row i is old row [5, 1, 0][i]
    assert taken.num_rows == 3 and taken.rows.tolist() == [0, 2] and taken.matrix.tolist() == [[4.0, 5.0], [0.0, 1.0]]
    kept = vectors.take(np.arange(6), np.asarray([True, True, False, True, True, True]))
    assert kept.rows.tolist() == [0, 5] and kept.num_rows == 6
    joined = SegmentVectors.concatenate([vectors, SegmentVectors.dense(np.ones((2, 2), np.float32))])
    assert joined.num_rows == 8 and joined.rows.tolist() == [0, 2, 5, 6, 7] and joined.problem() is None
    assert SegmentVectors.from_arrays(joined.to_arrays(), 8).rows.tolist() == [0, 2, 5, 6, 7]
    stacked = SegmentVectors.stacked([None, np.ones(2), None], 2)
    assert (stacked.rows.tolist(), stacked.matrix.shape) == ([1], (1, 2))
    assert SegmentVectors.stacked([None], 2).matrix.shape == (0, 2)


def test_inconsistent_vector_rows_are_named():
    assert _vectors(2, [0], 3).shape_problem() == "2 vectors and 1 vector rows for 3 rows"
    assert _vectors(2, [2, 1], 3).shape_problem() is None
    assert _vectors(2, [2, 1], 3).problem() == "vector rows out of order or outside the segment's 3 rows"
    assert _vectors(2, [0, 3], 3).problem() == "vector rows out of order or outside the segment's 3 rows"
    assert _vectors(2, None, 3).problem() == "2 vectors for 3 rows"


def _bare_rows(segment) -> list[int]:
    return [row for row in range(segment.entry.rows) if segment.object_at(row).is_bare_entity]


def test_a_bare_entity_is_stored_without_a_vector_and_the_search_never_finds_it(tmp_path):
    encoder = RandomEncoder(16)
    with MemoryStore.open(tmp_path / "s", encoder) as store:
        store.add([ANN, BOB, *TURNS])
        segment = store.snapshot().segments[-1]
        assert _bare_rows(segment) and _has_vectors_but_bare_entities(segment)
        with zipfile.ZipFile(segment.directory / INDEX_FILE) as index:
            assert {f"{VECTOR_ROWS}.npy", "vectors.npy"} <= set(index.namelist())
        hits = store.snapshot().search_vector(encoder.encode(["Ann"])[0], ["n"], 10)
        assert {hit.object_id for hit in hits} == {BOB.id, *(turn.id for turn in TURNS)}
        assert store.snapshot().search_vector(encoder.encode([BOB.content])[0], ["n"], 1)[0].object_id == BOB.id
        store.update("n", ANN.id, content="Ann, who likes green tea")  # no longer bare: embedded
        found = store.snapshot().search_vector(encoder.encode(["Ann, who likes green tea"])[0], ["n"], 1)[0]
        assert found.object_id == ANN.id and abs(found.cosine - 1.0) < 1e-6


def _as_format_5(path, encoder) -> None:
    """Rewrite every segment's index file as format 5 wrote it: a vector for every row, bare
    entities too, and no vector rows."""
    manifest = read_manifest(path)
    with MemoryStore.open(path, read_only=True, create=False) as store:
        segments = store.snapshot().segments
    entries = []
    for entry, segment in zip(manifest.segments, segments, strict=True):
        texts = [segment.object_at(row).content for row in range(entry.rows)]
        index = segment_directory(path, entry.id) / INDEX_FILE
        with np.load(index) as arrays:
            older = {name: arrays[name] for name in arrays.files if name != VECTOR_ROWS}
        older["vectors"] = encoder.encode(texts).astype(np.float32)
        np.savez(index, **older)
        entries.append(dataclasses.replace(entry, files={**entry.files, INDEX_FILE: hashlib.sha256(index.read_bytes()).hexdigest()}))
    write_manifest(path, dataclasses.replace(manifest, segments=tuple(entries)))


def _older_store(path, encoder):
    """A store of Ann, Bob and the turns, written as format 5 wrote it."""
    with MemoryStore.open(path, encoder) as store:
        store.add([ANN, BOB, *TURNS])
    _as_format_5(path, encoder)
    return path


def _has_vectors_but_bare_entities(segment) -> bool:
    return segment.vectors.has_vector().tolist() == [row not in _bare_rows(segment) for row in range(segment.entry.rows)]


def test_an_older_segment_s_bare_entity_vectors_are_skipped_and_dropped_by_a_rewrite(tmp_path):
    encoder = RandomEncoder(16)
    with MemoryStore.open(_older_store(tmp_path / "s", encoder), encoder) as store:
        segment = store.snapshot().segments[0]
        assert segment.vectors.rows is None and len(segment.vectors.matrix) == segment.entry.rows  # format 5, read as is
        hits = store.snapshot().search_vector(encoder.encode(["Ann"])[0], ["n"], 10)
        assert {hit.object_id for hit in hits} == {BOB.id, *(turn.id for turn in TURNS)}
        store.delete("n", [TURNS[1].id])
        store.compact()  # rewrites the segment: its bare entities' vectors go
        rewritten = store.snapshot().segments[0]
        assert rewritten.vectors.rows is not None and _has_vectors_but_bare_entities(rewritten)
        assert store.snapshot().search_vector(encoder.encode([BOB.content])[0], ["n"], 1)[0].object_id == BOB.id


def test_a_merge_of_older_segments_drops_their_bare_entities_vectors(tmp_path):
    encoder = RandomEncoder(16)
    with MemoryStore.open(_older_store(tmp_path / "s", encoder), encoder) as store:
        for number in range(9):  # ten segments of the smallest tier: a merge is due
            store.add([MemoryObject(id=UUID(int=100 + number), namespace="n", content=f"tea note {number}",
                                    session_id="s", session_seq=10 + number, created_at=T0, updated_at=T0)])
        store.wait_for_merges()
        segments = store.snapshot().segments
        assert len(segments) == 1 and segments[0].entry.sources  # the older segment merged with the rest
        assert _has_vectors_but_bare_entities(segments[0])
        hits = store.snapshot().search_vector(encoder.encode(["Ann"])[0], ["n"], 20)
        assert ANN.id not in {hit.object_id for hit in hits} and len(hits) == 12  # Bob, two turns, nine notes
