import copy
import pickle
from uuid import UUID, SafeUUID

import numpy as np
from hypothesis import given, strategies as st

from rms_retrieval.stores.indexes.adjacency import (
    Adjacency, UuidColumn, key_ints, sorted_positions, uuid_keys, uuid_of, uuid_of_bytes,
)
from rms_retrieval.stores.protocols import Edge

A, B, C = UUID(int=1), UUID(int=2), UUID(int=3)


def test_edges_touching_come_once_each_in_edge_id_order_above_the_confidence():
    adjacency = Adjacency([Edge(3, A, C, "MENTIONS", 0.9), Edge(1, A, B, "MENTIONS", 0.5), Edge(2, B, C, "CO", 0.3)])
    assert [e.edge_id for e in adjacency.touching([A, B], 0.4)] == [1, 3]
    assert [e.edge_id for e in adjacency.touching([B, C], 0.0)] == [1, 2, 3]
    assert adjacency.touching([UUID(int=9)], 0.0) == []


def test_nodes_are_numbered_in_uuid_order_and_each_row_lists_its_edges_ascending():
    adjacency = Adjacency([Edge(7, C, A, "MENTIONS", 0.9), Edge(2, B, A, "CO", 0.5), Edge(4, B, B, "SELF", 1.0)])
    assert adjacency.nodes == (A, B, C) and [adjacency.node_at(i) for i in range(3)] == [A, B, C]
    assert adjacency.edge_id.tolist() == [2, 4, 7]
    assert adjacency.edge_type == ("CO", "SELF", "MENTIONS") == tuple(adjacency.type_at(i) for i in range(3))
    rows = [adjacency.incident_edges(np.array([i]), 0.0).tolist() for i in range(3)]
    assert rows == [[0, 2], [0, 1], [2]]  # the self-loop is incident to B once
    assert adjacency.incident_edges(np.array([2, 0, 2]), 0.0).tolist() == [0, 2]  # each edge once, ascending
    assert adjacency.numbers([C, UUID(int=9), A, A]).tolist() == [0, 2]
    keys = uuid_keys([A, C, UUID(int=9)])
    assert adjacency.key_numbers(keys).tolist() == [0, 2] and Adjacency([]).key_numbers(keys).tolist() == []
    assert adjacency.incident_edges(np.array([1]), 0.6).tolist() == [1]


def test_an_empty_graph_has_no_edges_anywhere():
    adjacency = Adjacency([])
    assert len(adjacency) == 0 and adjacency.touching([A], 0.0) == []
    assert adjacency.incident_edges(np.array([], dtype=np.int64), 0.0).tolist() == []


def test_source_keys_into_follows_one_edge_type_into_the_targets_only():
    D = UUID(int=4)
    adjacency = Adjacency([Edge(1, C, A, "SPOKEN_BY", 1.0), Edge(2, B, A, "MENTIONS", 0.9),
                           Edge(3, A, D, "SPOKEN_BY", 1.0), Edge(4, D, A, "SPOKEN_BY", 0.3)])
    assert adjacency.source_keys_into([A], "SPOKEN_BY", 0.4) == {C.int}  # not B (MENTIONS), not D (below 0.4)
    assert adjacency.source_keys_into([A], "SPOKEN_BY", 0.0) == {C.int, D.int}
    assert adjacency.source_keys_into([D], "SPOKEN_BY", 0.0) == {A.int}  # A points into D, D into A: only A counts
    assert adjacency.source_keys_into([UUID(int=9)], "SPOKEN_BY", 0.0) == frozenset()
    assert adjacency.source_keys_into([A], "SPOKEN_BY", 0.4) == {C.int}  # the confidence is part of the question


def test_source_keys_are_the_ids_integers_over_all_128_bits():
    speakers = [UUID("f1e2d3c4-b5a6-4978-8695-a4b3c2d1e0f9"), UUID("00000000-0000-4000-8000-000000000001")]
    turns = [UUID("7fffffff-ffff-4fff-bfff-ffffffffffff"), UUID("80000000-0000-4000-8000-000000000000")]
    adjacency = Adjacency([Edge(i, turn, speaker, "SPOKEN_BY", 1.0)
                           for i, (turn, speaker) in enumerate(zip(turns, speakers), start=1)])
    assert adjacency.source_keys_into(speakers, "SPOKEN_BY", 0.0) == {turn.int for turn in turns}
    assert adjacency.source_keys_into(speakers[:1], "SPOKEN_BY", 0.0) == {turns[0].int}


def _same_arrays(updated: Adjacency, built: Adjacency) -> None:
    assert updated.edges == built.edges and updated.nodes == built.nodes and updated.edge_type == built.edge_type
    for name in ("source", "target", "confidence", "edge_id"):
        np.testing.assert_array_equal(getattr(updated, name), getattr(built, name), err_msg=name)
    assert updated.numbers(built.nodes).tolist() == list(range(len(built.nodes)))


def test_an_updated_graph_is_the_graph_of_its_edges_array_for_array():
    rng = np.random.default_rng(5)
    nodes = [UUID(int=int(value)) for value in rng.integers(1, 2**62, 40)]
    kinds = ["MENTIONS", "CO_MENTIONED", "SPOKEN_BY"]

    def edge(edge_id: int) -> Edge:
        source, target = rng.choice(len(nodes), 2)
        return Edge(edge_id, nodes[source], nodes[target], kinds[edge_id % 3], float(rng.random()))

    edges = {edge_id: edge(edge_id) for edge_id in range(1, 300)}
    graph = Adjacency(list(edges.values()))
    for round_ in range(20):
        upserts = [edge(int(edge_id)) for edge_id in rng.choice(400, 15, replace=False) + 1]  # new ids and re-weighted ones
        if round_ % 4 == 0:  # ends never seen before
            upserts.append(Edge(1000 + round_, UUID(int=round_ + 1), UUID(int=2**100 + round_), "MENTIONS", 0.5))
        removed = {int(edge_id) for edge_id in rng.choice(400, 10, replace=False) + 1} - {e.edge_id for e in upserts}
        for found in upserts:
            edges[found.edge_id] = found
        for edge_id in removed:
            edges.pop(edge_id, None)
        made = {graph.node_at(number): graph.node_at(number) for number in range(0, len(graph), 3)}
        graph = graph.updated(upserts, removed)
        _same_arrays(graph, Adjacency(list(edges.values())))
        # node ids: right at every (renumbered) place, and the UUIDs made before carried over
        now = [graph.node_at(number) for number in range(len(graph))]
        assert now == [UUID(bytes=key.tobytes()) for key in graph.node_keys]
        carried = [node for node in now if node in made]
        assert carried and all(node is made[node] for node in carried)
        asked = [nodes[int(i)] for i in rng.choice(len(nodes), 12)] + [UUID(int=7)]  # an updated graph's keys too
        keys = np.unique(uuid_keys(asked))
        assert graph.key_numbers(keys).tolist() == graph.numbers(asked).tolist()
    _same_arrays(graph.updated([], set(edges)), Adjacency([]))  # every edge removed: no nodes either


def test_a_uuid_column_makes_each_id_once_when_first_asked():
    column = UuidColumn(uuid_keys([C, A, B]))
    first = column.at(1)
    assert first == A and column.at(1) is first and [column.at(i) for i in range(3)] == [C, A, B]
    fresh = UuidColumn(uuid_keys([C, A, B]))
    each = fresh.at_each(np.array([2, 0, 2]))
    assert each == [B, C, B] and each[0] is each[2] is fresh.at(2)  # made once, in the order asked
    adjacency = Adjacency([Edge(1, A, B, "CO", 0.5)])
    assert adjacency.node_at(0) is adjacency.node_at(0)


def test_an_update_may_bring_an_edge_type_the_graph_did_not_have():
    graph = Adjacency([Edge(1, A, B, "MENTIONS", 0.9)])
    updated = graph.updated([Edge(2, C, A, "SPOKEN_BY", 1.0)])
    assert updated.edges == Adjacency([Edge(1, A, B, "MENTIONS", 0.9), Edge(2, C, A, "SPOKEN_BY", 1.0)]).edges
    assert updated.edge_type == ("MENTIONS", "SPOKEN_BY") and updated.type_at(1) == "SPOKEN_BY"
    assert updated.source_keys_into([A], "SPOKEN_BY", 0.0) == {C.int}
    assert graph.source_keys_into([A], "SPOKEN_BY", 0.0) == frozenset()


def test_used_numbers_number_the_codes_as_unique_does_as_numpy_indices():
    from rms_retrieval.stores.indexes.adjacency import used_numbers

    codes = np.asarray([[7, 3], [3, 9], [0, 7]], dtype=np.uint16)
    numbers, used = used_numbers(codes, 12)
    distinct, inverse = np.unique(codes, return_inverse=True)
    assert numbers.tolist() == inverse.reshape(codes.shape).tolist() and used.tolist() == distinct.tolist()
    assert numbers.dtype == np.intp  # a walk indexes with a graph's node numbers: no conversion per query


def test_a_graph_keeps_edge_ids_in_the_signed_type_they_come_in():
    ends, types, confidence = np.asarray([0, 1]), np.zeros(2, dtype=np.int64), np.asarray([0.5, 0.7])
    keys = uuid_keys([A, B])
    narrow = Adjacency.from_codes(np.asarray([3, 9], dtype=np.int16), keys, ends, ends[::-1], types, ("CO",), confidence)
    wide = Adjacency.from_codes(np.asarray([3, 9], dtype=np.uint16), keys, ends, ends[::-1], types, ("CO",), confidence)
    assert narrow.edge_id.dtype == np.int16 and wide.edge_id.dtype == np.int64
    assert narrow.edges == wide.edges and [edge.edge_id for edge in narrow.edges] == [3, 9]


def test_key_ints_are_the_ids_integers_over_all_128_bits():
    ids = [UUID(int=0), UUID(int=1), UUID("7fffffff-ffff-4fff-bfff-ffffffffffff"), UUID(int=(1 << 128) - 1)]
    assert key_ints(uuid_keys(ids)) == [node.int for node in ids] and key_ints(uuid_keys([])) == []
    assert key_ints(uuid_keys(ids)[::2]) == [ids[0].int, ids[2].int]  # a strided column too


@given(st.integers(min_value=0, max_value=(1 << 128) - 1))
def test_uuid_of_makes_the_uuid_the_constructor_makes(value):
    made, built = uuid_of(value), UUID(int=value)
    assert type(made) is UUID and made == built and hash(made) == hash(built)
    assert (str(made), repr(made), made.bytes, made.version, made.is_safe) == \
        (str(built), repr(built), built.bytes, built.version, SafeUUID.unknown)
    assert uuid_of_bytes(built.bytes) == built and pickle.loads(pickle.dumps(made)) == built
    assert copy.deepcopy(made) == built and {made: 1}[built] == 1 and not made < built
    assert not hasattr(made, "__dict__")  # slots only, as the constructor's


def test_sorted_positions_say_where_each_value_is_and_whether_it_is_there():
    column = np.array([2, 5, 9])
    at, held = sorted_positions(column, np.array([5, 1, 9, 10, 2, 6]))
    assert held.tolist() == [True, False, True, False, True, False]
    assert at[held].tolist() == [1, 2, 0] and (at < len(column)).all()
    at, held = sorted_positions(np.zeros(0, dtype=np.int64), np.array([3, 4]))
    assert held.tolist() == [False, False] and at.dtype == np.intp


def test_an_update_that_only_reweighs_edges_shares_the_graphs_arrays_and_is_the_graph_of_its_edges():
    rng = np.random.default_rng(9)
    nodes = [UUID(int=int(value)) for value in rng.integers(1, 2**62, 30)]
    kinds = ["MENTIONS", "CO_MENTIONED", "SPOKEN_BY"]
    edges = {edge_id: Edge(edge_id, nodes[int(rng.integers(30))], nodes[int(rng.integers(30))], kinds[edge_id % 3],
                           float(rng.random())) for edge_id in range(1, 120)}
    graph = Adjacency(list(edges.values()))
    chosen = [edges[int(edge_id)] for edge_id in rng.choice(np.arange(1, 120), 10, replace=False)]
    reweighed = [Edge(edge.edge_id, edge.source, edge.target, edge.edge_type, 0.25) for edge in chosen]
    updated = graph.updated(reweighed, {500, 501})  # ids the graph lacks: nothing goes
    _same_arrays(updated, Adjacency(list({**edges, **{edge.edge_id: edge for edge in reweighed}}.values())))
    assert updated.source is graph.source and updated.node_keys is graph.node_keys and updated.confidence is not graph.confidence
    first = chosen[0]
    for changed in (Edge(first.edge_id, first.target if first.source != first.target else nodes[0], first.target,
                         first.edge_type, 0.5),  # other ends
                    Edge(first.edge_id, first.source, first.target, kinds[(first.edge_id + 1) % 3], 0.5)):  # another type
        rebuilt = graph.updated([changed, *reweighed[1:]])
        _same_arrays(rebuilt, Adjacency(list({**edges, **{edge.edge_id: edge for edge in [changed, *reweighed[1:]]}}.values())))
    gone = graph.updated(reweighed[1:], {first.edge_id})  # an edge taken out: not in place
    kept = {**edges, **{edge.edge_id: edge for edge in reweighed[1:]}}
    kept.pop(first.edge_id)
    _same_arrays(gone, Adjacency(list(kept.values())))


def test_a_reweighed_graph_keeps_the_source_answers_no_changed_edge_crossed():
    turns, people = [UUID(int=number) for number in range(1, 5)], [UUID(int=100 + number) for number in range(3)]
    edges = [Edge(1, turns[0], people[0], "MENTIONS", 0.7), Edge(2, turns[1], people[0], "MENTIONS", 0.3),
             Edge(3, turns[2], people[1], "SPOKEN_BY", 0.9), Edge(4, turns[3], people[2], "MENTIONS", 0.6)]
    graph = Adjacency(edges)
    asked = [(people[:2], "MENTIONS", 0.5), (people[:2], "MENTIONS", 0.2), (people[:2], "SPOKEN_BY", 0.5)]
    before = [graph.source_keys_into(*question) for question in asked]
    assert before[0] == {turns[0].int} and before[1] == {turns[0].int, turns[1].int}
    changed = [Edge(2, turns[1], people[0], "MENTIONS", 0.8)]  # crosses 0.5, not 0.2
    updated = graph.updated(changed)
    fresh = Adjacency([changed[0] if edge.edge_id == 2 else edge for edge in edges])
    assert [updated.source_keys_into(*question) for question in asked] == [fresh.source_keys_into(*question) for question in asked]
    assert updated.source_keys_into(*asked[1]) is before[1] and updated.source_keys_into(*asked[2]) is before[2]  # kept
    assert updated.source_keys_into(*asked[0]) == {turns[0].int, turns[1].int} != before[0]
