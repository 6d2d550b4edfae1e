"""Cross-scope hints (RFC-0005 amendment): memories from other namespaces the caller names, returned
beside the bundle and never packed into its context.

The hints have their own exact vector pass over `cross_scope_namespaces` (2 x `cross_scope_top_n`),
the request's epistemic and time rules, their own scoring pool on the request's clock, the
request's `min_score` and their own cap. Every node is cheap and empty when the request names no
cross_scope_namespaces.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from hamilton.function_modifiers import config

from rms_retrieval.nodes import scoring
from rms_retrieval.nodes.bundle import CrossScopeHint
from rms_retrieval.nodes.helpers.channels import guarded, vector_hits
from rms_retrieval.nodes.helpers.eligibility import exclusion_reason
from rms_retrieval.nodes.models import QueryAnalysis, QueryEmbedding, RetrievalRequest
from rms_retrieval.nodes.pools import (Candidate, ChannelResult, CrossScopePass, CrossScopePool, CrossScopeScores,
                                       FilteredPool, PathType)
from rms_retrieval.nodes.scored_pool import ScoredPool, rank_order
from rms_retrieval.nodes.settings import RetrievalSettings
from rms_retrieval.stores.protocols import RetrievalStore


def cross_scope_candidates(
    query_embedding: QueryEmbedding | None, store_snapshot: RetrievalStore, request: RetrievalRequest
) -> CrossScopePass:
    """The hints' own vector pass: exact cosine top 2 x cross_scope_top_n in the request's
    `cross_scope_namespaces` only, with the objects behind the hits. Empty when the request names
    none or the vector path is off (no query embedding); a model mismatch empties it as it does
    the vector path."""
    if not request.cross_scope_namespaces or query_embedding is None:
        return CrossScopePass(ChannelResult(path=PathType.VECTOR))
    limit = 2 * request.cross_scope_top_n
    stored = store_snapshot.embedding_identity
    if stored is not None and stored != query_embedding.identity:
        return CrossScopePass(ChannelResult(path=PathType.VECTOR, limit=limit, embedding_mismatch=True,
                                            failure="embedding_mismatch"))

    def search() -> ChannelResult:
        hits = vector_hits(store_snapshot.search_vector(query_embedding.vector, request.cross_scope_namespaces, limit))
        objects = store_snapshot.get_objects([hit.object_id for hit in hits], request.cross_scope_namespaces)
        return ChannelResult(path=PathType.VECTOR, hits=hits, objects=objects, limit=limit)

    return CrossScopePass(guarded(PathType.VECTOR, limit, search))


def cross_scope_pool(
    cross_scope_candidates: CrossScopePass, request: RetrievalRequest, settings: RetrievalSettings
) -> CrossScopePool:
    """The hints that may be scored: the same epistemic and time rules, within their own namespaces."""
    scope = request.cross_scope_namespaces
    kept, removed, excluded = [], [], {}
    found = cross_scope_candidates.result
    for hit in found.hits:
        obj = found.objects.get(hit.object_id)
        if obj is None:  # gone between the search and the read
            continue
        candidate = Candidate(obj, {hit.path: hit})
        reason = exclusion_reason(obj, request, settings, scope)
        if reason is None:
            kept.append(candidate)
        else:
            removed.append(candidate)
            excluded[obj.id] = reason
    return CrossScopePool(FilteredPool(candidates=tuple(sorted(kept, key=lambda c: c.object_id.int)),
                                       excluded=excluded, removed=tuple(removed)))


def _scored(request: RetrievalRequest, score: Callable[[], ScoredPool]) -> CrossScopeScores:
    return CrossScopeScores(score() if request.cross_scope_namespaces else None)


@config.when(fusion="rrf")
def cross_scope_scores__rrf(
    cross_scope_pool: CrossScopePool, query_analysis: QueryAnalysis, request: RetrievalRequest,
    settings: RetrievalSettings,
) -> CrossScopeScores:
    """The hints fused within their own pool (RFC 7.2), on the request's clock."""
    return _scored(request, lambda: scoring.fused_scores__rrf(cross_scope_pool.pool, query_analysis, settings))


@config.when(fusion="weighted")
def cross_scope_scores__weighted(
    cross_scope_pool: CrossScopePool, query_analysis: QueryAnalysis, request: RetrievalRequest,
    settings: RetrievalSettings,
) -> CrossScopeScores:
    """The hints scored by formula 1 within their own pool, on the request's clock."""
    return _scored(request, lambda: scoring.fused_scores__weighted(cross_scope_pool.pool, query_analysis, request, settings))


def cross_scope_hints(
    cross_scope_scores: CrossScopeScores, request: RetrievalRequest
) -> tuple[CrossScopeHint, ...] | None:
    """The hints, best first: the request's min_score on their semantic_relevance under rank fusion
    (the score under weighted scoring), skipped only when no hint has a cosine, then their own cap,
    cross_scope_top_n. None when the request names no cross_scope_namespaces."""
    pool = cross_scope_scores.pool
    if pool is None:
        return None
    rank_fused = pool.rank_fused
    order = rank_order(pool.score, pool.path_count, pool.objects)
    if request.min_score > 0 and not np.isnan(pool.factors.semantic).all():
        value = pool.semantic_relevance if rank_fused else pool.score
        order = order[value[order] >= request.min_score]
    return tuple(
        CrossScopeHint(id=obj.id, namespace=obj.namespace, node_type=str(obj.node_type), content=obj.content,
                       score=float(pool.score[i]),
                       semantic_relevance=float(pool.semantic_relevance[i]) if rank_fused else None,
                       event_time=obj.event_time, source_ref=obj.source_ref)
        for i in order[: request.cross_scope_top_n].tolist() for obj in (pool.objects[i],)
    )
