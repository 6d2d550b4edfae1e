"""Adjacent session context (RFC 4.5): after primary scoring (and the optional reranker), neighbours of the top candidates
in their own session join or are promoted with an inherited, decayed score.

A neighbour keeps its own score when that is higher; either way SESSION_CONTEXT joins its
paths without changing its path count (unless `session.context_packing`, which counts it and
links the neighbour to its trigger). A neighbour new to the pool passes the same filter as
every candidate, has one path, and records its trigger, offset and decay as provenance.
Opt-in episode context (RFC 4.6, `packing.episode_context_top_k`) then routes the pool's best
sessions: their best records join EPISODE_CONTEXT, one more path, with an inherited score.
Opt-in evidence projection or augmentation (RFC 4.7, `packing.evidence_projection_top_k` or
`packing.evidence_augmentation_top_k`) last: the top exact evidence_refs groups bring in the stored
objects their references name, as EVIDENCE_CONTEXT with the group's strongest score, in place of
the group or beside it.

`session_context` and `evidence_sources` read the object store (session neighbours, the objects
evidence references name), as the stage-2 candidate paths do; `ranked_candidates` is pure.
"""

from __future__ import annotations

import dataclasses
from uuid import UUID

import numpy as np

from rms_retrieval.nodes.helpers.eligibility import exclusion_reason
from rms_retrieval.nodes.helpers.episodes import episode_marks
from rms_retrieval.nodes.models import RetrievalRequest
from rms_retrieval.nodes.pools import (EvidenceSources, FilteredPool, PathType, RankedCandidates, RerankedPool,
                                       SessionLink, path_mask)
from rms_retrieval.nodes.scored_pool import ScoredPool, rank_order
from rms_retrieval.nodes.scoring import SCORE_DECIMALS
from rms_retrieval.nodes.settings import RetrievalSettings
from rms_retrieval.stores.indexes.postings import indexed_terms
from rms_retrieval.stores.models import MemoryObject, NodeType
from rms_retrieval.stores.protocols import RetrievalStore, SessionNeighbour

_SESSION_BIT = path_mask([PathType.SESSION_CONTEXT])
_EPISODE_BIT = path_mask([PathType.EPISODE_CONTEXT])
_EVIDENCE_BIT = path_mask([PathType.EVIDENCE_CONTEXT])
# What a projected group's members are excluded as (RankedCandidates.excluded).
EVIDENCE_PROJECTED = "evidence_projected"


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


def evidence_sources(
    reranked_scores: RerankedPool, store_snapshot: RetrievalStore, settings: RetrievalSettings
) -> EvidenceSources:
    """The stored objects that the references of the top evidence groups name (RFC 4.7, opt-in),
    read from the store: by the routing candidate's id, in its evidence_refs order, each looked
    up in the routing candidate's namespace only."""
    cfg = settings.packing
    top_k = cfg.evidence_projection_top_k or cfg.evidence_augmentation_top_k
    if not top_k:
        return {}
    pool = reranked_scores.pool
    found: dict[UUID, tuple[MemoryObject, ...]] = {}
    for anchor in _evidence_anchors(pool, top_k, cfg.evidence_anchor_policy):
        ids = _referenced_ids(anchor)
        stored = store_snapshot.get_objects(ids, [anchor.namespace]) if ids else {}
        found[anchor.id] = tuple(stored[object_id] for object_id in ids if object_id in stored)
    return found


def _evidence_key(obj: MemoryObject) -> tuple[str, ...] | None:
    """An object's exact evidence set (as max_per_evidence groups), None without one."""
    return tuple(sorted(obj.evidence_refs)) if obj.evidence_refs else None


def _evidence_anchors(pool: ScoredPool, top_k: int, policy: str) -> list[MemoryObject]:
    """The strongest candidate of each of the pool's first `top_k` exact nonempty evidence groups,
    in rank order, among candidates with a positive score; under "non_entity" an ENTITY never
    routes a group, and later groups fill the quota."""
    anchors, seen = [], set()
    for row in np.flatnonzero(pool.score > 0).tolist():
        obj = pool.objects[row]
        key = _evidence_key(obj)
        if key is None or key in seen or (policy == "non_entity" and obj.node_type is NodeType.ENTITY):
            continue
        seen.add(key)
        anchors.append(obj)
        if len(anchors) == top_k:
            break
    return anchors


def _referenced_ids(anchor: MemoryObject) -> list[UUID]:
    """The object ids among an anchor's evidence references, in order, once each, itself left out."""
    ids: list[UUID] = []
    for ref in anchor.evidence_refs:
        try:
            object_id = UUID(ref)
        except ValueError:
            continue  # a reference that is not an object id (a dialogue id, a URL) names no stored object
        if object_id != anchor.id and object_id not in ids:
            ids.append(object_id)
    return ids


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
    evidence_sources: EvidenceSources,
) -> RankedCandidates:
    """The scored pool with session, episode and evidence context applied, in final rank order."""
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
    evidence_anchors: dict[UUID, UUID] = {}
    if evidence_sources:
        pool, rows, evidence_anchors, projected = _evidence_context(pool, evidence_sources, request, settings,
                                                                    {**filtered_candidates.excluded, **excluded})
        excluded.update(projected)
        triggers = [triggers[row] if row is not None else None for row in rows]
        offsets = np.array([offsets[row] if row is not None else np.nan for row in rows], dtype=float)
        decays = np.array([decays[row] if row is not None else np.nan for row in rows], dtype=float)
    order = rank_order(pool.score, pool.path_count, pool.objects)
    return RankedCandidates(
        pool=pool.take(order),
        session_trigger=tuple(triggers[i] for i in order.tolist()),
        session_offset=offsets[order],
        session_decay=decays[order],
        excluded=excluded,
        session_links=links,
        episode_anchors=anchors,
        evidence_anchors=evidence_anchors,
    )


def _evidence_context(
    pool: ScoredPool, sources: EvidenceSources, request: RetrievalRequest, settings: RetrievalSettings,
    excluded: dict[UUID, str],
) -> tuple[ScoredPool, list[int | None], dict[UUID, UUID], dict[UUID, str]]:
    """RFC 4.7 over the pool after session and episode context, groups in routing order. A group's
    direct sources (its anchor's owner and scope, eligible as any candidate, at most
    `*_max_sources`) join EVIDENCE_CONTEXT, one more path, and take the anchor's score and the
    group's largest semantic relevance (what min_score compares under rank fusion, RFC 7.2),
    each when higher; a group with none stays as it was. Under projection the group's other
    members leave the pool. Returns the pool, each of its rows' row before (None: a source new
    to the pool), each source's anchor, and the projected members with their reason."""
    cfg = settings.packing
    projecting = bool(cfg.evidence_projection_top_k)
    limit = cfg.evidence_projection_max_sources if projecting else cfg.evidence_augmentation_max_sources
    position = {obj.id.int: i for i, obj in enumerate(pool.objects)}
    score, relevance = pool.score.tolist(), pool.semantic_relevance.tolist()
    masks, path_count = pool.path_mask.tolist(), pool.path_count.tolist()
    objects = list(pool.objects)
    keys = [_evidence_key(obj) for obj in pool.objects]  # each row's evidence group, computed once
    anchors: dict[UUID, UUID] = {}
    projected: dict[UUID, str] = {}
    for anchor_id, stored in sources.items():
        anchor_row = position.get(anchor_id.int)
        if anchor_row is None or anchor_id in projected:
            continue
        anchor = objects[anchor_row]
        chosen = [source for source in stored
                  if source.owner == anchor.owner and source.scope == anchor.scope and source.id not in excluded
                  and exclusion_reason(source, request, settings) is None][:limit]
        if not chosen:
            continue
        key = keys[anchor_row]
        members = [row for row, member_key in enumerate(keys) if member_key == key]
        inherited = float(pool.score[anchor_row])
        # RFC 7.2: evidence context takes the largest semantic relevance in its evidence group.
        routed_relevance = max(float(pool.semantic_relevance[row]) for row in members)
        for source in chosen:
            row = position.get(source.id.int)
            if row is None:
                row = position[source.id.int] = len(objects)
                objects.append(source)
                score.append(inherited)
                relevance.append(routed_relevance)
                masks.append(0)
                path_count.append(0)
            else:
                score[row] = max(score[row], inherited)
                relevance[row] = max(relevance[row], routed_relevance)
            if not masks[row] & _EVIDENCE_BIT:
                masks[row] |= _EVIDENCE_BIT
                path_count[row] += 1
            anchors.setdefault(source.id, anchor_id)
            projected.pop(source.id, None)  # a source of this group is never also projected away
        if projecting:
            for row in members:
                if objects[row].id not in anchors:
                    projected[objects[row].id] = EVIDENCE_PROJECTED
    added = len(objects) - len(pool)
    kept = [row for row in range(len(objects)) if objects[row].id not in projected]
    widened = ScoredPool(
        formula_version=pool.formula_version,
        objects=tuple(objects),
        score=np.array(score, dtype=float),
        semantic_relevance=np.array(relevance, dtype=float),
        path_mask=np.array(masks, dtype=np.int64),
        path_count=np.array(path_count, dtype=np.int64),
        factors=pool.factors.padded(added),
    )
    rows: list[int | None] = [row if row < len(pool) else None for row in kept]
    return widened.take(np.array(kept, dtype=np.int64)), rows, anchors, projected


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
