"""A scope's graph from edge columns equals the rule written out edge by edge."""

from __future__ import annotations

import functools

import random
from uuid import UUID

import numpy as np
import pytest

from rms_retrieval.stores.engine.edge_columns import (CO_MENTIONED, COUNTED_ARRAY, MENTIONS, EdgeColumns, StoredEdge,
                                                      confidence_arrays, stored_edge_arrays)
from rms_retrieval.stores.engine import scope_graph as scope_graph_module
from rms_retrieval.stores.engine.scope_graph import (EdgeBlock, SegmentMentions, co_mention_counts, counted_confidences,
                                                     mentions_of, scope_graph)
from rms_retrieval.stores.indexes.adjacency import Adjacency, uuid_keys
from rms_retrieval.stores.indexes.entity_graph import co_mention_confidence
from rms_retrieval.stores.protocols import Edge

NAMESPACES = ("a", "b")


def _segments(seed: int) -> list[tuple[tuple[StoredEdge, ...], np.ndarray]]:
    """Three segments of MENTIONS, CO_MENTIONED (some re-weighted by a later segment) and other
    edges in two namespaces, each with some dead rows; later segments hold new versions of some
    of the first segment's edges (same ids, other sources)."""
    chooser = random.Random(seed)
    entities = {name: sorted((UUID(int=chooser.getrandbits(128)) for _ in range(9)), key=lambda u: u.int)
                for name in NAMESPACES}
    pairs = {name: [(first, second) for i, first in enumerate(entities[name]) for second in entities[name][i + 1:]]
             for name in NAMESPACES}
    co_ids: dict[tuple[str, UUID, UUID], int] = {}
    segments, next_id = [], 1
    for _ in range(3):
        rows, edges = 40, []
        for row in range(rows):
            name = chooser.choice(NAMESPACES)
            owner = UUID(int=chooser.getrandbits(128))
            for entity in chooser.sample(entities[name], chooser.randint(0, 4)):
                edges.append(StoredEdge(Edge(next_id, owner, entity, MENTIONS, 0.9), name, row))
                next_id += 1
            if chooser.random() < 0.2:
                edges.append(StoredEdge(Edge(next_id, owner, chooser.choice(entities[name]), "SPOKEN_BY", 1.0), name, row))
                next_id += 1
        for name in NAMESPACES:
            for first, second in chooser.sample(pairs[name], 8):
                key = (name, first, second)
                if key not in co_ids:
                    co_ids[key], next_id = next_id, next_id + 1
                edges.append(StoredEdge(Edge(co_ids[key], first, second, CO_MENTIONED, 0.45), name, -1))
        if segments:  # an object's new version takes some of an earlier segment's edges, ids kept
            moved = [stored for stored in segments[0][0] if stored.edge.edge_type == MENTIONS][:6]
            edges += [StoredEdge(Edge(stored.edge.edge_id, UUID(int=chooser.getrandbits(128)), stored.edge.target, MENTIONS,
                                      0.8), stored.namespace, chooser.randrange(rows)) for stored in moved]
        edges.sort(key=lambda stored: stored.edge.edge_id)
        dead = np.zeros(rows, dtype=bool)
        dead[chooser.sample(range(rows), 5)] = True
        segments.append((tuple(edges), dead))
    return segments


def _expected(segments, scope: tuple[str, ...], dead_ids: frozenset[tuple[str, UUID]]) -> list[tuple]:
    """StoreSnapshot.adjacency's rule, edge by edge."""
    latest: dict[int, tuple[str, Edge]] = {}
    for edges, dead in segments:
        for stored in edges:
            if stored.namespace in scope and (stored.row < 0 or not dead[stored.row]):
                latest[stored.edge.edge_id] = (stored.namespace, stored.edge)
    kept = []
    for namespace, edge in latest.values():
        if (namespace, edge.source) in dead_ids or (namespace, edge.target) in dead_ids:
            continue
        if edge.edge_type == CO_MENTIONED:
            count = 0
            for edges, dead in segments:
                mentioning: dict[UUID, set[int]] = {}
                for stored in edges:
                    if stored.namespace == namespace and stored.edge.edge_type == MENTIONS and not dead[stored.row]:
                        mentioning.setdefault(stored.edge.target, set()).add(stored.row)
                count += len(mentioning.get(edge.source, set()) & mentioning.get(edge.target, set()))
            if not count or not edge.source.int < edge.target.int:
                continue
            edge = Edge(edge.edge_id, edge.source, edge.target, CO_MENTIONED, co_mention_confidence(count))
        kept.append(edge)
    return sorted(kept, key=lambda edge: edge.edge_id)


def _byte_form(edges) -> dict[str, np.ndarray]:
    """The arrays of segments written before end codes: each edge's two ids, 32 bytes."""
    arrays = {name: array for name, array in stored_edge_arrays(edges).items() if not name.startswith("edge_end_")}
    arrays["edge_ends"] = np.frombuffer(b"".join(stored.edge.source.bytes + stored.edge.target.bytes for stored in edges),
                                        dtype=np.uint8).reshape(len(edges), 32)
    return arrays


def _built(segments, scope, dead_ids, older: tuple[int, ...] = (), counted: tuple[int, ...] = (),
           as_slices: bool = False) -> Adjacency:
    """The graph from the segments' columns, those at `older` in the byte form of their ends, those
    at `counted` with the co-mention counts a write stores (made before any row died); `as_slices`:
    each block's positions as the store passes them (`LiveEdgeGroups.where`: a slice where they run)."""
    blocks, mentions = [], {name: [] for name in scope}
    for number, (edges, dead) in enumerate(segments):
        arrays = _byte_form(edges) if number in older else stored_edge_arrays(edges)
        if number in counted:
            arrays.update(confidence_arrays(counted_confidences(EdgeColumns(arrays), len(dead))),
                          **{COUNTED_ARRAY: np.ones(1, dtype=np.uint8)})
        columns = EdgeColumns(arrays)
        groups = columns.live_by_namespace(dead if dead.any() else None)
        blocks += [EdgeBlock(name, groups.columns, groups.where(name) if as_slices else groups.positions(name))
                   for name in scope]
        for name in scope:
            mentions[name].append(SegmentMentions(columns, name, dead if dead.any() else None, len(dead)))
    return scope_graph(blocks, dead_ids, mentions)


# co-mentions by bit sets, by table, then by search
@pytest.mark.parametrize("dense_cells, by_bits", [(scope_graph_module.DENSE_CELLS, True), (scope_graph_module.DENSE_CELLS, False), (0, None)])
def test_the_graph_of_columns_is_the_graph_of_the_rule(dense_cells, by_bits, monkeypatch) -> None:
    monkeypatch.setattr(scope_graph_module, "DENSE_CELLS", dense_cells)
    monkeypatch.setattr(scope_graph_module, "co_mention_counts", functools.partial(co_mention_counts, by_bits=by_bits))
    for seed in range(6):
        segments = _segments(seed)
        some_entity = next(stored.edge.target for stored in segments[0][0] if stored.edge.edge_type == MENTIONS)
        owner = next(stored for stored in segments[1][0] if stored.edge.edge_type == MENTIONS)
        dead_ids = frozenset({(owner.namespace, some_entity), (owner.namespace, owner.edge.source)})
        for scope in (("a",), ("b",), ("a", "b")):
            expected = _expected(segments, scope, dead_ids if seed % 2 else frozenset())
            for counted in ((), (0, 2), (0, 1, 2)):  # co-mentions stored by none, some or all segments
                built = _built(segments, scope, dead_ids if seed % 2 else frozenset(), older=((), (1,), (0, 2))[seed % 3],
                               counted=counted)
                assert built.edges == tuple(expected)
            assert any(edge.edge_type == CO_MENTIONED for edge in expected)
            reference = Adjacency(expected)
            for name in ("source", "target", "confidence", "edge_id"):
                np.testing.assert_array_equal(getattr(built, name), getattr(reference, name), err_msg=name)
            assert built.nodes == reference.nodes and built.edge_type == reference.edge_type


def test_blocks_read_as_slices_of_segments_with_no_dead_row_make_the_graph_of_the_rule() -> None:
    for seed in range(4):
        segments = [(tuple(sorted(edges, key=lambda stored: stored.namespace)), np.zeros_like(dead))
                    for edges, dead in _segments(seed)]  # each namespace's edges together, no row dead
        assert all(isinstance(EdgeColumns(stored_edge_arrays(edges)).live_by_namespace(None).where(name), slice)
                   for edges, _ in segments for name in NAMESPACES)
        for chosen in (segments[:1], segments):  # one segment: its stored counts are the scope's counts
            for scope in (("a",), ("b",), ("a", "b")):
                expected = tuple(_expected(chosen, scope, frozenset()))
                for counted in ((), tuple(range(len(chosen)))):
                    sliced = _built(chosen, scope, frozenset(), counted=counted, as_slices=True)
                    assert sliced.edges == expected
                    assert sliced.edges == _built(chosen, scope, frozenset(), counted=counted).edges


def test_a_segments_stored_count_stands_only_where_it_counted_and_nothing_died() -> None:
    from rms_retrieval.stores.engine.scope_graph import _stored_counts_hold

    edges = tuple(sorted(_segments(1)[0][0], key=lambda stored: stored.namespace))
    columns = EdgeColumns(stored_edge_arrays(edges))
    block = EdgeBlock("a", columns, columns.live_by_namespace(None).where("a"))
    live = SegmentMentions(columns, "a", None, 40)
    stored, chosen = np.asarray([3, -1, 2]), np.asarray([True, False, True])
    assert _stored_counts_hold(chosen, stored, [block], [live])
    assert not _stored_counts_hold(np.asarray([True, True, False]), stored, [block], [live])  # one not counted
    assert not _stored_counts_hold(chosen, stored, [block], [SegmentMentions(columns, "a", np.zeros(40, dtype=bool), 40)])
    assert not _stored_counts_hold(chosen, stored, [block], [live, live])  # another segment's rows count too
    other = EdgeColumns(stored_edge_arrays(edges))
    assert not _stored_counts_hold(chosen, stored, [block, EdgeBlock("a", other, slice(0, 1))], [live])


def test_no_edges_make_an_empty_graph() -> None:
    graph = scope_graph([], frozenset(), {})
    assert len(graph) == 0 and graph.edges == ()


def test_co_mention_counts_need_the_smaller_id_first_and_live_rows() -> None:
    low, high, other = UUID(int=1), UUID(int=2), UUID(int=3)
    edges = tuple(StoredEdge(Edge(i + 1, UUID(int=100 + row), entity, MENTIONS, 0.9), "a", row)
                  for i, (row, entity) in enumerate([(0, low), (0, high), (1, low), (1, high), (2, low), (2, other)]))
    columns = EdgeColumns.from_stored(edges)
    keys = uuid_keys([low, high, other, UUID(int=9)])  # codes 0, 1, 2, 3
    code = lambda ids: np.asarray([[low, high, other, UUID(int=9)].index(u) for u in ids])  # noqa: E731
    live = [mentions_of(columns, "a", None, 3)]
    assert co_mention_counts(code([low, high, low, low]), code([high, low, other, UUID(int=9)]), keys, live).tolist() == [2, 0, 1, 0]
    one_dead = [mentions_of(columns, "a", np.array([True, False, False]), 3)]
    assert co_mention_counts(code([low]), code([high]), keys, one_dead).tolist() == [1]
    assert co_mention_counts(code([low]), code([high]), keys, live * 2).tolist() == [4]  # summed over segments
    assert co_mention_counts(code([low]), code([high]), keys[1:2], live).tolist() == [0]  # mentions of ids not in keys count for none
    searched = co_mention_counts(code([low, high, low, low]), code([high, low, other, UUID(int=9)]), keys, live, dense_cells=0)
    assert searched.tolist() == [2, 0, 1, 0]  # a scope too large for the table searches, and counts alike
    for by_bits in (True, False):  # rows as bit sets, or each row looked up in the table
        assert co_mention_counts(code([low, high, low, low]), code([high, low, other, UUID(int=9)]), keys, live * 2,
                                 by_bits=by_bits).tolist() == [4, 0, 2, 0]


def test_the_three_ways_of_counting_co_mentions_agree_across_many_rows() -> None:
    rng = random.Random(7)
    entities = [UUID(int=1000 + number) for number in range(40)]
    mentioned = sorted({(row, rng.choice(entities)) for row in range(300) for _ in range(rng.randint(1, 6))})
    edges = tuple(StoredEdge(Edge(i + 1, UUID(int=5000 + row), entity, MENTIONS, 0.9), "a", row)
                  for i, (row, entity) in enumerate(mentioned))
    dead = np.array([rng.random() < 0.1 for _ in range(300)])
    segments = [mentions_of(EdgeColumns.from_stored(edges), "a", dead, 300)]
    keys = uuid_keys(entities)
    sources, targets = np.triu_indices(len(entities), 1)
    said = set(mentioned)
    expected = [sum(1 for row in range(300) if not dead[row] and (row, entities[a]) in said and (row, entities[b]) in said)
                for a, b in zip(sources.tolist(), targets.tolist())]
    few = [pair for pair, count in enumerate(expected) if count][::97][:5] + [next(p for p, c in enumerate(expected) if not c)]
    # a few pairs asked of many mentions: only the entities they name are read
    assert 2 * len(few) < len(segments[0].rows)
    for dense_cells, by_bits in ((None, True), (None, False), (0, None)):
        counted = co_mention_counts(sources, targets, keys, segments, dense_cells=dense_cells, by_bits=by_bits)
        assert counted.tolist() == expected
        asked = co_mention_counts(sources[few], targets[few], keys, segments, dense_cells=dense_cells, by_bits=by_bits)
        assert asked.tolist() == [expected[pair] for pair in few]
    assert max(expected) > 1 and len(few) == 6


def test_found_gives_each_key_s_position_by_table_by_prefix_and_by_bytes() -> None:
    from rms_retrieval.stores.engine.scope_graph import _found

    codes = np.asarray([2, 5, 9])
    assert _found(codes, np.asarray([9, 2, 3, -1, 40, 5])).tolist() == [2, 0, -1, -1, -1, 1]
    distinct = np.sort(uuid_keys([UUID(int=n << 70) for n in (3, 1, 7)]))
    shared = np.sort(uuid_keys([UUID(int=(1 << 70) + n) for n in (3, 1, 7)]))  # one first 8 bytes: searched by bytes
    for keys in (distinct, shared):
        wanted = np.concatenate([keys[::-1], uuid_keys([UUID(int=12345)])])
        assert _found(keys, wanted).tolist() == [2, 1, 0, -1]
    assert _found(distinct[:0], distinct).tolist() == [-1, -1, -1] and _found(distinct, distinct[:0]).tolist() == []


def test_a_pair_its_segment_counted_as_saturated_is_counted_again_once_rows_mentioning_it_die() -> None:
    first, second, third = UUID(int=1), UUID(int=2), UUID(int=3)
    edges = [StoredEdge(Edge(10 + 2 * row + side, UUID(int=100 + row), entity, MENTIONS, 0.9), "a", row)
             for row in range(8) for side, entity in enumerate((first, second))]
    edges += [StoredEdge(Edge(40 + row, UUID(int=100 + row), third, MENTIONS, 0.9), "a", row) for row in (8, 9)]
    edges.append(StoredEdge(Edge(99, first, second, CO_MENTIONED, 0.45), "a", -1))
    arrays = stored_edge_arrays(edges)
    arrays.update(confidence_arrays(counted_confidences(EdgeColumns(arrays), 10)), **{COUNTED_ARRAY: np.ones(1, dtype=np.uint8)})
    columns = EdgeColumns(arrays)
    assert columns.confidences_at(np.asarray([len(edges) - 1])).tolist() == [0.95]  # eight rows: the most

    def weight(dead_rows):
        dead = None if dead_rows is None else np.isin(np.arange(10), dead_rows)
        groups = columns.live_by_namespace(dead)
        graph = scope_graph([EdgeBlock("a", columns, groups.positions("a"))], frozenset(),
                            {"a": [SegmentMentions(columns, "a", dead, 10)]})
        return [edge.confidence for edge in graph.edges if edge.edge_type == CO_MENTIONED]

    assert weight(None) == [0.95]
    assert weight([8, 9]) == [0.95]  # the dead rows mention neither end: the stored count stands
    assert weight([0, 1, 2, 9]) == [co_mention_confidence(5)]
    assert weight([0, 1]) == [co_mention_confidence(6)] == [0.95]  # six live rows still weigh the most
    assert weight(list(range(8))) == []  # no live row mentions the pair


def test_a_graph_whose_every_edge_stays_numbers_its_nodes_by_the_ends_as_they_are() -> None:
    a, b, c = UUID(int=5), UUID(int=6), UUID(int=7)
    turns = [UUID(int=50 + row) for row in range(3)]
    edges = [StoredEdge(Edge(1, turns[0], a, MENTIONS, 0.9), "n", 0), StoredEdge(Edge(2, turns[0], b, MENTIONS, 0.9), "n", 0),
             StoredEdge(Edge(3, turns[1], b, MENTIONS, 0.9), "n", 1), StoredEdge(Edge(4, turns[1], c, MENTIONS, 0.9), "n", 1),
             StoredEdge(Edge(5, turns[2], c, "SPOKEN_BY", 1.0), "n", 2),
             StoredEdge(Edge(6, a, b, CO_MENTIONED, 0.3), "n", -1), StoredEdge(Edge(7, b, c, CO_MENTIONED, 0.3), "n", -1)]
    for counted in (False, True):
        arrays = stored_edge_arrays(edges)
        if counted:
            arrays.update(confidence_arrays(counted_confidences(EdgeColumns(arrays), 3)), **{COUNTED_ARRAY: np.ones(1, np.uint8)})
        columns = EdgeColumns(arrays)
        graph = scope_graph([EdgeBlock("n", columns, np.arange(len(edges)))], frozenset(),
                            {"n": [SegmentMentions(columns, "n", None, 3)]})
        expected = Adjacency([stored.edge if stored.edge.edge_type != CO_MENTIONED
                              else Edge(stored.edge.edge_id, stored.edge.source, stored.edge.target, CO_MENTIONED,
                                        co_mention_confidence(1)) for stored in edges])
        assert graph.edges == expected.edges and graph.nodes == expected.nodes == tuple(sorted({*turns, a, b, c}))


def test_co_mention_counts_of_many_pairs_at_once_are_each_pairs_count(tmp_path, encoder) -> None:
    from datetime import datetime, timezone

    from rms_retrieval.stores.memory_store import MemoryStore
    from rms_retrieval.stores.models import MemoryObject

    names = ["Alice", "Bruno", "Chen", "Dara", "Elif"]
    chooser = random.Random(6)
    with MemoryStore.open(tmp_path / "store", encoder) as store:
        for write in range(4):  # several segments, some rows deleted
            store.add([MemoryObject(id=UUID(int=10 * write + turn + 1), namespace="a", created_at=datetime(2024, 1, 1, tzinfo=timezone.utc),
                                    content=" met ".join(chooser.sample(names, 3)) + ".") for turn in range(5)])
        store.add([MemoryObject(id=UUID(int=99), namespace="a", content="Greta went home.",
                                created_at=datetime(2024, 1, 1, tzinfo=timezone.utc))])  # Greta with no one
        store.delete("a", [UUID(int=2), UUID(int=13)])
        snapshot = store.snapshot()
        counts = snapshot.co_mention_counts(["a"])
        entities = sorted((entity.id for entity in snapshot.stored_entities(["a"])), key=lambda entity: entity.int)
        pairs = [(first, second) for first in entities for second in entities if first.int < second.int]
        found = counts.counts("a", uuid_keys([first for first, _ in pairs]), uuid_keys([second for _, second in pairs]))
        assert found.tolist() == [counts.count(("a", first, second)) for first, second in pairs]
        assert len(snapshot.segments) > 1 and 0 < sum(found.tolist()) and 0 in found.tolist()


def test_the_deleted_ids_are_grouped_by_namespace_as_sorted_distinct_keys() -> None:
    from rms_retrieval.stores.engine.scope_graph import dead_keys

    high, low, zeros = UUID(int=(5 << 64) | 1), UUID(int=7), UUID(int=3 << 64)  # one ends in zero bytes
    grouped = dead_keys([("a", high), ("b", low), ("a", zeros), ("a", low), ("a", high)])
    assert sorted(grouped) == ["a", "b"] and dead_keys([]) == {}
    assert [UUID(bytes=key.tobytes()) for key in grouped["a"]] == [low, zeros, high]
    assert [UUID(bytes=key.tobytes()) for key in grouped["b"]] == [low]
