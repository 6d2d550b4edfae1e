"""The BM25 index of one generation's segments, brought from the previous generation's index.

A write adds segments, a merge replaces some, and a delete or an update reads a segment with a
later deletion file (`SegmentEntry.key` names both). The index keeps every segment both
generations read as it is, takes out the segments merged away, and adds the new ones; a segment
read with a later deletion file keeps its postings and the parts made over them, less the rows
deleted since (`Bm25Index.with_deletions`), so the first search after a delete pays for the
deleted rows, not for the segment (a merged segment of a million rows holds 100,000 of a
namespace).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

import numpy as np

from rms_retrieval.stores.engine.manifest import segment_of_key
from rms_retrieval.stores.engine.segments import LoadedSegment
from rms_retrieval.stores.indexes.lexical import Bm25Index


def lexical_index(base: Bm25Index, segments: Sequence[LoadedSegment]) -> Bm25Index:
    """`base` (an index of earlier readings of the store) brought to `segments`: the segments it holds
    that are not read any more taken out, each segment read with a later deletion file derived from
    its earlier reading, the others added."""
    gone = base.segment_keys - {segment.entry.key for segment in segments}
    earlier = {segment_of_key(key): key for key in gone}
    index = base
    for segment in segments:
        old = earlier.get(segment.entry.id)
        derived = None if old is None or segment.dead is None else \
            index.with_deletions(old, segment.dead_positions, segment.entry.key)
        if derived is not None:
            index, gone = derived, gone - {old}
    index = index.without_segments(gone)
    for segment in segments:
        if segment.entry.key not in index.segment_keys:
            columns = segment.columns
            index = index.with_segment_columns(
                segment.stored_postings, columns.namespaces, columns.namespace_codes, columns.ids,
                segment.dead_positions, key=segment.entry.key,
                name_tfs=partial(_name_tfs, segment), id_at=segment.id_at)
    return index


def _name_tfs(segment: LoadedSegment) -> np.ndarray | None:
    """The entity-name counts of `segment`'s postings: a weighted lexical search's first need."""
    return segment.postings.name_tfs
