"""Writing one segment: staged, fsynced and renamed into place, described by its sidecar; and a
segment's deletion file, written durably with the sorted dead rows."""

from __future__ import annotations

import hashlib
import json

import numpy as np

from rms_retrieval.stores.engine.segment_writing import sidecar_bytes, write_deletions, write_segment
from rms_retrieval.stores.engine.segment_layout import SIDECAR_FILE, TEMPORARY_PREFIX, segment_directory
from rms_retrieval.stores.engine.segments import LoadedSegment
from rms_retrieval.stores.engine.segment_vectors import SegmentVectors
from tests import store_workers


def test_a_written_segment_is_in_place_described_and_loads_the_same(tmp_path):
    rows = [store_workers.turn(number) for number in range(5)]
    vectors = store_workers.encoder().encode([memory.content for memory in rows])
    segment = write_segment(tmp_path, "g00000001-0123456789ab", rows, SegmentVectors.dense(vectors), ())
    directory = segment_directory(tmp_path, "g00000001-0123456789ab")
    assert sorted(path.name for path in directory.parent.iterdir()) == ["g00000001-0123456789ab"]
    assert not any(path.name.startswith(TEMPORARY_PREFIX) for path in directory.parent.iterdir())
    described = json.loads((directory / SIDECAR_FILE).read_text())
    assert described["rows"] == 5 and described["namespaces"] == {store_workers.NAMESPACE: 5}
    assert described["files"] == segment.entry.files == {
        name: hashlib.sha256((directory / name).read_bytes()).hexdigest() for name in segment.entry.files}
    loaded = LoadedSegment(tmp_path, segment.entry)
    assert list(loaded.ids) == list(segment.ids) and np.array_equal(loaded.vectors.matrix, segment.vectors.matrix)
    assert loaded.vectors.rows.tolist() == segment.vectors.rows.tolist() == list(range(5))
    assert sidecar_bytes("x", 1, {}, (), {}, 0) == sidecar_bytes("x", 1, {}, (), {}, 0)


def test_a_deletion_file_holds_the_sorted_distinct_rows_and_names_its_generation(tmp_path):
    rows = [store_workers.turn(number) for number in range(4)]
    segment = write_segment(tmp_path, "g00000001-0123456789ab", rows,
                            SegmentVectors.dense(store_workers.encoder().encode([memory.content for memory in rows])), ())
    deletions = write_deletions(tmp_path, segment.entry.id, 7, [3, 1, 3])
    path = segment_directory(tmp_path, segment.entry.id) / deletions.file
    assert deletions.file == "deleted-g00000007.npy" and deletions.rows == 2
    assert np.load(path).tolist() == [1, 3] and deletions.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
