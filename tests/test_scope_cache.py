"""Per-namespace splits of segments, and scope values a new generation keeps or rebuilds."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from uuid import UUID

from rms_retrieval.stores.indexes.entity_graph import entity_id
from rms_retrieval.stores.memory_store import MemoryStore
from rms_retrieval.stores.models import MemoryObject, NodeType
from rms_retrieval.stores.engine.scope_cache import ScopeValues, namespace_rows

T0 = datetime(2024, 5, 1, 12, 0, tzinfo=timezone.utc)


def _memory(number: int, content: str, namespace: str, **extra) -> MemoryObject:
    return MemoryObject(id=UUID(int=number), namespace=namespace, content=content,
                        created_at=T0 + timedelta(minutes=number), **extra)


def test_scope_values_keep_a_value_while_its_segments_are_live():
    first = ScopeValues[str]()
    assert first.get(("a",), ("s1",), lambda: "built") == "built"
    assert first.get(("a",), ("s1",), lambda: "never") == "built"
    assert first.get(("a",), ("s1", "s2"), lambda: "rebuilt") == "rebuilt"  # a segment joined the scope
    kept = ScopeValues[str](first, live=["s1", "s2", "s3"])
    assert kept.get(("a",), ("s1", "s2"), lambda: "never") == "rebuilt"
    assert len(ScopeValues[str](first, live=["s2"])) == 0  # s1 was merged away: the value goes


def test_a_segment_splits_its_edges_entities_and_pins_by_namespace(tmp_path, encoder):
    with MemoryStore.open(tmp_path / "store", encoder) as store:
        store.add([_memory(1, "Caroline met Melanie", "a"), _memory(2, "Caroline sang", "b"),
                   _memory(3, "a note", "b", node_type=NodeType.TASK)])
        (segment,) = store.snapshot().segments
        rows = namespace_rows(segment)
    assert sorted(rows.edges) == ["a", "b"]
    assert sum(len(edges) for edges in rows.edges.values()) == len(segment.edges)
    assert all(segment.namespace_of_row[row] == namespace
               for namespace, found in rows.entity_rows.items() for row in found)
    assert {segment.ids[row] for row in rows.entity_rows["b"]} == {entity_id("b", "Caroline", UUID(int=2))}
    assert [segment.ids[row] for row in rows.pinned_rows["b"]] == [UUID(int=3)] and "a" not in rows.pinned_rows


def test_a_write_rebuilds_only_the_scopes_it_touched(tmp_path, encoder):
    with MemoryStore.open(tmp_path / "store", encoder) as store:
        store.add([_memory(1, "Caroline met Melanie", "a"), _memory(2, "Caroline met Jon", "b")])
        before = store.snapshot()
        graph_a, graph_b = before.snapshot().adjacency(["a"]), before.snapshot().adjacency(["b"])
        catalog_a = before.snapshot().entity_catalog(["a"])
        store.add([_memory(3, "Jon and Caroline again", "b"), _memory(4, "a pinned note", "b", salience=1.0)])
        after = store.snapshot()
        assert after.generation == before.generation + 1
        assert after.snapshot().adjacency(["a"]) is graph_a and after.snapshot().entity_catalog(["a"]) == catalog_a
        assert after.snapshot().adjacency(["b"]) is not graph_b and len(after.snapshot().adjacency(["b"]).edges) > len(graph_b.edges)
        assert [memory.id for memory in after.snapshot().pinned_objects(["b"])] == [UUID(int=4)]
    with MemoryStore.open(tmp_path / "store", encoder, read_only=True) as fresh:
        reopened = fresh.snapshot()
        for scope in (["a"], ["b"], ["a", "b"]):
            assert reopened.snapshot().adjacency(scope).edges == after.snapshot().adjacency(scope).edges
            assert reopened.snapshot().entity_catalog(scope) == after.snapshot().entity_catalog(scope)
            assert reopened.snapshot().pinned_objects(scope) == after.snapshot().pinned_objects(scope)


def test_a_scope_splits_only_the_segments_that_hold_its_rows_or_edges(tmp_path, encoder):
    with MemoryStore.open(tmp_path / "store", encoder) as store:
        store.add([_memory(1, "Caroline met Melanie", "a")])
        store.add([_memory(2, "Jon met Caroline", "b")])
        store.add([_memory(3, "Melanie and Caroline again", "a")])
        snapshot = store.snapshot()
        assert len(snapshot.segments) == 3
        holding_a = {segment.entry.key for segment in snapshot.segments if "a" in segment.edge_namespaces}
        assert len(holding_a) == 2
        assert snapshot.adjacency(["a"]).edges
        assert set(snapshot._namespace_rows) == holding_a  # the segment of b alone was never split
