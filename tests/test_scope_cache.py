"""Per-namespace splits of segments, and scope values a new generation keeps or rebuilds."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from uuid import UUID

from rms_retrieval.stores.indexes.entity_graph import entity_id
from rms_retrieval.stores.memory_store import MemoryStore
from rms_retrieval.stores.models import MemoryObject, NodeType
from rms_retrieval.stores.protocols import ScanSelection
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


def test_a_graph_extended_by_a_write_is_the_graph_a_fresh_reader_builds(tmp_path, encoder):
    from rms_retrieval.stores.engine.scope_cache import extended_adjacency

    names = ["Alice", "Bruno", "Chen", "Dara", "Elif", "Farid", "Greta", "Hugo", "Ines", "Jonas", "Kiri"]
    turns = [" met ".join(names) + ".", "Alice met Kiri.", "Bruno and Chen went to Lisbon.", "Kiri, Dara and Alice.",
             "Lisbon again with Chen.", "Greta met Hugo and Ines.", "Alice met Kiri once more.",
             " met ".join(reversed(names)) + "."]  # Alice and Kiri far apart: counted, their edge not rewritten
    path = tmp_path / "store"
    extended = 0
    with MemoryStore.open(path, encoder) as store:
        for number, text in enumerate(turns, start=1):
            before = store.snapshot()
            previous = before.adjacency(["a"])
            batch = [_memory(number, text, "a"), _memory(100 + number, f"{names[number]} elsewhere", "b")]
            if number == 3:  # two turns of the scope in one write: the writer counts only the window
                batch.append(_memory(200, " and ".join(names[::-1]) + " again.", "a"))
            store.add(batch)
            after = store.snapshot()
            added = {segment.entry.key for segment in after.segments} - {segment.entry.key for segment in before.segments}
            counts = after.co_mention_counts(["a"])
            grown = extended_adjacency(previous, after._split(("a",)), added, ("a",), {"a": counts.counter("a")}) \
                if {segment.entry.key for segment in before.segments} <= {segment.entry.key for segment in after.segments} else None
            with MemoryStore.open(path, encoder, read_only=True) as fresh:
                built = _graph_edges(fresh)
            assert _graph_edges(store) == built  # what the store's own snapshot gives, extended or built
            if grown is not None:
                extended += 1
                assert list(grown.edges) == built
        assert extended >= 3  # writes that merged nothing were extended, not rebuilt
        deleted = store.snapshot()
        store.delete("a", [UUID(int=2)])  # a segment read with a new deletion file: the graph is built again
        earlier, later = (found._sources(("a",), lambda rows: rows.edges) for found in (deleted, store.snapshot()))
        assert later[:len(earlier)] != earlier  # not a graph of the same segments and more: never extended
        store.compact()
        store.add([_memory(50, "Alice met Kiri after the compaction.", "a")])
        with MemoryStore.open(path, encoder, read_only=True) as fresh:
            assert _graph_edges(store) == _graph_edges(fresh)


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
        assert ("a",) not in after._adjacency._values  # its segment read with a new deletion file: never asked again
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


def test_writes_after_updates_and_deletes_extend_the_graph_to_the_graph_a_fresh_reader_builds(tmp_path, encoder,
                                                                                             monkeypatch):
    import random

    from rms_retrieval.stores import snapshot as snapshot_module

    extended = []
    extend = snapshot_module.extended_adjacency

    def counted(*args, **kwargs):
        found = extend(*args, **kwargs)
        extended.append(found is not None and any(rows.dead_rows for _, rows in args[1]))
        return found

    monkeypatch.setattr(snapshot_module, "extended_adjacency", counted)
    names = ["Alice", "Bruno", "Chen", "Dara", "Elif", "Farid"]
    chooser = random.Random(3)
    path, number = tmp_path / "store", 0
    with MemoryStore.open(path, encoder) as store:
        store.add([_memory(number := number + 1, " met ".join(names) + ".", "a")])
        for step in range(24):
            store.snapshot().adjacency(["a"])  # the graph the next write extends, if it can
            live = [memory.id for memory in store.snapshot().scan_page(
                ScanSelection("a", None, ("TURN",), ("ACTIVE",), None, 100))]
            action = step % 4
            if action == 1 and live:  # a turn says other names now
                store.update("a", chooser.choice(live), {"content": " and ".join(chooser.sample(names, 3)) + "."})
            elif action == 3 and len(live) > 1:
                store.delete("a", [chooser.choice(live)])
            elif step in (8, 16):  # an entity deleted, then named again: made anew with its id
                store.delete("a", [entity_id("a", "Farid", UUID(int=1))])
                store.snapshot().adjacency(["a"])
                store.add([_memory(number := number + 1, "Farid and Alice again.", "a")])
            elif step == 12:  # a turn added and changed before any question
                store.add([_memory(number := number + 1, "Chen met Dara.", "a")])
                store.update("a", UUID(int=number), {"content": "Chen met Elif."})
            else:
                store.add([_memory(number := number + 1, " met ".join(chooser.sample(names, 3)) + ".", "a")])
            with MemoryStore.open(path, encoder, read_only=True) as fresh:
                assert _graph_edges(store) == _graph_edges(fresh), step
    assert sum(extended) >= 3  # writes after a delete in the scope were extended, not rebuilt


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
