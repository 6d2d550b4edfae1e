"""`rms migrate`: turn a format-2 store (`store.duckdb` + `vectors-N.faiss`) into a segment store.

The old database and FAISS file are read read-only; their objects, vectors and edges become one
segment of generation 1, and the old retrieval log becomes this process's log file. The old
files stay where they are until the user deletes them; the new manifest takes precedence.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import duckdb
import faiss
import numpy as np
from pydantic import ValidationError

from rms_retrieval.stores.engine import store_sql

from rms_retrieval.stores.indexes import vector_index
from rms_retrieval.stores.errors import StoreError
from rms_retrieval.stores.engine.manifest import LEGACY_DATABASE_FILE, MANIFEST_FILE, Manifest, write_manifest
from rms_retrieval.stores.models import MemoryObject
from rms_retrieval.stores.protocols import Edge, EmbeddingIdentity
from rms_retrieval.stores.log.retrieval_log import RetrievalLogWriter
from rms_retrieval.stores.engine.segment_layout import new_segment_id
from rms_retrieval.stores.engine.segments import StoredEdge
from rms_retrieval.stores.engine.segment_vectors import SegmentVectors
from rms_retrieval.stores.engine.segment_writing import write_segment
from rms_retrieval.stores.engine.write_lock import WriteLock

LEGACY_SCHEMA_VERSION = "2"
_JSON_FIELDS = ("evidence_refs", "metadata", "assertion", "quantity")
_COLUMNS = (*MemoryObject.model_fields,)


@dataclass(frozen=True)
class MigrationReport:
    objects: int
    edges: int
    log_records: int

    def to_text(self) -> str:
        return (f"migrated {self.objects} objects, {self.edges} edges and {self.log_records} log records into "
                f"one segment; the old {LEGACY_DATABASE_FILE} and vectors-*.faiss can now be deleted")


def migrate_store(path: Path) -> MigrationReport:
    """Write the segment store for the format-2 store at `path`; StoreError if it is not one."""
    database = path / LEGACY_DATABASE_FILE
    if (path / MANIFEST_FILE).exists():
        raise StoreError(f"{path} is already a segment store ({MANIFEST_FILE} exists); there is nothing to migrate")
    if not database.exists():
        raise StoreError(f"no old-format store at {path} ({LEGACY_DATABASE_FILE} is missing)")
    try:
        connection = duckdb.connect(str(database), read_only=True)
    except duckdb.Error as error:
        raise StoreError(f"cannot open {database} read-only ({error}); is another process writing it?") from error
    try:
        connection.execute("SET TimeZone = 'UTC'")
        meta = dict(connection.execute(store_sql.LEGACY_META).fetchall())
        if meta.get("schema_version") != LEGACY_SCHEMA_VERSION:
            raise StoreError(f"{database} has schema version {meta.get('schema_version')!r}; `rms migrate` reads "
                             f"version {LEGACY_SCHEMA_VERSION}, rebuild the store with `rms ingest`")
        cursor = connection.execute(store_sql.LEGACY_OBJECTS)
        names = [column[0] for column in cursor.description]
        rows = cursor.fetchall()
        edges = connection.execute(store_sql.LEGACY_EDGES).fetchall()
        log = [json.loads(record) for (record,) in connection.execute(store_sql.LEGACY_LOG).fetchall()]
    finally:
        connection.close()
    objects = [_legacy_object(dict(zip(names, row)), database) for row in rows]
    identity, vectors = _legacy_vectors(path, meta, [row[0] for row in rows])
    stored_edges = [StoredEdge(Edge(edge_id, source, target, edge_type, confidence), namespace)
                    for edge_id, source, target, edge_type, confidence, namespace in edges]
    with WriteLock(path):
        segments = ()
        if objects:
            kept = SegmentVectors.dense(vectors).take(np.arange(len(objects)),
                                                      np.asarray([not memory.is_bare_entity for memory in objects]))
            segments = (write_segment(path, new_segment_id(1), objects, kept, stored_edges).entry,)
        if log:
            writer = RetrievalLogWriter(path / "log")
            for record in log:
                writer.append(record)
            writer.close()
        write_manifest(path, Manifest(1 if objects else 0, identity, segments))
    return MigrationReport(len(objects), len(edges), len(log))


def _legacy_object(row: dict, database: Path) -> MemoryObject:
    fields = {name: row[name] for name in _COLUMNS}
    for name in _JSON_FIELDS:
        fields[name] = None if fields[name] is None else json.loads(fields[name])
    try:
        return MemoryObject.model_validate(fields)
    except ValidationError as error:
        raise StoreError(f"object {row['id']} in {database} does not validate ({error.errors()[0]['msg']}); "
                         "rebuild the store with `rms ingest`") from error


def _legacy_vectors(path: Path, meta: dict, vec_ids: list[int]) -> tuple[EmbeddingIdentity | None, np.ndarray]:
    if "embedding_model_name" not in meta:
        return None, np.zeros((0, 0), dtype=np.float32)
    identity = EmbeddingIdentity(meta["embedding_model_name"], meta["embedding_model_hash"], int(meta["embedding_dimension"]))
    vectors_path = path / f"vectors-{meta['generation']}.faiss"
    try:
        index = vector_index.load_index(vectors_path)
        stored = index.index.reconstruct_n(0, index.ntotal)
        ids = faiss.vector_to_array(index.id_map)
    except RuntimeError as error:
        raise StoreError(f"cannot read {vectors_path} ({error}); rebuild the store with `rms ingest`") from error
    by_id = dict(zip(ids.tolist(), range(len(ids))))
    missing = [vec_id for vec_id in vec_ids if vec_id not in by_id]
    if missing:
        raise StoreError(f"{vectors_path} lacks the vectors of {len(missing)} objects; rebuild the store with `rms ingest`")
    return identity, np.asarray(stored[[by_id[vec_id] for vec_id in vec_ids]], dtype=np.float32)
