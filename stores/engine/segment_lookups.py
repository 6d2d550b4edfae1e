"""A segment's lookups by namespace, each namespace's made as arrays the first time that
namespace is asked about: a row by object id (`RowIndex`) and a session's turns
(`SegmentSessions`). A query reads one namespace, so a store of many pays for the ones it is
asked about, opening a segment makes none of them, and none holds a Python object per row.
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from typing import Any
from uuid import UUID

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rms_retrieval.stores.analysis.positions import SessionKey
from rms_retrieval.stores.engine.segment_parquet import SegmentColumns
from rms_retrieval.stores.engine.codec import record_fields
from rms_retrieval.stores.indexes.adjacency import UuidColumn, key_ints, uuid_keys
from rms_retrieval.stores.indexes.entity_graph import names_of


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


def _texts(dictionary: pa.Array, codes: np.ndarray) -> dict[int, str]:
    """The texts of the distinct `codes` by code (-1, a null, is not there: None), only those a
    namespace's sessions use, not the segment's every value."""
    used = np.unique(codes[codes >= 0])
    return dict(zip(used.tolist(), dictionary.take(pa.array(used)).to_pylist()))


class RowIndex:
    """Row by (namespace, object id) over every row of a segment, as arrays: each namespace's ids
    sorted (16-byte strings, compared as bytes) beside their rows, made the first time that
    namespace is asked about. A repeated id (an object's older version and its newer one, both
    kept by a merge) answers with its last row."""

    def __init__(self, columns: SegmentColumns, slices: Mapping[str, tuple[int, int]]) -> None:
        self._columns, self._slices = columns, slices
        self._by_namespace: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self._ids = UuidColumn(columns.ids)

    def id_at(self, row: int) -> UUID:
        """The object id of `row` (each made once: searches ask for the same rows again)."""
        return self._ids.at(row)

    def ids_at(self, rows: np.ndarray) -> list[UUID]:
        """`id_at` of each of `rows`, in order."""
        return self._ids.at_each(rows)

    def row(self, namespace: str, object_id: UUID) -> int | None:
        return self.rows(namespace, [object_id])[0]

    def rows(self, namespace: str, object_ids: Sequence[UUID], dead: np.ndarray | None = None) -> list[int | None]:
        """The row of each of `object_ids` in `namespace` (None where it holds no such id, or `dead`,
        per row True where deleted, names its row)."""
        rows = self.key_rows(namespace, uuid_keys(object_ids).view("S16"), dead)
        return [None if row < 0 else row for row in rows.tolist()]

    def key_rows(self, namespace: str, keys: np.ndarray, dead: np.ndarray | None = None) -> np.ndarray:
        """`rows` of ids given as 16-byte strings (`uuid_keys` viewed as "S16"), -1 for None."""
        found = self._by_namespace.get(namespace)
        if found is None:
            found = self._by_namespace[namespace] = self._sorted(namespace)  # racing builds are equal
        ids, rows = found
        if not len(ids) or not len(keys):
            return np.full(len(keys), -1, dtype=np.int64)
        at = np.maximum(np.searchsorted(ids, keys, side="right") - 1, 0)  # a key before every id misses at 0
        found_rows = np.where(ids[at] == keys, rows[at], -1)
        return found_rows if dead is None else np.where((found_rows >= 0) & dead[found_rows], -1, found_rows)

    def _sorted(self, namespace: str) -> tuple[np.ndarray, np.ndarray]:
        positions = _namespace_rows(self._columns, self._slices, namespace)
        ids = self._columns.ids[positions].view("S16")
        order = np.argsort(ids, kind="stable")  # a repeated id keeps its rows in row order
        return ids[order], positions[order]


# A namespace of at most this many rows in a segment (what a one-turn write or a small merge
# leaves) has its sessions gathered row by row in Python: Arrow's kernels cost more to set up.
FEW_ROWS = 32


def _few_gathered(columns: SegmentColumns, namespace: str, rows: np.ndarray, dead: np.ndarray | None
                  ) -> Gathered:
    """`SegmentSessions._gathered` for a namespace's few rows (ascending): the live ones with a
    session id and seq, each session's in row order, sessions in the order they start."""
    members: dict[SessionKey, list[tuple[int, int]]] = {}
    for row in rows.tolist():
        session_id, seq = columns.session_ids[row].as_py(), columns.session_seqs[row].as_py()
        if session_id is None or seq is None or (dead is not None and dead[row]):
            continue
        key = (namespace, columns.owners[row].as_py(), columns.scopes[row].as_py(), session_id)
        members.setdefault(key, []).append((seq, row))
    runs: dict[SessionKey, tuple[int, int]] = {}
    seqs: list[int] = []
    ordered: list[int] = []
    for key, found in members.items():
        runs[key] = (len(ordered), len(ordered) + len(found))
        seqs += [seq for seq, _ in found]
        ordered += [row for _, row in found]
    return _Runs(runs), np.asarray(seqs, dtype=np.int64), np.asarray(ordered, dtype=np.int64)


class _Runs:
    """Each session's run of a namespace's gathered arrays, by session key: the runs as gathered
    (`spans`, sessions in the order they start) and, once rows were deleted since, how many of the
    gathered rows before each position are still live (`before`), through which a run is read
    when it is asked for: a delete costs the namespace's rows as arrays, never a pass over its
    sessions in Python (2,000 sessions of a 40,000-turn namespace)."""

    __slots__ = ("spans", "before")

    def __init__(self, spans: dict[SessionKey, tuple[int, int]], before: np.ndarray | None = None) -> None:
        self.spans, self.before = spans, before

    def get(self, key: object) -> tuple[int, int] | None:
        span = self.spans.get(key)
        if span is None or self.before is None:
            return span
        start, end = int(self.before[span[0]]), int(self.before[span[1]])
        return (start, end) if end > start else None  # emptied: no session any more

    def __contains__(self, key: object) -> bool:
        return self.get(key) is not None

    def shrunk(self, before: np.ndarray) -> _Runs:
        """These runs over the arrays less some rows (`before`: the kept rows before each position)."""
        return _Runs(self.spans, before if self.before is None else before[self.before])

    def ordered(self, rows: np.ndarray) -> list[SessionKey]:
        """The sessions in the order they start (`rows`: the arrays' rows, as shrunk), emptied ones left out."""
        if self.before is None:
            return list(self.spans)
        keys = list(self.spans)
        bounds = self.before[np.fromiter(itertools.chain.from_iterable(self.spans.values()), dtype=np.int64,
                                         count=2 * len(keys)).reshape(-1, 2)]
        live = np.flatnonzero(bounds[:, 1] > bounds[:, 0])
        return [keys[index] for index in live[np.argsort(rows[bounds[live, 0]], kind="stable")].tolist()]


# A namespace's sessions in one segment: each session's run of the two arrays, the sessions in
# the order they start; each run's seqs and rows (in row order).
Gathered = tuple[_Runs, np.ndarray, np.ndarray]


def _without_dead(gathered: Gathered, dead: np.ndarray | None) -> Gathered:
    """`gathered` less the rows `dead` marks: each run shrunk when read (`_Runs`), an emptied one gone."""
    runs, seqs, rows = gathered
    if dead is None or not dead[rows].any():
        return gathered
    kept = ~dead[rows]
    return runs.shrunk(np.r_[0, np.cumsum(kept)]), seqs[kept], rows[kept]


class SegmentSessions(Mapping[SessionKey, list[tuple[int, int]]]):
    """(session_seq, row) of each session's live rows in one segment, in row order, by session key.
    A namespace's sessions are gathered the first time one of them is asked for, as two arrays
    (its sessions' rows one session after another, and their positions) and each session's run of
    them; a session's list is made when it is asked for."""

    def __init__(self, columns: SegmentColumns, slices: Mapping[str, tuple[int, int]], dead: np.ndarray | None,
                 earlier: Mapping[str, Gathered] | None = None) -> None:
        """`earlier`: namespaces gathered with fewer rows deleted, each filtered when first asked for."""
        self._columns, self._slices, self._dead = columns, slices, dead
        self._by_namespace: dict[str, Gathered] = {}
        self._earlier = earlier or {}

    def with_dead(self, dead: np.ndarray | None) -> SegmentSessions:
        """These sessions with more rows deleted (`dead`, per row): what is gathered so far is
        filtered when asked for, not gathered again (a question right after an update)."""
        return SegmentSessions(self._columns, self._slices, dead, {**self._earlier, **self._by_namespace})

    def _of(self, namespace: str) -> Gathered:
        found = self._by_namespace.get(namespace)
        if found is None:
            earlier = self._earlier.get(namespace)
            found = self._gathered(namespace) if earlier is None else _without_dead(earlier, self._dead)
            self._by_namespace[namespace] = found  # racing builds are equal
        return found

    def _gathered(self, namespace: str) -> Gathered:
        rows = _namespace_rows(self._columns, self._slices, namespace)
        columns = self._columns
        if len(rows) <= FEW_ROWS:
            return _few_gathered(columns, namespace, rows, self._dead)
        keys = [columns.owners, columns.scopes, columns.session_ids]
        taken = pa.array(rows)
        seqs = columns.session_seqs.take(taken)
        wanted = pc.and_(pc.is_valid(keys[2].take(taken)), pc.is_valid(seqs)).to_numpy(zero_copy_only=False)
        if self._dead is not None:
            wanted &= ~self._dead[rows]
        rows = rows[wanted]
        if not len(rows):
            return _Runs({}), np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
        taken = pa.array(rows)
        encoded = [column.take(taken) for column in keys]  # codes into the segment's distinct values
        codes = [pc.fill_null(part.indices, -1).to_numpy(zero_copy_only=False).astype(np.int64) for part in encoded]
        sizes = [len(part.dictionary) + 1 for part in encoded]
        session = (codes[0] + 1) * sizes[1] * sizes[2] + (codes[1] + 1) * sizes[2] + (codes[2] + 1)
        order = np.lexsort((rows, session))  # by session, then row
        session, rows = session[order], rows[order]
        seqs = columns.session_seqs.take(pa.array(rows)).to_numpy(zero_copy_only=False).astype(np.int64)
        starts = np.flatnonzero(np.r_[True, session[1:] != session[:-1]])
        ends = np.r_[starts[1:], len(session)]
        by_first_row = np.argsort(rows[starts], kind="stable")  # sessions in the order they start
        starts, ends = starts[by_first_row], ends[by_first_row]
        first = order[starts]  # each session's first row, as a position among the taken rows
        texts = [_texts(part.dictionary, part_codes[first]) for part, part_codes in zip(encoded, codes)]
        owners, scopes, sessions = ([names.get(code) for code in part_codes[first].tolist()]
                                    for names, part_codes in zip(texts, codes))
        runs = {(namespace, owner, scope, session): (start, end)
                for owner, scope, session, start, end in zip(owners, scopes, sessions, starts.tolist(), ends.tolist())}
        return _Runs(runs), seqs, rows

    def __getitem__(self, key: SessionKey) -> list[tuple[int, int]]:
        found = self.get(key)
        if found is None:
            raise KeyError(key)
        return found

    def get(self, key: SessionKey, default=None):
        runs, seqs, rows = self._of(key[0])
        run = runs.get(key)
        if run is None:
            return default
        start, end = run
        return list(zip(seqs[start:end].tolist(), rows[start:end].tolist()))

    def __contains__(self, key: object) -> bool:
        return isinstance(key, tuple) and len(key) == 4 and key in self._of(key[0])[0]

    def __iter__(self):
        return (key for namespace in self._slices for key in self._ordered(namespace))

    def __len__(self) -> int:
        return sum(len(self._ordered(namespace)) for namespace in self._slices)

    def _ordered(self, namespace: str) -> list[SessionKey]:
        runs, _, rows = self._of(namespace)
        return runs.ordered(rows)


def entity_row_entries(segment: Any, namespace: str, rows: Sequence[int]) -> Iterator[tuple[int, list[str], bool]]:
    """(id's integer, names, extracted) of the ENTITY `rows` of `namespace` in `segment` (a
    `LoadedSegment`), as `KnownNames.of_entries` takes them, read from its columns with no object
    made: the names as `entity_names` reads them for a catalog, and whether `metadata["extracted"]`
    is true from the records that hold the word (JSON keeps a key's text as it is)."""
    if not len(rows):
        return iter(())
    names, records = segment.entity_names(namespace, rows), segment.columns.records
    marked = np.flatnonzero(records.containing(rows, '"extracted"')).tolist()
    extracted = {index for index in marked if (record_fields(records.at(rows[index])).get("metadata") or {}).get("extracted")}
    return ((number, names_of(canonical, names.aliases.get(index)), index in extracted)
            for index, (number, canonical) in enumerate(zip(key_ints(names.ids), names.canonicals.to_pylist())))


def scope_entity_entries(split: Iterable[tuple[Any, Any]], namespace: str, added: Collection[str] | None = None
                         ) -> Iterator[tuple[int, list[str], bool]]:
    """`entity_row_entries` of `namespace`'s live ENTITY rows in each segment of `split` ((segment,
    NamespaceRows) pairs; of the segments whose keys `added` holds alone, if given), unsorted: a
    name index does not depend on the order its names are added."""
    return itertools.chain.from_iterable(entity_row_entries(segment, namespace, rows.entity_rows.get(namespace, ()))
                                         for segment, rows in split if added is None or segment.entry.key in added)
