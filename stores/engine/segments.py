"""One segment: the rows, vectors, edges and lexical postings of one write, immutable once named.

The files and their names: stores/engine/segment_layout.py.

`segment_writing.write_segment` builds them in memory (no DuckDB connection:
stores/engine/segment_parquet.py), writes them into a temporary directory, fsyncs, and renames it
into place; only a manifest that names the segment makes it live. `LoadedSegment` memory-maps the
objects file and verifies its sha256 before parsing it, decodes its small columns only (as
arrays: `segment_parquet.SegmentColumns`), and memory-maps `index.npz`, whose sha256 it verifies
the first time the arrays are read (`IndexArrays`).

A segment's rows never change, but some may be deleted: a deletion file
(`deleted-g<generation>.npy`, the sorted dead row positions) that the manifest names with the
segment. An update, a delete or an erase writes the segment a new deletion file and switches the
manifest; `LoadedSegment.with_deletions` gives the new view, sharing everything else.
"""

from __future__ import annotations

import hashlib
import mmap
import os
import threading
import zipfile
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from functools import cached_property
from pathlib import Path
from uuid import UUID

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rms_retrieval.stores.analysis.entity_catalog import EntityNames
from rms_retrieval.stores.analysis.text_tokens import TEXT_TOKENS
from rms_retrieval.stores.engine.codec import memory_object, record_fields
from rms_retrieval.stores.analysis.positions import SessionKey
from rms_retrieval.stores.engine.edge_columns import EDGE_PREFIX, EdgeColumns, LiveEdgeGroups, StoredEdge
from rms_retrieval.stores.engine.edge_index import EdgeIndex, LiveCounts
from rms_retrieval.stores.engine.segment_index import IndexArrays, legacy_edges, owned_edges, parquet_edges
from rms_retrieval.stores.engine.segment_layout import (EDGES_FILE, INDEX_FILE, OBJECTS_FILE, POSTINGS_FILE,
                                                       SEPARATE_FILES, VECTORS_FILE, segment_directory)
from rms_retrieval.stores.engine.segment_lookups import RowIndex, SegmentSessions
from rms_retrieval.stores.engine.segment_vectors import SegmentVectors
from rms_retrieval.stores.errors import StoreError
from rms_retrieval.stores.indexes.postings import TermPostings
from rms_retrieval.stores.engine.manifest import SegmentEntry
from rms_retrieval.stores.engine.npz_views import load_npy, load_npz, map_npz, read_npz
from rms_retrieval.stores.models import MemoryObject, NodeType
from rms_retrieval.stores.engine.segment_parquet import (CODED_COLUMNS, LOADED_COLUMNS, OBJECTS_SCHEMA, MappedRecords, Records,
                                                         SegmentColumns, conformed, read_table, segment_columns)

_DECODED_CACHE_LIMIT = 50_000
NO_ROWS: frozenset[int] = frozenset()


class LoadedSegment:
    """A segment as readers search it: its files mapped, its rows as columns. Immutable; shared by snapshots."""

    def __init__(self, store: Path, entry: SegmentEntry) -> None:
        """Load the segment `entry` names: its rows' small columns from the objects file, verified
        against its sha256 first, and its index file memory-mapped, verified the first time its
        arrays are read (`IndexArrays`); an index file written before it was aligned, and the
        older separate files, are read and verified here."""
        directory = segment_directory(store, entry.id)
        self.entry, self.directory = entry, directory
        separate = VECTORS_FILE in entry.files
        blobs = {name: self._verified_bytes(name) for name in (SEPARATE_FILES if separate else (OBJECTS_FILE,))}
        mapped = None if separate else map_npz(directory / INDEX_FILE)  # FileNotFoundError, as above
        index = None if separate or mapped is not None else self._verified_index()
        try:
            table = read_table(blobs[OBJECTS_FILE], LOADED_COLUMNS, CODED_COLUMNS)
            if separate:
                vectors = SegmentVectors.dense(load_npy(blobs[VECTORS_FILE]))
                postings = TermPostings.from_arrays(load_npz(blobs[POSTINGS_FILE]), directory / POSTINGS_FILE)
                edges = parquet_edges(read_table(blobs[EDGES_FILE]))
            else:
                arrays = mapped[1] if mapped is not None else index if isinstance(index, dict) else load_npz(index)
                vectors = SegmentVectors.from_arrays(arrays, entry.rows)
                postings = TermPostings.from_arrays(arrays, directory / INDEX_FILE)
                if "edge_rows" in arrays:
                    edges = EdgeColumns({name: array for name, array in arrays.items() if name.startswith(EDGE_PREFIX)})
                else:
                    edges = legacy_edges(arrays)
            records = Records(data=blobs[OBJECTS_FILE])
            if not separate and "record_offsets" in arrays:  # read once the index file is checked
                records = MappedRecords(arrays["record_offsets"], arrays["record_bytes"], lambda: self._index.checked())
            columns = segment_columns(table, records)
            decoded = None
            if not isinstance(edges, EdgeColumns):  # owners unknown: each found by its source's row here
                decoded = owned_edges(edges, columns.rows_by_key(), entry.rows)
                edges = EdgeColumns.from_stored(decoded)
        except (ValueError, OSError, KeyError, EOFError, zipfile.BadZipFile, pa.ArrowException) as error:
            raise StoreError(f"cannot read segment {directory} ({error}); run `rms check --store {store}`") from error
        if mapped is None:
            edges.check_owners(entry.rows, directory)
        check = None if mapped is None else self._index_check(mapped[0])
        counts = None if separate else arrays.get(TEXT_TOKENS)
        try:
            index_arrays = IndexArrays(vectors, postings, edges, columns.entity_names, check, counts)
        except ValueError as error:
            raise StoreError(f"cannot read segment {directory} ({error}); run `rms check --store {store}`") from error
        self._build(store, index_arrays, columns, decoded)

    def with_deletions(self, entry: SegmentEntry) -> LoadedSegment:
        """This segment read with `entry`'s deletion file (the same segment id): rows, vectors, postings
        and the objects decoded so far are shared, the lookups rebuilt without the dead rows."""
        if entry.id != self.entry.id:
            raise StoreError(f"segment {self.entry.id} cannot take the deletions of {entry.id}; this is a bug, report it")
        if entry == self.entry:
            return self
        segment = LoadedSegment.__new__(LoadedSegment)
        segment.entry, segment.directory = entry, self.directory
        segment._build(self.directory.parent.parent, self._index, self._columns,
                       self.__dict__.get("edges"))  # edges decoded already are shared, not decoded again
        segment._row_index = self._row_index  # over every row, dead or not
        segment._decoded = self._decoded  # the same records at the same rows
        segment.__dict__.update({name: self.__dict__[name] for name in ("ids", "namespace_of_row", "_named") if name in self.__dict__})
        segment.sessions = self.sessions.with_dead(segment.dead)  # what is gathered so far, filtered
        segment._checked = self._checked  # the rows' checked table; readers leave the dead rows out
        segment._edge_index = self._edge_index  # over every row, dead or not: shared by every reading
        return segment

    def _dead_rows(self) -> np.ndarray:
        """The deletion file's rows, verified against the manifest's sha256 (none without one)."""
        deletions = self.entry.deletions
        if deletions is None:
            return np.empty(0, dtype=np.int64)
        data = self.directory.joinpath(deletions.file).read_bytes()  # FileNotFoundError: a newer generation removed it
        if hashlib.sha256(data).hexdigest() != deletions.sha256:
            raise StoreError(f"{self.directory / deletions.file} is damaged (its sha256 differs from the manifest's); "
                             "restore the store from a backup")
        try:
            rows = load_npy(data)
        except (ValueError, OSError, EOFError) as error:
            raise StoreError(f"cannot read {self.directory / deletions.file} ({error}); restore the store from a backup") from error
        if len(rows) != deletions.rows or (len(rows) and (rows.min() < 0 or rows.max() >= self.entry.rows)):
            raise StoreError(f"{self.directory / deletions.file} names rows this segment does not hold; restore the store from a backup")
        return rows

    def _build(self, store: Path, index: IndexArrays, columns: SegmentColumns,
               decoded: tuple[StoredEdge, ...] | None = None) -> None:
        """The lookups over one segment's rows and its edges: arrays at once, and what needs a Python
        object per row (ids, lookups by id, sessions) per namespace or on first use; edges decoded
        when a caller first asks for them unless `decoded` holds them already."""
        entry = self.entry
        self._index = index
        vectors = index.vectors.shape_problem()  # shapes: nothing read
        if vectors is not None or not (len(columns) == entry.rows == index.vectors.num_rows == index.num_rows):
            raise StoreError(f"segment {self.directory} holds {len(columns)} rows, {vectors or 'vectors'} "
                             f"and {index.num_rows} postings rows, the manifest says {entry.rows}; "
                             f"run `rms check --store {store}`")
        self._columns = columns
        dead = self._dead_rows()
        self.dead_positions: np.ndarray = np.unique(dead)  # the deleted rows, ascending
        self.dead_rows: frozenset[int] = frozenset(dead.tolist())
        self.dead: np.ndarray | None = None  # per row, True where deleted (None: no row is)
        if len(dead):
            self.dead = np.zeros(entry.rows, dtype=bool)
            self.dead[dead] = True
            self.dead.flags.writeable = False
        codes = columns.namespace_codes
        present, first = np.unique(codes, return_index=True)
        _, last = np.unique(codes[::-1], return_index=True)
        self.namespace_slices: dict[str, tuple[int, int]] = {
            columns.namespaces[code]: (start, entry.rows - end)
            for code, start, end in sorted(zip(present.tolist(), first.tolist(), last.tolist()), key=lambda item: item[1])}
        # Keyed by namespace, then id: an id is unique within its namespace only, so that what another
        # namespace holds is invisible to a writer (stores/README.md, "Isolation"). Every row, dead
        # ones too: an id is not reused while a dead row still holds it. Built per namespace on first use.
        self._row_index = RowIndex(columns, self.namespace_slices)
        alive = ~self.dead if self.dead is not None else np.ones(entry.rows, dtype=bool)
        self.pinned_rows: list[int] = np.flatnonzero(columns.pinned & alive).tolist()
        is_entity = pc.fill_null(pc.equal(columns.node_types, NodeType.ENTITY.value), False).to_numpy(zero_copy_only=False)
        self.entity_rows: list[int] = np.flatnonzero(is_entity & alive).tolist()
        self.sessions: SegmentSessions = SegmentSessions(columns, self.namespace_slices, self.dead)
        if decoded is not None:
            self.__dict__["edges"] = tuple(decoded)
        self._edge_index: EdgeIndex | None = None
        self._decoded: dict[int, MemoryObject] = {}
        self._checked: pa.Table | None = None
        self._table_lock = threading.Lock()

    def checked(self) -> LoadedSegment:
        """This segment once its index file's sha256 is verified (a StoreError if it differs): what
        `rms check` and repair read; searches verify it on their first read of the arrays."""
        self._index.checked()
        return self

    @property
    def columns(self) -> SegmentColumns:
        """The rows' columns, as arrays (ids, namespace codes, ...)."""
        return self._columns

    @property
    def vectors(self) -> SegmentVectors:
        """The unit vectors of the rows that have one (read-only)."""
        return self._index.checked().vectors

    @cached_property
    def _bare_vector_rows(self) -> list[int]:
        """The live bare entities that have a vector: none, unless the segment was written before
        bare entities went without (stores/engine/segment_vectors.py)."""
        if self.vectors.rows is not None:
            return []
        return [row for row in self.entity_rows if self.object_at(row).is_bare_entity]

    @cached_property
    def vector_skip(self) -> np.ndarray | None:
        """Per row, True where the vector search passes a vector by: a dead row, or a bare entity's
        vector in an older segment (None: no row)."""
        if not self._bare_vector_rows:
            return self.dead
        skip = np.zeros(self.entry.rows, dtype=bool) if self.dead is None else self.dead.copy()
        skip[self._bare_vector_rows] = True
        return skip

    def rewritten_vectors(self) -> SegmentVectors:
        """The vectors a merge or compaction rewrites this segment with: all but an older segment's bare entities'."""
        if not self._bare_vector_rows:
            return self.vectors
        keep = np.ones(self.entry.rows, dtype=bool)
        keep[self._bare_vector_rows] = False
        return self.vectors.take(np.arange(self.entry.rows), keep)

    @property
    def postings(self) -> TermPostings:
        return self._index.checked().postings

    @property
    def text_tokens(self) -> np.ndarray | None:
        """Each row's tokens of its spoken text (None: a segment written before they were kept)."""
        return self._index.checked().text_tokens

    @property
    def stored_postings(self) -> TermPostings:
        """`postings` without the entity-name counts, which only a weighted lexical search reads."""
        return self._index.checked().stored_postings

    @property
    def edge_columns(self) -> EdgeColumns:
        return self._index.checked().edges

    @property
    def edge_namespaces(self) -> frozenset[str]:
        """The namespaces of the edges: a compacted segment may hold edges of a namespace without its rows."""
        return self.edge_columns.namespace_set

    def _index_check(self, mapped: mmap.mmap) -> Callable[[IndexArrays], None]:
        """What verifies this segment's memory-mapped index file: its sha256, then its edges' owners
        (it holds no reference to the segment, which holds it)."""
        expected, rows, directory = self.entry.files.get(INDEX_FILE), self.entry.rows, self.directory
        damaged = str(self._damaged(self.directory / INDEX_FILE))

        def check(index: IndexArrays) -> None:
            if expected is None or hashlib.sha256(mapped).hexdigest() != expected:
                raise StoreError(damaged)
            index.edges.check_owners(rows, directory)

        return check

    @cached_property
    def ids(self) -> list[UUID]:
        """Every row's object id, dead rows too, in row order (built on first use: `id_at` reads one)."""
        return self._columns.uuids()

    @cached_property
    def namespace_of_row(self) -> list[str]:
        """Every row's namespace, in row order (built on first use: `namespace_at` reads one)."""
        return self._columns.namespace_list()

    def id_at(self, row: int) -> UUID:
        return self._row_index.id_at(row)

    def ids_at(self, rows: np.ndarray) -> list[UUID]:
        """The object id of each of `rows`, in order."""
        return self._row_index.ids_at(rows)

    def namespace_at(self, row: int) -> str:
        return self._columns.namespaces[self._columns.namespace_codes[row]]

    def live_row(self, namespace: str, object_id: UUID) -> int | None:
        """The row of `object_id` in `namespace` unless it is deleted here."""
        return self.live_rows(namespace, [object_id])[0]

    def live_rows(self, namespace: str, object_ids: Sequence[UUID]) -> list[int | None]:
        """`live_row` of each of `object_ids`, looked up together."""
        return self._row_index.rows(namespace, object_ids, self.dead)

    def live_key_rows(self, namespace: str, keys: np.ndarray) -> np.ndarray:
        """`live_rows` of ids given as 16-byte strings (-1: none live here)."""
        return self._row_index.key_rows(namespace, keys, self.dead)

    def holds(self, namespace: str, object_id: UUID) -> bool:
        """Whether a row of `namespace` here, dead or not, holds `object_id`."""
        return self._row_index.row(namespace, object_id) is not None

    def keys(self) -> set[tuple[str, UUID]]:
        """(namespace, id) of every row, dead ones too."""
        return set(zip(self.namespace_of_row, self.ids))

    def live_positions(self) -> np.ndarray:
        """The rows no deletion file names, ascending."""
        return np.arange(self.entry.rows) if self.dead is None else np.flatnonzero(~self.dead)

    def objects_table(self) -> pa.Table:
        """This segment's objects file as a table of OBJECTS_SCHEMA, read again and verified."""
        try:
            table = read_table(self._verified_bytes(OBJECTS_FILE))
            record = table.schema.get_field_index("record")
            if table.num_rows and table.column(record).null_count == table.num_rows:  # the index file holds them
                table = table.set_column(record, "record", self._columns.records.array())
            return conformed(table, OBJECTS_SCHEMA)
        except (ValueError, pa.ArrowException) as error:
            raise StoreError(f"cannot read {self.parquet_path} ({error}); run `rms check`") from error

    def checked_table(self) -> pa.Table:
        """`objects_table()`, read and verified once, then held: what aggregation and enumeration
        query (FileNotFoundError if the file is gone, a StoreError if it is damaged)."""
        with self._table_lock:
            if self._checked is None:
                self._checked = self.objects_table()
            return self._checked

    def _verified_bytes(self, name: str) -> mmap.mmap | bytes:
        """The file `name` memory-mapped (its pages shared by every process that reads the store),
        verified against its sha256; an empty file as bytes."""
        path = self.directory / name
        expected = self.entry.files.get(name)
        with path.open("rb") as handle:  # FileNotFoundError is the caller's cue that a merge retired it
            data = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) if os.fstat(handle.fileno()).st_size else b""
        if expected is None or hashlib.sha256(data).hexdigest() != expected:
            raise self._damaged(path)
        return data

    def _verified_index(self) -> dict[str, np.ndarray] | mmap.mmap | bytes:
        """index.npz's arrays, read in one pass that checks the file's sha256, each in an aligned
        place of one buffer (stores/engine/npz_views.py); the verified bytes of a file that pass
        does not lay out, for `load_npz`."""
        path, expected = self.directory / INDEX_FILE, self.entry.files.get(INDEX_FILE)
        digest, arrays = read_npz(path)  # FileNotFoundError is the caller's cue that a merge retired it
        if expected is None or digest != expected:
            raise self._damaged(path)
        return arrays if arrays is not None else self._verified_bytes(INDEX_FILE)

    def _damaged(self, path: Path) -> StoreError:
        return StoreError(f"{path} is damaged (its sha256 differs from the manifest's); set it aside and keep "
                          f"the rest with `rms check --store {self.directory.parent.parent} --repair`, or restore "
                          "the store from a backup")

    @cached_property
    def _named(self) -> np.ndarray:
        """Per row, whether it has an entity name (most turns have none: no Arrow scalar made)."""
        return self._columns.entity_names.is_valid().to_numpy(zero_copy_only=False)

    def object_at(self, position: int) -> MemoryObject:
        memory = self._decoded.get(position)
        if memory is None:
            name = self._columns.entity_names[position].as_py() if self._named[position] else None
            memory = memory_object(self._columns.records.at(position), self.id_at(position), self.namespace_at(position),
                                   name)
            if len(self._decoded) >= _DECODED_CACHE_LIMIT:
                self._decoded.clear()
            self._decoded[position] = memory
        return memory

    def entity_names(self, namespace: str, positions: Sequence[int]) -> EntityNames:
        """The ids, canonical names and aliases of the ENTITY rows at `positions` (of `namespace`),
        read from the columns without building an object (an entity catalog reads thousands): the
        aliases from the records that hold any (most spotted names hold none; JSON escapes a quote
        in a text, so a record without the key has none)."""
        at = pa.array(positions, type=pa.int64())
        records = self._columns.records
        aliases = {index: (record_fields(records.at(positions[index])).get("metadata") or {}).get("aliases")
                   for index in np.flatnonzero(records.containing(positions, '"aliases"')).tolist()}
        return EntityNames(namespace, self._columns.ids[np.asarray(positions, dtype=np.int64)],
                           self._columns.entity_names.take(at), aliases)

    def objects(self) -> list[MemoryObject]:
        """The live objects, in row order."""
        return [self.object_at(position) for position in self.live_positions().tolist()]

    @property
    def parquet_path(self) -> Path:
        return self.directory / OBJECTS_FILE

    @cached_property
    def edges(self) -> tuple[StoredEdge, ...]:
        """Every edge of the segment, dead or not, in stored (id) order, decoded on first use."""
        return self.edge_columns.decoded()

    @property
    def last_edge_id(self) -> int:
        """The largest edge id stored here (edges are stored in id order), 0 for none."""
        return self._index.edges.last_edge_id  # unchecked, one value: a snapshot's fingerprint reads it at open

    def live_edges_by_namespace(self) -> LiveEdgeGroups:
        """The edges with a live owner row (or none) by namespace, each namespace's decoded on first lookup."""
        return self.edge_columns.live_by_namespace(self.dead)

    def mentioners(self, namespace: str) -> Mapping[int, frozenset[int]]:
        """Entity id's integer -> the rows (dead ones too) with a MENTIONS edge into it, in `namespace`."""
        return self.edge_columns.mentioners(namespace)

    @cached_property
    def session_ends(self) -> dict[SessionKey, int]:
        """The last (largest) position each session holds in this segment."""
        return {key: max(seq for seq, _ in turns) for key, turns in self.sessions.items()}

    def co_mentioned_id(self, namespace: str, source: UUID, target: UUID) -> int | None:
        """The id of this segment's CO_MENTIONED edge from `source` to `target` in `namespace`, if
        it stores one (dead or not): how a write finds the edge it re-weights."""
        return self.edge_columns.co_mentioned_id(namespace, source, target)

    @property
    def edge_index(self) -> EdgeIndex:
        """This segment's edges by owner row and by target, over every row, as positions into the
        edge columns (built once, shared with every reading of the segment with another deletion file)."""
        if self._edge_index is None:
            self._edge_index = EdgeIndex(self.edge_columns)
        return self._edge_index

    def owned_edges(self, row: int) -> tuple[StoredEdge, ...]:
        """The edges `row`'s analysis made, in stored order (only they are decoded)."""
        return self.edge_index.owned_edges(row)

    @cached_property
    def co_mentions(self) -> Mapping[tuple[str, UUID, UUID], int]:
        """Per (namespace, smaller id, larger id): how many of this segment's live objects mention
        both: the count over every row less the dead rows' pairs, so a deletion costs its rows.
        Every pair of every object: a full listing; one pair is counted by
        `CoMentionCounts.counter` from `LoadedSegment.mentioners` instead."""
        if not self.dead_rows:
            return self.edge_index.co_mentions
        dead: Counter[tuple[str, UUID, UUID]] = Counter()
        for row in self.dead_rows:
            dead.update(self.edge_index.pairs_of(row))
        return LiveCounts(self.edge_index.co_mentions, dead)
