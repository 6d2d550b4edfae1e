"""The memory store: one directory holding rows, graph, FTS index and log (DuckDB) and vectors (FAISS).

Layout: `store.duckdb` (tables objects, edges, meta, retrieval_log), `vectors-<generation>.faiss`
and `embedding_meta.json`. The committed `generation` in `meta` names the live vectors file, so
an ingest is one unit: the next vectors file is written first, rows, edges, FTS snapshot and the
generation bump commit in one DuckDB transaction, and only then is the old file removed. A crash
or error before COMMIT leaves the previous generation untouched; a stray newer file is ignored.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timezone
from enum import Enum
from pathlib import Path
from typing import Any
from uuid import UUID

import duckdb
import duckdb_extension_fts
import numpy as np
import pandas as pd

from rms_retrieval.stores import vector_index
from rms_retrieval.stores.adjacency import Adjacency
from rms_retrieval.stores.claims import Assertion, Quantity, normalize_predicate, normalize_value
from rms_retrieval.stores.embedding import encode_many
from rms_retrieval.stores.entity_graph import GraphEdge, entity_graph, entity_names
from rms_retrieval.stores.errors import EmbeddingMismatchError, StoreError
from rms_retrieval.stores.models import EpistemicType, LifecycleState, MemoryObject, NodeType
from rms_retrieval.stores.protocols import (
    Edge,
    GraphIndex,
    LexicalIndex,
    ObjectStore,
    RetrievalLog,
    VectorIndex,
    EmbeddingIdentity,
    EntityRef,
    IngestReport,
    LexicalHit,
    QueryEncoder,
    SessionNeighbour,
    VectorHit,
)

SCHEMA_VERSION = "2"
DATABASE_FILE = "store.duckdb"
EMBEDDING_META_FILE = "embedding_meta.json"
_REBUILD_HINT = "rebuild the store with `rms ingest` into an empty directory"
# The FTS extension ships with its wheel; never let DuckDB reach for the network.
_CONNECTION_CONFIG = {"autoinstall_known_extensions": False, "autoload_known_extensions": False}
_FTS_EXTENSION = os.path.join(
    os.path.dirname(duckdb_extension_fts.__file__), "extensions", "v" + duckdb.__version__, "fts.duckdb_extension"
)
# Near-equal BM25 sums can differ in the last bits with summation order; rounding makes them
# exact ties, which the id then breaks (RFC-0005 Section 11).
_BM25_TIE_DECIMALS = 9
_OBJECT_CACHE_LIMIT = 200_000

OBJECT_FIELDS = tuple(MemoryObject.model_fields)
# Written beside the raw claim JSON so exact aggregation can match and group in SQL.
ASSERTION_NORM_COLUMNS = ("assertion_subject_norm", "assertion_predicate_norm", "assertion_object_norm", "assertion_polarity")
_ROW_COLUMNS = (*OBJECT_FIELDS, *ASSERTION_NORM_COLUMNS)

CREATE_SCHEMA = """
CREATE TABLE IF NOT EXISTS objects (
    id UUID PRIMARY KEY,
    vec_id BIGINT NOT NULL,
    namespace VARCHAR NOT NULL,
    owner VARCHAR NOT NULL,
    scope VARCHAR NOT NULL,
    session_id VARCHAR,
    session_seq BIGINT,
    node_type VARCHAR NOT NULL,
    content VARCHAR NOT NULL,
    entity_canonical_name VARCHAR,
    epistemic_type VARCHAR NOT NULL,
    confidence DOUBLE NOT NULL,
    salience DOUBLE NOT NULL,
    lifecycle_state VARCHAR NOT NULL,
    created_at TIMESTAMPTZ NOT NULL,
    updated_at TIMESTAMPTZ NOT NULL,
    event_time TIMESTAMPTZ,
    valid_from TIMESTAMPTZ,
    valid_to TIMESTAMPTZ,
    evidence_refs JSON NOT NULL,
    source_ref VARCHAR,
    metadata JSON NOT NULL,
    assertion JSON,
    quantity JSON,
    assertion_subject_norm VARCHAR,
    assertion_predicate_norm VARCHAR,
    assertion_object_norm VARCHAR,
    assertion_polarity VARCHAR
);
CREATE TABLE IF NOT EXISTS edges (
    edge_id BIGINT NOT NULL,
    source UUID NOT NULL,
    target UUID NOT NULL,
    edge_type VARCHAR NOT NULL,
    confidence DOUBLE NOT NULL,
    namespace VARCHAR NOT NULL
);
CREATE TABLE IF NOT EXISTS meta (key VARCHAR PRIMARY KEY, value VARCHAR NOT NULL);
CREATE TABLE IF NOT EXISTS retrieval_log (request_id UUID NOT NULL, logged_at TIMESTAMPTZ NOT NULL, record JSON NOT NULL);
"""
SET_META = "INSERT OR REPLACE INTO meta VALUES (?, ?)"
SELECT_META = "SELECT key, value FROM meta"
SELECT_VEC_IDS = "SELECT vec_id, id, namespace FROM objects ORDER BY vec_id"
COUNT_EDGES = "SELECT count(*), coalesce(max(edge_id), 0) FROM edges"
SELECT_EXISTING_IDS = "SELECT id FROM objects WHERE id = ANY(?)"
_OBJECT_COLUMNS = ", ".join(OBJECT_FIELDS)
SELECT_OBJECTS_BY_ID = f"SELECT {_OBJECT_COLUMNS} FROM objects WHERE id = ANY(?)"
SELECT_ENTITIES = f"SELECT {_OBJECT_COLUMNS} FROM objects WHERE node_type = 'ENTITY' AND namespace = ANY(?) ORDER BY id"
SELECT_CO_MENTION_COUNTS = """
SELECT first.namespace, first.target, second.target, count(*)
FROM edges AS first
JOIN edges AS second ON second.source = first.source AND first.target < second.target
WHERE first.edge_type = 'MENTIONS' AND second.edge_type = 'MENTIONS' AND first.namespace = ANY(?)
GROUP BY ALL
"""
INSERT_OBJECTS = """
INSERT INTO objects
SELECT CAST(id AS UUID), vec_id, namespace, owner, scope, session_id, session_seq, node_type, content,
       entity_canonical_name, epistemic_type, confidence, salience, lifecycle_state,
       CAST(created_at AS TIMESTAMPTZ), CAST(updated_at AS TIMESTAMPTZ), CAST(event_time AS TIMESTAMPTZ),
       CAST(valid_from AS TIMESTAMPTZ), CAST(valid_to AS TIMESTAMPTZ), CAST(evidence_refs AS JSON),
       source_ref, CAST(metadata AS JSON), CAST(assertion AS JSON), CAST(quantity AS JSON),
       assertion_subject_norm, assertion_predicate_norm, assertion_object_norm, assertion_polarity
FROM incoming_objects
"""
INSERT_EDGES = """
INSERT INTO edges
SELECT edge_id, CAST(source AS UUID), CAST(target AS UUID), edge_type, confidence, namespace FROM incoming_edges
"""
REWEIGHT_EDGE = "UPDATE edges SET confidence = ? WHERE edge_type = ? AND source = ? AND target = ?"
REBUILD_FTS = "PRAGMA create_fts_index('objects', 'id', 'content', 'entity_canonical_name', overwrite=1)"
# DuckDB's match_bm25 macro (k1 1.2, b 0.75, every field) computed once for the whole result set
# instead of once per row: the same scores (checked against the macro on 100 LoCoMo questions),
# about 30% faster. Scores are rounded so that float summation order cannot reorder ties.
LEXICAL_SEARCH = f"""
WITH tokens AS (
    SELECT DISTINCT stem(unnest(fts_main_objects.tokenize($text)), 'porter') AS term
), stats AS (
    SELECT num_docs, avgdl FROM fts_main_objects.stats
), term_tf AS (
    SELECT terms.docid, terms.termid, count(*) AS tf
    FROM fts_main_objects.terms AS terms
    JOIN fts_main_objects.dict AS dict ON dict.termid = terms.termid
    JOIN tokens ON dict.term = tokens.term
    GROUP BY terms.docid, terms.termid
), scores AS (
    SELECT docs.name AS id, round(sum(
        log((stats.num_docs - dict.df + 0.5) / (dict.df + 0.5) + 1)
        * (term_tf.tf * (1.2 + 1) / (term_tf.tf + 1.2 * (1 - 0.75 + 0.75 * (docs.len / stats.avgdl))))
    ), {_BM25_TIE_DECIMALS}) AS bm25
    FROM term_tf
    JOIN fts_main_objects.docs AS docs ON docs.docid = term_tf.docid
    JOIN fts_main_objects.dict AS dict ON dict.termid = term_tf.termid
    CROSS JOIN stats
    GROUP BY docs.name
)
SELECT objects.id, scores.bm25 FROM scores JOIN objects ON objects.id = scores.id
WHERE objects.namespace = ANY($namespaces)
ORDER BY scores.bm25 DESC, objects.id
LIMIT $limit
"""
EDGES_IN_SCOPE = """
SELECT edge.edge_id, edge.source, edge.target, edge.edge_type, edge.confidence
FROM edges AS edge
JOIN objects AS source_object ON source_object.id = edge.source
JOIN objects AS target_object ON target_object.id = edge.target
WHERE source_object.namespace = ANY($namespaces)
  AND target_object.namespace = ANY($namespaces)
ORDER BY edge.edge_id
"""
PINNED_OBJECTS = f"""
SELECT {_OBJECT_COLUMNS} FROM objects
WHERE namespace = ANY(?)
  AND (salience = 1.0 OR (node_type IN ('TASK', 'INTENT') AND lifecycle_state = 'ACTIVE'))
ORDER BY id
"""
_NEIGHBOUR_COLUMNS = ", ".join(f"neighbour.{name}" for name in OBJECT_FIELDS)
SESSION_NEIGHBOURS = f"""
SELECT trigger.id, neighbour.session_seq - trigger.session_seq AS session_offset, {_NEIGHBOUR_COLUMNS}
FROM objects AS trigger
JOIN objects AS neighbour
  ON neighbour.namespace = trigger.namespace
 AND neighbour.owner = trigger.owner
 AND neighbour.scope = trigger.scope
 AND neighbour.session_id = trigger.session_id
 AND abs(neighbour.session_seq - trigger.session_seq) <= $window
 AND neighbour.id <> trigger.id
WHERE trigger.id = ANY($triggers)
"""
INSERT_LOG = "INSERT INTO retrieval_log VALUES (?, ?, ?)"
SELECT_LOG = "SELECT record FROM retrieval_log ORDER BY logged_at, rowid"
COUNT_OBJECTS = "SELECT count(*) FROM objects"
COUNT_OBJECTS_IN = "SELECT count(*) FROM objects WHERE namespace = ANY(?)"
SELECT_NAMESPACES = "SELECT DISTINCT namespace FROM objects ORDER BY namespace"


class MemoryStore(LexicalIndex, VectorIndex, GraphIndex, ObjectStore, RetrievalLog):
    """Rows, FTS, graph, vectors and the retrieval log of one store directory, behind the protocols."""

    def __init__(
        self,
        path: Path,
        connection: duckdb.DuckDBPyConnection,
        encoder: QueryEncoder | None,
        read_only: bool,
    ) -> None:
        self.path = path
        self._connection = connection
        self._encoder = encoder
        self._read_only = read_only
        self._load_state()

    # ----- opening and closing -----------------------------------------------------------------

    @classmethod
    def open(
        cls,
        path: str | Path,
        encoder: QueryEncoder | None = None,
        *,
        create: bool = True,
        read_only: bool = False,
    ) -> MemoryStore:
        """Open the store at `path`, creating it when allowed. Reopening never re-embeds."""
        path = Path(path)
        database = path / DATABASE_FILE
        if not database.exists():
            if not create or read_only:
                raise StoreError(f"no memory store at {path} ({DATABASE_FILE} is missing); create it with `rms ingest`")
            if path.exists() and not path.is_dir():
                raise StoreError(f"{path} is a file, not a store directory; choose another path")
            path.mkdir(parents=True, exist_ok=True)
        try:
            connection = duckdb.connect(str(database), read_only=read_only, config=_CONNECTION_CONFIG)
        except duckdb.Error as error:
            raise StoreError(f"cannot open {database}: {error}. If it is corrupted, {_REBUILD_HINT}") from error
        try:
            connection.execute(f"LOAD '{_FTS_EXTENSION}'")  # a path constant, not user input
            connection.execute("SET TimeZone = 'UTC'")
            if not read_only:
                connection.execute("BEGIN TRANSACTION")
                connection.execute(CREATE_SCHEMA)
                for key, value in (("schema_version", SCHEMA_VERSION), ("generation", "0")):
                    connection.execute("INSERT OR IGNORE INTO meta VALUES (?, ?)", [key, value])
                connection.execute("COMMIT")
            return cls(path, connection, encoder, read_only)
        except duckdb.Error as error:
            connection.close()
            raise StoreError(f"cannot read {database}: {error}. If it is corrupted, {_REBUILD_HINT}") from error
        except BaseException:
            connection.close()
            raise

    def close(self) -> None:
        self._connection.close()

    def __enter__(self) -> MemoryStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _load_state(self) -> None:
        meta = dict(self._connection.execute(SELECT_META).fetchall())
        database = self.path / DATABASE_FILE
        if meta.get("schema_version") != SCHEMA_VERSION:
            raise StoreError(f"{database} has schema version {meta.get('schema_version')!r}, expected {SCHEMA_VERSION}; {_REBUILD_HINT}")
        self._generation = int(meta["generation"])
        self._identity = _identity_from_meta(meta)
        if self._generation == 0:
            self._index = None
        else:
            self._check_embedding_meta()
            self._index = self._read_vectors(self._vectors_path(self._generation))
        if not self._read_only:
            self._remove_stale_vectors()
        self._refresh_caches()
        if self._index is not None and self._index.ntotal != len(self._object_ids):
            raise StoreError(
                f"{self._vectors_path(self._generation)} holds {self._index.ntotal} vectors but {database} "
                f"holds {len(self._object_ids)} objects; {_REBUILD_HINT}"
            )

    def _vectors_path(self, generation: int) -> Path:
        return self.path / f"vectors-{generation}.faiss"

    def _read_vectors(self, path: Path) -> Any:
        if not path.exists():
            raise StoreError(f"{path} is missing; {_REBUILD_HINT}")
        try:
            return vector_index.load_index(path)
        except RuntimeError as error:
            raise StoreError(f"cannot read {path} (corrupted?); {_REBUILD_HINT}") from error

    def _check_embedding_meta(self) -> None:
        meta_path = self.path / EMBEDDING_META_FILE
        try:
            recorded = json.loads(meta_path.read_text(encoding="utf-8"))
            identity = EmbeddingIdentity(
                str(recorded["model_name"]), str(recorded["model_hash"]), int(recorded["dimension"])
            )
            generation = int(recorded["generation"])
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise StoreError(f"cannot read {meta_path} ({error}); {_REBUILD_HINT}") from error
        if identity != self._identity:
            raise StoreError(f"{meta_path} names {identity}, but {DATABASE_FILE} records {self._identity}; {_REBUILD_HINT}")
        if generation != self._generation and not self._read_only:
            self._write_embedding_meta()  # a crash after COMMIT left the mirror one generation behind

    def _write_embedding_meta(self) -> None:
        assert self._identity is not None
        meta_path = self.path / EMBEDDING_META_FILE
        staged = meta_path.with_suffix(".json.tmp")
        record = {
            "model_name": self._identity.model_name,
            "model_hash": self._identity.model_hash,
            "dimension": self._identity.dimension,
            "generation": self._generation,
        }
        staged.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        os.replace(staged, meta_path)

    def _remove_stale_vectors(self) -> None:
        live = self._vectors_path(self._generation).name if self._generation else None
        for leftover in self.path.glob("vectors-*.faiss"):
            if leftover.name != live:
                leftover.unlink()

    def _refresh_caches(self) -> None:
        rows = self._connection.execute(SELECT_VEC_IDS).fetchall()
        self._object_ids: list[UUID] = []
        by_namespace: dict[str, list[int]] = {}
        for position, (vec_id, object_id, namespace) in enumerate(rows):
            if vec_id != position:
                raise StoreError(f"{self.path / DATABASE_FILE} has a gap in vector ids at {position}; {_REBUILD_HINT}")
            self._object_ids.append(object_id)
            by_namespace.setdefault(namespace, []).append(vec_id)
        self._vec_ids = {namespace: np.asarray(ids, dtype=np.int64) for namespace, ids in by_namespace.items()}
        self._edge_count, self._max_edge_id = self._connection.execute(COUNT_EDGES).fetchone()
        self._entity_catalogs: dict[tuple[str, ...], list[EntityRef]] = {}
        self._adjacency: dict[tuple[str, ...], Adjacency] = {}
        self._object_cache: dict[UUID, MemoryObject] = {}
        self._pinned: dict[tuple[str, ...], list[MemoryObject]] = {}

    # ----- ingestion -----------------------------------------------------------------------------

    def add(self, objects: Sequence[MemoryObject], *, progress: bool = False) -> IngestReport:
        """Store `objects` with their entities, edges and vectors, all or nothing."""
        started = time.perf_counter()
        if self._read_only:
            raise StoreError(f"{self.path} is open read-only; reopen it writable to add objects")
        if not objects:
            return IngestReport(0, 0, 0, time.perf_counter() - started, {"generation": self._generation})
        encoder = self._checked_encoder()
        namespaces = sorted({memory.namespace for memory in objects})
        graph = entity_graph(objects, self._stored_entities(namespaces), self._co_mention_counts(namespaces))
        rows = [*objects, *graph.entities]
        self._check_new_ids(rows)

        embedding_started = time.perf_counter()
        vectors = encode_many(encoder, [memory.content for memory in rows], progress=progress)
        embedding_seconds = time.perf_counter() - embedding_started
        vec_ids = np.arange(len(self._object_ids), len(self._object_ids) + len(rows), dtype=np.int64)
        index = self._index if self._index is not None else vector_index.new_index(encoder.identity.dimension)
        grown = vector_index.with_vectors(index, vectors, vec_ids)

        generation = self._generation + 1
        vectors_path = self._vectors_path(generation)
        vector_index.save_index(grown, vectors_path)
        try:
            self._connection.execute("BEGIN TRANSACTION")
            self._insert_objects(rows, vec_ids)
            self._insert_edges(graph.edges)
            for edge in graph.reweighted:
                self._connection.execute(REWEIGHT_EDGE, [edge.confidence, edge.edge_type, edge.source, edge.target])
            self._rebuild_fts_index()
            self._record_generation(generation, encoder.identity)
            self._connection.execute("COMMIT")
        except BaseException:
            self._connection.execute("ROLLBACK")
            vectors_path.unlink(missing_ok=True)
            raise
        previous = self._vectors_path(self._generation)
        self._generation, self._identity, self._index = generation, encoder.identity, grown
        self._write_embedding_meta()
        if generation > 1:
            previous.unlink(missing_ok=True)
        self._refresh_caches()
        return IngestReport(
            objects_added=len(objects),
            entities_added=len(graph.entities),
            edges_added=len(graph.edges),
            seconds=time.perf_counter() - started,
            details={
                "generation": generation,
                "edges_reweighted": len(graph.reweighted),
                "embedding_seconds": embedding_seconds,
            },
        )

    def _checked_encoder(self) -> QueryEncoder:
        if self._encoder is None:
            raise StoreError("adding objects needs an encoder; open the store with MemoryStore.open(path, encoder)")
        identity = self._encoder.identity
        if self._identity is not None and identity != self._identity:
            raise EmbeddingMismatchError(
                f"the encoder is {identity} but {self.path} holds vectors from {self._identity}; "
                f"use that model, or {_REBUILD_HINT}"
            )
        return self._encoder

    def _stored_entities(self, namespaces: Sequence[str]) -> list[MemoryObject]:
        return [_memory_object(row) for row in self._connection.execute(SELECT_ENTITIES, [list(namespaces)]).fetchall()]

    def _co_mention_counts(self, namespaces: Sequence[str]) -> dict[tuple[str, UUID, UUID], int]:
        counts = {}
        for namespace, first, second, count in self._connection.execute(SELECT_CO_MENTION_COUNTS, [list(namespaces)]).fetchall():
            low, high = sorted((first, second))
            counts[(namespace, low, high)] = count
        return counts

    def _check_new_ids(self, rows: Sequence[MemoryObject]) -> None:
        seen: set[UUID] = set()
        for memory in rows:
            if memory.id in seen:
                raise StoreError(f"object {memory.id} appears twice in the batch; give each memory its own id")
            seen.add(memory.id)
        clashes = self._connection.execute(SELECT_EXISTING_IDS, [list(seen)]).fetchall()
        if clashes:
            raise StoreError(f"object {min(row[0] for row in clashes)} is already in {self.path}; objects are added once")

    def _insert_objects(self, rows: Sequence[MemoryObject], vec_ids: np.ndarray) -> None:
        frame = pd.DataFrame([_row_values(memory) for memory in rows], columns=list(_ROW_COLUMNS), dtype=object)
        frame.insert(1, "vec_id", vec_ids)
        frame["session_seq"] = frame["session_seq"].astype("Int64")
        self._connection.register("incoming_objects", frame)
        try:
            self._connection.execute(INSERT_OBJECTS)
        finally:
            self._connection.unregister("incoming_objects")

    def _insert_edges(self, edges: Sequence[GraphEdge]) -> None:
        if not edges:
            return
        first_id = self._max_edge_id + 1
        frame = pd.DataFrame(
            {
                "edge_id": np.arange(first_id, first_id + len(edges), dtype=np.int64),
                "source": [str(edge.source) for edge in edges],
                "target": [str(edge.target) for edge in edges],
                "edge_type": [edge.edge_type for edge in edges],
                "confidence": np.asarray([edge.confidence for edge in edges], dtype=np.float64),
                "namespace": [edge.namespace for edge in edges],
            }
        )
        self._connection.register("incoming_edges", frame)
        try:
            self._connection.execute(INSERT_EDGES)
        finally:
            self._connection.unregister("incoming_edges")

    def _rebuild_fts_index(self) -> None:
        self._connection.execute(REBUILD_FTS)

    def _record_generation(self, generation: int, identity: EmbeddingIdentity) -> None:
        for key, value in (
            ("generation", str(generation)),
            ("embedding_model_name", identity.model_name),
            ("embedding_model_hash", identity.model_hash),
            ("embedding_dimension", str(identity.dimension)),
        ):
            self._connection.execute(SET_META, [key, value])

    # ----- LexicalIndex and VectorIndex ----------------------------------------------------------

    def search_lexical(self, text: str, namespaces: Sequence[str], limit: int) -> list[LexicalHit]:
        """BM25 over content and entity names, best first, ties by object id."""
        if self._generation == 0 or limit <= 0 or not namespaces:
            return []
        rows = self._connection.execute(
            LEXICAL_SEARCH, {"text": text, "namespaces": list(namespaces), "limit": limit}
        ).fetchall()
        if not rows:
            return []
        low, high = rows[-1][1], rows[0][1]
        spread = high - low
        return [
            LexicalHit(object_id=object_id, bm25=bm25, score=(bm25 - low) / spread if spread > 0 else 1.0)
            for object_id, bm25 in rows
        ]

    @property
    def embedding_identity(self) -> EmbeddingIdentity | None:
        return self._identity

    def search_vector(self, vector: np.ndarray, namespaces: Sequence[str], limit: int) -> list[VectorHit]:
        """Exact inner-product top-k over the namespaces' vectors, best first, ties by object id."""
        if self._index is None or limit <= 0:
            return []
        query = np.asarray(vector, dtype=np.float32).reshape(-1)
        if query.shape[0] != self._index.d:
            raise EmbeddingMismatchError(
                f"the query vector has dimension {query.shape[0]} but {self.path} stores {self._index.d}"
            )
        arrays = [self._vec_ids[namespace] for namespace in set(namespaces) if namespace in self._vec_ids]
        if not arrays:
            return []
        vec_ids, scores = vector_index.search(self._index, query, np.concatenate(arrays), limit)
        hits = [VectorHit(self._object_ids[vec_id], float(score)) for vec_id, score in zip(vec_ids, scores)]
        hits.sort(key=lambda hit: (-hit.cosine, hit.object_id))
        return hits[:limit]

    # ----- GraphIndex ----------------------------------------------------------------------------

    def entity_catalog(self, namespaces: Sequence[str]) -> list[EntityRef]:
        """Every entity name and alias in the namespaces, by namespace, alias, then id."""
        key = tuple(sorted(set(namespaces)))
        if key not in self._entity_catalogs:
            refs = {
                EntityRef(entity.id, entity.namespace, entity.entity_canonical_name or "", name)
                for entity in self._stored_entities(key)
                for name in entity_names(entity)
            }
            self._entity_catalogs[key] = sorted(refs, key=lambda ref: (ref.namespace, ref.alias.lower(), ref.alias, ref.object_id))
        return list(self._entity_catalogs[key])

    def edges_touching(self, nodes: Iterable[UUID], namespaces: Sequence[str], min_confidence: float) -> list[Edge]:
        """Edges with an endpoint in `nodes` whose both endpoints lie in `namespaces`, by edge id."""
        if not namespaces:
            return []
        return self.adjacency(namespaces).touching(nodes, min_confidence)

    def adjacency(self, namespaces: Sequence[str]) -> Adjacency:
        """The graph of one namespace scope, read once per store generation."""
        key = tuple(sorted(set(namespaces)))
        if key not in self._adjacency:
            rows = self._connection.execute(EDGES_IN_SCOPE, {"namespaces": list(key)}).fetchall()
            self._adjacency[key] = Adjacency([Edge(*row) for row in rows])
        return self._adjacency[key]

    # ----- ObjectStore ---------------------------------------------------------------------------

    def get_objects(self, ids: Iterable[UUID]) -> dict[UUID, MemoryObject]:
        """The stored objects among `ids`; unknown ids are left out.

        Objects are immutable once added, so they are cached until the next write: a question
        over one conversation reads mostly the same few hundred objects as the last one did.
        """
        id_list = list(ids)
        missing = [object_id for object_id in id_list if object_id not in self._object_cache]
        if missing:
            rows = self._connection.execute(SELECT_OBJECTS_BY_ID, [missing]).fetchall()
            if len(self._object_cache) + len(rows) > _OBJECT_CACHE_LIMIT:
                self._object_cache.clear()
            for row in rows:
                memory = _memory_object(row)
                self._object_cache[memory.id] = memory
        return {
            object_id: self._object_cache[object_id]
            for object_id in sorted(set(id_list))
            if object_id in self._object_cache
        }

    def pinned_objects(self, namespaces: Sequence[str]) -> list[MemoryObject]:
        """Salience 1.0, ACTIVE TASK and ACTIVE INTENT objects in the namespaces, by id.

        Read once per namespace scope until the next write: every request asks, few change.
        """
        key = tuple(sorted(set(namespaces)))
        if key not in self._pinned:
            rows = self._connection.execute(PINNED_OBJECTS, [list(key)]).fetchall()
            self._pinned[key] = sorted((_memory_object(row) for row in rows), key=lambda memory: memory.id)
        return list(self._pinned[key])

    def session_neighbours(self, triggers: Sequence[UUID], window: int) -> list[SessionNeighbour]:
        """Objects within `window` positions of each trigger in its own session, by trigger, offset, id."""
        if not triggers or window <= 0:
            return []
        order = {trigger: position for position, trigger in reversed(list(enumerate(triggers)))}
        rows = self._connection.execute(SESSION_NEIGHBOURS, {"triggers": list(order), "window": window}).fetchall()
        neighbours = [SessionNeighbour(row[0], _memory_object(row[2:]), row[1]) for row in rows]
        neighbours.sort(key=lambda found: (order[found.trigger], found.offset, found.neighbour.id))
        return neighbours

    def state_fingerprint(self) -> str:
        """Changes whenever rows, vectors or the FTS snapshot change (each add bumps the generation)."""
        return f"g{self._generation}-o{len(self._object_ids)}-e{self._edge_count}"

    def count_objects(self, namespaces: Sequence[str] | None = None) -> int:
        if namespaces is None:
            return len(self._object_ids)
        return sum(len(self._vec_ids.get(namespace, ())) for namespace in set(namespaces))

    def namespaces(self) -> list[str]:
        return sorted(self._vec_ids)

    # ----- exact reads (stores/enumeration.py, stores/aggregation.py) ---------------------------

    def read(self, query: str, parameters: Mapping[str, Any]) -> list[tuple[Any, ...]]:
        """The rows of one SELECT (or WITH ... SELECT) over the store, every value a bound `$name`."""
        if not query.lstrip().upper().startswith(("SELECT", "WITH")):
            raise ValueError("MemoryStore.read runs queries only; objects are written with add()")
        return self._connection.execute(query, dict(parameters)).fetchall()

    def read_objects(self, query: str, parameters: Mapping[str, Any]) -> list[MemoryObject]:
        """`read` for a query whose columns are OBJECT_FIELDS in order, as MemoryObjects in row order."""
        return [_memory_object(row) for row in self.read(query, parameters)]

    # ----- RetrievalLog --------------------------------------------------------------------------

    def log_retrieval(self, record: Mapping[str, Any]) -> None:
        """Append one retrieval record (RFC-0005 Section 10); `record["request_id"]` is a UUID string."""
        if self._read_only:
            raise StoreError(f"{self.path} is open read-only; reopen it writable to log retrievals")
        try:
            request_id = UUID(str(record["request_id"]))
        except (KeyError, ValueError) as error:
            raise StoreError(f"a retrieval record needs a UUID request_id ({error})") from error
        document = json.dumps(record, sort_keys=True, default=_json_default)
        self._connection.execute(INSERT_LOG, [request_id, datetime.now(timezone.utc), document])

    def retrieval_log(self, limit: int | None = None) -> list[dict[str, Any]]:
        """Logged records, oldest first; with `limit`, only the latest `limit` of them."""
        records = [json.loads(row[0]) for row in self._connection.execute(SELECT_LOG).fetchall()]
        return records if limit is None else records[max(0, len(records) - limit) :]


def _identity_from_meta(meta: Mapping[str, str]) -> EmbeddingIdentity | None:
    if "embedding_model_name" not in meta:
        return None
    return EmbeddingIdentity(meta["embedding_model_name"], meta["embedding_model_hash"], int(meta["embedding_dimension"]))


def _json_default(value: Any) -> Any:
    """How a retrieval record's ids, times, enums and numpy numbers are written."""
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, UUID):
        return str(value)
    if isinstance(value, (tuple, frozenset, set)):
        return sorted(value, key=str) if isinstance(value, (set, frozenset)) else list(value)
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.astimezone(timezone.utc).isoformat()


def _row_values(memory: MemoryObject) -> list[Any]:
    """One object as the `_ROW_COLUMNS` values INSERT_OBJECTS casts (strings for UUIDs, times and JSON)."""
    try:
        metadata = json.dumps(memory.metadata, sort_keys=True)
    except (TypeError, ValueError) as error:
        raise StoreError(f"object {memory.id} has metadata that is not JSON ({error}); store plain values") from error
    values = {
        **{name: getattr(memory, name) for name in OBJECT_FIELDS},
        "id": str(memory.id),
        "node_type": memory.node_type.value,
        "epistemic_type": memory.epistemic_type.value,
        "lifecycle_state": memory.lifecycle_state.value,
        "created_at": _iso(memory.created_at),
        "updated_at": _iso(memory.updated_at),
        "event_time": _iso(memory.event_time),
        "valid_from": _iso(memory.valid_from),
        "valid_to": _iso(memory.valid_to),
        "evidence_refs": json.dumps(list(memory.evidence_refs)),
        "metadata": metadata,
        "assertion": None if memory.assertion is None else memory.assertion.model_dump_json(),
        "quantity": None if memory.quantity is None else memory.quantity.model_dump_json(),
        **_assertion_norms(memory.assertion),
    }
    return [values[name] for name in _ROW_COLUMNS]


def _assertion_norms(assertion: Assertion | None) -> dict[str, str | None]:
    if assertion is None:
        return dict.fromkeys(ASSERTION_NORM_COLUMNS)
    return {
        "assertion_subject_norm": normalize_value(assertion.subject),
        "assertion_predicate_norm": normalize_predicate(assertion.predicate),
        "assertion_object_norm": normalize_value(assertion.object),
        "assertion_polarity": assertion.polarity,
    }


def _utc(value: datetime | None) -> datetime | None:
    return None if value is None else value.astimezone(timezone.utc)


def _memory_object(row: Sequence[Any]) -> MemoryObject:
    """A MemoryObject from a trusted row (validated when it was added), without re-validating."""
    fields = dict(zip(OBJECT_FIELDS, row))
    fields.update(
        node_type=NodeType(fields["node_type"]),
        epistemic_type=EpistemicType(fields["epistemic_type"]),
        lifecycle_state=LifecycleState(fields["lifecycle_state"]),
        created_at=_utc(fields["created_at"]),
        updated_at=_utc(fields["updated_at"]),
        event_time=_utc(fields["event_time"]),
        valid_from=_utc(fields["valid_from"]),
        valid_to=_utc(fields["valid_to"]),
        evidence_refs=tuple(json.loads(fields["evidence_refs"])),
        metadata=json.loads(fields["metadata"]),
        assertion=None if fields["assertion"] is None else Assertion.model_construct(**json.loads(fields["assertion"])),
        quantity=None if fields["quantity"] is None else Quantity.model_construct(**json.loads(fields["quantity"])),
    )
    return MemoryObject.model_construct(**fields)
