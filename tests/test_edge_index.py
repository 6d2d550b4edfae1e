"""A segment's edges by owner and by target, and its co-mention counts less the dead rows'."""

from __future__ import annotations

from collections import Counter, defaultdict
from itertools import combinations
from uuid import UUID

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rms_retrieval.stores.engine.edge_columns import CO_MENTIONED, MENTIONS, SPOKEN_BY, EdgeColumns, StoredEdge
from rms_retrieval.stores.engine.edge_index import EdgeIndex, LiveCounts
from rms_retrieval.stores.protocols import Edge
from tests.factories import AWKWARD_IDS

ANN, BOB, CAL, TURN = UUID(int=1), UUID(int=2), UUID(int=3), UUID(int=100)


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
    edges = _edges()
    index = EdgeIndex(EdgeColumns.from_stored(edges))
    assert [index.owned(row).tolist() for row in range(4)] == [[0, 1, 2], [3, 4], [5], []]  # CO_MENTIONED: no owner
    assert index.owned_edges(1) == (edges[3], edges[4]) and index.owned_edges(7) == ()
    assert index.owners_into("a", ANN) == [(0, MENTIONS), (1, MENTIONS)]
    assert index.owners_into("a", CAL) == [(0, SPOKEN_BY)] and index.owners_into("b", ANN) == [(2, MENTIONS)]
    assert index.owners_into("b", BOB) == [] and index.owners_into("c", ANN) == [] and index.owners_into("a", TURN) == []
    assert index.pairs_of(0) == [("a", ANN, BOB)] and index.pairs_of(2) == [] and index.pairs_of(7) == []
    assert dict(index.co_mentions) == {("a", ANN, BOB): 2}


def _by_objects(edges: list[StoredEdge]) -> tuple[dict, dict, Counter]:
    """What the index answers, from the edges as objects: positions by owner, owners by target
    (MENTIONS and SPOKEN_BY), and every row's pairs counted."""
    by_owner, into = defaultdict(list), defaultdict(list)
    for position, stored in enumerate(edges):
        if stored.row >= 0:
            by_owner[stored.row].append(position)
            if stored.edge.edge_type in (MENTIONS, SPOKEN_BY):
                into[(stored.namespace, stored.edge.target)].append((stored.row, stored.edge.edge_type))
    pairs = Counter()
    for positions in by_owner.values():
        mentions = [edges[at] for at in positions if edges[at].edge.edge_type == MENTIONS]
        mentioned = sorted({stored.edge.target for stored in mentions})
        pairs.update((mentions[0].namespace, *pair) for pair in combinations(mentioned, 2))
    return by_owner, into, pairs


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 6), st.sampled_from([MENTIONS, SPOKEN_BY, CO_MENTIONED]),
                          st.sampled_from(["a", "b"]), st.integers(-1, 4)), max_size=40))
def test_the_columns_answer_as_the_edges_read_one_by_one(drawn) -> None:
    ids = AWKWARD_IDS  # in any order of rows
    edges = [StoredEdge(Edge(number + 1, ids[source], ids[target], kind, 0.5), namespace, row)
             for number, (source, target, kind, namespace, row) in enumerate(drawn)]
    index = EdgeIndex(EdgeColumns.from_stored(edges))
    by_owner, into, pairs = _by_objects(edges)
    for row in range(-1, 6):
        assert index.owned(row).tolist() == by_owner.get(row, [])
        assert index.owned_edges(row) == tuple(edges[at] for at in by_owner.get(row, []))
    for namespace in ("a", "b", "c"):
        for entity in ids:
            assert index.owners_into(namespace, entity) == into.get((namespace, entity), [])
    assert index.co_mentions == pairs


def test_live_counts_leave_out_what_the_dead_rows_counted() -> None:
    counts = LiveCounts({("a", ANN, BOB): 2, ("a", ANN, CAL): 1}, {("a", ANN, CAL): 1})
    assert dict(counts) == {("a", ANN, BOB): 2} and len(counts) == 1
    with pytest.raises(KeyError):
        counts[("a", ANN, CAL)]
