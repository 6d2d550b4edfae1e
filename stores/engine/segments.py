"""One segment: the rows, vectors, edges and lexical postings of one write, immutable once named.

Files under `segments/<id>/`:
- `objects.parquet`: the rows (typed columns for SQL, plus each object's JSON `record`), grouped by
  namespace so that each namespace's vectors are one contiguous slice;
- `index.npz`: plain arrays (no pickles) of the float32 unit vectors in row order, the BM25 term
  postings of the rows (stores/indexes/lexical.py) and the graph edges this write added or re-weighted
  (a later segment's edge wins over an earlier one with the same edge id). One file, not three,
  because every file of a write costs an fsync.
Segments written before index.npz have `vectors.npy`, `edges.parquet` and `postings.npz` instead;
they load the same, and a merge rewrites them in the current form.

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
import io
import json
import mmap
import os
import re
import threading
import uuid
import zipfile
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from functools import cached_property
from itertools import combinations
from pathlib import Path
from uuid import UUID

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rms_retrieval.stores.engine.codec import memory_object
from rms_retrieval.stores.indexes.entity_graph import entity_names, names_of
from rms_retrieval.stores.engine.edge_columns import (CO_MENTIONED, EDGE_PREFIX, MENTIONS, SPOKEN_BY, EdgeColumns,
                                                      LiveEdgeGroups, StoredEdge)
from rms_retrieval.stores.errors import StoreError
from rms_retrieval.stores.indexes.postings import TermPostings
from rms_retrieval.stores.engine.manifest import SEGMENTS_DIR, Deletions, SegmentEntry
from rms_retrieval.stores.engine.npz_views import load_npz, map_npz, read_npz
from rms_retrieval.stores.models import MemoryObject, NodeType
from rms_retrieval.stores.protocols import Edge
from rms_retrieval.stores.engine.segment_parquet import (LOADED_COLUMNS, OBJECTS_SCHEMA, Records, SegmentColumns, conformed,
                                                         read_table, segment_columns)

OBJECTS_FILE = "objects.parquet"
INDEX_FILE = "index.npz"
# The segment's own description (id, rows per namespace, its files' sha256, the segments a merge
# replaced): what `rms check --repair` rebuilds a lost manifest from. Readers never need it.
SIDECAR_FILE = "segment.json"
SEGMENT_FILES = (OBJECTS_FILE, INDEX_FILE)
# Segments written before index.npz held vectors, edges and postings in files of their own.
VECTORS_FILE = "vectors.npy"
EDGES_FILE = "edges.parquet"
POSTINGS_FILE = "postings.npz"
SEPARATE_FILES = (OBJECTS_FILE, VECTORS_FILE, EDGES_FILE, POSTINGS_FILE)
TEMPORARY_PREFIX = ".tmp-"
DELETIONS_PREFIX = "deleted-"
_DECODED_CACHE_LIMIT = 50_000
NO_ROWS: frozenset[int] = frozenset()

SessionKey = tuple[str, str, str, str]  # namespace, owner, scope, session id


def segment_directory(store: Path, segment_id: str) -> Path:
    return store / SEGMENTS_DIR / segment_id


def new_segment_id(generation: int) -> str:
    return f"g{generation:08d}-{uuid.uuid4().hex[:12]}"


# What new_segment_id makes; nothing else under segments/ is the store's.
SEGMENT_NAME = re.compile(r"g[0-9]{8}-[0-9a-f]{12}")


def segment_generation(segment_id: str) -> int:
    """The generation a segment directory was written for (ids are `g<generation>-<random>`)."""
    return int(segment_id[1:9])


def latest_deletions(directory: Path) -> Deletions | None:
    """The newest deletion file in a segment directory, described as a manifest would (for
    `rms check --repair`, which has no manifest to name it); None without one."""
    found = sorted(path for path in directory.glob(f"{DELETIONS_PREFIX}g*.npy"))
    if not found:
        return None
    data = found[-1].read_bytes()
    rows = np.load(io.BytesIO(data), allow_pickle=False)
    return Deletions(found[-1].name, hashlib.sha256(data).hexdigest(), len(rows))


def _legacy_edges(arrays: Mapping[str, np.ndarray]) -> tuple[StoredEdge, ...]:
    """The edges of an index.npz written before owners were stored, owners unknown (found on load)."""
    columns = EdgeColumns({name: array for name, array in arrays.items() if name.startswith(EDGE_PREFIX)}
                          | {"edge_rows": np.full(len(arrays["edge_ids"]), -1)})
    return tuple(StoredEdge(stored.edge, stored.namespace, None) for stored in columns.decoded())


def owned_edges(edges: Sequence[StoredEdge], row_of: Mapping[tuple[str, UUID], int], rows: int) -> tuple[StoredEdge, ...]:
    """`edges` with every unknown owner found (the source's row here, for the edges an object's
    analysis makes), each owner checked to be a row of the segment."""
    owned = []
    for stored in edges:
        if stored.row is None:
            row = -1 if stored.edge.edge_type == CO_MENTIONED else row_of.get((stored.namespace, stored.edge.source), -1)
            stored = StoredEdge(stored.edge, stored.namespace, row)
        elif not -1 <= stored.row < rows:
            raise StoreError(f"edge {stored.edge.edge_id} names row {stored.row} of a segment of {rows} rows")
        owned.append(stored)
    return tuple(owned)


def _parquet_edges(table: pa.Table) -> tuple[StoredEdge, ...]:
    edges = table.to_pydict()
    return tuple(
        StoredEdge(Edge(edge_id, source, target, edge_type, confidence), namespace)
        for edge_id, source, target, edge_type, confidence, namespace in zip(
            edges["edge_id"], edges["source"], edges["target"], edges["edge_type"], edges["confidence"], edges["namespace"])
    )


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
        blobs = {name: self._verified_bytes(name) for name in (SEPARATE_FILES if separate else ())}
        blobs[OBJECTS_FILE] = self._verified_map(OBJECTS_FILE)
        mapped = None if separate else map_npz(directory / INDEX_FILE)  # FileNotFoundError, as above
        index = None if separate or mapped is not None else self._verified_index()
        try:
            columns = segment_columns(read_table(blobs[OBJECTS_FILE], LOADED_COLUMNS), Records(data=blobs[OBJECTS_FILE]))
            if separate:
                vectors = np.load(io.BytesIO(blobs[VECTORS_FILE]), allow_pickle=False)
                with np.load(io.BytesIO(blobs[POSTINGS_FILE]), allow_pickle=False) as arrays:
                    postings = TermPostings.from_arrays(arrays, directory / POSTINGS_FILE)
                edges = _parquet_edges(read_table(blobs[EDGES_FILE]))
            else:
                arrays = mapped[1] if mapped is not None else index if isinstance(index, dict) else load_npz(index)
                vectors = arrays["vectors"]
                postings = TermPostings.from_arrays(arrays, directory / INDEX_FILE)
                if "edge_rows" in arrays:
                    edges = EdgeColumns({name: array for name, array in arrays.items() if name.startswith(EDGE_PREFIX)})
                else:
                    edges = _legacy_edges(arrays)
            decoded = None
            if not isinstance(edges, EdgeColumns):  # owners unknown: each found by its source's row here
                row_of = {key: position for position, key in enumerate(zip(columns.namespace_list(), columns.uuids()))}
                decoded = owned_edges(edges, row_of, entry.rows)
                edges = EdgeColumns.from_stored(decoded)
        except (ValueError, OSError, KeyError, EOFError, zipfile.BadZipFile, pa.ArrowException) as error:
            raise StoreError(f"cannot read segment {directory} ({error}); run `rms check --store {store}`") from error
        if mapped is None:
            edges.check_owners(entry.rows, directory)
        check = None if mapped is None else self._index_check(mapped[0])
        self._build(store, IndexArrays(vectors, postings, edges, columns.entity_names, check), columns, decoded)

    def with_deletions(self, entry: SegmentEntry) -> LoadedSegment:
        """This segment read with `entry`'s deletion file (the same segment id): rows, vectors and
        postings are shared, the lookups rebuilt without the dead rows."""
        if entry.id != self.entry.id:
            raise StoreError(f"segment {self.entry.id} cannot take the deletions of {entry.id}; this is a bug, report it")
        if entry == self.entry:
            return self
        segment = LoadedSegment.__new__(LoadedSegment)
        segment.entry, segment.directory = entry, self.directory
        segment._build(self.directory.parent.parent, self._index, self._columns,
                       self.__dict__.get("edges"))  # edges decoded already are shared, not decoded again
        segment._row_index = self._row_index  # over every row, dead or not
        for shared in ("ids", "namespace_of_row"):
            if shared in self.__dict__:
                segment.__dict__[shared] = self.__dict__[shared]
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
            rows = np.load(io.BytesIO(data), allow_pickle=False)
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
        vectors, postings = index.unchecked_vectors, index.unchecked_postings  # their shapes only
        if not (len(columns) == entry.rows == vectors.shape[0] == postings.num_rows):
            raise StoreError(f"segment {self.directory} holds {len(columns)} rows, {vectors.shape[0]} vectors "
                             f"and {postings.num_rows} postings rows, the manifest says {entry.rows}; "
                             f"run `rms check --store {store}`")
        self._columns = columns
        dead = self._dead_rows()
        self.dead_rows: frozenset[int] = frozenset(dead.tolist())
        self.dead: np.ndarray | None = None  # per row, True where deleted (None: no row is)
        if len(dead):
            self.dead = np.zeros(entry.rows, dtype=bool)
            self.dead[dead] = True
            self.dead.flags.writeable = False
        # Keyed by namespace, then id: an id is unique within its namespace only, so that what another
        # namespace holds is invisible to a writer (stores/README.md, "Isolation"). Every row, dead
        # ones too: an id is not reused while a dead row still holds it. Built per namespace on first use.
        self._row_index = _RowIndex(columns)
        codes = columns.namespace_codes
        present, first = np.unique(codes, return_index=True)
        _, last = np.unique(codes[::-1], return_index=True)
        self.namespace_slices: dict[str, tuple[int, int]] = {
            columns.namespaces[code]: (start, entry.rows - end)
            for code, start, end in sorted(zip(present.tolist(), first.tolist(), last.tolist()), key=lambda item: item[1])}
        alive = ~self.dead if self.dead is not None else np.ones(entry.rows, dtype=bool)
        self.pinned_rows: list[int] = np.flatnonzero(columns.pinned & alive).tolist()
        is_entity = pc.fill_null(pc.equal(columns.node_types, NodeType.ENTITY.value), False).to_numpy(zero_copy_only=False)
        self.entity_rows: list[int] = np.flatnonzero(is_entity & alive).tolist()
        self.sessions: SegmentSessions = SegmentSessions(columns, self.namespace_slices, self.dead_rows)
        if decoded is not None:
            self.__dict__["edges"] = tuple(decoded)
        self._edge_index: _EdgeIndex | None = None
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
    def vectors(self) -> np.ndarray:
        """The unit vectors, one per row (read-only)."""
        return self._index.checked().vectors

    @property
    def postings(self) -> TermPostings:
        return self._index.checked().postings

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

    def namespace_at(self, row: int) -> str:
        return self._columns.namespaces[self._columns.namespace_codes[row]]

    def live_row(self, namespace: str, object_id: UUID) -> int | None:
        """The row of `object_id` in `namespace` unless it is deleted here."""
        row = self._row_index.row(namespace, object_id)
        return None if row is None or row in self.dead_rows else row

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
            return conformed(read_table(self._verified_bytes(OBJECTS_FILE)), OBJECTS_SCHEMA)
        except (ValueError, pa.ArrowException) as error:
            raise StoreError(f"cannot read {self.parquet_path} ({error}); run `rms check`") from error

    def checked_table(self) -> pa.Table:
        """`objects_table()`, read and verified once, then held: what aggregation and enumeration
        query (FileNotFoundError if the file is gone, a StoreError if it is damaged)."""
        with self._table_lock:
            if self._checked is None:
                self._checked = self.objects_table()
            return self._checked

    def _verified_bytes(self, name: str) -> bytes:
        path = self.directory / name
        expected = self.entry.files.get(name)
        data = path.read_bytes()  # FileNotFoundError is the caller's cue that a merge retired it
        if expected is None or hashlib.sha256(data).hexdigest() != expected:
            raise self._damaged(path)
        return data

    def _verified_map(self, name: str) -> mmap.mmap | bytes:
        """The file `name` memory-mapped (its pages shared by every process that reads the store),
        verified against its sha256; an empty file as bytes."""
        path = self.directory / name
        expected = self.entry.files.get(name)
        with path.open("rb") as handle:  # FileNotFoundError is the caller's cue that a merge retired it
            data = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) if os.fstat(handle.fileno()).st_size else b""
        if expected is None or hashlib.sha256(data).hexdigest() != expected:
            raise self._damaged(path)
        return data

    def _verified_index(self) -> dict[str, np.ndarray] | bytes:
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

    def object_at(self, position: int) -> MemoryObject:
        memory = self._decoded.get(position)
        if memory is None:
            memory = memory_object(self._columns.records.at(position))
            if len(self._decoded) >= _DECODED_CACHE_LIMIT:
                self._decoded.clear()
            self._decoded[position] = memory
        return memory

    def entity_names_at(self, position: int) -> tuple[str, list[str]]:
        """The canonical name and every name (`entity_names`) of the ENTITY at `position`, read from
        its record without building the object: an entity catalog reads thousands of them."""
        memory = self._decoded.get(position)
        if memory is not None:
            return memory.entity_canonical_name or "", entity_names(memory)
        fields = json.loads(self._columns.records.at(position))
        canonical = fields["entity_canonical_name"]
        return canonical or "", names_of(canonical, (fields["metadata"] or {}).get("aliases"))

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
        return self._index.unchecked_edges.last_edge_id  # one value: a snapshot's fingerprint reads it at open

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
    def edge_index(self) -> _EdgeIndex:
        """This segment's edges by owner row and by target, over every row (built once, shared
        with every reading of the segment with another deletion file)."""
        if self._edge_index is None:
            self._edge_index = _EdgeIndex(self.edges)
        return self._edge_index

    def edge_alive(self, stored: StoredEdge) -> bool:
        """Whether an edge of this segment has a live owner row (or none)."""
        return stored.row is None or stored.row < 0 or stored.row not in self.dead_rows

    def live_edges(self) -> list[StoredEdge]:
        """The edges whose owner row is live (or that have none), in stored order."""
        if not self.dead_rows:
            return list(self.edges)
        edges = self.edges
        return [edges[position] for position in self.edge_columns.live_positions(self.dead).tolist()]

    def owned_edges(self, row: int) -> list[StoredEdge]:
        """The edges `row`'s analysis made, in stored order."""
        return [self.edges[position] for position in self.edge_index.by_owner.get(row, ())]

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


class LiveCounts(Mapping[tuple[str, UUID, UUID], int]):
    """Counts over every row less those of the dead rows; a pair no live row counts is absent."""

    def __init__(self, every: Mapping[tuple[str, UUID, UUID], int], dead: Mapping[tuple[str, UUID, UUID], int]) -> None:
        self._every, self._dead = every, dead

    def __getitem__(self, key: tuple[str, UUID, UUID]) -> int:
        count = self._every[key] - self._dead.get(key, 0)
        if count <= 0:
            raise KeyError(key)
        return count

    def __iter__(self):
        return (key for key, count in self._every.items() if count > self._dead.get(key, 0))

    def __len__(self) -> int:
        return sum(1 for _ in self)


class _EdgeIndex:
    """One segment's edges grouped by owner row, its owners by target entity, and co-mention
    counts over every row (what a deletion file subtracts from)."""

    def __init__(self, edges: Sequence[StoredEdge]) -> None:
        self._edges = edges
        self.by_owner: dict[int, list[int]] = defaultdict(list)
        # (namespace, entity) -> (owner row, MENTIONS or SPOKEN_BY) of the edges into it
        self.owners_into: dict[tuple[str, UUID], list[tuple[int, str]]] = defaultdict(list)
        for position, stored in enumerate(edges):
            if stored.row is not None and stored.row >= 0:
                self.by_owner[stored.row].append(position)
                if stored.edge.edge_type in (MENTIONS, SPOKEN_BY):
                    self.owners_into[(stored.namespace, stored.edge.target)].append((stored.row, stored.edge.edge_type))

    @cached_property
    def co_mentions(self) -> Counter[tuple[str, UUID, UUID]]:
        counts: Counter[tuple[str, UUID, UUID]] = Counter()
        for row in self.by_owner:
            counts.update(self.pairs_of(row))
        return counts

    def pairs_of(self, row: int) -> list[tuple[str, UUID, UUID]]:
        """The (namespace, smaller id, larger id) entity pairs the object of `row` mentions."""
        mentioned = [self._edges[position] for position in self.by_owner.get(row, ())
                     if self._edges[position].edge.edge_type == MENTIONS]
        if not mentioned:
            return []
        namespace = mentioned[0].namespace
        return [(namespace, first, second)
                for first, second in combinations(sorted({stored.edge.target for stored in mentioned}), 2)]


class _RowIndex:
    """Row by (namespace, object id) over every row of a segment, each namespace's dictionary
    built the first time that namespace is asked about: a query reads one namespace."""

    def __init__(self, columns: SegmentColumns) -> None:
        self._columns = columns
        self._codes = {name: code for code, name in enumerate(columns.namespaces)}
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
        code = self._codes.get(namespace)
        if code is None:
            return {}
        positions = np.flatnonzero(self._columns.namespace_codes == code)
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
        span = self._slices.get(namespace)
        if span is None:
            return {}
        start, stop = span
        columns, length = self._columns, stop - start
        codes = columns.namespace_codes[start:stop].tolist()
        code = columns.namespaces.index(namespace)
        sessions: dict[SessionKey, list[tuple[int, int]]] = defaultdict(list)
        for offset, (owner, scope, session_id, seq) in enumerate(zip(
                columns.owners.slice(start, length).to_pylist(), columns.scopes.slice(start, length).to_pylist(),
                columns.session_ids.slice(start, length).to_pylist(), columns.session_seqs.slice(start, length).to_pylist())):
            position = start + offset
            if session_id is not None and seq is not None and codes[offset] == code and position not in self._dead:
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


class IndexArrays:
    """A segment's vectors, postings and edge columns, and the check they wait for when they are
    views of a memory-mapped index file: run once, the first time any of them is read (a failed
    check raises again at the next read). Shared by every reading of the segment."""

    def __init__(self, vectors: np.ndarray, postings: TermPostings, edges: EdgeColumns, names: pa.Array | None,
                 check: Callable[[IndexArrays], None] | None) -> None:
        """`names`: each row's entity name, for the postings' name counts (None: `postings` has them)."""
        vectors.flags.writeable = False
        self.unchecked_vectors, self.unchecked_postings, self.unchecked_edges = vectors, postings, edges
        self._names, self._check = names, check
        self._named: TermPostings | None = None
        self._lock = threading.Lock()

    def checked(self) -> IndexArrays:
        if self._check is not None:
            with self._lock:
                if self._check is not None:
                    self._check(self)
                    self._check = None
        return self

    @property
    def vectors(self) -> np.ndarray:
        return self.unchecked_vectors

    @property
    def edges(self) -> EdgeColumns:
        return self.unchecked_edges

    @property
    def postings(self) -> TermPostings:
        if self._names is None:
            return self.unchecked_postings
        named = self._named
        if named is None:
            with self._lock:
                if self._named is None:
                    self._named = self.unchecked_postings.with_names(self._names.to_pylist())
                named = self._named
        return named
