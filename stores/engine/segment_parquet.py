"""The Parquet form of a segment's rows, written with pyarrow and read by DuckDB.

A small write must not pay for a DuckDB connection, so segment files are built as Arrow tables
with one fixed schema and serialised in memory (the bytes are hashed for the manifest, then
written and fsynced once). Aggregation and enumeration query them with DuckDB as Arrow tables
read from checked bytes: ids are Parquet UUIDs, JSON columns carry the JSON logical type and times
are UTC microsecond timestamps, as DuckDB itself writes them. The schema is fixed so that every
file of a store has the same column types and the tables of all segments concatenate: a text
column that happened to be all NULL in one write must not become an INTEGER column there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from rms_retrieval.stores.engine.codec import ASSERTION_NORM_COLUMNS, row_values
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
# What a reader keeps in memory of each row (stores/engine/segments.py LoadedSegment).
LOADED_COLUMNS = ("id", "namespace", "owner", "scope", "session_id", "node_type", "pinned", "record", "session_seq",
                  "entity_canonical_name")
_COMPRESSION = "zstd"


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
    pq.write_table(table, sink, compression=_COMPRESSION)
    return sink.getvalue().to_pybytes()


def read_table(data: bytes, columns: Sequence[str] | None = None) -> pa.Table:
    """A Parquet file's table from its (verified) bytes, read as one file (`ParquetFile`): not
    through `pq.read_table`'s dataset layer, which a process sets up on its first call."""
    return pq.ParquetFile(pa.BufferReader(data)).read(columns=list(columns) if columns is not None else None)


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


def loaded_columns(table: pa.Table) -> Mapping[str, list[Any]]:
    """The LOADED_COLUMNS of an objects table as Python lists (UUIDs for ids), except `record`,
    each object's JSON, which stays one Arrow array: a reader decodes the few objects it packs,
    and a Python string per stored object cost a store's open time and memory for nothing."""
    columns = table.select([name for name in LOADED_COLUMNS if name != "record"]).to_pydict()
    columns["record"] = table.column("record").combine_chunks()
    return columns
