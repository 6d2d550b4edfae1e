"""Stage 2: candidate generation (RFC 4.1 to 4.4): per-path limits, then the candidate paths.

The paths, `text_path_candidates` and `candidate_objects` read the stores; so do stage 1's
`entity_catalog`, and after scoring the session neighbours (`session_context`) and the objects
evidence references name (`evidence_sources`). Nothing else after this stage reads a store.

Each path returns a `ChannelResult`. A backend exception empties that path and is reported
as a backend failure instead of failing the request; an embedding-model mismatch empties the
vector path and flags the bundle (RFC 4.2), or raises when the settings ask for that.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Sequence
from uuid import UUID

from hamilton.function_modifiers import group, inject, source

from rms_retrieval.nodes.models import QueryAnalysis, QueryEmbedding, RetrievalRequest
from rms_retrieval.nodes.pools import (CandidateLimits, ChannelHit, ChannelResult, PathType, TextPathCandidates,
                                       in_path_order)
from rms_retrieval.nodes.helpers.channels import guarded, vector_hits
from rms_retrieval.nodes.helpers.graph_walk import walk
from rms_retrieval.nodes.settings import RetrievalSettings
from rms_retrieval.stores.analysis.entity_catalog import EntityCatalog
from rms_retrieval.stores.indexes.entity_graph import SPOKEN_BY
from rms_retrieval.stores.errors import EmbeddingMismatchError
from rms_retrieval.stores.models import MemoryObject
from rms_retrieval.stores.protocols import FieldWeights, RetrievalStore

logger = logging.getLogger(__name__)

# The candidate paths, each a node of this module returning a `ChannelResult`: the one list that
# `merging.merged_candidates` reads them from (a new path is one more name). The vector path is
# last, so that Hamilton's own walk, which runs a node's inputs in order, also runs the paths that
# need no query embedding while a prefetched one is made (a planned walk runs them first whatever
# the order: dataflows/pipeline.py, `_embedding_last`); the merge puts them back in `PathType`
# order (`pools.in_path_order`).
TEXT_PATHS = ("lexical_candidates", "graph_candidates", "pinned_candidates", "keyword_scan_candidates")
CANDIDATE_CHANNELS = group(*(source(name) for name in (*TEXT_PATHS, "vector_candidates")))
# The paths that need no query embedding: `text_path_candidates` reads and merges what they found
# while the embedding is made.
TEXT_CHANNELS = group(*(source(name) for name in TEXT_PATHS))


def _widened(limit: int, multiplier: float, cap: int) -> int:
    return max(limit, min(math.ceil(limit * multiplier), cap))


def candidate_limits(query_analysis: QueryAnalysis, settings: RetrievalSettings) -> CandidateLimits:
    """Per-path candidate limits; count and list questions get them widened up to the cap (RFC 4.3)."""
    configured = settings.candidates
    if query_analysis.aggregation is None:
        return CandidateLimits(
            vector_k=configured.vector_k,
            lexical_k=configured.lexical_k,
            graph_max_candidates=configured.graph_max_candidates,
        )
    multiplier, cap = configured.aggregation_k_multiplier, configured.aggregation_k_max
    return CandidateLimits(
        vector_k=_widened(configured.vector_k, multiplier, cap),
        lexical_k=_widened(configured.lexical_k, multiplier, cap),
        graph_max_candidates=_widened(configured.graph_max_candidates, multiplier, cap),
        widened=True,
    )


def vector_candidates(
    query_embedding: QueryEmbedding | None,
    store_snapshot: RetrievalStore,
    candidate_limits: CandidateLimits,
    request: RetrievalRequest,
    settings: RetrievalSettings,
) -> ChannelResult:
    """Exact cosine top-k within the request's namespaces."""
    limit = candidate_limits.vector_k
    if query_embedding is None or limit == 0:
        return ChannelResult(path=PathType.VECTOR)
    stored = store_snapshot.embedding_identity
    if stored is not None and stored != query_embedding.identity:
        if settings.candidates.on_embedding_mismatch == "error":
            raise EmbeddingMismatchError(
                f"EMBEDDING_VERSION_MISMATCH: the query was embedded with {query_embedding.identity} "
                f"but the store holds {stored}; re-ingest with the same model or query with a matching encoder"
            )
        return ChannelResult(path=PathType.VECTOR, limit=limit, embedding_mismatch=True, failure="embedding_mismatch")

    def search() -> ChannelResult:
        found = store_snapshot.search_vector(query_embedding.vector, request.namespaces, limit)
        return ChannelResult(path=PathType.VECTOR, hits=vector_hits(found), limit=limit)

    return guarded(PathType.VECTOR, limit, search)


def _field_weights(settings: RetrievalSettings) -> FieldWeights:
    boost = settings.candidates.boost_fields
    return FieldWeights(value=boost.value, entity_canonical_name=boost.entity_canonical_name)


def lexical_candidates(
    store_snapshot: RetrievalStore,
    candidate_limits: CandidateLimits,
    request: RetrievalRequest,
    settings: RetrievalSettings,
) -> ChannelResult:
    """BM25 top-k within the request's namespaces, scores normalised per query."""
    limit = candidate_limits.lexical_k
    if PathType.LEXICAL not in settings.candidates.enabled_paths or limit == 0:
        return ChannelResult(path=PathType.LEXICAL)

    def search() -> ChannelResult:
        found = store_snapshot.search_lexical(request.query, request.namespaces, limit, _field_weights(settings))
        path = PathType.LEXICAL  # bound once: an enum member read off its class costs a Python call (3.11)
        hits = tuple(ChannelHit(hit.object_id, path, rank, hit.bm25, hit.score) for rank, hit in enumerate(found, start=1))
        return ChannelResult(path=PathType.LEXICAL, hits=hits, limit=limit)

    return guarded(PathType.LEXICAL, limit, search)


def graph_candidates(
    query_analysis: QueryAnalysis,
    entity_catalog: EntityCatalog,
    store_snapshot: RetrievalStore,
    candidate_limits: CandidateLimits,
    request: RetrievalRequest,
    settings: RetrievalSettings,
) -> ChannelResult:
    """Objects reached from the query's entities within `graph_max_hops` (hard limit 3)."""
    limit = candidate_limits.graph_max_candidates
    starts = sorted({oid for entity in query_analysis.entities for oid in entity.matched_ids})
    if PathType.GRAPH not in settings.candidates.enabled_paths or limit == 0 or not starts:
        return ChannelResult(path=PathType.GRAPH, limit=limit)
    entity_ids = entity_catalog.id_keys  # one sorted column, made once per scope
    cfg = settings.candidates

    def search() -> ChannelResult:
        graph = store_snapshot.adjacency(request.namespaces)
        reached = walk(graph, starts, entity_ids, max_hops=cfg.graph_max_hops,
                       min_confidence=cfg.graph_min_edge_confidence, max_candidates=limit)
        hits = tuple(
            ChannelHit(
                oid,
                PathType.GRAPH,
                rank,
                raw_score=float(weight),
                score=1.0 / hops,
                detail={"hops": hops, "support": support, "edge_path": [int(graph.edge_id[e]) for e in path],
                        "edge_types": [graph.type_at(e) for e in path]},
            )
            for rank, (oid, weight, hops, support, path) in enumerate(
                zip(reached.objects, reached.weight.tolist(), reached.hops.tolist(), reached.support.tolist(),
                    reached.edge_paths), start=1)
        )
        return ChannelResult(path=PathType.GRAPH, hits=hits, limit=limit)

    return guarded(PathType.GRAPH, limit, search)


def spoken_by_query_entities(
    query_analysis: QueryAnalysis, store_snapshot: RetrievalStore, request: RetrievalRequest, settings: RetrievalSettings
) -> frozenset[int]:
    """The objects spoken by a person the question names (SPOKEN_BY edges into its matched
    entities), as id integers: what `scoring.speaker_boost` lifts. Empty while the boost is 0."""
    starts = {oid for entity in query_analysis.entities for oid in entity.matched_ids}
    if settings.scoring.speaker_boost == 0 or not starts:
        return frozenset()
    try:
        graph = store_snapshot.adjacency(request.namespaces)
        return graph.source_keys_into(starts, SPOKEN_BY, settings.candidates.graph_min_edge_confidence)
    except Exception as exc:  # the graph backend failed: no lift, as a failed graph path adds no hits
        logger.warning("speaker lookup failed (%s: %s); no speaker boost", type(exc).__name__, exc)
        return frozenset()


def pinned_candidates(
    store_snapshot: RetrievalStore, request: RetrievalRequest, settings: RetrievalSettings
) -> ChannelResult:
    """Pinned (salience 1.0), ACTIVE TASK and ACTIVE INTENT objects in scope; they bypass scoring."""
    if PathType.PINNED not in settings.candidates.enabled_paths:
        return ChannelResult(path=PathType.PINNED)

    def search() -> ChannelResult:
        objects = store_snapshot.pinned_objects(request.namespaces)
        hits = tuple(
            ChannelHit(obj.id, PathType.PINNED, rank, obj.salience, 1.0)
            for rank, obj in enumerate(sorted(objects, key=lambda o: str(o.id)), start=1)
        )
        return ChannelResult(path=PathType.PINNED, hits=hits, objects={o.id: o for o in objects})

    return guarded(PathType.PINNED, 0, search)


def objects_of(
    channels: Sequence[ChannelResult], store_snapshot: RetrievalStore, request: RetrievalRequest
) -> dict[UUID, MemoryObject]:
    """The stored objects behind every hit of `channels`, read in one round trip: those a channel
    read itself (the pinned path) first, then the rest in id order. Whatever order the channels
    ran in: only the pinned path brings objects, and the rest are read by id."""
    # Keyed by the id's integer, which hashes and compares in C (a UUID does both in Python code);
    # integers sort as the ids do.
    wanted = {hit.object_id.int: hit.object_id for result in channels for hit in result.hits}
    objects: dict[UUID, MemoryObject] = {}
    for result in channels:
        objects.update(result.objects)
    for known in objects:
        wanted.pop(known.int, None)
    if wanted:
        objects.update(store_snapshot.get_objects([wanted[key] for key in sorted(wanted)], request.namespaces))
    return objects


@inject(channels=TEXT_CHANNELS)
def text_path_candidates(
    channels: list[ChannelResult], store_snapshot: RetrievalStore, request: RetrievalRequest
) -> TextPathCandidates:
    """The objects the lexical, graph, pinned and keyword paths found, with each one's hits in
    path order: it needs no query embedding, so a planned request runs it while the question's
    embedding is made (dataflows/pipeline.py, `_embedding_last`)."""
    hits: dict[int, dict[PathType, ChannelHit]] = {}
    for channel in in_path_order(channels):
        for hit in channel.hits:
            hits.setdefault(hit.object_id.int, {})[hit.path] = hit
    return TextPathCandidates(objects=objects_of(channels, store_snapshot, request), hits=hits)


def candidate_objects(
    text_path_candidates: TextPathCandidates,
    vector_candidates: ChannelResult,
    store_snapshot: RetrievalStore,
    request: RetrievalRequest,
) -> dict[UUID, MemoryObject]:
    """The stored objects behind every hit: the text paths' objects, read already (in the order
    `objects_of` gives), then the other objects of the vector hits, read in one round trip, in id order."""
    objects = dict(text_path_candidates.objects)
    known = {obj.id.int for obj in objects.values()}
    missing = {hit.object_id.int: hit.object_id for hit in vector_candidates.hits if hit.object_id.int not in known}
    if missing:
        objects.update(store_snapshot.get_objects([missing[key] for key in sorted(missing)], request.namespaces))
    return objects


_SCAN_STOPWORDS = frozenset(
    """a an the and or of to in on at for with from by about into over after before since until
    how many much times time often number count list all every each any some what which who whom
    whose when where why did do does done is are was were be been being have has had i me my we us
    our you your he him his she her they them their it its this that these those there here ever
    name kinds kind types type things thing""".split()
)
_TERM = re.compile(r"[A-Za-z][A-Za-z'\-]{2,}")


def _scan_terms(query_analysis: QueryAnalysis) -> list[str]:
    entity_words = {w.lower() for e in query_analysis.entities for w in e.name.split()}
    terms = []
    for word in _TERM.findall(query_analysis.raw_query):
        lower = word.lower().removesuffix("'s")
        if lower not in _SCAN_STOPWORDS and lower not in entity_words and lower not in terms:
            terms.append(lower)
    return terms


def keyword_scan_candidates(
    query_analysis: QueryAnalysis,
    store_snapshot: RetrievalStore,
    request: RetrievalRequest,
    settings: RetrievalSettings,
) -> ChannelResult:
    """For count and list questions only: BM25 hits per content word and per entity name (RFC 4.3).

    These scans widen the pool beyond the per-path limits so a list has more of its members to
    draw on; they are not ranked evidence, so they neither count toward path_count nor fuse.
    """
    cfg = settings.candidates
    if query_analysis.aggregation is None or PathType.LEXICAL not in cfg.enabled_paths:
        return ChannelResult(path=PathType.KEYWORD_SCAN)
    scans = [(term, cfg.keyword_scan_hits_per_term) for term in _scan_terms(query_analysis)]
    scans += [(entity.name, cfg.entity_scan_hits_per_entity) for entity in query_analysis.entities]

    def search() -> ChannelResult:
        best: dict[UUID, tuple[float, str]] = {}
        for text, limit in scans:
            if limit == 0:
                continue
            for hit in store_snapshot.search_lexical(text, request.namespaces, limit, _field_weights(settings)):
                if hit.object_id not in best or hit.score > best[hit.object_id][0]:
                    best[hit.object_id] = (hit.score, text)
        ordered = sorted(best.items(), key=lambda kv: (-kv[1][0], str(kv[0])))
        hits = tuple(
            ChannelHit(oid, PathType.KEYWORD_SCAN, rank, score, score, detail={"scan": text})
            for rank, (oid, (score, text)) in enumerate(ordered, start=1)
        )
        return ChannelResult(path=PathType.KEYWORD_SCAN, hits=hits)

    return guarded(PathType.KEYWORD_SCAN, 0, search)
