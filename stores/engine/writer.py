"""The write path: one add becomes one new segment and one manifest (merges follow it, off the
write path: stores/engine/merging.py).

Everything here runs under the write lock (stores/engine/write_lock.py) on the writer's snapshot, which
was refreshed after the lock was taken, so the entity graph sees every committed entity and
co-mention without scanning the store. Order of a commit: segment files (fsynced, renamed into
place), then `manifest.json` (stores/engine/manifest.py). A crash before the manifest switch leaves the
previous generation live and some unnamed files, which `GarbageCollector` removes on the next write.
"""

from __future__ import annotations

import errno
import shutil
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from uuid import UUID

import numpy as np

from rms_retrieval.stores.providers.embedding import encode_many, validated_vectors
from rms_retrieval.stores.indexes.entity_graph import CO_MENTIONED, GraphEdge, GraphUpdate, entity_graph, entity_id
from rms_retrieval.stores.errors import EmbeddingError, EmbeddingMismatchError, StoreError
from rms_retrieval.stores.analysis.expansion import TurnExpansion, indexed_texts
from rms_retrieval.stores.indexes.postings import TermPostings, term_postings
from rms_retrieval.stores.engine.manifest import (MANIFEST_FILE, SEGMENTS_DIR, Manifest, committed_generation, write_manifest)
from rms_retrieval.stores.models import MemoryObject
from rms_retrieval.stores.analysis.positions import placed_turns
from rms_retrieval.stores.protocols import Edge, EmbeddingIdentity, QueryEncoder
from rms_retrieval.stores.engine.segment_layout import (DELETIONS_PREFIX, SEGMENT_NAME, TEMPORARY_PREFIX, new_segment_id,
                                                       segment_generation)
from rms_retrieval.stores.engine.segments import LoadedSegment, StoredEdge
from rms_retrieval.stores.engine.merging import remove_dead_merges
from rms_retrieval.stores.engine.segment_writing import write_deletions, write_segment
from rms_retrieval.stores.engine.segment_vectors import SegmentVectors
from rms_retrieval.stores.snapshot import StoreSnapshot
from rms_retrieval.stores.analysis.speakers import DEFAULT_SPEAKER_RULES, SpeakerRules

# How long a retired segment's files outlive the write that retired it (GarbageCollector).
RETIRED_GRACE_SECONDS = 60.0
MISMATCH_HINT = "use that model, or rebuild the store with `rms ingest` into an empty directory"


@dataclass(frozen=True)
class PreparedWrite:
    """What one add will store: its rows (objects and new entities), their vectors and edges."""

    rows: tuple[MemoryObject, ...]
    vectors: SegmentVectors
    edges: tuple[StoredEdge, ...]
    graph: GraphUpdate
    embedding_seconds: float
    postings: TermPostings
    expansion: TurnExpansion


def prepare_write(
    snapshot: StoreSnapshot, objects: Sequence[MemoryObject], encoder: QueryEncoder, *, progress: bool,
    expansion: TurnExpansion, versions: Collection[UUID] = (), extra_edges: Sequence[GraphEdge] = (),
    speakers: SpeakerRules = DEFAULT_SPEAKER_RULES, given_vectors: Mapping[UUID, np.ndarray] | None = None,
) -> PreparedWrite:
    """Rows, vectors and numbered edges for `objects` on top of `snapshot` (positionless session
    turns placed by arrival, stores/analysis/positions.py); nothing is written. `versions`: ids of
    `objects` that are new versions of live objects (their old rows are deleted by the same
    commit); `extra_edges`: edges to store besides the entity graph's (SUPERSEDES);
    `given_vectors`: checked unit vectors by object id, used instead of embedding those objects."""
    _check_new_ids(snapshot, [memory for memory in objects if memory.id not in versions])
    objects = placed_turns(objects, snapshot.segments)
    namespaces = sorted({memory.namespace for memory in objects})
    anchors = namespace_anchors(snapshot, objects)
    graph = entity_graph(objects, snapshot.known_names(namespaces), snapshot.co_mention_counts(namespaces), anchors,
                         speakers)
    graph = _without_id_clashes(graph, snapshot, {(memory.namespace, memory.id) for memory in objects}, anchors)
    graph = GraphUpdate(graph.entities, (*graph.edges, *extra_edges), graph.reweighted)
    # grouped by namespace here (stable, as write_segment would) so the postings match the rows
    rows = tuple(sorted((*objects, *graph.entities), key=lambda memory: memory.namespace))
    texts = indexed_texts(rows, snapshot.segments, expansion)
    started = time.perf_counter()
    vectors = row_vectors(rows, texts.vector, encoder, given_vectors or {}, progress)
    embedding_seconds = time.perf_counter() - started
    next_id = snapshot.max_edge_id + 1
    owner = {(memory.namespace, memory.id): row for row, memory in enumerate(rows)}
    edges: list[StoredEdge] = []
    for edge in (*graph.edges, *graph.reweighted):
        # A pair whose earlier co-mentions were all deleted still has its edge: it is re-weighted.
        # A re-weighted pair may have none: objects that mention both but further apart than
        # CO_MENTION_WINDOW counted without joining them; this write's edge is its first.
        existing = snapshot.co_mentioned_edge_id(edge.namespace, edge.source, edge.target) if edge.edge_type == CO_MENTIONED else None
        if existing is None:
            existing, next_id = next_id, next_id + 1
        edges.append(_stored(edge, existing, owner))
    edges.sort(key=lambda stored: stored.edge.edge_id)
    return PreparedWrite(rows, vectors, tuple(edges), graph, embedding_seconds, term_postings(texts.lexical), expansion)


def joined(first: PreparedWrite, second: PreparedWrite) -> PreparedWrite:
    """One write of both prepared writes' rows, still grouped by namespace (within a namespace,
    `first`'s rows before `second`'s), with their vectors, postings and edges (owner rows
    renumbered); `second` adds no entity (`first` made the graph update)."""
    if second.graph.entities:
        raise StoreError("the second of two joined writes must add no entity; this is a bug, report it")
    spans = [(write, _namespace_spans(write.rows)) for write in (first, second)]
    rows: list[MemoryObject] = []
    vectors, postings = [], []
    edges = [stored for write in (first, second) for stored in write.edges if stored.row < 0]
    for namespace in sorted({*spans[0][1], *spans[1][1]}):
        for write, by_namespace in spans:
            if namespace not in by_namespace:
                continue
            start, stop = by_namespace[namespace]
            offset = len(rows) - start
            rows += write.rows[start:stop]
            vectors.append(write.vectors.take(np.arange(start, stop)))
            postings.append(write.postings.subset(np.arange(start, stop)))
            edges += [StoredEdge(stored.edge, stored.namespace, stored.row + offset) for stored in write.edges
                      if start <= stored.row < stop]
    return PreparedWrite(tuple(rows), SegmentVectors.concatenate(vectors), tuple(sorted(edges, key=lambda stored: stored.edge.edge_id)),
                         first.graph, first.embedding_seconds, TermPostings.concatenate(postings), first.expansion)


def _namespace_spans(rows: Sequence[MemoryObject]) -> dict[str, tuple[int, int]]:
    """Where each namespace's rows lie in rows grouped by namespace."""
    spans: dict[str, tuple[int, int]] = {}
    for position, memory in enumerate(rows):
        start, _ = spans.get(memory.namespace, (position, position))
        spans[memory.namespace] = (start, position + 1)
    return spans


def row_vectors(rows: Sequence[MemoryObject], texts: Sequence[str], encoder: QueryEncoder,
                given: Mapping[UUID, np.ndarray], progress: bool) -> SegmentVectors:
    """Each row's vector: the given one, else the encoder's; a bare entity has none
    (stores/engine/segment_vectors.py), so nothing embeds it and a vector given for it is not kept."""
    embedded = [i for i, memory in enumerate(rows) if not memory.is_bare_entity]
    for i in embedded:
        if rows[i].id in given and texts[i] != rows[i].content:
            raise StoreError(f"object {rows[i].id} is embedded with its neighbouring turns in this store (its "
                             "expansion embeds expanded text), so a precomputed vector of its content alone does not "
                             "fit; add it without vectors, or use a store whose expansion leaves vectors alone")
    missing = [i for i in embedded if rows[i].id not in given]
    matrix = np.empty((len(embedded), encoder.identity.dimension), dtype=np.float32)
    if missing:
        encoded = encode_many(encoder, [texts[i] for i in missing], progress=progress)
        matrix[np.searchsorted(embedded, missing)] = encoded
    for position, i in enumerate(embedded):
        if rows[i].id in given:
            matrix[position] = given[rows[i].id]
    return SegmentVectors(matrix, np.asarray(embedded, dtype=np.int64), len(rows))


def _stored(edge: GraphEdge, edge_id: int, owner: Mapping[tuple[str, UUID], int]) -> StoredEdge:
    """`edge` numbered, owned by its source's row of the write (CO_MENTIONED by none)."""
    row = -1 if edge.edge_type == CO_MENTIONED else owner[(edge.namespace, edge.source)]
    return StoredEdge(Edge(edge_id, edge.source, edge.target, edge.edge_type, edge.confidence), edge.namespace, row)


def namespace_anchors(snapshot: StoreSnapshot, objects: Sequence[MemoryObject]) -> dict[str, UUID]:
    """Each batch namespace's anchor: its first stored object's id, or for a new namespace the id
    of the batch's first object in it (which the write stores first there)."""
    anchors: dict[str, UUID] = {}
    for memory in objects:
        if memory.namespace not in anchors:
            anchors[memory.namespace] = snapshot.namespace_anchor(memory.namespace) or memory.id
    return anchors


def _check_new_ids(snapshot: StoreSnapshot, objects: Sequence[MemoryObject]) -> None:
    """Ids are unique within a namespace. Only the batch's own namespaces are consulted, so a
    refusal never tells a writer what another namespace holds."""
    seen: set[tuple[str, UUID]] = set()
    for memory in objects:
        key = (memory.namespace, memory.id)
        if key in seen:
            raise StoreError(f"object {memory.id} appears twice in the batch for namespace {memory.namespace!r}; "
                             "give each memory its own id")
        seen.add(key)
    clashes = sorted((key for key in seen if snapshot.contains(*key)), key=lambda key: (key[0], key[1].int))
    if clashes:
        namespace, object_id = clashes[0]
        raise StoreError(f"object {object_id} is already in namespace {namespace!r}; objects are added once")


def _without_id_clashes(graph: GraphUpdate, snapshot: StoreSnapshot, batch_keys: set[tuple[str, UUID]],
                        anchors: dict[str, UUID]) -> GraphUpdate:
    """The update with every new entity whose derived id is taken in its namespace (by a
    user-supplied id) moved to the next free derived id, edges included. The id of a deleted
    object is free here: an entity a delete left without mentions (changes.entity_changes) gets
    its id back when it is named again, as in a store that never held what named it before."""
    taken = set(batch_keys)
    moved: dict[UUID, UUID] = {}
    entities = []
    for entity in graph.entities:
        fresh, attempt = entity.id, 0
        while (entity.namespace, fresh) in taken or snapshot.is_live(entity.namespace, fresh):
            attempt += 1
            fresh = entity_id(entity.namespace, entity.entity_canonical_name or entity.content,
                              anchors[entity.namespace], attempt)
        taken.add((entity.namespace, fresh))
        if fresh != entity.id:
            moved[entity.id] = fresh
            entity = entity.model_copy(update={"id": fresh})
        entities.append(entity)
    if not moved:
        return graph

    def remapped(edge: GraphEdge) -> GraphEdge:
        source, target = moved.get(edge.source, edge.source), moved.get(edge.target, edge.target)
        if edge.edge_type == "CO_MENTIONED" and source > target:
            source, target = target, source
        return GraphEdge(edge.namespace, edge.edge_type, source, target, edge.confidence)

    return GraphUpdate(
        entities=tuple(sorted(entities, key=lambda entity: entity.id)),
        edges=tuple(sorted(map(remapped, graph.edges))),
        reweighted=tuple(sorted(map(remapped, graph.reweighted))),
    )


def store_made(name: str) -> bool:
    """Whether a name under `segments/` is one the store makes: a segment or its staging directory."""
    return SEGMENT_NAME.fullmatch(name.removeprefix(TEMPORARY_PREFIX)) is not None


class GarbageCollector:
    """Removes the segment directories no generation needs any more; runs under the write lock.

    Never-named directories (a staging `.tmp-*` directory, or a segment of a generation at or after
    the live one that the live manifest does not name: a dead write's) go on the next write, as
    does a killed merge's `.merge-*` staging when no merge is running (stores/engine/merging.py). A retired segment (named by an older
    generation) stays `grace` seconds after the write that retired it stamped its directory's
    mtime, because a reader may still be answering from an older snapshot: aggregation and
    enumeration read its Parquet files as they go. The open writer remembers what is waiting, so a
    write lists the directory only when another process wrote, or died writing, since its own
    last write.
    """

    def __init__(self, store: Path, grace: float) -> None:
        self._store, self._grace = store, grace
        self._waiting: dict[str, float] = {}  # retired segment id -> when it was retired
        self._known_generation: int | None = None

    def collect(self, live: Manifest, *, writer_died: bool) -> None:
        """Remove what `live` (the committed generation this write builds on) no longer needs;
        `writer_died`: the write lock's last holder died holding it."""
        (self._store / (MANIFEST_FILE + ".tmp")).unlink(missing_ok=True)
        remove_dead_merges(self._store)
        if writer_died or live.generation != self._known_generation:
            self._waiting = self._listed(live)
        now = time.time()
        for segment_id, retired_at in list(self._waiting.items()):
            if now - retired_at >= self._grace:
                shutil.rmtree(self._store / SEGMENTS_DIR / segment_id, ignore_errors=True)
                del self._waiting[segment_id]

    def committed(self, manifest: Manifest, retired_at: float) -> None:
        """This process committed `manifest`, retiring `manifest.retired` at `retired_at`."""
        self._waiting.update(dict.fromkeys(manifest.retired, retired_at))
        self._known_generation = manifest.generation

    def _listed(self, live: Manifest) -> dict[str, float]:
        """Remove never-named directories now; the retired ones, with their retirement times."""
        directory = self._store / SEGMENTS_DIR
        if not directory.exists():
            return {}
        named = set(live.segment_ids)
        remove_unnamed_deletions(self._store, live)
        waiting = {}
        for child in directory.iterdir():
            if child.name in named or not store_made(child.name):
                continue  # what the store did not make (an operator's backup, say) is never touched
            generation = segment_generation(child.name.removeprefix(TEMPORARY_PREFIX))
            if child.name.startswith(TEMPORARY_PREFIX) or generation >= live.generation:
                shutil.rmtree(child, ignore_errors=True)
            else:
                try:
                    waiting[child.name] = child.stat().st_mtime
                except FileNotFoundError:
                    continue
        return waiting


def remove_unnamed_deletions(store: Path, live: Manifest) -> None:
    """Remove the deletion files in live segments that `live` does not name (replaced ones a
    killed writer left, and staged ones)."""
    for entry in live.segments:
        named = None if entry.deletions is None else entry.deletions.file
        for path in (store / SEGMENTS_DIR / entry.id).glob(f"*{DELETIONS_PREFIX}*"):
            if path.name != named:
                path.unlink(missing_ok=True)


def never_named(store: Path, live: Manifest) -> list[str]:
    """The segment directories of `store` that no committed generation ever named."""
    directory = store / SEGMENTS_DIR
    if not directory.exists():
        return []
    named = set(live.segment_ids)
    return sorted(child.name for child in directory.iterdir() if child.name not in named and store_made(child.name)
                  and (child.name.startswith(TEMPORARY_PREFIX) or segment_generation(child.name) >= live.generation))


def commit(
    store: Path, snapshot: StoreSnapshot, prepared: PreparedWrite | None, identity: EmbeddingIdentity,
    deleted: Mapping[str, Collection[int]] | None = None,
) -> tuple[Manifest, list[LoadedSegment]]:
    """Write the prepared segment (if any) and the deletion files of the segments whose rows
    `deleted` names (segment id -> rows); switch the manifest, and return it with the segments of
    the new generation, in manifest order. Merges run after it (stores/engine/merging.py)."""
    previous = snapshot.manifest
    generation = previous.generation + 1
    written: list[LoadedSegment] = []
    deletion_files: list[Path] = []
    try:
        segments = []
        for segment in snapshot.segments:
            rows = (deleted or {}).get(segment.entry.id)
            if rows:
                deletions = write_deletions(store, segment.entry.id, generation, sorted(segment.dead_rows | set(rows)))
                deletion_files.append(segment.directory / deletions.file)
                segment = segment.with_deletions(replace(segment.entry, deletions=deletions))
            segments.append(segment)
        if prepared is not None and prepared.rows:
            written.append(write_segment(store, new_segment_id(generation), prepared.rows, prepared.vectors, prepared.edges,
                                         postings=prepared.postings))
            segments.append(written[-1])
        manifest = Manifest(generation, identity, tuple(segment.entry for segment in segments), (),
                            previous.expansion if prepared is None else prepared.expansion)
        write_manifest(store, manifest)
    except BaseException:
        if committed_generation(store) != generation:  # a failed write leaves the store as it was
            for segment in written:
                shutil.rmtree(segment.directory, ignore_errors=True)
            for path in deletion_files:
                path.unlink(missing_ok=True)
        raise
    for segment in snapshot.segments:  # a deletion file the new generation replaced
        if segment.entry.deletions is not None and (deleted or {}).get(segment.entry.id):
            (segment.directory / segment.entry.deletions.file).unlink(missing_ok=True)
    return manifest, segments


def write_failure(store: Path, generation: int, step: str, error: OSError) -> StoreError:
    """The one-line error of a write that failed at `step` on top of `generation`: which store,
    which step, and whether anything was written (a failed commit removes what it wrote)."""
    reason = error.strerror or str(error)
    hint = "; free space and try again" if error.errno in (errno.ENOSPC, errno.EDQUOT) else ""
    if committed_generation(store) == generation + 1:
        return StoreError(f"store {store}: generation {generation + 1} was committed, but {reason} while {step}; "
                          f"run `rms check --store {store}`{hint}")
    return StoreError(f"cannot write store {store}: {reason} while {step}; nothing was written, the store is as it "
                      f"was at generation {generation}{hint}")




def given_vectors(
    objects: Sequence[MemoryObject], vectors: np.ndarray | None, identity: EmbeddingIdentity | None,
    expected: EmbeddingIdentity,
) -> dict[UUID, np.ndarray] | None:
    """Precomputed vectors by object id, checked: their model, their shape, finite unit rows."""
    if vectors is None:
        if identity is not None:
            raise StoreError("vector_identity was given without vectors; pass both or neither")
        return None
    if identity is None:
        raise StoreError("precomputed vectors need vector_identity=EmbeddingIdentity(...) naming the model that made them")
    if identity != expected:
        raise EmbeddingMismatchError(f"the precomputed vectors come from {identity} but this store embeds with "
                                     f"{expected}; {MISMATCH_HINT}")
    try:
        checked = validated_vectors(vectors, len(objects), expected.dimension)
    except EmbeddingError as error:
        raise StoreError(f"precomputed vectors: {error}") from None
    return {memory.id: row for memory, row in zip(objects, checked)}
