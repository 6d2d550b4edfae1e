"""Compaction: rewrite every segment that holds deleted rows, or edges that name a deleted object,
without them (and without the edges those rows owned), and remove every file no generation needs. What erasure relies on: after it, no
byte of a deleted object is left in `segments/`.

Rows move as Arrow columns and postings and vectors as arrays (no text is embedded or analysed
again); untouched segments are kept as they are. Runs under the write lock; readers never wait
(they hold their snapshot and pick up the new generation on their next request).
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pyarrow as pa

from rms_retrieval.stores.engine.edge_columns import EdgeColumns, id_keys
from rms_retrieval.stores.engine.manifest import MANIFEST_FILE, SEGMENTS_DIR, Manifest, write_manifest
from rms_retrieval.stores.engine.mentioners import SortedIds
from rms_retrieval.stores.engine.scope_graph import dead_keys
from rms_retrieval.stores.engine.segment_layout import new_segment_id
from rms_retrieval.stores.engine.segments import LoadedSegment, StoredEdge
from rms_retrieval.stores.engine.segment_writing import segment_text_tokens, write_table_segment
from rms_retrieval.stores.snapshot import StoreSnapshot
from rms_retrieval.stores.engine.manifest import committed_generation
from rms_retrieval.stores.engine.writer import remove_unnamed_deletions, store_made
from rms_retrieval.stores.indexes.adjacency import code_of


def naming_dead(columns: EdgeColumns, dead: Mapping[str, np.ndarray]) -> np.ndarray:
    """Per edge of `columns`, whether either end is a deleted (namespace, id) (`dead`: `dead_keys`
    of the store's): read from the columns, no edge decoded (a segment compaction keeps would hold
    its edges as objects after)."""
    named = np.zeros(len(columns), dtype=bool)
    for namespace, keys in dead.items():
        code = code_of(columns.namespace_names, namespace)
        if code < 0:
            continue
        edges = np.flatnonzero(columns.namespaces == code)
        ends = SortedIds(keys).positions(id_keys(columns.ends_at(edges))).reshape(-1, 2)
        named[edges] = (ends >= 0).any(axis=1)
    return named


def compact(store: Path, snapshot: StoreSnapshot) -> tuple[Manifest, list[LoadedSegment]] | None:
    """Commit the compacted generation of `snapshot` (None when nothing needs it) and remove
    every file it does not name at once: retired segments get no grace period."""
    dead = dead_keys(snapshot.dead_ids)
    named = [naming_dead(segment.edge_columns, dead) for segment in snapshot.segments]  # once per segment
    if not any(segment.dead_rows or naming.any() for segment, naming in zip(snapshot.segments, named)):
        return None
    generation = snapshot.generation + 1
    segments: list[LoadedSegment] = []
    written: list[LoadedSegment] = []
    retired: list[str] = []
    try:
        for segment, naming in zip(snapshot.segments, named):
            if not segment.dead_rows and not naming.any():  # no deleted row, no edge to a deleted object
                segments.append(segment)
                continue
            retired.append(segment.entry.id)
            kept = segment.live_positions()
            new_row = np.full(segment.entry.rows, -1, dtype=np.int64)
            new_row[kept] = np.arange(len(kept))
            # An edge goes with its owner row (a deleted object's, or an old version's) and with either end.
            columns = segment.edge_columns
            live = columns.live_positions(segment.dead)
            edges = [StoredEdge(stored.edge, stored.namespace, -1 if stored.row < 0 else int(new_row[stored.row]))
                     for stored in columns.decoded(live[~naming[live]])]
            if not len(kept) and not edges:
                continue
            objects = segment.objects_table().take(pa.array(kept))
            objects = objects.set_column(0, "row", pa.array(np.arange(len(kept), dtype=np.int64)))
            written.append(write_table_segment(store, new_segment_id(generation), objects, segment.rewritten_vectors().take(kept), edges,
                                               segment.postings.subset(kept), sources=(segment.entry.id,),
                                               text_tokens=segment_text_tokens(segment)[kept]))
            segments.append(written[-1])
        manifest = Manifest(generation, snapshot.manifest.embedding, tuple(segment.entry for segment in segments),
                            tuple(retired), snapshot.manifest.expansion)
        write_manifest(store, manifest)
    except BaseException:
        if committed_generation(store) != generation:  # a failed compaction leaves the store as it was
            for segment in written:
                shutil.rmtree(segment.directory, ignore_errors=True)
        raise
    remove_unnamed(store, manifest)
    return manifest, segments


def remove_unnamed(store: Path, live: Manifest) -> None:
    """Remove every segment directory the store made, deletion file and staged file `live` does
    not name (what the store did not make, such as an operator's backup, is never touched)."""
    (store / (MANIFEST_FILE + ".tmp")).unlink(missing_ok=True)
    named = set(live.segment_ids)
    directory = store / SEGMENTS_DIR
    if directory.exists():
        for child in directory.iterdir():
            if child.name not in named and store_made(child.name):
                shutil.rmtree(child, ignore_errors=True)
    remove_unnamed_deletions(store, live)
