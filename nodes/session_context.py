"""Adjacent session context (RFC 4.5): after primary scoring (and the optional reranker), neighbours of the top candidates
in their own session join or are promoted with an inherited, decayed score.

A neighbour keeps its own score when that is higher; either way SESSION_CONTEXT joins its
paths without changing its path count (unless `session.context_packing`, which counts it and
links the neighbour to its trigger). A neighbour new to the pool passes the same filter as
every candidate, has one path, and records its trigger, offset and decay as provenance.
Opt-in episode context (RFC 4.6, `packing.episode_context_top_k`) then routes the pool's best
sessions: their best records join EPISODE_CONTEXT, one more path, with an inherited score.

`session_context` reads the object store (the session neighbours), as the stage-2 candidate
paths do; `ranked_candidates` is pure.
"""

from __future__ import annotations

import dataclasses
from uuid import UUID

import numpy as np

from rms_retrieval.nodes.helpers.eligibility import exclusion_reason
from rms_retrieval.nodes.helpers.episodes import episode_marks
from rms_retrieval.nodes.models import RetrievalRequest
from rms_retrieval.nodes.pools import (FilteredPool, PathType, RankedCandidates, RerankedPool, ScoredPool, SessionLink,
                                       path_mask, rank_order)
from rms_retrieval.nodes.scoring import SCORE_DECIMALS
from rms_retrieval.nodes.settings import RetrievalSettings
from rms_retrieval.stores.indexes.lexical import indexed_terms
from rms_retrieval.stores.protocols import RetrievalStore, SessionNeighbour

_SESSION_BIT = path_mask([PathType.SESSION_CONTEXT])
_EPISODE_BIT = path_mask([PathType.EPISODE_CONTEXT])


def session_context(
    reranked_scores: RerankedPool, store_snapshot: RetrievalStore, request: RetrievalRequest, settings: RetrievalSettings
) -> list[SessionNeighbour]:
    """Objects within the session window of the top-scored candidates, read from the store."""
    cfg = settings.session
    scored_pool = reranked_scores.pool
    if cfg.window == 0 or cfg.top_triggers == 0 or not len(scored_pool):
        return []
    scored = np.flatnonzero(scored_pool.score > 0)[: cfg.top_triggers]
    triggers = [scored_pool.objects[i].id for i in scored.tolist()]
    return store_snapshot.session_neighbours(triggers, cfg.window, request.namespaces) if triggers else []


def _decay(pool: ScoredPool, settings: RetrievalSettings) -> float:
    cfg = settings.session
    if pool.rank_fused and cfg.rank_fusion_score_decay is not None:
        return cfg.rank_fusion_score_decay
    return cfg.score_decay


def ranked_candidates(
    reranked_scores: RerankedPool,
    session_context: list[SessionNeighbour],
    filtered_candidates: FilteredPool,
    request: RetrievalRequest,
    settings: RetrievalSettings,
) -> RankedCandidates:
    """The scored pool with session context applied, in final rank order."""
    fused = reranked_scores.pool
    size = len(fused)
    # Keyed by the id's integer, which hashes in C (a UUID hashes through Python code).
    position = {obj.id.int: i for i, obj in enumerate(fused.objects)}
    score = fused.score.copy()
    relevance = fused.semantic_relevance.copy()
    masks = fused.path_mask.copy()
    triggers: list[UUID | None] = [None] * size
    offsets = np.full(size, np.nan)
    decays = np.full(size, np.nan)
    joined = []  # neighbours new to the pool, in the order they join
    excluded: dict[UUID, str] = {}
    decay = _decay(fused, settings)
    extra_score: list[float] = []
    extra_relevance: list[float] = []
    # Opt-in session context packing (RFC 4.5): links, and the session path counted.
    packing = settings.session.context_packing
    trigger_ids = {link.trigger for link in session_context}
    links: dict[UUID, SessionLink] = {}
    # A neighbour inherits from its trigger's score as fused, never from a score an earlier
    # trigger promoted in this loop: inheritance does not chain.
    # The highest-ranked trigger decides a neighbour shared by several windows.
    for link in sorted(session_context, key=lambda n: (position[n.trigger.int], abs(n.offset), n.offset)):
        source = position[link.trigger.int]
        inherited = round(float(fused.score[source]) * decay, SCORE_DECIMALS)
        trigger_relevance = float(fused.semantic_relevance[source])
        neighbour = link.neighbour
        row = position.get(neighbour.id.int)
        if row is None:
            if neighbour.id in excluded or neighbour.id in filtered_candidates.excluded:
                continue
            reason = exclusion_reason(neighbour, request, settings)
            if reason is not None:
                excluded[neighbour.id] = reason
                continue
            row = position[neighbour.id.int] = size + len(joined)
            joined.append(neighbour)
            extra_score.append(-1.0)
            extra_relevance.append(0.0)
            triggers.append(None)
            offsets = np.append(offsets, np.nan)
            decays = np.append(decays, np.nan)
        if packing and neighbour.id not in trigger_ids and neighbour.id not in links:
            links[neighbour.id] = SessionLink(link.trigger, link.offset)  # the first is the highest-ranked trigger
        if row < size:
            masks[row] |= _SESSION_BIT
            relevance[row] = max(float(relevance[row]), trigger_relevance)
            promoted = inherited > score[row]
            if promoted:
                score[row] = inherited
        else:
            extra_relevance[row - size] = max(extra_relevance[row - size], trigger_relevance)
            promoted = inherited > extra_score[row - size]
            if promoted:
                extra_score[row - size] = inherited
        if promoted:
            triggers[row], offsets[row], decays[row] = link.trigger, link.offset, decay
    added = len(joined)
    objects = fused.objects + tuple(joined)
    path_count = np.concatenate([fused.path_count, np.ones(added, dtype=np.int64)])
    if packing:  # the session path counts for the candidates it joined
        path_count[:size] += ((masks & _SESSION_BIT) != 0) & ((fused.path_mask & _SESSION_BIT) == 0)
    pool = ScoredPool(
        formula_version=fused.formula_version,
        objects=objects,
        score=np.concatenate([score, np.array(extra_score, dtype=float)]),
        semantic_relevance=np.concatenate([relevance, np.array(extra_relevance, dtype=float)]),
        path_mask=np.concatenate([masks, np.full(added, _SESSION_BIT, dtype=np.int64)]),
        path_count=path_count,
        factors=fused.factors.padded(added),
    )
    anchors: dict[UUID, UUID] = {}
    if settings.packing.episode_context_top_k:
        pool, anchors = _episode_context(pool, request.query, settings)
        path_count = pool.path_count
    order = rank_order(pool.score, path_count, objects)
    return RankedCandidates(
        pool=pool.take(order),
        session_trigger=tuple(triggers[i] for i in order.tolist()),
        session_offset=offsets[order],
        session_decay=decays[order],
        excluded=excluded,
        session_links=links,
        episode_anchors=anchors,
    )


def _episode_context(pool: ScoredPool, question: str, settings: RetrievalSettings) -> tuple[ScoredPool, dict[UUID, UUID]]:
    """RFC 4.6 over the pool after session context: each record episode routing marks
    (nodes/helpers/episodes.py, the pool in rank order) joins EPISODE_CONTEXT, which counts as a
    path (RFC 5), and inherits its episode's strongest score times `episode_decay` when higher.
    Terms are the content's as the store's BM25 indexes it."""
    cfg = settings.packing
    order = rank_order(pool.score, pool.path_count, pool.objects).tolist()
    objects = pool.objects
    episodes = [(o.namespace, o.owner, o.scope, o.session_id) if o.session_id is not None else None
                for o in (objects[i] for i in order)]
    *terms, asked = indexed_terms([*(objects[i].content for i in order), question])
    marks = episode_marks(episodes, terms, pool.score[order], asked, cfg.episode_context_top_k,
                          cfg.episode_context_local_k)
    if not marks:
        return pool, {}
    score, masks, path_count = pool.score.copy(), pool.path_mask.copy(), pool.path_count.copy()
    anchors: dict[UUID, UUID] = {}
    for mark in marks:
        row, anchor = order[mark.row], order[mark.anchor]
        score[row] = max(float(score[row]), round(float(pool.score[anchor]) * cfg.episode_decay, SCORE_DECIMALS))
        masks[row] |= _EPISODE_BIT
        path_count[row] += 1
        anchors[objects[row].id] = objects[anchor].id
    return dataclasses.replace(pool, score=score, path_mask=masks, path_count=path_count), anchors
