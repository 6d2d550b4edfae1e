"""The CSR graph walk: weights, hops, pruning and the exact left-to-right weight sums."""

from __future__ import annotations

import math
from uuid import UUID

import numpy as np

from rms_retrieval.nodes.helpers.graph_walk import _summed, walk
from rms_retrieval.stores.indexes.adjacency import Adjacency, uuid_keys
from rms_retrieval.stores.protocols import Edge

E1, E2, E3, HUB = (UUID(int=i) for i in (1, 2, 3, 4))
T = [UUID(int=100 + i) for i in range(6)]


def _walk(edges, starts, entities, hops=2, limit=50, min_confidence=0.0):
    keys = entities if isinstance(entities, np.ndarray) else uuid_keys(list(entities))
    return walk(Adjacency(edges), starts, keys, max_hops=hops, min_confidence=min_confidence, max_candidates=limit)


def test_an_object_two_entities_reach_sums_one_over_sqrt_degree_from_each():
    edges = [Edge(1, T[0], E1, "MENTIONS", 1.0), Edge(2, T[0], E2, "MENTIONS", 0.8), Edge(3, T[1], E2, "MENTIONS", 0.8)]
    reached = _walk(edges, [E1, E2], {E1, E2})
    assert reached.objects == (T[0], T[1])
    assert reached.weight.tolist() == [1.0 / math.sqrt(1) + 0.8 / math.sqrt(2), 0.8 / math.sqrt(2)]
    assert reached.hops.tolist() == [1, 1] and reached.support.tolist() == [2, 1]
    assert reached.edge_paths == ((0,), (2,))


def test_the_second_hop_divides_by_two_and_records_the_whole_path():
    edges = [Edge(1, E1, E2, "CO_MENTIONED", 0.9), Edge(2, T[0], E2, "MENTIONS", 0.5)]
    reached = _walk(edges, [E1], {E1, E2})
    assert reached.objects == (T[0],) and reached.hops.tolist() == [2]
    assert reached.weight.tolist() == [0.5 / (math.sqrt(2) * 2)]
    assert reached.edge_paths == ((0, 1),)
    assert _walk(edges, [E1], {E1, E2}, hops=1).objects == ()
    keys = np.unique(np.frombuffer(E1.bytes + E2.bytes, dtype="V16"))  # the entities as a catalog's id column
    by_keys = _walk(edges, [E1], keys)
    assert (by_keys.objects, by_keys.weight.tolist(), by_keys.edge_paths) == (reached.objects, reached.weight.tolist(),
                                                                              reached.edge_paths)


def test_pruning_keeps_the_entities_behind_the_most_confident_edges():
    edges = [Edge(1, E1, E2, "CO_MENTIONED", 0.5), Edge(2, E1, E3, "CO_MENTIONED", 0.9),
             Edge(3, T[0], E2, "MENTIONS", 1.0), Edge(4, T[1], E3, "MENTIONS", 1.0)]
    assert _walk(edges, [E1], {E1, E2, E3}, limit=1).objects == (T[1],)


def test_edges_below_the_confidence_are_not_walked_and_equal_weights_fall_back_to_edge_id():
    edges = [Edge(5, T[1], E1, "MENTIONS", 0.9), Edge(2, T[0], E1, "MENTIONS", 0.9), Edge(3, T[2], E1, "MENTIONS", 0.2)]
    reached = _walk(edges, [E1], {E1}, min_confidence=0.4)
    assert reached.objects == (T[0], T[1])


def test_weights_are_summed_left_to_right_in_the_order_entities_first_lent_them():
    terms = [0.1, 0.2, 0.3, 0.7, 1e-17]
    obj = np.zeros(len(terms), dtype=np.int64)
    sources = np.arange(1, len(terms) + 1, dtype=np.int64)
    total, support = _summed([(obj, sources, np.array(terms))], 10)
    expected = 0
    for term in terms:
        expected += term
    assert total[0] == expected and support[0] == len(terms)
