"""A segment's edges as columns: decoded exactly as stored, by namespace, and counted from arrays."""

from __future__ import annotations

import random
from uuid import UUID

import numpy as np
import pytest

from rms_retrieval.stores.engine.edge_columns import (CO_MENTIONED, MENTIONS, SPOKEN_BY, EdgeColumns, StoredEdge, smallest_int,
                                                      merged_edge_arrays, stored_edge_arrays)
from rms_retrieval.stores.errors import StoreError
from rms_retrieval.stores.protocols import Edge


def _edges(count: int = 400, rows: int = 60, seed: int = 7) -> tuple[StoredEdge, ...]:
    chooser = random.Random(seed)
    entities = {namespace: [UUID(int=chooser.getrandbits(128)) for _ in range(12)]
                for namespace in ("alpha", "béta", "tenant/γ")}
    objects = [UUID(int=chooser.getrandbits(128)) for _ in range(rows)]
    edges = []
    for edge_id in range(1, count + 1):
        namespace = chooser.choice(sorted(entities))
        edge_type = chooser.choice((MENTIONS, SPOKEN_BY, CO_MENTIONED, "SUPERSEDES"))
        if edge_type == CO_MENTIONED:
            source, target = sorted(chooser.sample(entities[namespace], 2), key=lambda entity: entity.int)
            row = -1
        else:
            row = chooser.randrange(rows)
            source, target = objects[row], chooser.choice(entities[namespace])
        edges.append(StoredEdge(Edge(edge_id, source, target, edge_type, chooser.random()), namespace, row))
    return tuple(edges)


def test_columns_decode_every_edge_as_stored() -> None:
    edges = _edges()
    columns = EdgeColumns(stored_edge_arrays(edges))
    assert columns.decoded() == edges
    assert len(columns) == len(edges)
    assert columns.last_edge_id == edges[-1].edge.edge_id
    assert columns.namespace_set == {"alpha", "béta", "tenant/γ"}
    positions = np.asarray([5, 3, 399])
    assert columns.decoded(positions) == tuple(edges[i] for i in positions)


def test_no_edges() -> None:
    columns = EdgeColumns.from_stored(())
    assert columns.decoded() == ()
    assert columns.last_edge_id == 0
    assert columns.namespace_set == frozenset()
    assert dict(columns.live_by_namespace(None)) == {}
    assert columns.mentioners("alpha") == {}


def test_live_edges_by_namespace_leave_out_dead_owners_only() -> None:
    edges = _edges()
    dead = np.zeros(60, dtype=bool)
    dead[[0, 7, 31]] = True
    groups = EdgeColumns.from_stored(edges).live_by_namespace(dead)
    expected: dict[str, list[Edge]] = {}
    for stored in edges:
        if stored.row < 0 or not dead[stored.row]:
            expected.setdefault(stored.namespace, []).append(stored.edge)
    assert set(groups) == set(expected)
    assert {namespace: list(groups[namespace]) for namespace in groups} == expected
    assert "nowhere" not in groups
    assert groups.get("nowhere") is None
    assert groups["alpha"] is groups["alpha"]  # decoded once, then kept


@pytest.mark.parametrize("together", [True, False])  # each namespace's edges in one run, or interleaved
@pytest.mark.parametrize("some_dead", [True, False])
def test_a_namespaces_live_positions_are_found_whether_its_edges_lie_together_or_not(together, some_dead) -> None:
    edges = _edges()
    if together:
        edges = tuple(sorted(edges, key=lambda stored: stored.namespace))
    dead = np.zeros(60, dtype=bool)
    dead[[3, 9, 40]] = some_dead
    columns = EdgeColumns.from_stored(edges)
    groups = columns.live_by_namespace(dead if some_dead else None)
    for namespace in ("alpha", "béta", "tenant/γ", "nowhere"):
        expected = [position for position, stored in enumerate(edges)
                    if stored.namespace == namespace and (stored.row < 0 or not dead[stored.row])]
        assert groups.positions(namespace).tolist() == expected
        where = groups.where(namespace)  # a slice only where the positions are one run of the columns
        assert isinstance(where, slice) == (together and not some_dead)
        assert np.arange(len(columns))[where].tolist() == expected
    assert list(groups) == list(columns.namespace_names)  # in the order of their codes


def test_a_namespace_whose_every_edge_is_dead_is_no_key() -> None:
    owner = UUID(int=1)
    edges = (StoredEdge(Edge(1, owner, UUID(int=2), MENTIONS, 1.0), "only", 0),
             StoredEdge(Edge(2, UUID(int=3), UUID(int=4), MENTIONS, 1.0), "other", 1))
    groups = EdgeColumns.from_stored(edges).live_by_namespace(np.asarray([True, False]))
    assert list(groups) == ["other"]


def test_mentioners_are_the_rows_with_a_mentions_edge_into_each_entity() -> None:
    edges = _edges()
    columns = EdgeColumns.from_stored(edges)
    for namespace in ("alpha", "béta", "tenant/γ", "absent"):
        expected: dict[int, set[int]] = {}
        for stored in edges:
            if stored.namespace == namespace and stored.edge.edge_type == MENTIONS:
                expected.setdefault(stored.edge.target.int, set()).add(stored.row)
        assert columns.mentioners(namespace) == {entity: frozenset(rows) for entity, rows in expected.items()}


def test_an_owner_outside_the_segment_is_refused() -> None:
    columns = EdgeColumns.from_stored(_edges(rows=60))
    columns.check_owners(60, "segment-a")
    with pytest.raises(StoreError, match=r"names row \d+ of a segment of 10 rows"):
        columns.check_owners(10, "segment-a")


def test_damaged_text_columns_are_refused() -> None:
    for arrays in (stored_edge_arrays(_edges(count=5)), _text_form(_edges(count=5))):
        ends = "edge_namespace_name_ends" if "edge_namespace_name_ends" in arrays else "edge_namespace_ends"
        texts = "edge_type_names" if "edge_type_names" in arrays else "edge_type_bytes"
        broken = dict(arrays, **{ends: arrays[ends] + 1})
        with pytest.raises(ValueError):
            EdgeColumns(broken)
        invalid = dict(arrays, **{texts: np.frombuffer(b"\xff" * len(arrays[texts]), dtype=np.uint8)})
        with pytest.raises(ValueError):
            EdgeColumns(invalid)
        short = dict(arrays, edge_confidence_codes=arrays["edge_confidence_codes"][:-1])
        with pytest.raises(ValueError):
            EdgeColumns(short)
    arrays = stored_edge_arrays(_edges(count=5))
    with pytest.raises(ValueError, match="codes do not match"):
        EdgeColumns(dict(arrays, edge_type_codes=arrays["edge_type_codes"] + 7))


def _text_form(edges: list[StoredEdge]) -> dict[str, np.ndarray]:
    """The arrays of segments written before codes: each edge's type and namespace as text."""
    arrays = {name: array for name, array in stored_edge_arrays(edges).items()
              if not name.startswith(("edge_type_", "edge_namespace_"))}
    for name, texts in (("type", [stored.edge.edge_type for stored in edges]), ("namespace", [stored.namespace for stored in edges])):
        encoded = [text.encode() for text in texts]
        arrays[f"edge_{name}_bytes"] = np.frombuffer(b"".join(encoded), dtype=np.uint8)
        arrays[f"edge_{name}_ends"] = np.cumsum([len(text) for text in encoded], dtype=np.int64)
    return arrays


def test_ids_rows_and_confidences_are_stored_small_and_read_from_either_form() -> None:
    edges = _edges(count=40)
    arrays = stored_edge_arrays(edges)
    assert [arrays[name].dtype for name in ("edge_ids", "edge_rows", "edge_confidence_codes", "edge_end_codes")] == [
        np.uint8, np.int8, np.uint8, np.uint8]  # ids 1-40, owner rows -1-59, 40 values, fewer than 256 ends
    assert [smallest_int(np.asarray(values)).dtype for values in ([0, 300], [-1, 40000], [2**40], [])] == [
        np.uint16, np.int32, np.int64, np.uint8]
    assert arrays["edge_confidence_values"].tolist() == sorted({stored.edge.confidence for stored in edges})
    older = {name: array for name, array in arrays.items() if not name.startswith("edge_confidence_")}
    older.update(edge_ids=arrays["edge_ids"].astype(np.int64), edge_rows=arrays["edge_rows"].astype(np.int64),
                 edge_confidences=np.asarray([stored.edge.confidence for stored in edges]))
    assert EdgeColumns(arrays).decoded() == EdgeColumns(older).decoded() == tuple(edges)
    confidences = np.asarray([stored.edge.confidence for stored in edges])
    for positions in (np.asarray([5, 0, 39, 5]), slice(3, 17)):  # per edge from either form, as the formula gives
        expected = np.rint((confidences[positions] - 0.35) / 0.1).astype(np.int64)
        for columns in (EdgeColumns(arrays), EdgeColumns(older)):
            assert np.array_equal(columns.counts_at(positions, 0.35, 0.1), expected)
    assert EdgeColumns(arrays).counts_at(slice(0, 3), 0.35, 0.1).dtype == np.int32  # from codes: half the pages
    assert EdgeColumns(arrays).counts_at(slice(0, 3), 0.0, 1e-12).dtype == np.int64  # counts beyond int32
    big = [StoredEdge(Edge(2**33 + i, stored.edge.source, stored.edge.target, stored.edge.edge_type, stored.edge.confidence),
                      stored.namespace, stored.row) for i, stored in enumerate(edges)]
    assert stored_edge_arrays(big)["edge_ids"].dtype == np.int64 and EdgeColumns.from_stored(big).decoded() == tuple(big)
    with pytest.raises(ValueError, match="confidence codes"):
        EdgeColumns(dict(arrays, edge_confidence_values=arrays["edge_confidence_values"][:1]))


def test_types_and_namespaces_are_stored_as_codes_and_read_from_either_form() -> None:
    edges = _edges(count=40)
    arrays = stored_edge_arrays(edges)
    assert arrays["edge_type_codes"].dtype == np.uint8 and len(arrays["edge_type_codes"]) == 40
    assert "edge_type_bytes" not in arrays and "edge_namespace_bytes" not in arrays
    coded, texts = EdgeColumns(arrays), EdgeColumns(_text_form(edges))
    assert coded.decoded() == texts.decoded() == tuple(edges)
    assert coded.namespace_set == texts.namespace_set


@pytest.mark.parametrize("byte_form", [False, True])  # ends as codes into the segment's ids, or as 32 bytes each
def test_a_co_mentioned_edge_is_found_by_its_namespace_and_ends(byte_form) -> None:
    edges = _edges()
    columns = EdgeColumns(_byte_form(edges)) if byte_form else EdgeColumns.from_stored(edges)
    co_mentioned = [stored for stored in edges if stored.edge.edge_type == CO_MENTIONED]
    last = {(stored.namespace, stored.edge.source, stored.edge.target): stored.edge.edge_id for stored in co_mentioned}
    assert len(last) < len(co_mentioned)  # some pairs are stored twice: the later edge answers
    for (namespace, source, target), edge_id in last.items():
        assert columns.co_mentioned_id(namespace, source, target) == edge_id
        for other in {"alpha", "béta", "tenant/γ"} - {namespace}:
            assert columns.co_mentioned_id(other, source, target) is None  # entities of one namespace only
    mentions = next(stored for stored in edges if stored.edge.edge_type == MENTIONS)
    assert columns.co_mentioned_id(mentions.namespace, mentions.edge.source, mentions.edge.target) is None
    assert columns.co_mentioned_id("absent", co_mentioned[0].edge.source, co_mentioned[0].edge.target) is None


def _byte_form(edges: tuple[StoredEdge, ...]) -> dict[str, np.ndarray]:
    """The arrays of segments written before end codes: each edge's two ids, 32 bytes."""
    arrays = {name: array for name, array in stored_edge_arrays(edges).items() if not name.startswith("edge_end_")}
    arrays["edge_ends"] = np.frombuffer(b"".join(stored.edge.source.bytes + stored.edge.target.bytes for stored in edges),
                                        dtype=np.uint8).reshape(len(edges), 32)
    return arrays


def test_ends_are_stored_as_codes_into_distinct_ids_and_read_from_either_form() -> None:
    edges = _edges()
    arrays = stored_edge_arrays(edges)
    distinct = {stored.edge.source for stored in edges} | {stored.edge.target for stored in edges}
    assert arrays["edge_end_ids"].shape == (len(distinct), 16) and arrays["edge_end_codes"].shape == (400, 2)
    assert [UUID(bytes=row.tobytes()) for row in arrays["edge_end_ids"]] == sorted(distinct, key=lambda end: end.int)
    coded, older = EdgeColumns(arrays), EdgeColumns(_byte_form(edges))
    assert coded.decoded() == older.decoded() == edges
    mask = np.zeros(400, dtype=bool)
    mask[::3] = True
    for chosen in (np.asarray([399, 0, 5]), mask, np.asarray([], dtype=np.int64)):
        assert np.array_equal(coded.ends_at(chosen), older.ends_at(chosen))
        for columns in (coded, older):
            codes, ids = columns.end_codes_at(chosen)
            assert np.array_equal(ids[codes.reshape(-1)].reshape(-1, 32), coded.ends_at(chosen))
            assert len({row.tobytes() for row in ids}) == len(ids) == len(np.unique(codes))  # each used id once
    assert all(coded.mentioners(namespace) == older.mentioners(namespace) for namespace in ("alpha", "béta", "tenant/γ"))
    with pytest.raises(ValueError, match="end codes do not match"):
        EdgeColumns(dict(arrays, edge_end_codes=arrays["edge_end_codes"].astype(np.int64) + len(distinct)))
    with pytest.raises(ValueError, match="end codes do not match"):
        EdgeColumns(dict(arrays, edge_end_codes=arrays["edge_end_codes"].astype(np.float64)))


def test_merged_edges_keep_the_last_of_each_id_with_owner_rows_moved() -> None:
    first, second = _edges(count=300, seed=3), _edges(count=200, rows=60, seed=4)  # ids 1-200 in both
    extra = (StoredEdge(Edge(900, UUID(int=5), UUID(int=6), "SUPERSEDES", 1.0), "only-here", 2),)
    parts = [(EdgeColumns(_byte_form(first)), np.arange(60) + 100), (EdgeColumns.from_stored(second + extra), np.arange(60)[::-1])]
    latest: dict[int, StoredEdge] = {}
    for (columns, new_row) in parts:
        for stored in columns.decoded():
            row = -1 if stored.row < 0 else int(new_row[stored.row])
            latest[stored.edge.edge_id] = StoredEdge(stored.edge, stored.namespace, row)
    expected = tuple(latest[edge_id] for edge_id in sorted(latest))
    merged = EdgeColumns(merged_edge_arrays(parts))
    assert merged.decoded() == expected and merged.namespace_set == {"alpha", "béta", "tenant/γ", "only-here"}
    assert merged_edge_arrays([(EdgeColumns.from_stored(()), np.arange(0))])["edge_ids"].shape == (0,)
    # a segment of no rows whose edges have no owner row (a compaction leaves such segments)
    ownerless = (StoredEdge(Edge(901, UUID(int=7), UUID(int=8), "MENTIONS", 1.0), "alpha", -1),)
    with_empty = EdgeColumns(merged_edge_arrays([*parts, (EdgeColumns.from_stored(ownerless), np.arange(0))]))
    assert with_empty.decoded() == expected + ownerless
    assert EdgeColumns.from_stored(ownerless).live_positions(np.zeros(0, dtype=bool)).tolist() == [0]
    superseded = merged_edge_arrays([(EdgeColumns.from_stored(extra), np.arange(3)),
                                     (EdgeColumns.from_stored((StoredEdge(Edge(900, UUID(int=5), UUID(int=6), "X", 1.0), "b", 1),)),
                                      np.arange(3))])
    assert EdgeColumns(superseded).namespace_set == {"b"} and EdgeColumns(superseded).type_names == ("X",)  # unused names go
