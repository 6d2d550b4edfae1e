"""A segment's index arrays: owners found for edges stored without them, and the check the arrays
wait for, run once and raised again while it fails."""

from __future__ import annotations

from uuid import UUID

import numpy as np
import pyarrow as pa
import pytest

from rms_retrieval.stores.engine.edge_columns import CO_MENTIONED, MENTIONS, EdgeColumns, StoredEdge
from rms_retrieval.stores.engine.segment_index import IndexArrays, owned_edges
from rms_retrieval.stores.errors import StoreError
from rms_retrieval.stores.indexes.postings import term_postings
from rms_retrieval.stores.protocols import Edge
from rms_retrieval.stores.engine.segment_vectors import SegmentVectors

SOURCE, ENTITY, OTHER = UUID(int=1), UUID(int=8), UUID(int=9)


def test_an_edge_without_its_owner_is_owned_by_its_source_s_row():
    edges = [StoredEdge(Edge(1, SOURCE, ENTITY, MENTIONS, 0.9), "a"),
             StoredEdge(Edge(2, ENTITY, OTHER, CO_MENTIONED, 0.4), "a"),
             StoredEdge(Edge(3, UUID(int=5), ENTITY, MENTIONS, 0.9), "a"),
             StoredEdge(Edge(4, SOURCE, OTHER, MENTIONS, 0.9), "a", 0)]
    owned = owned_edges(edges, {("a", SOURCE): 1}, rows=2)
    assert [stored.row for stored in owned] == [1, -1, -1, 0]  # CO_MENTIONED, and an unknown source, own nothing
    with pytest.raises(StoreError, match="names row 2 of a segment of 2 rows"):
        owned_edges([StoredEdge(Edge(5, SOURCE, ENTITY, MENTIONS, 0.9), "a", 2)], {}, rows=2)


def test_the_arrays_wait_for_one_check_and_a_failed_one_is_raised_again():
    postings = term_postings([("Caroline went running", None), ("a walk", None)])
    columns = EdgeColumns.from_stored([StoredEdge(Edge(1, SOURCE, ENTITY, MENTIONS, 0.9), "a", 0)])
    runs: list[int] = []
    verdicts = iter([StoreError("index.npz is damaged"), None])

    def check(index: IndexArrays) -> None:
        runs.append(len(index.edges))
        verdict = next(verdicts)
        if verdict is not None:
            raise verdict

    index = IndexArrays(SegmentVectors.dense(np.ones((2, 4), dtype=np.float32)), postings, columns, pa.array(["Caroline", None]), check)
    assert index.num_rows == 2 and not index.vectors.matrix.flags.writeable and runs == []  # shapes read, nothing checked
    with pytest.raises(StoreError, match="damaged"):
        index.checked()
    assert index.checked() is index and index.checked() is index and runs == [1, 1]
    assert index.postings is index.postings and index.postings.name_tfs is not None  # the names, counted once
    assert IndexArrays(SegmentVectors.dense(np.ones((2, 4), dtype=np.float32)), postings, columns, None, None).postings is postings
