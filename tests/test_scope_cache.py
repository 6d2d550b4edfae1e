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


def test_a_value_kept_by_segment_outlives_a_new_deletion_file_and_is_handed_its_sources():
    from rms_retrieval.stores.engine.scope_cache import appended

    first = ScopeValues[str](by_segment=True)
    assert first.get(("a",), ("s1", "s2"), lambda: "built") == "built"
    kept = ScopeValues[str](first, live=["s1", "s2"], by_segment=True)  # s2 read with a deletion file now
    handed = []
    assert kept.get(("a",), ("s1", "s2/deleted-g3.npy"), lambda: "never",
                    lambda value, before: handed.append((value, before)) or "extended") == "extended"
    assert handed == [("built", ("s1", "s2"))]
    assert kept.get(("a",), ("s1", "s2/deleted-g3.npy"), lambda: "never") == "extended"
    assert kept.get(("a",), ("s1", "s3"), lambda: "rebuilt", lambda value, before: None) == "rebuilt"
    assert len(ScopeValues[str](first, live=["s1", "s2/deleted-g3.npy"])) == 0  # by key: the old key is gone
    assert len(ScopeValues[str](first, live=["s1"], by_segment=True)) == 0  # s2 merged away
    assert appended(("s1",), ("s1", "s2", "s3")) == ("s2", "s3") and appended(("s1",), ("s1",)) == ()
    assert appended(("s1", "s2"), ("s1", "s2/deleted-g3.npy")) is None and appended(("s1", "s2"), ("s1",)) is None


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


def test_the_split_groups_rows_as_a_row_by_row_grouping_would(tmp_path, encoder):
    with MemoryStore.open(tmp_path / "store", encoder) as store:
        store.add([_memory(number, f"Caroline met Melanie {number}", namespace, salience=1.0 if number % 3 else 0.5)
                   for number, namespace in enumerate(["c", "a", "b", "a", "c", "b", "a"], start=1)])
        store.delete("a", [UUID(int=2), UUID(int=7), entity_id("a", "Caroline", UUID(int=2))])
        store.delete("b", [UUID(int=3)])
        segments = store.snapshot().segments
    for segment in segments:
        rows = namespace_rows(segment)
        for found, listed in ((rows.entity_rows, segment.entity_rows), (rows.pinned_rows, segment.pinned_rows),
                              (rows.dead_rows, sorted(segment.dead_rows))):
            expected: dict[str, list[int]] = {}
            for row in listed:
                expected.setdefault(segment.namespace_of_row[row], []).append(row)
            assert list(found) == list(expected)  # namespaces in order of their first row
            assert {name: list(group) for name, group in found.items()} == expected
        kinds = {name: {kind for row in dead for kind, holds in (
            ("entity_rows", segment.object_at(row).node_type is NodeType.ENTITY),
            ("pinned_rows", segment.object_at(row).is_pinned)) if holds} for name, dead in rows.dead_rows.items()}
        assert rows.dead_kinds == kinds
    assert {kind for rows in map(namespace_rows, segments) for kinds in rows.dead_kinds.values() for kind in kinds} \
        == {"entity_rows", "pinned_rows"}


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


def _graph_edges(store) -> list:
    return list(store.snapshot().adjacency(["a"]).edges)


def test_a_merge_keeps_every_scope_value_and_a_reader_that_missed_a_delete_builds_again(tmp_path, encoder):
    from rms_retrieval.stores.engine.merging import MERGE_FACTOR, MergeLock

    names = ["Alice", "Bruno", "Chen", "Dara", "Elif", "Farid", "Greta", "Hugo", "Ines", "Jonas", "Kiri"]
    path = tmp_path / "store"
    with MemoryStore.open(path, encoder) as store:
        with MergeLock(path):  # the merge waits until the values are cached
            for number in range(MERGE_FACTOR):
                store.add([_memory(number + 1, f"{names[number]} met {names[number + 1]} and Alice.", "a"),
                           _memory(100 + number, f"{names[number]} went home.", "b", salience=1.0 if number == 3 else 0.5)])
            before = store.snapshot()
            values = (before.adjacency(["a"]), before.entity_catalog(["a", "b"]), before.pinned_objects(["b"]))
        store.wait_for_merges()
        after = store.snapshot()
        assert [entry.rows for entry in after.manifest.segments] != [entry.rows for entry in before.manifest.segments]
        assert after.adjacency(["a"]) is values[0]  # kept through the merge, not built again
        assert after.entity_catalog(["a", "b"]) == values[1] and after.pinned_objects(["b"]) == values[2]
        with MemoryStore.open(path, encoder, read_only=True) as fresh:
            assert list(fresh.snapshot().adjacency(["a"]).edges) == list(values[0].edges)
            assert fresh.snapshot().entity_catalog(["a", "b"]) == values[1]
        with MemoryStore.open(path, encoder, read_only=True) as reader:
            with MergeLock(path):
                for number in range(MERGE_FACTOR, 2 * MERGE_FACTOR):
                    store.add([_memory(number + 1, f"{names[number % 11]} met Kiri and Alice.", "a")])
                seen = reader.snapshot()
                old = seen.adjacency(["a"])
                store.delete("a", [UUID(int=2 * MERGE_FACTOR)])  # the last turn: only a deletion file
            store.wait_for_merges()  # the merge carries the delete the reader has not seen
            merged = store.snapshot().manifest.segments[-1]
            assert set(merged.sources) <= {segment.entry.id for segment in seen.segments} and merged.deletions.rows == 1
            rebuilt = reader.snapshot().adjacency(["a"])
            assert rebuilt is not old and list(rebuilt.edges) == _graph_edges(store)
        with MemoryStore.open(path, encoder, read_only=True) as fresh:
            assert list(rebuilt.edges) == list(fresh.snapshot().adjacency(["a"]).edges)


def test_deleting_other_rows_keeps_a_scopes_catalog_and_pins_and_deleting_one_of_theirs_rebuilds_them(tmp_path, encoder):
    with MemoryStore.open(tmp_path / "store", encoder) as store:
        store.add([_memory(1, "Caroline met Melanie", "a"), _memory(2, "a pinned note", "a", salience=1.0),
                   _memory(3, "Melanie sang", "a"), _memory(4, "another pinned note", "a", salience=1.0)])
        catalog, pinned = store.snapshot().entity_catalog(["a"]), store.snapshot().pinned_objects(["a"])
        assert [memory.id for memory in pinned] == [UUID(int=2), UUID(int=4)]
        store.snapshot().adjacency(["a"])
        store.delete("a", [UUID(int=3)])  # a turn: neither an entity nor pinned
        after = store.snapshot()
        held = after._adjacency._values[("a",)][1]  # its segment read with a new deletion file: held to be revised
        assert after.adjacency(["a"]) is not held.adjacency and after._adjacency._values[("a",)][1].dead_rows
        assert after.entity_catalog(["a"]) is catalog
        assert [id(memory) for memory in after.pinned_objects(["a"])] == [id(memory) for memory in pinned]
        store.delete("a", [UUID(int=2)])  # a pinned note
        assert store.snapshot().pinned_objects(["a"]) == [pinned[1]] and store.snapshot().entity_catalog(["a"]) is catalog
        caroline = entity_id("a", "Caroline", UUID(int=1))
        assert caroline in {ref.object_id for ref in catalog}
        store.delete("a", [caroline])
        rebuilt = store.snapshot().entity_catalog(["a"])
        assert rebuilt is not catalog and caroline not in {ref.object_id for ref in rebuilt}
        written = store.snapshot()
        with MemoryStore.open(tmp_path / "store", encoder, read_only=True) as fresh:
            assert fresh.snapshot().entity_catalog(["a"]) == written.entity_catalog(["a"])
            assert fresh.snapshot().pinned_objects(["a"]) == written.pinned_objects(["a"]) == [pinned[1]]


def test_a_segment_read_with_a_new_deletion_file_is_split_from_its_earlier_split_as_it_would_be_whole(tmp_path, encoder):
    with MemoryStore.open(tmp_path / "store", encoder) as store:
        store.add([_memory(number, f"Caroline met Melanie {number}", namespace, salience=1.0 if number % 3 else 0.5)
                   for number, namespace in enumerate(["c", "a", "b", "a", "c", "b", "a", "c"], start=1)])
        store.delete("a", [UUID(int=2)])
        shared = 0
        for deleted in (("a", [UUID(int=7), entity_id("a", "Caroline", UUID(int=2))]), ("c", [UUID(int=1), UUID(int=8)]),
                        ("b", [UUID(int=3), UUID(int=6)])):
            before = store.snapshot()
            before.adjacency(["a", "b", "c"])  # every segment split
            store.delete(*deleted)
            after = store.snapshot()
            derived_keys = set(after._namespace_rows) - set(before._namespace_rows)  # split from an earlier split
            assert derived_keys
            for segment in (segment for segment in after.segments if segment.entry.key in derived_keys):
                derived, whole = after._namespace_rows[segment.entry.key], namespace_rows(segment)
                for field in ("entity_rows", "pinned_rows", "dead_rows", "dead_kinds"):
                    assert list(getattr(derived, field).items()) == list(getattr(whole, field).items()), field
                assert {name: derived.edges.positions(name).tolist() for name in derived.edges} == \
                    {name: whole.edges.positions(name).tolist() for name in whole.edges}
                earlier = next(rows for key, rows in before._namespace_rows.items() if key.split("/")[0] == segment.entry.id)
                untouched = [name for name in earlier.entity_rows if name != deleted[0]]
                assert all(derived.entity_rows[name] is earlier.entity_rows[name] for name in untouched)
                shared += len(untouched)
        assert shared  # what no deletion touched is kept, not split again


def test_a_value_built_before_a_write_is_not_kept_for_a_merge_that_holds_the_write(tmp_path, encoder):
    from rms_retrieval.stores.engine.merging import MERGE_FACTOR, MergeLock

    names = ["Alice", "Bruno", "Chen", "Dara", "Elif", "Farid", "Greta", "Hugo", "Ines", "Jonas", "Kiri"]
    path = tmp_path / "store"
    with MemoryStore.open(path, encoder) as store:
        with MergeLock(path):  # the merge waits for the last write
            for number in range(MERGE_FACTOR):
                if number == MERGE_FACTOR - 1:
                    earlier = store.snapshot().adjacency(["a"])  # built before the last write, asked nothing after
                store.add([_memory(number + 1, f"{names[number]} met {names[number + 1]} and Alice.", "a")])
        store.wait_for_merges()
        assert len(store.snapshot().segments) < MERGE_FACTOR  # the writes merged, the last one with them
        with MemoryStore.open(path, encoder, read_only=True) as fresh:
            assert _graph_edges(store) == _graph_edges(fresh) != list(earlier.edges)
        merged = len(store.snapshot().segments)
        with MergeLock(path):
            for number in range(MERGE_FACTOR - 1):
                store.add([_memory(50 + number, f"{names[number]} met Kiri.", "a")])
            graph = store.snapshot().adjacency(["a"])
            store.add([_memory(98, "the kettle was descaled today.", "a"),  # names no one: no edge, no entity
                       _memory(99, "Dara went home.", "b")])  # another namespace's write, merged with them
        store.wait_for_merges()
        assert len(store.snapshot().segments) == merged + 1
        assert store.snapshot().adjacency(["a"]) is graph  # kept, as built from the merged segment
        with MemoryStore.open(path, encoder, read_only=True) as fresh:
            assert _graph_edges(store) == _graph_edges(fresh)
