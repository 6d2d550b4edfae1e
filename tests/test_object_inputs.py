"""An object's own score inputs are read off the object, kept while it lives, and never answer for another."""

from __future__ import annotations

import gc
import math
import threading
import weakref
from datetime import timedelta

import numpy as np

from rms_retrieval.nodes.helpers import object_inputs
from rms_retrieval.nodes.helpers.object_inputs import ObjectInputs
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


def test_no_objects_give_empty_columns():
    table, times = ObjectInputs.of([], WEIGHTS, BOOSTS, None)
    assert table.shape == (0, 5) and times.shape == (0, 3) and times.dtype == np.int64


def test_a_kept_row_goes_with_its_object_and_serves_the_next_one():
    obj = make_object("short-lived", salience=0.5)
    ObjectInputs.of([obj], WEIGHTS, BOOSTS, None)
    key = id(obj)
    ref = object_inputs._KEPT.slots[key]
    place = ref.key[1]
    assert ref() is obj
    del obj, ref
    gc.collect()
    assert key not in object_inputs._KEPT.slots and place in object_inputs._KEPT.freed
    successors = [make_object(f"successor{i}", salience=0.25) for i in range(len(object_inputs._KEPT.freed))]
    assert ObjectInputs.of(successors, WEIGHTS, BOOSTS, None).table[:, 0].tolist() == [0.25] * len(successors)
    assert place in {object_inputs._KEPT.slots[id(successor)].key[1] for successor in successors}


def test_a_row_kept_for_another_object_at_the_same_address_is_never_read():
    gone, here = make_object("gone", salience=0.9), make_object("here", salience=0.1)
    ObjectInputs.of([gone], WEIGHTS, BOOSTS, None)
    # As if `here` had been made where `gone` was: its id() finds a row made for another object.
    kept = object_inputs._KEPT
    place = kept.slots[id(gone)].key[1]
    kept.slots[id(here)] = weakref.KeyedRef(gone, kept._forget, (id(here), place))
    assert ObjectInputs.of([here], WEIGHTS, BOOSTS, None).table[0, 0] == 0.1
    assert kept.slots[id(here)]() is here


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
