"""One segment: the rows, vectors, edges and lexical postings of one write, immutable once named.

Files under `segments/<id>/`:
- `objects.parquet`: the rows (typed columns for SQL, plus each object's JSON `record`), grouped by
  namespace so that each namespace's vectors are one contiguous slice;
- `vectors.npy`: float32 unit vectors in row order;
- `edges.parquet`: the graph edges this write added or re-weighted (a later segment's edge wins
  over an earlier one with the same edge id);
- `postings.npz`: the BM25 term postings of the rows (stores/lexical.py).

`write_segment` builds them in a temporary directory, fsyncs, and renames it into place; only a
manifest that names the segment makes it live. `load_segment` verifies every file's sha256 first.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import uuid
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from itertools import combinations
from pathlib import Path
from uuid import UUID

import duckdb
import numpy as np
import pandas as pd

from rms_retrieval.stores import store_sql
from rms_retrieval.stores.codec import ROW_COLUMNS, memory_object, object_record, row_values
from rms_retrieval.stores.errors import StoreError
from rms_retrieval.stores.lexical import TermPostings, term_postings
from rms_retrieval.stores.manifest import SEGMENTS_DIR, SegmentEntry, fsync_path, sha256_file
from rms_retrieval.stores.models import MemoryObject, NodeType
from rms_retrieval.stores.protocols import Edge

OBJECTS_FILE = "objects.parquet"
VECTORS_FILE = "vectors.npy"
EDGES_FILE = "edges.parquet"
POSTINGS_FILE = "postings.npz"
SEGMENT_FILES = (OBJECTS_FILE, VECTORS_FILE, EDGES_FILE, POSTINGS_FILE)
TEMPORARY_PREFIX = ".tmp-"
_DECODED_CACHE_LIMIT = 50_000
MENTIONS = "MENTIONS"

SessionKey = tuple[str, str, str, str]  # namespace, owner, scope, session id


@dataclass(frozen=True, slots=True)
class StoredEdge:
    """An edge as a segment stores it: the graph edge plus the namespace both its ends lie in."""

    edge: Edge
    namespace: str


def segment_directory(store: Path, segment_id: str) -> Path:
    return store / SEGMENTS_DIR / segment_id


def new_segment_id(generation: int) -> str:
    return f"g{generation:08d}-{uuid.uuid4().hex[:12]}"


def _namespace_order(rows: Sequence[MemoryObject]) -> list[int]:
    """Row positions grouped by namespace (stable), so a namespace's vectors are one slice."""
    return sorted(range(len(rows)), key=lambda position: rows[position].namespace)


def write_segment(
    store: Path,
    segment_id: str,
    rows: Sequence[MemoryObject],
    vectors: np.ndarray,
    edges: Sequence[StoredEdge],
    postings: TermPostings | None = None,
    sources: tuple[str, ...] = (),
) -> LoadedSegment:
    """Write one segment durably under `segments/<segment_id>/`; return it, loaded, with its entry.

    `rows` must already be grouped by namespace when `postings` is given (a merge passes the
    concatenated postings of its sources); otherwise rows are grouped here and analysed.
    """
    if postings is None:
        order = _namespace_order(rows)
        rows = [rows[position] for position in order]
        vectors = np.asarray(vectors, dtype=np.float32)[order] if len(order) else vectors
        postings = term_postings([(memory.content, memory.entity_canonical_name) for memory in rows])
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    if vectors.shape[0] != len(rows) or postings.num_rows != len(rows):
        raise StoreError(f"segment {segment_id}: {len(rows)} rows, {vectors.shape[0]} vectors and "
                         f"{postings.num_rows} postings rows disagree; this is a bug, report it")
    parent = store / SEGMENTS_DIR
    parent.mkdir(exist_ok=True)
    staging = parent / f"{TEMPORARY_PREFIX}{segment_id}"
    staging.mkdir()
    try:
        _write_objects(staging / OBJECTS_FILE, rows)
        with (staging / VECTORS_FILE).open("wb") as handle:
            np.save(handle, vectors, allow_pickle=False)
        _write_edges(staging / EDGES_FILE, edges)
        postings.save(staging / POSTINGS_FILE)
        for name in SEGMENT_FILES:
            fsync_path(staging / name)
        fsync_path(staging)
        files = {name: sha256_file(staging / name) for name in SEGMENT_FILES}
        os.rename(staging, parent / segment_id)
        fsync_path(parent)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    entry = SegmentEntry(segment_id, len(rows), files, sources)
    return LoadedSegment.just_written(store, entry, rows, vectors, postings, edges)


def _write_objects(path: Path, rows: Sequence[MemoryObject]) -> None:
    values = [row_values(memory) for memory in rows]
    frame = pd.DataFrame({name: pd.Series([row[name] for row in values], dtype=object) for name in ROW_COLUMNS})
    frame.insert(0, "row", np.arange(len(rows), dtype=np.int64))
    frame["session_seq"] = frame["session_seq"].astype("Int64")
    frame["confidence"] = frame["confidence"].astype("float64")
    frame["salience"] = frame["salience"].astype("float64")
    frame["pinned"] = np.asarray([memory.is_pinned for memory in rows], dtype=bool)
    _copy_to_parquet(store_sql.OBJECT_ROWS, frame, path)


def _write_edges(path: Path, edges: Sequence[StoredEdge]) -> None:
    frame = pd.DataFrame(
        {
            "edge_id": np.asarray([stored.edge.edge_id for stored in edges], dtype=np.int64),
            "source": pd.Series([str(stored.edge.source) for stored in edges], dtype=object),
            "target": pd.Series([str(stored.edge.target) for stored in edges], dtype=object),
            "edge_type": pd.Series([stored.edge.edge_type for stored in edges], dtype=object),
            "confidence": np.asarray([stored.edge.confidence for stored in edges], dtype=np.float64),
            "namespace": pd.Series([stored.namespace for stored in edges], dtype=object),
        }
    )
    _copy_to_parquet(store_sql.EDGE_ROWS, frame, path)


def _copy_to_parquet(query: str, frame: pd.DataFrame, path: Path) -> None:
    connection = store_sql.connect()
    try:
        connection.register("incoming", frame)
        connection.sql(query).write_parquet(str(path), compression="zstd")
    finally:
        connection.close()


class LoadedSegment:
    """A verified segment held in memory: what readers search. Immutable; shared by snapshots."""

    def __init__(self, store: Path, entry: SegmentEntry) -> None:
        """Load the segment `entry` names, verifying every file's sha256 before it is parsed."""
        directory = segment_directory(store, entry.id)
        self.entry, self.directory = entry, directory
        blobs = {name: self._verified_bytes(name) for name in SEGMENT_FILES}
        try:
            vectors = np.load(io.BytesIO(blobs[VECTORS_FILE]), allow_pickle=False)
            postings = TermPostings.load(directory / POSTINGS_FILE)
            cursor = store_sql.connect()
            try:
                objects = cursor.execute(store_sql.LOAD_OBJECTS, [str(directory / OBJECTS_FILE)]).fetchall()
                edges = cursor.execute(store_sql.LOAD_EDGES, [str(directory / EDGES_FILE)]).fetchall()
            finally:
                cursor.close()
        except (ValueError, OSError, duckdb.Error) as error:
            if not directory.exists():  # retired and removed while this reader was loading it
                raise FileNotFoundError(2, "segment retired while loading", str(directory)) from error
            raise StoreError(f"cannot read segment {directory} ({error}); run `rms check --store {store}`") from error
        self._build(store, vectors, postings, objects, edges)

    @classmethod
    def just_written(
        cls, store: Path, entry: SegmentEntry, rows: Sequence[MemoryObject], vectors: np.ndarray,
        postings: TermPostings, edges: Sequence[StoredEdge],
    ) -> LoadedSegment:
        """The segment a write has just made, from the values it wrote (no need to read them back)."""
        segment = cls.__new__(cls)
        segment.entry, segment.directory = entry, segment_directory(store, entry.id)
        objects = [(memory.id, memory.namespace, memory.owner, memory.scope, memory.session_id, memory.node_type.value,
                    memory.is_pinned, object_record(memory), memory.session_seq) for memory in rows]
        edge_rows = [(stored.edge.edge_id, stored.edge.source, stored.edge.target, stored.edge.edge_type,
                      stored.edge.confidence, stored.namespace) for stored in edges]
        segment._build(store, np.array(vectors, dtype=np.float32), postings, objects, edge_rows)
        return segment

    def _build(self, store: Path, vectors: np.ndarray, postings: TermPostings, objects: list, edges: list) -> None:
        """The in-memory lookups over one segment's rows (columns in store_sql.LOAD_OBJECTS order)."""
        entry = self.entry
        self.vectors, self.postings = vectors, postings
        self.vectors.flags.writeable = False
        if not (len(objects) == entry.rows == self.vectors.shape[0] == self.postings.num_rows):
            raise StoreError(f"segment {self.directory} holds {len(objects)} rows, {self.vectors.shape[0]} vectors and "
                             f"{self.postings.num_rows} postings rows, the manifest says {entry.rows}; "
                             f"run `rms check --store {store}`")
        self.ids: list[UUID] = [row[0] for row in objects]
        self.row_of: dict[UUID, int] = {object_id: position for position, object_id in enumerate(self.ids)}
        self.namespace_of_row: list[str] = [row[1] for row in objects]
        self._records: list[str] = [row[7] for row in objects]
        self.namespace_slices: dict[str, tuple[int, int]] = {}
        for position, namespace in enumerate(self.namespace_of_row):
            start, _ = self.namespace_slices.get(namespace, (position, position))
            self.namespace_slices[namespace] = (start, position + 1)
        self.pinned_rows = [position for position, row in enumerate(objects) if row[6]]
        self.entity_rows = [position for position, row in enumerate(objects) if row[5] == NodeType.ENTITY.value]
        self.sessions: dict[SessionKey, list[tuple[int, int]]] = defaultdict(list)
        for position, (_, namespace, owner, scope, session_id, _, _, _, session_seq) in enumerate(objects):
            if session_id is not None and session_seq is not None:
                self.sessions[(namespace, owner, scope, session_id)].append((session_seq, position))
        self.edges = tuple(
            StoredEdge(Edge(edge_id, source, target, edge_type, confidence), namespace)
            for edge_id, source, target, edge_type, confidence, namespace in edges
        )
        self._decoded: dict[int, MemoryObject] = {}

    def _verified_bytes(self, name: str) -> bytes:
        path = self.directory / name
        expected = self.entry.files.get(name)
        data = path.read_bytes()  # FileNotFoundError is the caller's cue that a merge retired it
        if expected is None or hashlib.sha256(data).hexdigest() != expected:
            raise StoreError(f"{path} is damaged (its sha256 differs from the manifest's); "
                             f"restore the store from a backup, or rebuild it with `rms ingest`")
        return data

    def object_at(self, position: int) -> MemoryObject:
        memory = self._decoded.get(position)
        if memory is None:
            memory = memory_object(self._records[position])
            if len(self._decoded) >= _DECODED_CACHE_LIMIT:
                self._decoded.clear()
            self._decoded[position] = memory
        return memory

    def objects(self) -> list[MemoryObject]:
        return [self.object_at(position) for position in range(len(self.ids))]

    @property
    def parquet_path(self) -> Path:
        return self.directory / OBJECTS_FILE

    @cached_property
    def edge_ids_by_key(self) -> dict[tuple[str, UUID, UUID], int]:
        """Edge id by (edge type, source, target): how a re-weight finds the edge it replaces."""
        return {(stored.edge.edge_type, stored.edge.source, stored.edge.target): stored.edge.edge_id for stored in self.edges}

    @cached_property
    def co_mentions(self) -> Counter[tuple[str, UUID, UUID]]:
        """Per (namespace, smaller id, larger id): how many of this segment's objects mention both."""
        targets: dict[UUID, list[UUID]] = defaultdict(list)
        namespaces: dict[UUID, str] = {}
        for stored in self.edges:
            if stored.edge.edge_type == MENTIONS:
                targets[stored.edge.source].append(stored.edge.target)
                namespaces[stored.edge.source] = stored.namespace
        counts: Counter[tuple[str, UUID, UUID]] = Counter()
        for source, mentioned in targets.items():
            for first, second in combinations(sorted(set(mentioned)), 2):
                counts[(namespaces[source], first, second)] += 1
        return counts
