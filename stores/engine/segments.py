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
into place; only a manifest that names the segment makes it live. `LoadedSegment` verifies every
file's sha256 before parsing it.

A segment's rows never change, but some may be deleted: a deletion file
(`deleted-g<generation>.npy`, the sorted dead row positions) that the manifest names with the
segment. An update, a delete or an erase writes the segment a new deletion file and switches the
manifest; `LoadedSegment.with_deletions` gives the new view, sharing everything else.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import threading
import uuid
import zipfile
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from functools import cached_property
from itertools import combinations
from pathlib import Path
from uuid import UUID

import numpy as np
import pyarrow as pa

from rms_retrieval.stores.engine.codec import memory_object
from rms_retrieval.stores.indexes.entity_graph import entity_names, names_of
from rms_retrieval.stores.engine.edge_columns import (CO_MENTIONED, EDGE_ARRAYS, MENTIONS, SPOKEN_BY, EdgeColumns,
                                                      LiveEdgeGroups, StoredEdge)
from rms_retrieval.stores.errors import StoreError
from rms_retrieval.stores.indexes.postings import TermPostings
from rms_retrieval.stores.engine.manifest import SEGMENTS_DIR, Deletions, SegmentEntry
from rms_retrieval.stores.engine.npz_views import load_npz, read_npz
from rms_retrieval.stores.models import MemoryObject, NodeType
from rms_retrieval.stores.protocols import Edge
from rms_retrieval.stores.engine.segment_parquet import LOADED_COLUMNS, OBJECTS_SCHEMA, conformed, loaded_columns, read_table

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
    columns = EdgeColumns({name: arrays[name] for name in EDGE_ARRAYS} | {"edge_rows": np.full(len(arrays["edge_ids"]), -1)})
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
    """A verified segment held in memory: what readers search. Immutable; shared by snapshots."""

    def __init__(self, store: Path, entry: SegmentEntry) -> None:
        """Load the segment `entry` names from its files' bytes, each verified against its sha256 first."""
        directory = segment_directory(store, entry.id)
        self.entry, self.directory = entry, directory
        separate = VECTORS_FILE in entry.files
        blobs = {name: self._verified_bytes(name) for name in (SEPARATE_FILES if separate else (OBJECTS_FILE,))}
        index = None if separate else self._verified_index()  # FileNotFoundError, as above: not a damaged segment
        try:
            columns = loaded_columns(read_table(blobs[OBJECTS_FILE], LOADED_COLUMNS))
            if separate:
                vectors = np.load(io.BytesIO(blobs[VECTORS_FILE]), allow_pickle=False)
                with np.load(io.BytesIO(blobs[POSTINGS_FILE]), allow_pickle=False) as arrays:
                    postings = TermPostings.from_arrays(arrays, directory / POSTINGS_FILE)
                edges = _parquet_edges(read_table(blobs[EDGES_FILE]))
            else:
                arrays = index if isinstance(index, dict) else load_npz(index)
                vectors = arrays["vectors"]
                postings = TermPostings.from_arrays(arrays, directory / INDEX_FILE)
                if "edge_rows" in arrays:
                    edges = EdgeColumns({name: arrays[name] for name in (*EDGE_ARRAYS, "edge_rows")})
                else:
                    edges = _legacy_edges(arrays)
            decoded = None
            if not isinstance(edges, EdgeColumns):  # owners unknown: each found by its source's row here
                row_of = {key: position for position, key in enumerate(zip(columns["namespace"], columns["id"]))}
                decoded = owned_edges(edges, row_of, entry.rows)
                edges = EdgeColumns.from_stored(decoded)
        except (ValueError, OSError, KeyError, EOFError, zipfile.BadZipFile, pa.ArrowException) as error:
            raise StoreError(f"cannot read segment {directory} ({error}); run `rms check --store {store}`") from error
        self._build(store, vectors, postings.with_names(columns["entity_canonical_name"]), columns, edges, decoded)

    def with_deletions(self, entry: SegmentEntry) -> LoadedSegment:
        """This segment read with `entry`'s deletion file (the same segment id): rows, vectors and
        postings are shared, the lookups rebuilt without the dead rows."""
        if entry.id != self.entry.id:
            raise StoreError(f"segment {self.entry.id} cannot take the deletions of {entry.id}; this is a bug, report it")
        if entry == self.entry:
            return self
        segment = LoadedSegment.__new__(LoadedSegment)
        segment.entry, segment.directory = entry, self.directory
        segment._build(self.directory.parent.parent, self.vectors, self.postings, self._columns, self.edge_columns,
                       self.__dict__.get("edges"))  # edges decoded already are shared, not decoded again
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

    def _build(self, store: Path, vectors: np.ndarray, postings: TermPostings, columns: Mapping[str, list],
               edges: EdgeColumns, decoded: tuple[StoredEdge, ...] | None = None) -> None:
        """The in-memory lookups over one segment's rows (`columns`: segment_parquet.LOADED_COLUMNS)
        and its edges, decoded when a caller first asks for them unless `decoded` holds them already."""
        entry = self.entry
        self.vectors, self.postings = vectors, postings
        self.vectors.flags.writeable = False
        if not (len(columns["id"]) == entry.rows == self.vectors.shape[0] == self.postings.num_rows):
            raise StoreError(f"segment {self.directory} holds {len(columns['id'])} rows, {self.vectors.shape[0]} vectors "
                             f"and {self.postings.num_rows} postings rows, the manifest says {entry.rows}; "
                             f"run `rms check --store {store}`")
        self._columns = columns
        self.ids: list[UUID] = columns["id"]
        dead = self._dead_rows()
        self.dead_rows: frozenset[int] = frozenset(dead.tolist())
        self.dead: np.ndarray | None = None  # per row, True where deleted (None: no row is)
        if len(dead):
            self.dead = np.zeros(entry.rows, dtype=bool)
            self.dead[dead] = True
            self.dead.flags.writeable = False
        self.namespace_of_row: list[str] = columns["namespace"]
        # Keyed by (namespace, id): an id is unique within its namespace only, so that what another
        # namespace holds is invisible to a writer (stores/README.md, "Isolation").
        # Every row, dead ones too: an id is not reused while a dead row still holds it.
        self.row_of: dict[tuple[str, UUID], int] = {
            key: position for position, key in enumerate(zip(self.namespace_of_row, self.ids))}
        self._records: pa.Array = columns["record"]
        self.namespace_slices: dict[str, tuple[int, int]] = {}
        for position, namespace in enumerate(self.namespace_of_row):
            start, _ = self.namespace_slices.get(namespace, (position, position))
            self.namespace_slices[namespace] = (start, position + 1)
        self.pinned_rows = [position for position, pinned in enumerate(columns["pinned"])
                            if pinned and position not in self.dead_rows]
        self.entity_rows = [position for position, node_type in enumerate(columns["node_type"])
                            if node_type == NodeType.ENTITY.value and position not in self.dead_rows]
        self.sessions: dict[SessionKey, list[tuple[int, int]]] = defaultdict(list)
        for position, key in enumerate(zip(columns["namespace"], columns["owner"], columns["scope"], columns["session_id"])):
            session_seq = columns["session_seq"][position]
            if key[3] is not None and session_seq is not None and position not in self.dead_rows:
                self.sessions[key].append((session_seq, position))
        self.edge_columns = edges
        if decoded is not None:
            self.__dict__["edges"] = tuple(decoded)
        self.edge_columns.check_owners(entry.rows, self.directory)
        # The namespaces of the edges: a compacted segment may hold edges of a namespace without its rows.
        self.edge_namespaces: frozenset[str] = self.edge_columns.namespace_set
        self._edge_index: _EdgeIndex | None = None
        self._decoded: dict[int, MemoryObject] = {}
        self._checked: pa.Table | None = None
        self._table_lock = threading.Lock()

    def live_row(self, namespace: str, object_id: UUID) -> int | None:
        """The row of `object_id` in `namespace` unless it is deleted here."""
        row = self.row_of.get((namespace, object_id))
        return None if row is None or row in self.dead_rows else row

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
            memory = memory_object(self._records[position].as_py())
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
        fields = json.loads(self._records[position].as_py())
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
        return self.edge_columns.last_edge_id

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
