"""A segment's lookups that need a Python object per row, each namespace's made the first time
that namespace is asked about: a row by object id (`RowIndex`) and a session's turns
(`SegmentSessions`). A query reads one namespace, so a store of many pays for the ones it is
asked about, and opening a segment makes none of them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from uuid import UUID

import numpy as np

from rms_retrieval.stores.analysis.positions import SessionKey
from rms_retrieval.stores.engine.segment_parquet import SegmentColumns


def _namespace_rows(columns: SegmentColumns, slices: Mapping[str, tuple[int, int]], namespace: str) -> np.ndarray:
    """The rows of `namespace`, ascending: those of its span (`slices`, first row to one past the
    last) that hold its code. A segment the store writes keeps a namespace's rows together; the
    codes keep any other layout right."""
    span = slices.get(namespace)
    if span is None:
        return np.empty(0, dtype=np.int64)
    start, stop = span
    code = columns.namespaces.index(namespace)
    return start + np.flatnonzero(columns.namespace_codes[start:stop] == code)


class RowIndex:
    """Row by (namespace, object id) over every row of a segment, each namespace's dictionary
    built the first time that namespace is asked about: a query reads one namespace."""

    def __init__(self, columns: SegmentColumns, slices: Mapping[str, tuple[int, int]]) -> None:
        self._columns, self._slices = columns, slices
        self._by_namespace: dict[str, dict[int, int]] = {}
        self._ids: dict[int, UUID] = {}

    def id_at(self, row: int) -> UUID:
        """The object id of `row` (each made once: searches ask for the same rows again)."""
        found = self._ids.get(row)
        if found is None:
            found = self._ids[row] = UUID(bytes=self._columns.ids[row].tobytes())
        return found

    def row(self, namespace: str, object_id: UUID) -> int | None:
        rows = self._by_namespace.get(namespace)
        if rows is None:
            rows = self._by_namespace[namespace] = self._rows_of(namespace)  # racing builds are equal
        return rows.get(object_id.int)

    def _rows_of(self, namespace: str) -> dict[int, int]:
        positions = _namespace_rows(self._columns, self._slices, namespace)
        if not len(positions):
            return {}
        start, stop = int(positions[0]), int(positions[-1]) + 1
        ints = self._columns.id_ints(start, stop)
        if len(positions) == stop - start:
            return dict(zip(ints, range(start, stop)))
        return {ints[position - start]: position for position in positions.tolist()}


class SegmentSessions(Mapping[SessionKey, list[tuple[int, int]]]):
    """(session_seq, row) of each session's live rows in one segment, in row order, by session key;
    a namespace's sessions are gathered the first time one of them is asked for."""

    def __init__(self, columns: SegmentColumns, slices: Mapping[str, tuple[int, int]], dead: frozenset[int]) -> None:
        self._columns, self._slices, self._dead = columns, slices, dead
        self._by_namespace: dict[str, dict[SessionKey, list[tuple[int, int]]]] = {}

    def _of(self, namespace: str) -> dict[SessionKey, list[tuple[int, int]]]:
        found = self._by_namespace.get(namespace)
        if found is None:
            found = self._by_namespace[namespace] = self._gathered(namespace)  # racing builds are equal
        return found

    def _gathered(self, namespace: str) -> dict[SessionKey, list[tuple[int, int]]]:
        rows = _namespace_rows(self._columns, self._slices, namespace)
        if not len(rows):
            return {}
        columns, start = self._columns, int(rows[0])
        length = int(rows[-1]) + 1 - start
        member = np.zeros(length, dtype=bool)
        member[rows - start] = True
        members = member.tolist()
        sessions: dict[SessionKey, list[tuple[int, int]]] = defaultdict(list)
        for offset, (owner, scope, session_id, seq) in enumerate(zip(
                columns.owners.slice(start, length).to_pylist(), columns.scopes.slice(start, length).to_pylist(),
                columns.session_ids.slice(start, length).to_pylist(), columns.session_seqs.slice(start, length).to_pylist())):
            position = start + offset
            if session_id is not None and seq is not None and members[offset] and position not in self._dead:
                sessions[(namespace, owner, scope, session_id)].append((seq, position))
        return dict(sessions)

    def __getitem__(self, key: SessionKey) -> list[tuple[int, int]]:
        return self._of(key[0])[key]

    def get(self, key: SessionKey, default=None):
        return self._of(key[0]).get(key, default)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, tuple) and len(key) == 4 and key in self._of(key[0])

    def __iter__(self):
        return (key for namespace in self._slices for key in self._of(namespace))

    def __len__(self) -> int:
        return sum(len(self._of(namespace)) for namespace in self._slices)
