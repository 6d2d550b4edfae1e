"""What scoring and filtering read of a stored object alone, as columns of the objects a request reads.

A warm request filters and scores some 430 candidates, nearly all of them objects it read before (a
segment keeps the objects it decodes: stores/engine/segments.py). Each object's salience,
confidence, epistemic type, node type, times and whether every retrieval mode may see it are read
once and kept in a table (`_Kept`, for that very object, while it lives), so a request gathers its
candidates' rows with one index: `ObjectInputs.of` maps types to weights and times to temporal
affinities as arrays (`temporal_affinities`), and `visible_everywhere` tells the filter which
objects only the namespace and time rules decide.
"""

from __future__ import annotations

import collections
import itertools
import operator
import os
import threading
import weakref
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import NamedTuple

import numpy as np

from rms_retrieval.nodes.helpers.eligibility import visible_in_every_mode
from rms_retrieval.nodes.helpers.temporal import micros, temporal_affinities
from rms_retrieval.stores.models import EpistemicType, MemoryObject, NodeType

# Rows kept at most (a table of 4 MB): beyond, the rows start afresh.
KEPT_ROWS = 65_536
_EPISTEMIC_CODES = {member: code for code, member in enumerate(EpistemicType)}
_NODE_TYPE_CODES = {member: code for code, member in enumerate(NodeType)}


# A row of `_Kept.table`: salience, confidence, the epistemic type's and the node type's places in
# their enums, the stated, updated and current (event, else updated) times in epoch microseconds,
# which a float64 holds exactly (below 2**53), and 1.0 where the object is `visible_in_every_mode`.
_WIDTH = 8
_VISIBLE = 7


# What a row reads of an object, in one call: its `stated_time` is its event time, else its creation.
_FIELDS = operator.attrgetter("salience", "confidence", "epistemic_type", "node_type", "event_time", "created_at",
                              "updated_at")


def _rows(objects: Sequence[MemoryObject]) -> list[tuple[float, ...]]:
    """Each object's row. Each distinct time is turned into microseconds once (a session's turns
    share their times): equal datetimes are one instant, whatever their offsets."""
    known: dict[datetime, int] = {}
    rows = []
    for obj in objects:
        salience, confidence, epistemic, node_type, event, created, updated = _FIELDS(obj)
        stated = event or created
        stated_us = known.get(stated)
        if stated_us is None:
            stated_us = known[stated] = micros(stated)
        updated_us = known.get(updated)
        if updated_us is None:
            updated_us = known[updated] = micros(updated)
        rows.append((salience, confidence, _EPISTEMIC_CODES[epistemic], _NODE_TYPE_CODES[node_type], stated_us,
                     updated_us, updated_us if event is None else stated_us, 1.0 if visible_in_every_mode(obj) else 0.0))
    return rows


class _Kept:
    """Each object's row, in one table: a request gathers its candidates' rows with one index.

    `current.refs` holds, by the object's `id()`, a weak reference to it that names that id and its
    row, and `current.places` the row alone, which a request reads (one dictionary lookup per
    object, mapped in C): a row is read only for the very object it was read from, and two copies
    of one memory (two stores, two snapshots) each keep their own. When an object goes, the
    reference's callback drops both entries and frees its row; CPython runs it before the
    object's memory is freed (when its last reference goes, or when the collector clears the weak
    references to a cycle it found unreachable), so an address holds no other object while its
    entry stands, an `id()` never answers for another object and the table holds what lives. At
    `limit` rows a fresh `_Rows` starts: a request still gathering from the old one ends on it,
    whole. Rows are written, and a table grown, under the lock; a callback takes no lock (the
    collector may run it inside a locked section)."""

    def __init__(self, limit: int = KEPT_ROWS) -> None:
        self.limit = limit
        self.current = _Rows()
        self._lock = threading.Lock()

    def gathered(self, objects: Sequence[MemoryObject]) -> np.ndarray:
        """The objects' rows, in order (one row each), looked up by `id()` in C."""
        state = self.current
        places = np.fromiter(map(state.places.get, map(id, objects), itertools.repeat(-1)), dtype=np.intp,
                             count=len(objects))
        new = np.flatnonzero(places < 0).tolist()
        if new:
            places[new] = self._add(state, [objects[position] for position in new])
        return state.table[places]  # after every row is in it

    def _add(self, state: _Rows, objects: Sequence[MemoryObject]) -> list[int]:
        """The rows of `objects`, made for those that have none (an object asked for twice, here or
        by another thread at once, gets one row). A row is in the table before its reference is
        published: a reader takes no lock, and a reference it finds always names a written row."""
        rows = _rows(objects)
        with self._lock:
            if state.used >= self.limit and state is self.current:
                self.current = _Rows()  # the next request starts afresh; this one ends on `state`
            places, fresh, claimed = [], [], {}
            refs, freed = state.refs, state.freed  # only the lock's holder takes from freed
            for obj, row in zip(objects, rows):
                key = id(obj)
                ref = refs.get(key)
                if ref is not None and ref() is obj:
                    places.append(ref.place)
                elif key in claimed:  # asked for twice in this call
                    places.append(claimed[key])
                else:
                    if freed:
                        place = freed.popleft()
                    else:
                        place, state.used = state.used, state.used + 1
                    claimed[key] = place
                    fresh.append((obj, place, row))
                    places.append(place)
            if state.used > len(state.table):
                grown = np.empty((max(2 * len(state.table), state.used), _WIDTH))
                grown[:len(state.table)] = state.table
                state.table = grown
            if fresh:
                state.table[[place for _, place, _ in fresh]] = np.fromiter(
                    itertools.chain.from_iterable(row for _, _, row in fresh), dtype=float,
                    count=len(fresh) * _WIDTH).reshape(len(fresh), _WIDTH)
            for obj, place, _ in fresh:  # published once its row is written
                ref = _Ref(obj, state.forget)
                ref.key, ref.place = id(obj), place
                refs[ref.key] = ref
                state.places[ref.key] = place
        return places


class _Ref(weakref.ref):
    """A weak reference to an object with a row: the object's `id()` and its row."""

    __slots__ = ("key", "place")


class _Rows:
    __slots__ = ("table", "refs", "places", "freed", "used", "forget")

    def __init__(self) -> None:
        self.table = np.empty((1024, _WIDTH))
        self.refs: dict[int, _Ref] = {}
        self.places: dict[int, int] = {}  # each reference's row, by the same key
        self.freed: collections.deque[int] = collections.deque()
        self.used = 0
        self.forget = self._forget  # one callback for every reference

    def _forget(self, ref: _Ref) -> None:
        if self.refs.get(ref.key) is ref:
            del self.places[ref.key]
            del self.refs[ref.key]
        self.freed.append(ref.place)


_KEPT = _Kept()


def _unlocked_in_child() -> None:
    # A fork copies the lock as it was: held, if another thread was adding a row just then.
    _KEPT._lock = threading.Lock()


os.register_at_fork(after_in_child=_unlocked_in_child)


class ObjectInputs(NamedTuple):
    """The objects' own score inputs: `table` a row per object of salience, confidence, epistemic
    weight, node type boost and temporal affinity (nodes/pools.py, OBJECT_COLUMNS); `times` its
    stated, updated and current times in epoch microseconds."""

    table: np.ndarray
    times: np.ndarray

    @classmethod
    def of(cls, objects: Sequence[MemoryObject], epistemic_weights: Mapping[EpistemicType, float],
           node_type_boosts: Mapping[NodeType, float], window: tuple[datetime, datetime] | None) -> ObjectInputs:
        gathered = _KEPT.gathered(objects)
        table = np.empty((len(gathered), 5))
        table[:, :2] = gathered[:, :2]
        codes = gathered[:, 2:4].astype(np.intp)
        table[:, 2] = np.array([epistemic_weights[member] for member in EpistemicType])[codes[:, 0]]
        table[:, 3] = np.array([node_type_boosts.get(member, 1.0) for member in NodeType])[codes[:, 1]]
        times = gathered[:, 4:7].astype(np.int64)
        table[:, 4] = temporal_affinities(times[:, 0], window)
        return cls(table, times)


def visible_everywhere(objects: Sequence[MemoryObject]) -> list[bool]:
    """Whether each object is `visible_in_every_mode` (nodes/helpers/eligibility.py), from its kept row."""
    return (_KEPT.gathered(objects)[:, _VISIBLE] != 0.0).tolist()
