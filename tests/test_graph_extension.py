"""A scope's graph brought up to date through adds, updates, supersedes and deletes is the graph a
fresh reader builds, and where it cannot be, it is built."""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone
from uuid import UUID

import numpy as np

from rms_retrieval.stores import snapshot as snapshot_module
from rms_retrieval.stores.engine.graph_extension import FEW_ROWS, ScopeGraph, _owned_mask, extended_adjacency
from rms_retrieval.stores.engine.merging import MERGE_FACTOR, MergeLock
from rms_retrieval.stores.indexes.entity_graph import entity_id
from rms_retrieval.stores.memory_store import MemoryStore
from rms_retrieval.stores.models import MemoryObject
from rms_retrieval.stores.protocols import ScanSelection

T0 = datetime(2024, 5, 1, 12, 0, tzinfo=timezone.utc)
NAMES = ["Alice", "Bruno", "Chen", "Dara", "Elif", "Farid", "Greta", "Hugo", "Ines", "Jonas", "Kiri"]


def _memory(number: int, content: str, namespace: str, **extra) -> MemoryObject:
    return MemoryObject(id=UUID(int=number), namespace=namespace, content=content,
                        created_at=T0 + timedelta(minutes=number), **extra)


def _graph_edges(store, scope=("a",)) -> list:
    return list(store.snapshot().adjacency(list(scope)).edges)


def _extensions(monkeypatch) -> list[tuple[bool, bool]]:
    """Per extension the snapshot asks for: whether it gave a graph, and whether a segment it was
    built from had rows deleted since."""
    extended = []
    extend = snapshot_module.extended_adjacency

    def counted(previous, before, split, *rest):
        found = extend(previous, before, split, *rest)
        earlier = {key.split("/")[0] for key in before}
        extended.append((found is not None, any(segment.entry.id in earlier and segment.entry.key not in before
                                                for segment, _ in split)))
        return found

    monkeypatch.setattr(snapshot_module, "extended_adjacency", counted)
    return extended


def test_a_graph_extended_by_a_write_is_the_graph_a_fresh_reader_builds(tmp_path, encoder):
    names = NAMES
    turns = [" met ".join(names) + ".", "Alice met Kiri.", "Bruno and Chen went to Lisbon.", "Kiri, Dara and Alice.",
             "Lisbon again with Chen.", "Greta met Hugo and Ines.", "Alice met Kiri once more.",
             " met ".join(reversed(names)) + "."]  # Alice and Kiri far apart: counted, their edge not rewritten
    path = tmp_path / "store"
    extended = 0
    with MemoryStore.open(path, encoder) as store:
        for number, text in enumerate(turns, start=1):
            before = store.snapshot()
            before.adjacency(["a"])
            sources, previous = before._adjacency._values[("a",)]
            batch = [_memory(number, text, "a"), _memory(100 + number, f"{names[number]} elsewhere", "b")]
            if number == 3:  # two turns of the scope in one write: the writer counts only the window
                batch.append(_memory(200, " and ".join(names[::-1]) + " again.", "a"))
            store.add(batch)
            after = store.snapshot()
            counts = after.co_mention_counts(["a"])
            grown = extended_adjacency(previous, sources, after._split(("a",)), ("a",), counts,
                                       after.dead_ids)
            with MemoryStore.open(path, encoder, read_only=True) as fresh:
                built = _graph_edges(fresh)
            assert _graph_edges(store) == built  # what the store's own snapshot gives, extended or built
            if grown is not None:
                extended += 1
                assert list(grown.adjacency.edges) == built
        assert extended >= 3  # writes that merged nothing were extended, not rebuilt
        deleted = store.snapshot()
        deleted.adjacency(["a"])
        sources, previous = deleted._adjacency._values[("a",)]
        store.delete("a", [UUID(int=2)])  # a segment read with a new deletion file: the turn's edges go
        after = store.snapshot()
        grown = extended_adjacency(previous, sources, after._split(("a",)), ("a",),
                                   after.co_mention_counts(["a"]), after.dead_ids)
        with MemoryStore.open(path, encoder, read_only=True) as fresh:
            assert list(grown.adjacency.edges) == _graph_edges(fresh) != list(previous.adjacency.edges)
        store.compact()
        store.add([_memory(50, "Alice met Kiri after the compaction.", "a")])
        with MemoryStore.open(path, encoder, read_only=True) as fresh:
            assert _graph_edges(store) == _graph_edges(fresh)


def test_a_graph_brought_through_adds_updates_supersedes_and_deletes_is_the_graph_a_fresh_reader_builds(tmp_path, encoder,
                                                                                                    monkeypatch):
    extended = _extensions(monkeypatch)
    names = ["Alice", "Bruno", "Chen", "Dara", "Elif", "Farid"]
    chooser = random.Random(3)
    path, number = tmp_path / "store", 0
    farid = entity_id("a", "Farid", UUID(int=1))

    def turn(namespace: str = "a") -> MemoryObject:
        nonlocal number
        number += 1
        return _memory(number, " met ".join(chooser.sample(names, chooser.randint(1, 4))) + ".", namespace)

    with MemoryStore.open(path, encoder) as store:
        store.add([_memory(number := number + 1, " met ".join(names) + ".", "a"), turn("b")])
        for step in range(60):
            for _ in range(chooser.choice((1, 1, 2))):  # some questions come after two changes
                live = [memory.id for memory in store.snapshot().scan_page(
                    ScanSelection("a", None, ("TURN",), ("ACTIVE",), None, 100))]
                action = chooser.randrange(7)
                if action == 0 and live:  # a turn says other names now
                    store.update("a", chooser.choice(live), {"content": " and ".join(chooser.sample(names, 3)) + "."})
                elif action == 1 and live:  # the same names: its edges move to the new version
                    store.update("a", chooser.choice(live), {"salience": chooser.choice((0.3, 0.6, 0.9))})
                elif action == 2 and len(live) > 1:
                    store.delete("a", [chooser.choice(live)])
                elif action == 3 and live:
                    store.supersede("a", chooser.choice(live), turn())
                elif action == 4:  # an entity deleted, and named again by a later add
                    if store.snapshot().get_objects([farid], ["a"]):
                        store.delete("a", [farid])
                    store.add([turn()])
                else:
                    store.add([turn(), *([turn("b")] if action == 5 else [])])
            if step % 3:  # else the changes of two steps meet one question
                with MemoryStore.open(path, encoder, read_only=True) as fresh:
                    for scope in (["a"], ["a", "b"]):
                        assert list(store.snapshot().adjacency(scope).edges) == list(fresh.snapshot().adjacency(scope).edges), step
    assert sum(found and deleted for found, deleted in extended) >= 10  # after updates and deletes: extended
    assert sum(not found for found, _ in extended) >= 1  # a deleted entity named again: built


def test_an_added_segment_with_edges_before_one_the_graph_was_built_from_is_not_extended(tmp_path, encoder):
    with MemoryStore.open(tmp_path / "store", encoder) as store:
        for number in range(3):
            store.add([_memory(number + 1, f"{NAMES[number]} met {NAMES[number + 1]}.", "a")])
        snapshot = store.snapshot()
        split = snapshot._split(("a",))
        keys = tuple(segment.entry.key for segment, _ in split)
        graph = ScopeGraph.of(snapshot.adjacency(["a"]), split, ("a",))
        counts, dead = snapshot.co_mention_counts(["a"]), snapshot.dead_ids
        assert extended_adjacency(graph, keys, split, ("a",), counts, dead) is not None  # nothing changed
        outer = ScopeGraph.of(graph.adjacency, split[::2], ("a",))  # as if built before the middle one was read
        assert extended_adjacency(outer, keys[::2], split, ("a",), counts, dead) is None  # its edges come before the last
        assert extended_adjacency(graph, keys[::-1], split, ("a",), counts, dead) is None  # out of order
        assert extended_adjacency(graph, (*keys, "gone"), split, ("a",), counts, dead) is None  # a source merged away


def test_a_graph_kept_through_a_merge_and_then_deleted_from_is_built_again(tmp_path, encoder, monkeypatch):
    extended = _extensions(monkeypatch)
    path = tmp_path / "store"
    farid = entity_id("a", "Farid", UUID(int=1))
    with MemoryStore.open(path, encoder) as store:
        store.add([_memory(1, "Farid met Alice and Bruno.", "a")])
        store.delete("a", [farid])  # deleted before the graph is built, in a segment the merge takes
        with MergeLock(path):  # the merge waits until the graph is cached
            for number in range(2, MERGE_FACTOR + 1):
                store.add([_memory(number, f"{NAMES[number]} met Alice.", "a")])
            graph = store.snapshot().adjacency(["a"])
        store.wait_for_merges()
        assert store.snapshot().adjacency(["a"]) is graph  # kept through the merge
        merged = store.snapshot().segments[0]
        assert merged.entry.sources and merged.dead_rows
        store.delete("a", [UUID(int=3)])  # the merged segment, read with a new deletion file
        store.add([_memory(50, "Farid again, with Bruno.", "a")])  # Farid made anew: his old edges come back
        extended.clear()
        with MemoryStore.open(path, encoder, read_only=True) as fresh:
            assert _graph_edges(store) == _graph_edges(fresh)
        assert extended == [(False, True)]  # the graph does not know the merged segment's deletions then


def test_the_edges_a_few_rows_own_are_found_as_isin_finds_them():
    chooser = np.random.default_rng(7)
    owners = chooser.integers(-1, 300, 5_000).astype(np.int16)
    for count in (1, 2, FEW_ROWS, FEW_ROWS + 1, 40):
        rows = [int(row) for row in chooser.choice(400, count, replace=False)]  # some own no edge, some lie past every owner
        np.testing.assert_array_equal(_owned_mask(owners, rows), np.isin(owners, rows))


def test_updates_of_a_turn_that_names_no_one_extend_the_graph(tmp_path, encoder, monkeypatch):
    extended = _extensions(monkeypatch)
    path = tmp_path / "store"
    with MemoryStore.open(path, encoder) as store:
        store.add([_memory(1, "Alice met Bruno and Chen.", "a"), _memory(2, "the kettle was descaled today.", "a")])
        store.snapshot().adjacency(["a"])
        for salience in (0.3, 0.6, 0.9):  # each version a segment of no edge; the version before it deleted
            store.update("a", UUID(int=2), {"salience": salience})
            store.update("a", UUID(int=1), {"salience": salience})
            with MemoryStore.open(path, encoder, read_only=True) as fresh:
                assert _graph_edges(store) == _graph_edges(fresh)
    assert [found for found, _ in extended] == [True, True, True]
