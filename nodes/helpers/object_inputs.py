"""The score inputs that depend on a stored object alone, as columns of the objects a request scores.

A warm request scores some 430 candidates, nearly all of them objects it scored before (a segment
keeps the objects it decodes: stores/engine/segments.py). `ObjectInputs.of` reads each object's
salience, confidence, epistemic type, node type and times once and keeps them beside the object
in a table (`_Kept`, by the object's identity, the row freed when the object goes), so a request
gathers its candidates' rows with one index and maps types to weights and times to temporal
affinities as arrays (`temporal_affinities`).
"""

from __future__ import annotations

import collections
import threading
import weakref
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import NamedTuple

import numpy as np

from rms_retrieval.nodes.helpers.temporal import micros, temporal_affinities
from rms_retrieval.stores.models import EpistemicType, MemoryObject, NodeType

_EPISTEMIC_CODES = {member: code for code, member in enumerate(EpistemicType)}
_NODE_TYPE_CODES = {member: code for code, member in enumerate(NodeType)}


# A row of `_Kept.table`: salience, confidence, the epistemic type's and the node type's places in
# their enums, and the stated, updated and current (event, else updated) times in epoch
# microseconds, which a float64 holds exactly (below 2**53).
_WIDTH = 7


def _row(obj: MemoryObject) -> tuple[float, ...]:
    stated, updated = micros(obj.stated_time), micros(obj.updated_at)
    return (obj.salience, obj.confidence, _EPISTEMIC_CODES[obj.epistemic_type], _NODE_TYPE_CODES[obj.node_type],
            stated, updated, updated if obj.event_time is None else micros(obj.event_time))


class _Kept:
    """Each object's row, in one table: a request gathers its candidates' rows with one index.

    `slots` holds, by the object's `id()`, a reference to the object keyed by that id and its row;
    its callback, when the object goes, drops the entry (so an `id()` never answers for another
    object) and frees the row for a next object. Rows are written, and the table grown, under the
    lock, before an entry names them; the callback takes no lock (it may run inside a locked
    section, when the collector runs there)."""

    def __init__(self) -> None:
        self.table = np.empty((1024, _WIDTH))
        self.slots: dict[int, weakref.KeyedRef] = {}  # its key: (the id(), the row)
        self.freed: collections.deque[int] = collections.deque()
        self.used = 0
        self._lock = threading.Lock()

    def rows(self, objects: Sequence[MemoryObject]) -> np.ndarray:
        """The objects' rows of `table`, in order."""
        found = self.slots.get
        places = []
        for obj in objects:
            ref = found(id(obj))
            places.append(ref.key[1] if ref is not None and ref() is obj else self._add(obj))
        return np.array(places, dtype=np.intp)

    def _add(self, obj: MemoryObject) -> int:
        row = _row(obj)
        with self._lock:
            try:
                place = self.freed.popleft()
            except IndexError:
                if self.used == len(self.table):
                    grown = np.empty((2 * len(self.table), _WIDTH))
                    grown[:self.used] = self.table
                    self.table = grown
                place, self.used = self.used, self.used + 1
            self.table[place] = row
            key = id(obj)
            self.slots[key] = weakref.KeyedRef(obj, self._forget, (key, place))
        return place

    def _forget(self, ref: weakref.KeyedRef) -> None:
        key, place = ref.key
        if self.slots.get(key) is ref:
            del self.slots[key]
        self.freed.append(place)


_KEPT = _Kept()


class ObjectInputs(NamedTuple):
    """The objects' own score inputs: `table` a row per object of salience, confidence, epistemic
    weight, node type boost and temporal affinity (nodes/pools.py, OBJECT_COLUMNS); `times` its
    stated, updated and current times in epoch microseconds."""

    table: np.ndarray
    times: np.ndarray

    @classmethod
    def of(cls, objects: Sequence[MemoryObject], epistemic_weights: Mapping[EpistemicType, float],
           node_type_boosts: Mapping[NodeType, float], window: tuple[datetime, datetime] | None) -> ObjectInputs:
        kept = _KEPT.rows(objects)
        gathered = _KEPT.table[kept]  # the table as it is once every row is in it
        table = np.empty((len(kept), 5))
        table[:, :2] = gathered[:, :2]
        codes = gathered[:, 2:4].astype(np.intp)
        table[:, 2] = np.array([epistemic_weights[member] for member in EpistemicType])[codes[:, 0]]
        table[:, 3] = np.array([node_type_boosts.get(member, 1.0) for member in NodeType])[codes[:, 1]]
        times = gathered[:, 4:].astype(np.int64)
        table[:, 4] = temporal_affinities(times[:, 0], window)
        return cls(table, times)
