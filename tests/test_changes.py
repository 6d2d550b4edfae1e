"""Memories that change: update, supersede, delete and erase through MemoryStore, exact afterwards."""

from __future__ import annotations

from datetime import timedelta
from uuid import UUID

import pytest

from tests import store_workers
from rms_retrieval.dataflows.retrieval import retrieve
from rms_retrieval.stores.engine.check import check_store
from rms_retrieval.stores.errors import StoreError
from rms_retrieval.stores.exact.enumeration import iter_objects
from rms_retrieval.stores.memory_store import MemoryStore
from rms_retrieval.stores.models import LifecycleState, MemoryObject
from rms_retrieval.stores.visibility import RetrievalMode

NAMESPACE = store_workers.NAMESPACE
QUESTIONS = ("which turn was about the river?", "guitar and pottery", "turn 17", "museum violin hiking", "turn 5 garden")


def _open(path) -> MemoryStore:
    return MemoryStore.open(path, store_workers.encoder(), retired_grace=0)


def _bundles(store, mode: RetrievalMode = RetrievalMode.DEFAULT) -> list[str]:
    when = store_workers.turn(0).created_at + timedelta(days=3)
    return [retrieve(store, question, namespaces=[NAMESPACE], encoder=store_workers.encoder(), reference_time=when,
                     retrieval_mode=mode, log=False).bundle.to_json() for question in QUESTIONS]


def _turns(count: int) -> list[MemoryObject]:
    return [store_workers.turn(number) for number in range(count)]


def test_deleted_turns_leave_bundles_byte_identical_to_a_store_that_never_held_them(tmp_path):
    turns = _turns(60)
    gone = {turns[number].id for number in (3, 4, 5, 17, 30, 41, 59)}
    with _open(tmp_path / "changed") as changed, _open(tmp_path / "never") as never:
        for turn in turns:  # one add each, so deletions land in merged and in small segments
            changed.add([turn])
        changed.wait_for_merges()
        never.add([turn for turn in turns if turn.id not in gone])
        changed.delete(NAMESPACE, sorted(gone)[:4])
        changed.delete(NAMESPACE, sorted(gone)[4:])
        assert changed.snapshot().count_objects() == never.snapshot().count_objects() == 53
        assert _bundles(changed) == _bundles(never)  # BM25 statistics, vectors, session neighbours
        changed.compact()
        assert _bundles(changed) == _bundles(never)
        assert check_store(tmp_path / "changed").problems == []


def test_after_a_delete_the_session_window_of_arrival_numbered_turns_is_that_of_a_store_without_the_turn(tmp_path):
    """Messages are numbered by arrival, so a delete leaves a gap in session_seq that a store which
    never held the turn does not have; the window counts places among live turns (RFC 4.5)."""
    said = [f"message {number} about the {word}" for number, word in enumerate(
        ("river", "garden", "violin", "museum", "pottery", "hiking", "guitar", "market"))]
    messages = [{"role": "user", "name": "Ana", "content": text} for text in said]

    def windows(store: MemoryStore) -> dict[str, list[tuple[str, int]]]:
        snapshot = store.snapshot()
        turns = {memory.content: memory for memory in iter_objects(snapshot, namespace=NAMESPACE) if memory.node_type == "TURN"}
        return {content: [(found.neighbour.content, found.offset)
                          for found in snapshot.session_neighbours([memory.id], 2, [NAMESPACE])]
                for content, memory in sorted(turns.items())}

    with _open(tmp_path / "changed") as changed, _open(tmp_path / "never") as never:
        changed.add_messages(NAMESPACE, "s", messages[:6])
        [third] = [m.id for m in iter_objects(changed.snapshot(), namespace=NAMESPACE) if m.content == said[3]]
        changed.delete(NAMESPACE, [third])
        changed.add_messages(NAMESPACE, "s", messages[6:])  # numbered after the gap
        never.add_messages(NAMESPACE, "s", messages[:3] + messages[4:6])
        never.add_messages(NAMESPACE, "s", messages[6:])
        assert windows(changed) == windows(never)
        assert windows(changed)[said[4]] == [(said[1], -2), (said[2], -1), (said[5], 1), (said[6], 2)]


def test_update_changes_fields_records_updated_at_and_keeps_the_vector(tmp_path):
    turns = _turns(12)
    with _open(tmp_path / "store") as store:
        store.add(turns)
        before = store.snapshot().search_vector(store.snapshot().segments[0].vectors.of(4), [NAMESPACE], 3)
        store.update(NAMESPACE, turns[4].id, {"salience": 0.9}, metadata={"topic": "river"}, valid_to=turns[4].created_at)
        updated = store.snapshot().get_objects([turns[4].id], [NAMESPACE])[turns[4].id]
        assert (updated.salience, updated.metadata, updated.valid_to) == (0.9, {"topic": "river"}, turns[4].created_at)
        assert updated.updated_at > turns[4].updated_at and updated.content == turns[4].content
        assert store.snapshot().search_vector(store.snapshot().segments[0].vectors.of(4), [NAMESPACE], 3) == before
        assert store.snapshot().count_objects() == 12 and check_store(tmp_path / "store").problems == []


def test_a_content_change_is_indexed_again_with_the_turns_whose_indexed_text_takes_it_in(tmp_path):
    turns = _turns(12)
    turns[2] = turns[2].model_copy(update={"content": "turn 2 albatross"})
    with _open(tmp_path / "store") as store, _open(tmp_path / "never") as never:
        store.add(turns)
        assert {hit.object_id for hit in store.snapshot().search_lexical("albatross", [NAMESPACE], 50)} == {turns[2].id, turns[3].id}
        store.update(NAMESPACE, turns[2].id, content="a zeppelin")
        version = store.snapshot().get_objects([turns[2].id], [NAMESPACE])[turns[2].id]
        never.add([version if turn.id == version.id else turn for turn in turns])
        # turn 3 is indexed with the turn before it (the store's expansion): it is indexed again too
        assert [hit.object_id for hit in store.snapshot().search_lexical("zeppelin", [NAMESPACE], 5)] == [turns[2].id, turns[3].id]
        assert store.snapshot().search_lexical("albatross", [NAMESPACE], 50) == []
        for words in ("zeppelin", "turn", "garden river"):
            assert store.snapshot().search_lexical(words, [NAMESPACE], 50) == never.snapshot().search_lexical(words, [NAMESPACE], 50)
        assert store.snapshot().count_objects() == 12


def test_a_pinned_task_stops_being_pinned_when_it_is_done(tmp_path):
    task = MemoryObject(namespace=NAMESPACE, node_type="TASK", content="book the river trip")
    with _open(tmp_path / "store") as store:
        store.add([*_turns(3), task])
        assert [memory.id for memory in store.snapshot().pinned_objects([NAMESPACE])] == [task.id]
        store.update(NAMESPACE, task.id, lifecycle_state="ARCHIVED")
        assert store.snapshot().pinned_objects([NAMESPACE]) == []


def test_supersede_drops_the_old_fact_in_default_mode_with_the_reason_and_audit_still_shows_it(tmp_path):
    old = MemoryObject(namespace=NAMESPACE, node_type="FACT", content="the river trip is on monday")
    new = MemoryObject(namespace=NAMESPACE, node_type="FACT", content="the river trip moved to friday")
    when = store_workers.turn(0).created_at + timedelta(days=3)
    with _open(tmp_path / "store") as store:
        store.add([*_turns(5), old])
        store.supersede(NAMESPACE, old.id, new)
        assert store.snapshot().get_objects([old.id], [NAMESPACE])[old.id].lifecycle_state is LifecycleState.SUPERSEDED
        edges = store.snapshot().adjacency([NAMESPACE]).edges
        assert [(edge.source, edge.target, edge.edge_type) for edge in edges] == [(new.id, old.id, "SUPERSEDES")]
        default = retrieve(store, "when is the river trip?", namespaces=[NAMESPACE], encoder=store_workers.encoder(),
                           reference_time=when, log=False)
        items = [item.id for item in default.bundle.items]
        assert new.id in items and old.id not in items
        assert default.bundle.retrieval_metadata.excluded[old.id] == "lifecycle:SUPERSEDED"
        audit = retrieve(store, "when is the river trip?", namespaces=[NAMESPACE], encoder=store_workers.encoder(),
                         reference_time=when, retrieval_mode=RetrievalMode.AUDIT, log=False)
        assert old.id in [item.id for item in audit.bundle.items]


def test_an_id_of_another_namespace_reads_like_an_unknown_id(tmp_path):
    other = MemoryObject(namespace="tenant-b", content="a private note about the river")
    with _open(tmp_path / "store") as store:
        store.add([*_turns(3), other])
        with pytest.raises(StoreError) as foreign:
            store.delete(NAMESPACE, [other.id])
        with pytest.raises(StoreError) as unknown:
            store.delete(NAMESPACE, [UUID(int=999)])
        assert str(foreign.value).replace(str(other.id), "X") == str(unknown.value).replace(str(UUID(int=999)), "X")
        assert "\n" not in str(foreign.value)
        with pytest.raises(StoreError, match="namespace 'nobody' holds no objects"):
            store.update("nobody", other.id, salience=0.1)
        with pytest.raises(StoreError, match="cannot update 'owner'; updatable fields are"):
            store.update(NAMESPACE, store_workers.turn(0).id, owner="mallory")
        with pytest.raises(StoreError, match="cannot erase by 'colour'"):
            store.erase(NAMESPACE, where={"colour": "red"})
        generation = store.snapshot().generation
        with pytest.raises(StoreError, match="confidence"):  # bad values change nothing
            store.update(NAMESPACE, store_workers.turn(0).id, confidence=7)
        assert store.snapshot().generation == generation and store.snapshot().count_objects() == 4


def test_a_deleted_id_is_not_reused_until_compaction_removed_it(tmp_path):
    turn = store_workers.turn(0)
    with _open(tmp_path / "store") as store:
        store.add([turn, store_workers.turn(1)])
        store.delete(NAMESPACE, [turn.id])
        with pytest.raises(StoreError, match="is already in namespace"):
            store.add([turn])
        store.compact()
        store.add([turn])
        assert store.snapshot().count_objects() == 2


def test_deleted_ids_and_lookups_by_id_over_namespaces_and_segments_after_deletes_and_updates(tmp_path):
    """A snapshot's `dead_ids` and `get_objects` (each segment asked about many ids at once): deletes
    in merged and in small segments and in two namespaces holding the same ids, an updated turn (its
    old row is no deleted object), an id whose bytes end in zeros; what a row-by-row search gives."""
    turns = _turns(40)
    zeros = store_workers.turn(40).model_copy(update={"id": UUID(bytes=b"\x01" + bytes(15))})
    other = [turn.model_copy(update={"namespace": "other"}) for turn in _turns(6)]
    with _open(tmp_path / "store") as store:
        for turn in [*turns, zeros]:
            store.add([turn])
        store.add(other)
        store.wait_for_merges()
        store.update(NAMESPACE, turns[2].id, salience=0.9)
        store.delete(NAMESPACE, [turns[3].id, turns[39].id, zeros.id])
        store.delete("other", [other[4].id])
        store.update("other", other[5].id, salience=0.8)
        snapshot = store.snapshot()
        rows = {(segment.namespace_at(row), segment.id_at(row)) for segment in snapshot.segments for row in segment.dead_rows}
        assert len(rows) == 7 and len(snapshot.segments) > 2
        assert snapshot.dead_ids == {key for key in rows if not any(
            segment.live_row(*key) is not None for segment in snapshot.segments)}
        assert snapshot.dead_ids == {(NAMESPACE, turns[3].id), (NAMESPACE, turns[39].id), (NAMESPACE, zeros.id),
                                     ("other", turns[4].id)}
        # Lookups by id across namespaces and segments: the first namespace in sorted order with a live
        # row answers ("live" before "other"), from the segment holding it live (an update's version).
        asked = [turns[number].id for number in (2, 3, 4, 5, 39)] + [zeros.id, UUID(int=10**6)]
        found = snapshot.get_objects(asked, ["other", NAMESPACE])
        assert {key: (memory.namespace, memory.salience) for key, memory in found.items()} == {
            turns[2].id: (NAMESPACE, 0.9), turns[3].id: ("other", turns[3].salience), turns[4].id: (NAMESPACE, turns[4].salience),
            turns[5].id: (NAMESPACE, turns[5].salience)}
        assert list(found) == sorted(found, key=lambda key: key.int) and snapshot.get_objects([], [NAMESPACE]) == {}
        assert snapshot.text_tokens(asked, [NAMESPACE]).keys() == {turns[number].id for number in (2, 4, 5)}


def test_erase_leaves_no_byte_of_the_erased_objects_in_the_store_directory(tmp_path):
    secret = "zanzibar marmalade confession"
    erased = [MemoryObject(namespace="tenant-gone", owner="carol", session_id="t", session_seq=number,
                           content=f"{secret} number {number} with Carol Danvers") for number in range(4)]
    kept = [MemoryObject(namespace="tenant-gone", owner="dave", content="dave likes the river") , *_turns(30)]
    path = tmp_path / "store"
    when = store_workers.turn(0).created_at + timedelta(days=3)
    with _open(path) as store:
        for memory in [*erased, *kept]:
            store.add([memory])
        for namespace, question in (("tenant-gone", "zanzibar marmalade"), (NAMESPACE, "the river")):
            retrieve(store, question, namespaces=[namespace], encoder=store_workers.encoder(), reference_time=when, log=True)
        store.close()
        entities = [memory for memory in store.snapshot().stored_entities(["tenant-gone"])]
        assert entities  # "Carol Danvers" was spotted: derived objects of the owner's text
        report = store.erase("tenant-gone", owner="carol")
        store.erase("tenant-gone", where={"node_type": "ENTITY"})
        assert set(report.object_ids) >= {memory.id for memory in erased}
        assert store.snapshot().count_objects(["tenant-gone"]) == 1 and store.snapshot().count_objects() == 31
    needles = [secret.encode(), b"zanzibar", b"Danvers"]
    for memory in [*erased, *entities]:
        needles += [str(memory.id).encode(), memory.id.hex.encode(), memory.id.bytes]
    found = [(str(file.relative_to(path)), needle) for file in path.rglob("*") if file.is_file()
             for needle in needles if needle in file.read_bytes()]
    assert found == []
    assert check_store(path).problems == []
    with MemoryStore.open(path, create=False, read_only=True) as reader:
        assert reader.snapshot().count_objects() == 31


def test_erasing_a_whole_namespace_removes_its_log_records(tmp_path):
    path = tmp_path / "store"
    when = store_workers.turn(0).created_at + timedelta(days=3)
    with _open(path) as store:
        store.add([MemoryObject(namespace="tenant-gone", content="quokka holiday plans"), *_turns(3)])
        for namespace in ("tenant-gone", NAMESPACE):
            retrieve(store, "holiday", namespaces=[namespace], encoder=store_workers.encoder(), reference_time=when, log=True)
        store.close()
        assert len(store.retrieval_log()) == 2
        store.erase("tenant-gone")
        assert [record["payload"]["namespace_scope"] for record in store.retrieval_log()] == [[NAMESPACE]]
        assert "tenant-gone" not in store.snapshot().namespaces()
    assert not any(b"tenant-gone" in file.read_bytes() or b"quokka" in file.read_bytes()
                   for file in path.rglob("*") if file.is_file())


def test_knowledge_at_leaves_out_what_was_stored_after_it_and_says_it_is_no_replay(tmp_path):
    from rms_retrieval.nodes.packing import HISTORICAL_WARNING

    turns = _turns(30)
    cutoff = turns[9].created_at
    when = store_workers.turn(0).created_at + timedelta(days=3)
    with _open(tmp_path / "store") as store:
        store.add(turns)
        result = retrieve(store, "turn river guitar", namespaces=[NAMESPACE], encoder=store_workers.encoder(),
                          reference_time=when, knowledge_at=cutoff, log=False)
        items = {item.id for item in result.bundle.items}
        assert items and items <= {turn.id for turn in turns[:10]}
        meta = result.bundle.retrieval_metadata
        assert set(meta.excluded.values()) >= {"ingested_after_knowledge_at"}
        assert meta.historical_coverage.exact_snapshot is False
        assert '"historical_coverage":{"knowledge_at":"' in result.bundle.to_json()
        assert result.bundle.context.startswith(HISTORICAL_WARNING)
        plain = retrieve(store, "turn river guitar", namespaces=[NAMESPACE], encoder=store_workers.encoder(),
                         reference_time=when, log=False)
        assert plain.bundle.retrieval_metadata.historical_coverage is None
        assert "historical_coverage" not in plain.bundle.to_json()
        tiny = retrieve(store, "turn river guitar", namespaces=[NAMESPACE], encoder=store_workers.encoder(),
                        reference_time=when, knowledge_at=cutoff, token_budget=5, log=False)
        assert tiny.bundle.items == ()  # the warning does not fit: no unqualified evidence

