"""The Parquet form of a segment's rows, written with pyarrow and read by DuckDB.

A small write must not pay for a DuckDB connection, so segment files are built as Arrow tables
with one fixed schema and serialised in memory (the bytes are hashed for the manifest, then
written and fsynced once). Aggregation and enumeration query them with DuckDB as Arrow tables
read from checked bytes: ids are Parquet UUIDs, JSON columns carry the JSON logical type and times
are UTC microsecond timestamps, as DuckDB itself writes them. The schema is fixed so that every
file of a store has the same column types and the tables of all segments concatenate: a text
column that happened to be all NULL in one write must not become an INTEGER column there.

Each row's `record` (the whole object as JSON) is written to the segment's index file rather than
to its Parquet file (`record_arrays`): there it is memory-mapped, so a reader decodes the rows it
reads and nothing else, and every process that reads the store shares the pages
(`MappedRecords`). Segments written before keep the records in their Parquet file, read one row
group at a time (`Records`).
"""

from __future__ import annotations

import threading
from bisect import bisect_right
from collections.abc import Callable, Sequence
from itertools import accumulate
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from rms_retrieval.stores.engine.codec import ASSERTION_NORM_COLUMNS, row_values
from rms_retrieval.stores.indexes.adjacency import key_ints, uuid_of
from rms_retrieval.stores.models import MemoryObject

_TEXT = pa.string()
_JSON = pa.json_()
_TIME = pa.timestamp("us", tz="UTC")
TIME_COLUMNS = ("created_at", "updated_at", "event_time", "valid_from", "valid_to")
OBJECTS_SCHEMA = pa.schema([
    ("row", pa.int64()), ("id", pa.uuid()), ("namespace", _TEXT), ("owner", _TEXT), ("scope", _TEXT),
    ("session_id", _TEXT), ("session_seq", pa.int64()), ("node_type", _TEXT), ("content", _TEXT),
    ("entity_canonical_name", _TEXT), ("epistemic_type", _TEXT), ("confidence", pa.float64()),
    ("salience", pa.float64()), ("lifecycle_state", _TEXT), *((name, _TIME) for name in TIME_COLUMNS),
    ("evidence_refs", _JSON), ("source_ref", _TEXT), ("metadata", _JSON), ("assertion", _JSON), ("quantity", _JSON),
    *((name, _TEXT) for name in ASSERTION_NORM_COLUMNS), ("pinned", pa.bool_()), ("record", _TEXT),
])
# What a reader keeps in memory of each row (`SegmentColumns`); `record` is read on first use.
LOADED_COLUMNS = ("id", "namespace", "owner", "scope", "session_id", "node_type", "pinned", "session_seq",
                  "entity_canonical_name")
# Of those, the texts a segment holds few distinct values of: kept as codes into each segment's
# distinct values (4 bytes a row, not the text), read that way from the Parquet dictionary pages.
CODED_COLUMNS = ("namespace", "owner", "scope", "session_id", "node_type")
_COMPRESSION = "zstd"
# Rows per Parquet row group: what a reader decodes to read one record of a segment written with
# its records in the Parquet file (`Records`).
ROW_GROUP_ROWS = 8192


def objects_table(rows: Sequence[MemoryObject]) -> pa.Table:
    """The rows, in the order given, as one table of OBJECTS_SCHEMA."""
    values = [row_values(memory) for memory in rows]
    columns: dict[str, Any] = {"row": pa.array(range(len(rows)), type=pa.int64()),
                               "id": pa.array([memory.id.bytes for memory in rows], type=pa.uuid())}
    for name in TIME_COLUMNS:
        columns[name] = pa.array([getattr(memory, name) for memory in rows], type=_TIME)
    columns["pinned"] = pa.array([memory.is_pinned for memory in rows], type=pa.bool_())
    for field in OBJECTS_SCHEMA:
        if field.name not in columns:
            columns[field.name] = pa.array([row[field.name] for row in values], type=field.type)
    return pa.Table.from_pydict(columns, schema=OBJECTS_SCHEMA)


def parquet_bytes(table: pa.Table) -> bytes:
    """The table as one Parquet file, in memory."""
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression=_COMPRESSION, row_group_size=ROW_GROUP_ROWS)
    return sink.getvalue().to_pybytes()


def read_table(data: Any, columns: Sequence[str] | None = None, coded: Sequence[str] = ()) -> pa.Table:
    """A Parquet file's table from its (verified) bytes (any buffer: a memory map too), read as one file (`ParquetFile`): not
    through `pq.read_table`'s dataset layer, which a process sets up on its first call. `coded`: columns read as
    dictionary arrays."""
    source = pa.BufferReader(pa.py_buffer(data))
    return pq.ParquetFile(source, read_dictionary=list(coded) or None).read(columns=list(columns) if columns is not None else None)


def _coded(column: pa.ChunkedArray) -> pa.DictionaryArray:
    """One dictionary array of `column` (text, or dictionary arrays of a file's row groups)."""
    if pa.types.is_dictionary(column.type):
        return column.unify_dictionaries().combine_chunks()
    return column.combine_chunks().dictionary_encode()


def conformed(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """`table` with `schema`'s column types: files DuckDB wrote before the schema was fixed typed
    an all-NULL text column as INTEGER."""
    columns = []
    for field in schema:
        column = table.column(field.name)
        if column.type != field.type:
            column = pa.nulls(len(column), field.type) if column.null_count == len(column) else column.cast(field.type)
        columns.append(column)
    return pa.Table.from_arrays(columns, schema=schema)


def record_arrays(records: pa.Array | pa.ChunkedArray) -> dict[str, np.ndarray]:
    """The records as the index file keeps them: `record_bytes`, every record's UTF-8 end to end,
    and `record_offsets`, where each starts (one offset more than rows)."""
    array = records.combine_chunks() if isinstance(records, pa.ChunkedArray) else records
    if array.null_count:
        raise ValueError("a row has no record")
    array = array.cast(pa.large_string())
    _, offsets_buffer, data_buffer = array.buffers()
    offsets = np.frombuffer(offsets_buffer, dtype=np.int64, count=len(array) + 1, offset=array.offset * 8)
    data = np.frombuffer(data_buffer, dtype=np.uint8) if data_buffer is not None else np.empty(0, dtype=np.uint8)
    return {"record_offsets": offsets - offsets[0], "record_bytes": data[offsets[0]:offsets[-1]]}


def without_records(table: pa.Table) -> pa.Table:
    """`table` with empty `record` and `content` columns: what the Parquet file of a segment holds
    when its index file holds the records (each record holds the content; no SQL reads it)."""
    for name in ("record", "content"):
        table = table.set_column(table.schema.get_field_index(name), name, pa.nulls(table.num_rows, _TEXT))
    return table


# `MappedRecords.containing` searches the bytes between its first and last rows where they are at
# most this many times the rows' own, and this many bytes more.
_SPAN_FACTOR, _SPAN_SLACK = 4, 1 << 20


def consecutive_run(positions: np.ndarray, size: int) -> slice | None:
    """The slice `positions` cover where they are a run of consecutive positions below `size` (a
    namespace's rows, or its edges, in one segment usually are), so that columns are read as
    views; None where they are not (or are none)."""
    if len(positions) and 0 <= positions[0] and positions[-1] < size and bool(np.all(np.diff(positions) == 1)):
        return slice(int(positions[0]), int(positions[-1]) + 1)
    return None


def _containing(records: pa.Array, positions: Sequence[int], text: str) -> np.ndarray:
    """Whether the record of each of `positions` contains `text`: a run of rows searched in place,
    other positions through a copy of their records."""
    at = np.asarray(positions, dtype=np.int64)
    run = consecutive_run(at, len(records))
    chosen = records.take(pa.array(at, type=pa.int64())) if run is None else records.slice(run.start, len(at))
    return pc.match_substring(chosen, text).to_numpy(zero_copy_only=False).astype(bool, copy=False)


class MappedRecords:
    """Each row's JSON record, from the two `record_arrays` of a memory-mapped index file: a read
    decodes the one record it asks for. `ready` runs before every read (the index file's sha256
    check, which returns at once after the first)."""

    def __init__(self, offsets: np.ndarray, data: np.ndarray, ready: Callable[[], object]) -> None:
        if offsets.ndim != 1 or data.ndim != 1 or offsets.dtype != np.int64 or data.dtype != np.uint8:
            raise ValueError("the record arrays are not one-dimensional int64 offsets and uint8 bytes")
        self._offsets, self._data, self._ready = offsets, data, ready

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def at(self, position: int) -> str:
        """The JSON record of row `position`."""
        self._ready()
        if not 0 <= position < len(self._offsets) - 1:
            raise IndexError(f"row {position} of {len(self._offsets) - 1}")
        return self._data[self._offsets[position]:self._offsets[position + 1]].tobytes().decode()

    def containing(self, positions: Sequence[int], text: str) -> np.ndarray:
        """Whether the record of each of `positions` contains `text`, in one pass over them: the
        bytes from the first of them to the last searched by `bytes.find` where they are not many
        more than the records' own (a namespace's rows lie together: a tenth of Arrow's
        `match_substring` time on a LongMemEval-S namespace's 2,574 entity records), else by Arrow
        over a copy of those records."""
        self._ready()
        at = np.asarray(positions, dtype=np.int64)
        low, high = (int(at.min()), int(at.max())) if len(at) else (0, -1)
        if not text or not len(at) or low < 0 or high >= len(self):
            return _containing(self._whole(), at, text)
        offsets = self._offsets[low:high + 2]
        if offsets[-1] > len(self._data) or np.any(np.diff(offsets) < 0):
            raise ValueError("the record offsets do not run through the record bytes")
        start, end = int(offsets[0]), int(offsets[-1])
        if end - start > _SPAN_FACTOR * int((self._offsets[at + 1] - self._offsets[at]).sum()) + _SPAN_SLACK:
            return _containing(self._whole(), at, text)
        needle, block, hits = text.encode(), self._data[start:end].tobytes(), []
        hit = block.find(needle)
        while hit >= 0:  # every match, overlapping ones too: one may span two records, the next lie in one
            hits.append(hit)
            hit = block.find(needle, hit + 1)
        found = np.zeros(high - low + 1, dtype=bool)
        if hits:
            where = np.asarray(hits, dtype=np.int64) + start
            rows = np.searchsorted(offsets, where, side="right") - 1
            found[rows[where + len(needle) <= offsets[rows + 1]]] = True  # a match that lies within one record
        return found[at - low]

    def array(self) -> pa.Array:
        """Every record, as a string array over the mapped bytes (for SQL over the rows)."""
        self._ready()
        return self._whole().cast(_TEXT)

    def _whole(self) -> pa.LargeStringArray:
        if len(self._data) and (self._offsets[-1] != len(self._data) or np.any(np.diff(self._offsets) < 0)):
            raise ValueError("the record offsets do not run through the record bytes")
        return pa.LargeStringArray.from_buffers(len(self), pa.py_buffer(self._offsets), pa.py_buffer(self._data))


class Records:
    """Each row's JSON record, as Arrow arrays: given whole (a segment just written), or read from
    the segment's verified Parquet bytes one row group at a time, the first time a row of that
    group is decoded. An open reads the small columns only; a query reads the groups of the rows
    it packs, not a million records it never looks at."""

    def __init__(self, array: pa.Array | None = None, data: Any = None) -> None:
        """`array`: every record; or `data`: the Parquet file's bytes (any buffer)."""
        if (array is None) == (data is None):
            raise ValueError("Records needs the record array or the Parquet bytes to read it from, not both")
        self._groups: dict[int, pa.Array] = {}
        self._starts = [0]
        self._file: pq.ParquetFile | None = None
        if array is not None:
            self._groups[0] = array
        else:
            self._file = pq.ParquetFile(pa.BufferReader(pa.py_buffer(data)))
            metadata = self._file.metadata
            self._starts = [0, *accumulate(metadata.row_group(group).num_rows for group in range(metadata.num_row_groups))][:-1]
        self._lock = threading.Lock()

    def at(self, position: int) -> str:
        """The JSON record of row `position`."""
        group = bisect_right(self._starts, position) - 1
        array = self._groups.get(group)
        if array is None:
            with self._lock:
                array = self._groups.get(group)
                if array is None:
                    array = self._groups[group] = self._file.read_row_group(group, columns=["record"]).column(0).combine_chunks()
        return array[position - self._starts[group]].as_py()

    def containing(self, positions: Sequence[int], text: str) -> np.ndarray:
        """Whether the record of each of `positions` contains `text`."""
        if self._file is None:
            return _containing(self._groups[0], positions, text)
        return np.fromiter((text in self.at(position) for position in positions), dtype=bool, count=len(positions))

    def array(self) -> pa.Array:
        """Every record of a segment just written, given whole (a segment read from its objects
        file has them in that file's own `record` column)."""
        if self._file is not None:
            raise ValueError("records read from the objects file are in its record column")
        return self._groups[0]


@dataclass(frozen=True)
class SegmentColumns:
    """What a reader keeps of a segment's rows, as arrays: no Python object per row. Ids are
    16-byte big-endian UUIDs (`ids`, dtype V16); namespaces are codes into `namespaces`, node
    types, owners, scopes and session ids dictionary arrays (CODED_COLUMNS)."""

    ids: np.ndarray
    namespaces: tuple[str, ...]
    namespace_codes: np.ndarray
    node_types: pa.DictionaryArray
    pinned: np.ndarray
    owners: pa.DictionaryArray
    scopes: pa.DictionaryArray
    session_ids: pa.DictionaryArray
    session_seqs: pa.Array
    entity_names: pa.Array
    records: Records | MappedRecords

    def __len__(self) -> int:
        return len(self.ids)

    def id_ints(self, start: int = 0, stop: int | None = None) -> list[int]:
        """The ids of rows `start`..`stop` as the integers `UUID.int` gives."""
        return key_ints(self.ids[start:stop])

    def uuids(self) -> list[UUID]:
        return list(map(uuid_of, self.id_ints()))

    def namespace_list(self) -> list[str]:
        names = self.namespaces
        return [names[code] for code in self.namespace_codes.tolist()]

    def rows_by_key(self) -> dict[tuple[str, UUID], int]:
        """Row by (namespace, object id), every row (a later row wins a repeated key)."""
        return {key: row for row, key in enumerate(zip(self.namespace_list(), self.uuids()))}


def segment_columns(table: pa.Table, records: Records | MappedRecords | None = None) -> SegmentColumns:
    """The LOADED_COLUMNS of an objects table (and its `record` column, unless `records` reads it
    later) as arrays."""
    ids = table.column("id").combine_chunks()
    if isinstance(ids, pa.ExtensionArray):
        ids = ids.storage
    if ids.null_count:
        raise ValueError("an object id is missing")
    id_array = np.frombuffer(ids.buffers()[1], dtype="V16", count=len(ids), offset=ids.offset * 16)
    namespaces = _coded(table.column("namespace"))
    return SegmentColumns(
        ids=id_array,
        namespaces=tuple(namespaces.dictionary.to_pylist()),
        namespace_codes=namespaces.indices.to_numpy(zero_copy_only=False).astype(np.int32),
        node_types=_coded(table.column("node_type")),
        pinned=pc.fill_null(table.column("pinned").combine_chunks(), False).to_numpy(zero_copy_only=False),
        owners=_coded(table.column("owner")),
        scopes=_coded(table.column("scope")),
        session_ids=_coded(table.column("session_id")),
        session_seqs=table.column("session_seq").combine_chunks(),
        entity_names=table.column("entity_canonical_name").combine_chunks(),
        records=records if records is not None else Records(array=table.column("record").combine_chunks()),
    )
