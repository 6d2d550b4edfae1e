"""A segment's lookups by namespace: rows by object id and sessions' turns, made on first use."""

from __future__ import annotations

from datetime import datetime, timezone
from uuid import UUID

import numpy as np
import pytest

from tests import store_workers
from rms_retrieval.stores.engine import segment_lookups
from rms_retrieval.stores.engine.segment_lookups import RowIndex, SegmentSessions
from rms_retrieval.stores.engine.segment_parquet import objects_table, segment_columns
from rms_retrieval.stores.models import MemoryObject

OTHER = MemoryObject(id=UUID(int=7), namespace="a", content="another namespace's turn", session_id="s", session_seq=3,
                     created_at=datetime(2024, 1, 1, tzinfo=timezone.utc))


def test_rows_of_one_namespace_need_not_be_contiguous_for_the_lookups():
    rows = [store_workers.turn(0), OTHER, store_workers.turn(1)]  # live, a, live as the table lies
    columns = segment_columns(objects_table(rows))
    slices = {"live": (0, 3), "a": (1, 2)}
    index = RowIndex(columns, slices)
    assert [index.row("live", UUID(int=number)) for number in (1, 2)] == [0, 2] and index.row("live", OTHER.id) is None
    assert index.row("a", OTHER.id) == 1 and index.row("b", OTHER.id) is None
    assert [index.id_at(row) for row in range(3)] == [UUID(int=1), OTHER.id, UUID(int=2)]
    assert index.ids_at(np.array([2, 1])) == [UUID(int=2), OTHER.id]
    sessions = SegmentSessions(columns, slices, None)
    assert sessions.get(("live", "default", "default", "s")) == [(0, 0), (1, 2)]
    assert sessions.get(("a", "default", "default", "s")) == [(3, 1)] and len(sessions) == 2
    assert SegmentSessions(columns, slices, np.array([False, False, True])).get(("live", "default", "default", "s")) == [(0, 0)]
    assert columns.uuids() == [UUID(int=1), OTHER.id, UUID(int=2)] and columns.namespace_list() == ["live", "a", "live"]
    assert columns.rows_by_key() == {("live", UUID(int=1)): 0, ("a", OTHER.id): 1, ("live", UUID(int=2)): 2}


def test_a_repeated_id_answers_with_its_last_row_and_lookups_run_together():
    older, newer = store_workers.turn(0), store_workers.turn(0).model_copy(update={"content": "edited", "session_seq": 5})
    rows = [older, store_workers.turn(1), newer, OTHER.model_copy(update={"namespace": "live", "id": UUID(bytes=b"\x01" + bytes(15))})]
    columns = segment_columns(objects_table(rows))
    index = RowIndex(columns, {"live": (0, 4)})
    trailing_zeros, near = UUID(bytes=b"\x01" + bytes(15)), UUID(bytes=b"\x01" + bytes(14) + b"\x01")
    assert index.rows("live", [UUID(int=1), UUID(int=2), trailing_zeros, near, UUID(int=1 << 127)]) == [2, 1, 3, None, None]
    assert index.row("live", trailing_zeros) == 3 and index.rows("live", []) == []
    assert index.rows("none", [UUID(int=1)]) == [None]
    dead = np.array([False, True, True, False])  # the newer version of UUID(int=1) and UUID(int=2) deleted
    assert index.rows("live", [UUID(int=1), UUID(int=2), trailing_zeros], dead) == [None, None, 3]
    keys = np.frombuffer(b"".join(key.bytes for key in (trailing_zeros, near, UUID(int=1))), dtype="V16").view("S16")
    assert index.key_rows("live", keys).tolist() == [3, -1, 2] and index.key_rows("live", keys, dead).tolist() == [3, -1, -1]
    assert index.key_rows("none", keys).tolist() == [-1, -1, -1] and index.key_rows("live", keys[:0]).tolist() == []
    sessions = SegmentSessions(columns, {"live": (0, 4)}, None)
    assert sessions[("live", "default", "default", "s")] == [(0, 0), (1, 1), (5, 2), (3, 3)]  # in row order
    assert sessions[("live", "default", "default", "s")] is not sessions[("live", "default", "default", "s")]
    assert ("live", "default", "default", "t") not in sessions and ("live",) not in sessions
    with pytest.raises(KeyError):
        sessions[("live", "default", "default", "t")]


@pytest.mark.parametrize("count", [1, 7, 40])
def test_a_few_rows_are_gathered_row_by_row_as_arrow_gathers_many(monkeypatch, count):
    rng = np.random.default_rng(count)
    rows = [MemoryObject(id=UUID(int=number + 1), namespace="live", content=f"turn {number}",
                         owner=["ann", "bo"][int(rng.integers(2))], scope=["default", "work"][int(rng.integers(2))],
                         session_id=None if rng.random() < 0.2 else f"s{int(rng.integers(3))}",
                         session_seq=None if rng.random() < 0.1 else int(rng.integers(100)),
                         created_at=datetime(2024, 1, 1, tzinfo=timezone.utc)) for number in range(count)]
    columns = segment_columns(objects_table(rows))
    dead = rng.random(count) < 0.2

    def gathered(few_rows: int):
        monkeypatch.setattr(segment_lookups, "FEW_ROWS", few_rows)
        sessions = SegmentSessions(columns, {"live": (0, count)}, dead)
        return {key: sessions[key] for key in sessions}, list(sessions)

    by_arrow, by_rows = gathered(0), gathered(count)
    assert by_rows == by_arrow and by_rows[0]  # the same sessions, turns and order


@pytest.mark.parametrize("count", [12, 60])  # gathered row by row, and by Arrow
def test_sessions_with_more_rows_deleted_are_what_gathering_them_again_gives(count):
    rng = np.random.default_rng(count + 1)
    rows = [MemoryObject(id=UUID(int=number + 1), namespace="live", content=f"turn {number}",
                         owner=["ann", "bo"][int(rng.integers(2))], session_id=f"s{int(rng.integers(4))}",
                         session_seq=int(rng.integers(100)), created_at=datetime(2024, 1, 1, tzinfo=timezone.utc))
            for number in range(count)]
    rows.append(OTHER.model_copy(update={"namespace": "other"}))
    columns = segment_columns(objects_table(rows))
    slices = {"live": (0, count), "other": (count, count + 1)}
    dead = rng.random(count + 1) < 0.1
    earlier = SegmentSessions(columns, slices, dead)
    assert list(earlier)  # gathered: what the derived sessions filter
    first_rows = {key: earlier[key][0][1] for key in earlier}
    later = dead.copy()
    later[list(first_rows.values())[:2]] = True  # the first turn of two sessions: they start later now
    later[[row for key, turns in earlier.items() for _, row in turns if key[3] == "s3"]] = True  # a session emptied
    derived, whole = earlier.with_dead(later), SegmentSessions(columns, slices, later)
    assert list(derived) == list(whole) and {key: derived[key] for key in derived} == {key: whole[key] for key in whole}
    assert not any(key[3] == "s3" for key in derived) and any(key[3] == "s3" for key in earlier)
    untouched = earlier.with_dead(dead)
    assert untouched._of("live") is earlier._of("live")  # no row deleted since: the same arrays
    twice = earlier.with_dead(dead).with_dead(later)  # a namespace not asked for in between is still filtered
    assert twice._earlier["live"] is earlier._of("live") and {key: twice[key] for key in twice} == {key: whole[key] for key in whole}
    # Runs are read through the rows kept, never made again per session; two deletions in a row compose.
    assert derived._of("live")[0].spans is earlier._of("live")[0].spans
    middle = dead.copy()
    middle[list(first_rows.values())[:1]] = True
    stepped = earlier.with_dead(middle)
    assert list(stepped) == list(SegmentSessions(columns, slices, middle))  # asked for: filtered once
    again = stepped.with_dead(later)
    assert list(again) == list(whole) and {key: again[key] for key in again} == {key: whole[key] for key in whole}
    assert all((key in again) == (key in whole) for key in earlier) and len(again) == len(whole)


def test_the_entity_entries_read_from_the_columns_are_those_of_the_decoded_objects(tmp_path):
    from rms_retrieval.stores.engine.segment_vectors import SegmentVectors
    from rms_retrieval.stores.engine.segment_writing import write_segment
    from rms_retrieval.stores.engine.segments import LoadedSegment
    from rms_retrieval.stores.indexes.entity_graph import entity_entries
    from rms_retrieval.stores.models import NodeType

    when = datetime(2024, 1, 1, tzinfo=timezone.utc)
    metadata = [{"extracted": True}, {}, {"aliases": ["Mel", "Melly"]}, {"notes": {"extracted": True}}, {"extracted": 0},
                {"extracted": "yes", "aliases": ["Cal"]}, {"entity_type": "PERSON", "note": "not \"extracted\" at all"}]
    entities = [MemoryObject(id=UUID(int=(number + 1) << 64), namespace="a", node_type=NodeType.ENTITY, content=f"Name{number}",
                             entity_canonical_name=f"Name{number}" if number != 1 else "  Name1 ", metadata=extra, created_at=when)
                for number, extra in enumerate(metadata)]
    rows = [*entities, store_workers.turn(0)]
    written = write_segment(tmp_path, "g1-x", rows, SegmentVectors.dense(np.eye(len(rows), 8, dtype=np.float32)), [])
    segment = LoadedSegment(tmp_path, written.entry)
    positions = list(range(len(entities)))  # namespace a's rows come first
    from_columns = list(segment_lookups.entity_row_entries(segment, "a", positions))
    assert segment._decoded == {}  # read from the columns: no object made
    assert from_columns == list(entity_entries(segment.object_at(row) for row in positions))
    assert [extracted for _, _, extracted in from_columns] == [True, False, False, False, False, True, False]
    assert from_columns[2][1] == ["Name2", "Mel", "Melly"] and list(segment_lookups.entity_row_entries(segment, "a", [])) == []
