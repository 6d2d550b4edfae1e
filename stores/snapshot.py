"""One generation of a store, held in memory and never changed: what a request reads.

A `StoreSnapshot` implements every store protocol over the verified segments one manifest names.
Readers never lock: they hold a snapshot, and a newer generation is a new snapshot that shares
the segments both generations name. Derived structures (the BM25 index, adjacency lists, entity
catalogs) are built on first use; a racing second build gives the same value. Those of a namespace
scope read that scope's rows only and pass to the next generation while the segments they came
from stay live (stores/engine/scope_cache.py). The BM25 index is the previous generation's brought to
this one's segments (stores/engine/lexical_reading.py): the parts of segments merged away go, those
of new segments come, and a segment read with a later deletion file keeps its postings, less the
rows deleted since, so a write, a delete or a merge costs what it touches. Deleted rows
(stores/engine/segments.py deletion files) are left out of every structure.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from typing import Any
from uuid import UUID

import numpy as np
import pyarrow as pa

from rms_retrieval.stores.analysis.entity_catalog import EntityCatalog
from rms_retrieval.stores.indexes.adjacency import Adjacency, key_ints, uuid_of
from rms_retrieval.stores.indexes.entity_graph import KnownNames
from rms_retrieval.stores.errors import EmbeddingMismatchError, StaleSnapshotError
from rms_retrieval.stores.indexes.lexical import Bm25Index
from rms_retrieval.stores.engine.manifest import Manifest
from rms_retrieval.stores.models import MemoryObject
from rms_retrieval.stores.protocols import (PLAIN_FIELDS, AssertionGroupRow, ClaimSelection, EmbeddingIdentity, FieldWeights,
                                            GraphIndex, LexicalHit, LexicalIndex, ObjectStore, QuantityRow, RecordReader,
                                            RetrievalLog, ScanSelection, SessionNeighbour, SnapshotSource, VectorHit,
                                            VectorIndex)
from rms_retrieval.stores.engine.graph_extension import ScopeGraph, built_graph, extended_adjacency
from rms_retrieval.stores.engine.scope_cache import (NamespaceRows, Scope, ScopeValues, appended, handed_splits, merged_keys,
                                                     namespace_rows, row_sources)
from rms_retrieval.stores.engine.scope_graph import CoMentionCounts
from rms_retrieval.stores.engine.lexical_reading import lexical_index
from rms_retrieval.stores.engine.segment_lookups import scope_entity_entries
from rms_retrieval.stores.engine.segments import LoadedSegment
from rms_retrieval.stores.engine.store_sql import ParquetRecords
from rms_retrieval.stores.indexes.vector_index import exact_top_k

class StoreSnapshot(LexicalIndex, VectorIndex, GraphIndex, ObjectStore, RetrievalLog, RecordReader, SnapshotSource):
    """The rows, vectors, graph and lexical statistics of one generation."""

    def __init__(
        self,
        manifest: Manifest,
        segments: Sequence[LoadedSegment],
        log: Callable[[Mapping[str, Any]], None],
        previous: StoreSnapshot | None = None,
    ) -> None:
        self.manifest = manifest
        self.segments = tuple(segments)
        self._log = log
        self._lock = threading.Lock()
        self._bm25: Bm25Index | None = None
        self._bm25_base = None if previous is None else previous._handed_bm25()
        self.dead_ids: frozenset[tuple[str, UUID]] = self._dead_ids()
        self._namespace_rows: dict[str, NamespaceRows] = {} if previous is None else \
            handed_splits(previous.segments, previous._namespace_rows, self.segments)
        merged = None if previous is None else merged_keys(previous.segments, self.segments)
        keys = [segment.entry.key for segment in self.segments]
        ids = [*keys, *(segment.entry.id for segment in self.segments)]  # row_sources names a segment by its id too
        self._adjacency = ScopeValues[ScopeGraph](None if previous is None else previous._adjacency,
                                                  [segment.entry.id for segment in self.segments], merged, by_segment=True)
        self._catalogs = ScopeValues[EntityCatalog](None if previous is None else previous._catalogs, ids, merged)
        self._pinned = ScopeValues[list[MemoryObject]](None if previous is None else previous._pinned, ids, merged)
        self._known_names = ScopeValues[KnownNames](None if previous is None else previous._known_names, keys, merged)
        self._rows_table: pa.Table | None = None

    def _dead_ids(self) -> frozenset[tuple[str, UUID]]:
        """(namespace, id) of the objects deleted from the store (a row replaced by a newer version is
        not one): per namespace, its deleted rows' ids less those a segment holds live, each segment
        asked about all at once (every write makes a snapshot: no Python call per row and segment)."""
        deleted: dict[str, list[np.ndarray]] = {}
        for segment in self.segments:
            columns, rows = segment.columns, segment.dead_positions
            if not len(rows):
                continue
            codes = columns.namespace_codes[rows]
            for code in np.unique(codes).tolist():
                deleted.setdefault(columns.namespaces[code], []).append(columns.ids[rows[codes == code]].view("S16"))
        found: list[tuple[str, UUID]] = []
        for namespace, keys in deleted.items():
            gone = np.unique(np.concatenate(keys))
            for segment in self.segments:
                gone = gone[segment.live_key_rows(namespace, gone) < 0]
            found.extend((namespace, uuid_of(value)) for value in key_ints(gone))
        return frozenset(found)

    # ----- generation facts ----------------------------------------------------------------------

    @property
    def generation(self) -> int:
        return self.manifest.generation

    @property
    def max_edge_id(self) -> int:
        """Edge ids run 1..N without gaps, so the largest is also the edge count."""
        return max((segment.last_edge_id for segment in self.segments), default=0)

    def state_fingerprint(self) -> str:
        """Changes whenever rows, vectors or lexical statistics change (each write bumps the generation)."""
        return f"g{self.generation}-o{self.manifest.object_count}-e{self.max_edge_id}"

    def snapshot(self) -> StoreSnapshot:
        return self

    def count_objects(self, namespaces: Sequence[str] | None = None) -> int:
        """Live objects (of `namespaces`)."""
        if namespaces is None:
            return self.manifest.object_count
        wanted = set(namespaces)
        return sum(_live_in(segment, start, stop) for segment in self.segments
                   for namespace, (start, stop) in segment.namespace_slices.items() if namespace in wanted)

    def namespaces(self) -> list[str]:
        """The namespaces that hold a live object."""
        return sorted({namespace for segment in self.segments for namespace, (start, stop) in segment.namespace_slices.items()
                       if _live_in(segment, start, stop)})

    def contains(self, namespace: str, object_id: UUID) -> bool:
        """Whether `namespace` holds `object_id`; what other namespaces hold is never consulted."""
        return any(segment.holds(namespace, object_id) for segment in self.segments)

    def namespace_anchor(self, namespace: str) -> UUID | None:
        """The id of the first object stored in `namespace` (None for a namespace with no rows):
        the secret part of the ids the store makes there (entity_graph.entity_id)."""
        for segment in self.segments:
            span = segment.namespace_slices.get(namespace)
            if span is not None:
                return segment.id_at(span[0])
        return None

    def is_live(self, namespace: str, object_id: UUID) -> bool:
        """Whether `namespace` holds `object_id` in a row no deletion file names."""
        return any(segment.live_row(namespace, object_id) is not None for segment in self.segments)

    # ----- LexicalIndex ----------------------------------------------------------------------------

    def _handed_bm25(self) -> Bm25Index | None:
        return self._bm25 if self._bm25 is not None else self._bm25_base

    def _lexical_index(self) -> Bm25Index:
        """The previous generation's index brought to this one's segments (`lexical_index`): a write
        costs the segments it touched."""
        with self._lock:
            if self._bm25 is None:
                self._bm25 = lexical_index(self._bm25_base or Bm25Index.empty(), self.segments)
                self._bm25_base = None
            return self._bm25

    def search_lexical(self, text: str, namespaces: Sequence[str], limit: int,
                       fields: FieldWeights = PLAIN_FIELDS) -> list[LexicalHit]:
        """BM25 over content and entity names (each field's terms times its weight), statistics over
        `namespaces` only, best first, ties by id."""
        if limit <= 0 or not namespaces or not self.segments:
            return []
        found = self._lexical_index().search(text, list(namespaces), limit, fields)
        if not found:
            return []
        low, high = found[-1][1], found[0][1]
        spread = high - low
        return [LexicalHit(object_id=object_id, bm25=bm25, score=(bm25 - low) / spread if spread > 0 else 1.0)
                for object_id, bm25 in found]

    # ----- VectorIndex -----------------------------------------------------------------------------

    @property
    def embedding_identity(self) -> EmbeddingIdentity | None:
        return self.manifest.embedding

    def search_vector(self, vector: np.ndarray, namespaces: Sequence[str], limit: int) -> list[VectorHit]:
        """Exact inner-product top-k over the namespaces' vectors, best first, ties by object id.
        float32 scores from FAISS's per-row kernel (stores/indexes/vector_index.py), so a row scores the same
        bits in any segment at any offset, and each namespace slice of a segment is searched in place."""
        identity = self.manifest.embedding
        if identity is None or limit <= 0:
            return []
        query = np.asarray(vector, dtype=np.float32).reshape(-1)
        if query.shape[0] != identity.dimension:
            raise EmbeddingMismatchError(f"the query vector has dimension {query.shape[0]} but the store holds {identity.dimension}")
        score_blocks, owners = [], []
        for segment in self.segments:
            vectors, skip = segment.vectors, segment.vector_skip
            for namespace in sorted(set(namespaces)):
                bounds = segment.namespace_slices.get(namespace)
                if bounds is None:
                    continue
                start, stop = vectors.span(*bounds)
                if start == stop:
                    continue
                skipped = 0 if skip is None else int(skip[bounds[0]:bounds[1]].sum())  # at most this many
                positions, scores = exact_top_k(vectors.matrix[start:stop], query, limit + skipped)
                rows = vectors.rows_at(start + positions)
                if skipped:
                    kept = ~skip[rows]
                    rows, scores = rows[kept], scores[kept]
                score_blocks.append(scores)
                owners.append((segment, rows))
        if not score_blocks:
            return []
        scores = np.concatenate(score_blocks)
        keep = np.zeros(len(scores), dtype=bool)
        keep[_at_least_kth(scores, limit)] = True
        hits, offset = [], 0
        for (segment, rows), block in zip(owners, score_blocks):
            kept = keep[offset:offset + len(block)]
            hits.extend(map(VectorHit, segment.ids_at(rows[kept]), block[kept].tolist()))
            offset += len(block)
        found = scores[keep]
        if not (found[:-1] > found[1:]).all():  # strictly falling scores are in this order already
            hits.sort(key=lambda hit: (-hit.cosine, hit.object_id))
        return hits[:limit]

    # ----- GraphIndex ------------------------------------------------------------------------------

    def _split(self, scope: Iterable[str]) -> list[tuple[LoadedSegment, NamespaceRows]]:
        """The live segments holding rows or edges of `scope`, each with its rows split by namespace
        (split once per segment, not per generation; a segment of other namespaces only is never split)."""
        wanted = frozenset(scope)
        split = []
        for segment in self.segments:
            if wanted.isdisjoint(segment.namespace_slices) and wanted.isdisjoint(segment.edge_namespaces):
                continue
            rows = self._namespace_rows.get(segment.entry.key)
            if rows is None:
                rows = self._namespace_rows[segment.entry.key] = namespace_rows(segment)
            split.append((segment, rows))
        return split

    def _sources(self, scope: Scope, kind: Callable[[NamespaceRows], Collection[str]]) -> tuple[str, ...]:
        """Keys of the segments holding `kind` rows or deleted rows in `scope`, in order (a deletion may remove any edge)."""
        return tuple(segment.entry.key for segment, rows in self._split(scope)
                     if any(name in kind(rows) or name in rows.dead_rows for name in scope))

    def _entity_rows(self, namespaces: Iterable[str]) -> Iterator[tuple[LoadedSegment, str, int]]:
        """(segment, namespace, row) of each live ENTITY row of the namespaces."""
        wanted = sorted(set(namespaces))
        return ((segment, namespace, row) for segment, rows in self._split(wanted)
                for namespace in wanted for row in rows.entity_rows.get(namespace, ()))

    def stored_entities(self, namespaces: Iterable[str]) -> list[MemoryObject]:
        """The ENTITY objects of the namespaces, by id (what the entity-graph step of an add needs)."""
        return sorted((segment.object_at(row) for segment, _, row in self._entity_rows(namespaces)),
                      key=lambda entity: entity.id)

    def known_names(self, namespaces: Iterable[str]) -> dict[str, KnownNames]:
        """Per namespace, the names of its ENTITY rows (some 2,500 in a LongMemEval-S namespace) as
        an add's entity-graph step reads them, from the columns: made on its first write, then extended
        by the entities of the segments each write adds (`ScopeValues`); never changed (`entity_graph`
        adds to a copy)."""
        found = {}
        for namespace in sorted(set(namespaces)):
            scope = (namespace,)

            def entries(added: tuple[str, ...] | None = None, namespace: str = namespace) -> Iterator[tuple[int, list[str], bool]]:
                return scope_entity_entries(self._split([namespace]), namespace, added)

            sources = self._sources(scope, lambda rows: rows.entity_rows)

            def extend(previous: KnownNames, before: tuple[str, ...], sources: tuple[str, ...] = sources) -> KnownNames | None:
                return None if (added := appended(before, sources)) is None else previous.with_entries(entries(added))

            found[namespace] = self._known_names.get(scope, sources, lambda: KnownNames.of_entries(entries()), extend)
        return found

    def co_mention_counts(self, namespaces: Iterable[str]) -> CoMentionCounts:
        return CoMentionCounts(self.segments, namespaces)

    def co_mentioned_edge_id(self, namespace: str, source: UUID, target: UUID) -> int | None:
        """The id of the CO_MENTIONED edge between two entities of `namespace`, if one is stored."""
        for segment in reversed(self.segments):
            edge_id = segment.co_mentioned_id(namespace, source, target)
            if edge_id is not None:
                return edge_id
        return None

    def entity_catalog(self, namespaces: Sequence[str]) -> EntityCatalog:
        """Every entity name and alias in the namespaces, by namespace, alias, then id: one
        read-only `EntityCatalog` per scope, shared by every query of this snapshot."""
        key = tuple(sorted(set(namespaces)))

        def build() -> EntityCatalog:
            return EntityCatalog.of_parts([segment.entity_names(namespace, list(rows.entity_rows[namespace]))
                                           for segment, rows in self._split(key) for namespace in key
                                           if rows.entity_rows.get(namespace)])

        return self._catalogs.get(key, row_sources(self._split(key), key, "entity_rows"), build)

    def adjacency(self, namespaces: Sequence[str]) -> Adjacency:
        """The graph of one namespace scope; edges never cross namespaces, and a later segment's
        edge replaces an earlier one with the same id (a re-weighted CO_MENTIONED edge, an edge
        moved to an object's new version). Exactly the live objects' edges: an edge whose owner row
        or either end is deleted is left out, and a CO_MENTIONED edge weighs the live objects
        mentioning both its entities (none: left out), as if the deleted ones were never stored."""
        key = tuple(sorted(set(namespaces)))

        def build() -> ScopeGraph:
            return built_graph(self._split(key), key, self.co_mention_counts(key), self.dead_ids)

        def extend(previous: ScopeGraph, before: tuple[str, ...]) -> ScopeGraph | None:
            return extended_adjacency(previous, before, self._split(key), key, self.co_mention_counts(key), self.dead_ids)

        # A segment with no deleted row in the scope holds its edges there live: the edges need no split to be told.
        return self._adjacency.get(key, self._sources(key, lambda rows: rows.edge_namespaces), build, extend).adjacency

    # ----- ObjectStore -----------------------------------------------------------------------------

    def get_objects(self, ids: Iterable[UUID], namespaces: Sequence[str]) -> dict[UUID, MemoryObject]:
        """The objects of `namespaces` among `ids`, by id; ids those namespaces do not hold are left
        out. Two namespaces may hold one id: the first of `namespaces` in sorted order answers."""
        return {object_id: segment.object_at(row) for object_id, segment, row in self._live_rows(ids, namespaces)}

    def text_tokens(self, ids: Iterable[UUID], namespaces: Sequence[str]) -> dict[UUID, int]:
        """The kept token counts of the objects of `namespaces` among `ids` (ObjectStore.text_tokens):
        those whose segment keeps them."""
        counts = {}
        for object_id, segment, row in self._live_rows(ids, namespaces):
            kept = segment.text_tokens
            if kept is not None:
                counts[object_id] = int(kept[row])
        return counts

    def _live_rows(self, ids: Iterable[UUID], namespaces: Sequence[str]) -> list[tuple[UUID, LoadedSegment, int]]:
        """(id, segment, live row) of each of `ids` that `namespaces` hold, in id order; two namespaces
        may hold one id: the first of `namespaces` in sorted order answers."""
        # By the id's integer (hashed and compared in C, a UUID in Python code; they sort as the ids do), looked
        # up in each segment as one column of 16-byte keys made from the integers once (`UUID.bytes` is Python).
        by_key = {object_id.int: object_id for object_id in ids}
        wanted = sorted(by_key)
        keys = np.frombuffer(b"".join([key.to_bytes(16, "big") for key in wanted]), dtype="S16")
        segment_of, row_of = np.full(len(wanted), -1), np.full(len(wanted), -1)
        for namespace in sorted(set(namespaces)):
            missing = np.flatnonzero(segment_of < 0)
            for number, segment in enumerate(self.segments):  # the first segment with a live row answers
                if not len(missing):
                    break
                if namespace not in segment.namespace_slices:
                    continue
                rows = segment.live_key_rows(namespace, keys[missing])
                hit = rows >= 0
                segment_of[missing[hit]], row_of[missing[hit]] = number, rows[hit]
                missing = missing[~hit]
        return [(by_key[key], self.segments[number], row)
                for key, number, row in zip(wanted, segment_of.tolist(), row_of.tolist()) if number >= 0]

    def pinned_objects(self, namespaces: Sequence[str]) -> list[MemoryObject]:
        """Pinned objects (MemoryObject.is_pinned) of the namespaces, by id."""
        key = tuple(sorted(set(namespaces)))

        def build() -> list[MemoryObject]:
            pinned = [segment.object_at(row) for segment, rows in self._split(key)
                      for namespace in key for row in rows.pinned_rows.get(namespace, ())]
            return sorted(pinned, key=lambda memory: memory.id)

        return list(self._pinned.get(key, row_sources(self._split(key), key, "pinned_rows"), build))

    def session_neighbours(self, triggers: Sequence[UUID], window: int, namespaces: Sequence[str]) -> list[SessionNeighbour]:
        """Objects within `window` places of each trigger in its own session, by trigger, offset, id.
        A place is a distinct `session_seq` of the session's live objects, in order (RFC 4.5:
        adjacent active nodes): a deleted turn leaves no gap, so after a delete the window holds
        what it holds in a store that never had the turn, whose arrival numbering has no gap."""
        if not triggers or window <= 0:
            return []
        order = {trigger: position for position, trigger in reversed(list(enumerate(triggers)))}
        found: list[SessionNeighbour] = []
        # Triggers often share a session: its rows and places are gathered once per call.
        sessions: dict[tuple, tuple[list, dict[int, int]]] = {}
        for trigger, memory in self.get_objects(order, namespaces).items():
            if memory.session_id is None or memory.session_seq is None:
                continue
            session = (memory.namespace, memory.owner, memory.scope, memory.session_id)
            if session not in sessions:
                gathered = [(seq, segment, row) for segment in self.segments if memory.namespace in segment.namespace_slices
                            for seq, row in segment.sessions.get(session, ())]
                sessions[session] = gathered, {seq: number for number, seq in
                                               enumerate(sorted({seq for seq, _, _ in gathered}))}
            rows, place = sessions[session]
            here = place[memory.session_seq]
            for seq, segment, row in rows:
                offset = place[seq] - here
                if abs(offset) <= window and segment.id_at(row) != trigger:
                    found.append(SessionNeighbour(trigger, segment.object_at(row), offset))
        found.sort(key=lambda item: (order[item.trigger], item.offset, item.neighbour.id))
        return found

    # ----- RetrievalLog and RecordReader -----------------------------------------------------------

    def _checked_rows(self) -> pa.Table | None:
        """Every row of this generation as one table, from segment files checked against their
        sha256 (each segment's once, shared with later generations); None without rows."""
        if not self.segments:
            return None
        with self._lock:
            if self._rows_table is None:
                tables = []
                for segment in self.segments:
                    try:
                        table = segment.checked_table()
                        tables.append(table if segment.dead is None else table.take(pa.array(segment.live_positions())))
                    except FileNotFoundError as missing:
                        raise StaleSnapshotError(
                            f"this snapshot of {segment.directory.parent.parent} (generation {self.generation}) is older than "
                            f"the store's retired grace, or an erase or compaction removed its files: a later write removed "
                            f"{missing.filename}, which it reads; take a "
                            "new snapshot (`store.snapshot()`) and read again, or keep snapshots for less than the "
                            "`retired_grace` the writer opened the store with") from missing
                self._rows_table = pa.concat_tables(tables)
            return self._rows_table

    def log_retrieval(self, record: Mapping[str, Any]) -> None:
        self._log(record)

    def _records(self) -> ParquetRecords:
        """The record queries over this generation's rows, made per call: a reader kept in the
        snapshot would hold its bound `_checked_rows`, a reference cycle that would keep every
        replaced snapshot, its segments and caches, until a full collection of the garbage
        collector (one per write, on a store being written)."""
        return ParquetRecords(self._checked_rows, self.state_fingerprint())

    def scan_page(self, selection: ScanSelection) -> list[MemoryObject]:
        return self._records().scan_page(selection)

    def exclusion_counts(self, selection: ClaimSelection) -> dict[str, int]:
        return self._records().exclusion_counts(selection)

    def assertion_groups(self, selection: ClaimSelection, max_groups: int, max_samples: int) -> list[AssertionGroupRow]:
        return self._records().assertion_groups(selection, max_groups, max_samples)

    def quantity_page(self, selection: ClaimSelection, after_id: UUID | None, limit: int) -> list[QuantityRow]:
        return self._records().quantity_page(selection, after_id, limit)


def _live_in(segment: LoadedSegment, start: int, stop: int) -> int:
    """How many rows of `segment[start:stop]` are not deleted."""
    return stop - start - (0 if segment.dead is None else int(segment.dead[start:stop].sum()))


def _at_least_kth(scores: np.ndarray, k: int) -> np.ndarray:
    """Positions of the scores at or above the k-th best (every tie at the cut included)."""
    if scores.size <= k:
        return np.arange(scores.size)
    kth = np.partition(scores, scores.size - k)[scores.size - k]
    return np.flatnonzero(scores >= kth)
