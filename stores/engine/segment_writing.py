"""Writing one segment: its rows, vectors, postings and edges serialised in memory, hashed once,
written into a staging directory, fsynced and renamed into place (stores/engine/segments.py says
what the files hold); and the deletion file an update, delete or erase gives a segment."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
from collections import Counter
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow as pa

from rms_retrieval.stores.analysis.text_tokens import TEXT_TOKENS, spoken_tokens
from rms_retrieval.stores.engine.edge_columns import COUNTED_ARRAY, EdgeColumns, confidence_arrays, smallest_int, stored_edge_arrays
from rms_retrieval.stores.engine.manifest import SEGMENTS_DIR, Deletions, SegmentEntry, fsync_path
from rms_retrieval.stores.engine.npz_views import npz_bytes
from rms_retrieval.stores.engine.segment_parquet import (objects_table, parquet_bytes, record_arrays, segment_columns,
                                                         without_records)
from rms_retrieval.stores.engine.segment_index import IndexArrays, owned_edges
from rms_retrieval.stores.engine.segment_vectors import SegmentVectors
from rms_retrieval.stores.engine.segment_layout import (DELETIONS_PREFIX, INDEX_FILE, OBJECTS_FILE, SIDECAR_FILE,
                                                       TEMPORARY_PREFIX, segment_directory)
from rms_retrieval.stores.engine.scope_graph import counted_confidences
from rms_retrieval.stores.engine.segments import LoadedSegment, StoredEdge
from rms_retrieval.stores.errors import StoreError
from rms_retrieval.stores.indexes.postings import TermPostings, read_only, term_postings
from rms_retrieval.stores.models import MemoryObject


def _namespace_order(rows: Sequence[MemoryObject]) -> list[int]:
    """Row positions grouped by namespace (stable), so a namespace's vectors are one slice."""
    return sorted(range(len(rows)), key=lambda position: rows[position].namespace)


def write_segment(
    store: Path,
    segment_id: str,
    rows: Sequence[MemoryObject],
    vectors: SegmentVectors,
    edges: Sequence[StoredEdge],
    postings: TermPostings | None = None,
) -> LoadedSegment:
    """Write one segment of `rows` durably under `segments/<segment_id>/`; return it, loaded.

    `rows` must already be grouped by namespace when `postings` is given; otherwise rows are
    grouped here and analysed.
    """
    if postings is None:
        order = _namespace_order(rows)
        rows = [rows[position] for position in order]
        vectors = vectors.take(np.asarray(order, dtype=np.int64))
        postings = term_postings([(memory.content, memory.entity_canonical_name) for memory in rows])
    return write_table_segment(store, segment_id, objects_table(rows), vectors, edges, postings, text_tokens=spoken_tokens(rows))


def write_table_segment(
    store: Path,
    segment_id: str,
    objects: pa.Table,
    vectors: SegmentVectors,
    edges: Sequence[StoredEdge] | Mapping[str, np.ndarray],
    postings: TermPostings,
    sources: tuple[str, ...] = (),
    staging_prefix: str = TEMPORARY_PREFIX,
    publish: bool = True,
    *,
    text_tokens: np.ndarray,
) -> LoadedSegment:
    """Write one segment from its objects table (OBJECTS_SCHEMA, rows grouped by namespace, `row`
    counting from 0), vectors, edges (as `StoredEdge`s, or as the arrays a merge builds),
    postings and each row's `text_tokens.spoken_tokens`; a merge passes its sources' ids as `sources`.

    Each file is serialised in memory, hashed, written and fsynced once, with the staging
    directory `segments/<staging_prefix><id>/`; then (with `publish`) that is renamed into place:
    a merge renames it itself when it commits. Nothing names the segment until a manifest does,
    and `write_manifest` fsyncs `segments/` before it switches to one that does.
    """
    vector_arrays = vectors.to_arrays()
    vectors = SegmentVectors.from_arrays(vector_arrays, vectors.num_rows)
    if vectors.problem() is not None or vectors.num_rows != objects.num_rows or postings.num_rows != objects.num_rows:
        raise StoreError(f"segment {segment_id}: {objects.num_rows} rows, {vectors.problem() or 'its vectors'} and "
                         f"{postings.num_rows} postings rows disagree; this is a bug, report it")
    columns = segment_columns(objects)
    decoded = None
    if isinstance(edges, Mapping):  # a merge's edges, as arrays (edge_columns.merged_edge_arrays)
        edge_arrays = dict(edges)
    else:
        # every owner known before it is stored (an edge given without one is owned by its source's
        # row; compaction gives every owner, so its rows are not looked up by id)
        unowned = any(stored.row is None for stored in edges)
        row_of = columns.rows_by_key() if unowned else {}
        decoded = owned_edges(edges, row_of, objects.num_rows)
        edge_arrays = stored_edge_arrays(decoded)
    confidences = counted_confidences(EdgeColumns(edge_arrays), objects.num_rows)
    edge_arrays.update(confidence_arrays(confidences), **{COUNTED_ARRAY: np.ones(1, dtype=np.uint8)})
    if decoded is not None:  # the edges as stored, with the confidences the segment counted
        decoded = tuple(stored if stored.edge.confidence == confidence
                        else replace(stored, edge=replace(stored.edge, confidence=confidence))
                        for stored, confidence in zip(decoded, confidences.tolist()))
    if len(text_tokens) != objects.num_rows:
        raise StoreError(f"segment {segment_id}: {objects.num_rows} rows need as many text token counts; "
                         "this is a bug, report it")
    text_tokens = read_only(smallest_int(np.asarray(text_tokens, dtype=np.int64)))
    blobs = {OBJECTS_FILE: parquet_bytes(without_records(objects)),
             INDEX_FILE: npz_bytes({**vector_arrays, **record_arrays(objects.column("record")), **postings.to_arrays(),
                                    **edge_arrays, TEXT_TOKENS: text_tokens})}
    digests = {name: hashlib.sha256(data).hexdigest() for name, data in blobs.items()}
    namespaces = Counter(objects.column("namespace").to_pylist())
    sidecar = sidecar_bytes(segment_id, objects.num_rows, digests, sources, dict(sorted(namespaces.items())),
                            vectors.matrix.shape[1])
    parent = store / SEGMENTS_DIR
    parent.mkdir(exist_ok=True)
    staging = parent / f"{staging_prefix}{segment_id}"
    staging.mkdir()
    try:
        files = {**blobs, SIDECAR_FILE: sidecar}
        for name, data in files.items():
            (staging / name).write_bytes(data)
        # The files' data and the staging directory's entries are independent, so their fsyncs
        # run at once (the journal commits them together); all must finish before the rename.
        with ThreadPoolExecutor(len(files) + 1, thread_name_prefix="segment-fsync") as pool:
            list(pool.map(fsync_path, [*(staging / name for name in files), staging]))
        if publish:
            os.rename(staging, parent / segment_id)  # made durable by the manifest switch that names it
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    entry = SegmentEntry(segment_id, objects.num_rows, digests, sources)
    segment = LoadedSegment.__new__(LoadedSegment)
    segment.entry, segment.directory = entry, segment_directory(store, segment_id)
    edge_columns = EdgeColumns(edge_arrays)
    edge_columns.check_owners(objects.num_rows, segment.directory)
    segment._build(store, IndexArrays(vectors, postings, edge_columns, None, None, text_tokens), columns, decoded)
    return segment


def segment_text_tokens(segment: LoadedSegment) -> np.ndarray:
    """Each row's `text_tokens.spoken_tokens`, dead rows too: as `segment` keeps them, or counted
    from its records (a segment written before they were kept), for a merge or compaction to carry."""
    kept = segment.text_tokens
    if kept is not None:
        return np.asarray(kept, dtype=np.int64)
    return spoken_tokens(segment.object_at(row) for row in range(segment.entry.rows))


def sidecar_bytes(segment_id: str, rows: int, files: Mapping[str, str], sources: Sequence[str],
                  namespaces: Mapping[str, int], dimension: int) -> bytes:
    """The segment's description (SIDECAR_FILE), canonical JSON."""
    return json.dumps({"id": segment_id, "rows": rows, "files": dict(files), "sources": list(sources),
                       "namespaces": dict(namespaces), "dimension": dimension}, sort_keys=True).encode()


def write_deletions(store: Path, segment_id: str, generation: int, rows: Sequence[int]) -> Deletions:
    """Write the deletion file of generation `generation` for a segment durably (it is live once a
    manifest names it): the sorted dead rows as an int64 `.npy`."""
    directory = segment_directory(store, segment_id)
    name = f"{DELETIONS_PREFIX}g{generation:08d}.npy"
    buffer = io.BytesIO()
    np.save(buffer, np.unique(np.asarray(rows, dtype=np.int64)), allow_pickle=False)
    data = buffer.getvalue()
    staged = directory / f"{TEMPORARY_PREFIX}{name}"
    try:
        staged.write_bytes(data)
        fsync_path(staged)
        os.rename(staged, directory / name)
        fsync_path(directory)
    except BaseException:
        staged.unlink(missing_ok=True)
        raise
    return Deletions(name, hashlib.sha256(data).hexdigest(), len(set(rows)))
