"""A segment directory's names: the ids a store makes, their generations, and the newest deletion file."""

from __future__ import annotations

import hashlib
import io

import numpy as np

from rms_retrieval.stores.engine.segment_layout import (DELETIONS_PREFIX, SEGMENT_NAME, latest_deletions,
                                                        new_segment_id, segment_directory, segment_generation)


def test_a_new_segment_id_is_a_store_name_of_its_generation_and_never_repeats():
    made = {new_segment_id(generation) for generation in (1, 42, 99_999_999) for _ in range(50)}
    assert len(made) == 150 and all(SEGMENT_NAME.fullmatch(segment_id) for segment_id in made)
    assert sorted({segment_generation(segment_id) for segment_id in made}) == [1, 42, 99_999_999]
    assert not SEGMENT_NAME.fullmatch("backup-g00000001") and not SEGMENT_NAME.fullmatch(".tmp-" + new_segment_id(3))


def test_the_newest_deletion_file_is_described_as_a_manifest_names_it(tmp_path):
    directory = segment_directory(tmp_path, new_segment_id(7))
    directory.mkdir(parents=True)
    assert directory.parent.name == "segments" and latest_deletions(directory) is None
    for generation, rows in ((8, [1]), (12, [1, 4, 9])):
        buffer = io.BytesIO()
        np.save(buffer, np.asarray(rows, dtype=np.int64))
        (directory / f"{DELETIONS_PREFIX}g{generation:08d}.npy").write_bytes(buffer.getvalue())
    found = latest_deletions(directory)
    newest = (directory / f"{DELETIONS_PREFIX}g00000012.npy").read_bytes()
    assert (found.file, found.rows) == (f"{DELETIONS_PREFIX}g00000012.npy", 3)
    assert found.sha256 == hashlib.sha256(newest).hexdigest()
