from uuid import UUID

from rms_retrieval.stores.adjacency import Adjacency
from rms_retrieval.stores.protocols import Edge

A, B, C = UUID(int=1), UUID(int=2), UUID(int=3)


def test_edges_touching_come_once_each_in_edge_id_order_above_the_confidence():
    adjacency = Adjacency([Edge(3, A, C, "MENTIONS", 0.9), Edge(1, A, B, "MENTIONS", 0.5), Edge(2, B, C, "CO", 0.3)])
    assert [e.edge_id for e in adjacency.touching([A, B], 0.4)] == [1, 3]
    assert [e.edge_id for e in adjacency.touching([B, C], 0.0)] == [1, 2, 3]
    assert adjacency.degree(A) == 2 and adjacency.degree(UUID(int=9)) == 0
