"""An object's own score inputs are read off the object, kept while it lives, and never answer for another."""

from __future__ import annotations

import gc
import math
import os
import signal
import threading
import time
from datetime import timedelta, timezone

import numpy as np

from rms_retrieval.nodes.helpers import object_inputs
from rms_retrieval.nodes.helpers.object_inputs import ObjectInputs, visible_everywhere
from rms_retrieval.nodes.helpers.temporal import micros
from rms_retrieval.stores.models import EpistemicType, NodeType
from tests.factories import BASE_TIME, make_object

WEIGHTS = {member: 0.1 * (place + 1) for place, member in enumerate(EpistemicType)}
BOOSTS = {NodeType.FACT: 1.5}


def test_each_row_is_read_off_its_object():
    dated = make_object("dated", salience=0.25, confidence=0.75, epistemic_type=EpistemicType.INFERRED,
                        node_type=NodeType.FACT, days=-3)
    undated = make_object("undated", days=2, event_time=None, updated_at=BASE_TIME + timedelta(days=5))
    window = (BASE_TIME, BASE_TIME + timedelta(days=1))
    table, times = ObjectInputs.of([dated, undated], WEIGHTS, BOOSTS, window)
    assert table.tolist() == [
        [0.25, 0.75, WEIGHTS[EpistemicType.INFERRED], 1.5, math.exp(-3 / 7)],
        [undated.salience, undated.confidence, WEIGHTS[undated.epistemic_type], 1.0, math.exp(-1 / 7)],
    ]
    # stated (event time, else created), updated, current (event time, else updated)
    assert times.tolist() == [
        [micros(dated.event_time), micros(dated.updated_at), micros(dated.event_time)],
        [micros(undated.created_at), micros(undated.updated_at), micros(undated.updated_at)],
    ]
    assert ObjectInputs.of([dated], WEIGHTS, BOOSTS, None).table[:, 4].tolist() == [0.0]


def test_objects_sharing_times_or_naming_one_instant_at_other_offsets_read_the_same_microseconds():
    east = timezone(timedelta(hours=2))
    shared = make_object("shared", days=-1)
    same = make_object("same", event_time=shared.event_time.astimezone(east), updated_at=shared.updated_at)
    undated = make_object("undated", event_time=None, created_at=shared.event_time.astimezone(east),
                          updated_at=BASE_TIME + timedelta(microseconds=1))
    _, times = ObjectInputs.of([shared, same, undated], WEIGHTS, BOOSTS, None)
    instant, later = micros(shared.event_time), micros(BASE_TIME) + 1
    assert times.tolist() == [[instant, instant, instant], [instant, instant, instant], [instant, later, later]]


def test_no_objects_give_empty_columns():
    table, times = ObjectInputs.of([], WEIGHTS, BOOSTS, None)
    assert table.shape == (0, 5) and times.shape == (0, 3) and times.dtype == np.int64


def test_a_row_is_kept_for_the_very_object_it_was_read_from():
    first = make_object("updated", salience=0.5)
    again = first.model_copy(update={"salience": 0.75})  # the same id: the memory updated, or decoded anew
    assert ObjectInputs.of([first], WEIGHTS, BOOSTS, None).table[0, 0] == 0.5
    assert ObjectInputs.of([again, first], WEIGHTS, BOOSTS, None).table[:, 0].tolist() == [0.75, 0.5]


def test_two_copies_of_one_memory_read_in_turn_keep_their_rows():
    kept = object_inputs._Kept()
    one = make_object("copied", salience=0.5)
    other = one.model_copy()  # as the same memory read from two stores, or two snapshots
    for _ in range(10):
        assert kept.gathered([one, other])[:, 0].tolist() == [0.5, 0.5]
    assert kept.current.used == 2


def test_an_object_asked_for_twice_at_once_gets_one_row():
    kept = object_inputs._Kept()
    obj = make_object("twice", salience=0.5)
    assert kept.gathered([obj, obj, obj])[:, 0].tolist() == [0.5, 0.5, 0.5]
    assert kept.current.used == 1


def test_a_kept_row_goes_with_its_object_and_serves_the_next_one():
    kept = object_inputs._Kept()
    obj = make_object("short-lived", salience=0.5)
    kept.gathered([obj])
    key = id(obj)
    place = kept.current.refs[key].place
    del obj
    gc.collect()
    assert key not in kept.current.refs and list(kept.current.freed) == [place]
    successor = make_object("successor", salience=0.25)
    assert kept.gathered([successor])[0, 0] == 0.25
    assert kept.current.refs[id(successor)].place == place and kept.current.used == 1


def test_an_object_the_collector_frees_from_a_cycle_leaves_no_row_behind():
    # A request reads a row by the object's id() alone: the entry must go before the address can hold
    # another object, also where only the collector frees the object.
    kept = object_inputs._Kept()
    obj = make_object("cyclic", salience=0.5)
    obj.metadata["self"] = obj
    kept.gathered([obj])
    key = id(obj)
    place = kept.current.places[key]
    del obj
    assert key in kept.current.places  # alive in its cycle until the collector runs
    gc.collect()
    assert key not in kept.current.places and key not in kept.current.refs and list(kept.current.freed) == [place]


def test_at_the_limit_the_rows_start_afresh_and_a_gathering_ends_on_its_own():
    kept = object_inputs._Kept(limit=4)
    first = kept.current
    objects = [make_object(f"limit{i}", salience=i / 10) for i in range(10)]
    assert kept.gathered(objects)[:, 0].tolist() == [i / 10 for i in range(10)]  # one request: past the limit
    assert kept.current is first and len(first.refs) == 10
    more = [make_object(f"more{i}", salience=i / 4) for i in range(3)]
    assert kept.gathered(more)[:, 0].tolist() == [0.0, 0.25, 0.5]  # the next starts a table, and ends on its own
    assert kept.current is not first and not kept.current.refs and len(first.refs) == 13
    assert kept.gathered(objects[::-1])[:, 0].tolist() == [i / 10 for i in range(10)][::-1]
    assert len(kept.current.refs) == 10


def test_threads_reading_two_versions_of_one_memory_each_read_their_own():
    old = make_object("versioned", salience=0.25)
    new = old.model_copy(update={"salience": 0.5, "confidence": 0.5})
    wrong, start = [], threading.Barrier(4)

    def read(version) -> None:
        start.wait()
        for _ in range(2000):
            row = ObjectInputs.of([version], WEIGHTS, BOOSTS, None).table[0]
            if (row[0], row[1]) != (version.salience, version.confidence):
                wrong.append(row)

    threads = [threading.Thread(target=read, args=(version,)) for version in (old, new, old, new)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not wrong


def test_rows_hold_as_the_table_grows():
    objects = [make_object(f"many{i}", salience=i / 5000) for i in range(3000)]
    first = ObjectInputs.of(objects[:10], WEIGHTS, BOOSTS, None).table
    table = ObjectInputs.of(objects, WEIGHTS, BOOSTS, None).table
    assert table[:, 0].tolist() == [i / 5000 for i in range(3000)]
    assert np.array_equal(table[:10], first)


def test_threads_reading_the_same_objects_read_the_same_rows():
    objects = [make_object(f"o{i}", salience=i / 100, days=-i) for i in range(100)]
    expected = ObjectInputs.of(objects, WEIGHTS, BOOSTS, (BASE_TIME, BASE_TIME + timedelta(days=1)))
    results, start = [], threading.Barrier(4)

    def read() -> None:
        start.wait()
        for _ in range(50):
            results.append(ObjectInputs.of(objects, WEIGHTS, BOOSTS, (BASE_TIME, BASE_TIME + timedelta(days=1))))

    threads = [threading.Thread(target=read) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 200
    assert all(np.array_equal(table, expected.table) and np.array_equal(times, expected.times)
               for table, times in results)


def test_visible_everywhere_reads_the_kept_rows_as_the_rules_decide():
    objects = [make_object("plain"), make_object("deprecated", epistemic_type=EpistemicType.DEPRECATED),
               make_object("archived", lifecycle_state="ARCHIVED"),
               make_object("unverified", epistemic_type="UNVERIFIED"),
               make_object("bare", "Tomas", node_type="ENTITY", entity_canonical_name="Tomas")]
    assert visible_everywhere(objects) == [True, False, False, False, False]
    assert visible_everywhere(objects[:1] * 3) == [True] * 3
    assert visible_everywhere([]) == []


def test_a_child_forked_while_a_row_is_added_adds_its_own():
    held = object_inputs._KEPT._lock
    with held:  # as a thread adding a row when another forks
        child = os.fork()
        if child == 0:  # the child: a new object's row, then out at once
            obj = make_object("in-child", salience=0.75)
            os._exit(0 if ObjectInputs.of([obj], WEIGHTS, BOOSTS, None).table[0, 0] == 0.75 else 1)
    deadline = time.monotonic() + 30
    while (done := os.waitpid(child, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    if done[0] == 0:  # stuck on the lock it was forked with
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)
    assert done[0] == child and os.waitstatus_to_exitcode(done[1]) == 0


def test_a_reference_is_published_only_once_its_row_is_written():
    kept = object_inputs._Kept()
    published = []

    class Watching(dict):  # a reader finds a row by the object's id(), without the lock
        def __setitem__(self, key, place):
            memory = next(obj for obj in objects if id(obj) == key)
            published.append(tuple(kept.current.table[place][:2]) == (memory.salience, memory.confidence))
            super().__setitem__(key, place)

    kept.current.places = Watching()
    objects = [make_object(f"watched{number}", salience=0.1 + number / 10, confidence=0.37) for number in range(5)]
    kept.gathered([*objects, objects[0]])
    assert published == [True] * 5
