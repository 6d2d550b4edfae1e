"""A segment's edges by owner and by target, and its co-mention counts less the dead rows'."""

from __future__ import annotations

from uuid import UUID

import pytest

from rms_retrieval.stores.engine.edge_columns import CO_MENTIONED, MENTIONS, SPOKEN_BY, StoredEdge
from rms_retrieval.stores.engine.edge_index import EdgeIndex, LiveCounts
from rms_retrieval.stores.protocols import Edge

ANN, BOB, CAL = UUID(int=1), UUID(int=2), UUID(int=3)


def _edges() -> list[StoredEdge]:
    turn = [UUID(int=100 + row) for row in range(3)]
    return [
        StoredEdge(Edge(1, turn[0], ANN, MENTIONS, 0.9), "a", 0),
        StoredEdge(Edge(2, turn[0], BOB, MENTIONS, 0.9), "a", 0),
        StoredEdge(Edge(3, turn[0], CAL, SPOKEN_BY, 1.0), "a", 0),
        StoredEdge(Edge(4, turn[1], BOB, MENTIONS, 0.9), "a", 1),
        StoredEdge(Edge(5, turn[1], ANN, MENTIONS, 0.9), "a", 1),
        StoredEdge(Edge(6, turn[2], ANN, MENTIONS, 0.7), "b", 2),
        StoredEdge(Edge(7, ANN, BOB, CO_MENTIONED, 0.55), "a", -1),
    ]


def test_edges_are_grouped_by_owner_and_by_target_and_pairs_counted_per_row() -> None:
    index = EdgeIndex(_edges())
    assert dict(index.by_owner) == {0: [0, 1, 2], 1: [3, 4], 2: [5]}  # the ownerless CO_MENTIONED edge in none
    assert index.owners_into[("a", ANN)] == [(0, MENTIONS), (1, MENTIONS)]
    assert index.owners_into[("a", CAL)] == [(0, SPOKEN_BY)] and index.owners_into[("b", ANN)] == [(2, MENTIONS)]
    assert index.pairs_of(0) == [("a", ANN, BOB)] and index.pairs_of(2) == [] and index.pairs_of(7) == []
    assert dict(index.co_mentions) == {("a", ANN, BOB): 2}


def test_live_counts_leave_out_what_the_dead_rows_counted() -> None:
    counts = LiveCounts({("a", ANN, BOB): 2, ("a", ANN, CAL): 1}, {("a", ANN, CAL): 1})
    assert dict(counts) == {("a", ANN, BOB): 2} and len(counts) == 1
    with pytest.raises(KeyError):
        counts[("a", ANN, CAL)]
