"""Adjacent session context (RFC 4.5): after primary scoring, neighbours of the top candidates
in their own session join or are promoted with an inherited, decayed score.

A neighbour keeps its own score when that is higher; either way SESSION_CONTEXT joins its
paths without changing its path count. A neighbour new to the pool passes the same filter as
every candidate, has one path, and records its trigger, offset and decay as provenance.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from uuid import UUID

import pandas as pd

from rms_retrieval.nodes.eligibility import exclusion_reason
from rms_retrieval.nodes.models import FilteredPool, PathType, RetrievalRequest
from rms_retrieval.nodes.scoring import COLUMNS, SCORE_DECIMALS
from rms_retrieval.nodes.settings import RetrievalSettings
from rms_retrieval.stores.models import MemoryObject
from rms_retrieval.stores.protocols import ObjectStore, SessionNeighbour

SESSION_COLUMNS = ["session_trigger", "session_offset", "session_decay", "session_lift"]


@dataclass(frozen=True)
class RankedCandidates:
    """The scored pool after session context: `frame` in final order, objects by id, new exclusions."""

    frame: pd.DataFrame
    objects: dict[UUID, MemoryObject]
    excluded: dict[UUID, str] = field(default_factory=dict)


def session_context(
    fused_scores: pd.DataFrame, object_store: ObjectStore, settings: RetrievalSettings
) -> list[SessionNeighbour]:
    """Objects within the session window of the top-scored candidates, read from the store."""
    cfg = settings.session
    if cfg.window == 0 or cfg.top_triggers == 0 or fused_scores.empty:
        return []
    scored = fused_scores[fused_scores["score"] > 0]
    triggers = [UUID(oid) for oid in scored["object_id"].head(cfg.top_triggers)]
    return object_store.session_neighbours(triggers, cfg.window) if triggers else []


def _decay(formula_version: int, settings: RetrievalSettings) -> float:
    cfg = settings.session
    if formula_version == 2 and cfg.rank_fusion_score_decay is not None:
        return cfg.rank_fusion_score_decay
    return cfg.score_decay


def ranked_candidates(
    fused_scores: pd.DataFrame,
    session_context: list[SessionNeighbour],
    filtered_candidates: FilteredPool,
    request: RetrievalRequest,
    settings: RetrievalSettings,
) -> RankedCandidates:
    """The scored pool with session context applied, in final rank order."""
    objects = {c.object_id: c.object for c in filtered_candidates.candidates}
    rows = {row["object_id"]: row for row in fused_scores.to_dict("records")}
    for row in rows.values():
        row.update(session_trigger=None, session_offset=None, session_decay=None, session_lift=None)
    excluded: dict[UUID, str] = {}
    trigger_order = {oid: i for i, oid in enumerate(fused_scores["object_id"])}
    # A neighbour inherits from its trigger's score as fused, never from a score an earlier
    # trigger promoted in this loop: inheritance does not chain.
    primary = {row["object_id"]: dict(row) for row in rows.values()}
    # The highest-ranked trigger decides a neighbour shared by several windows.
    for link in sorted(session_context, key=lambda n: (trigger_order[str(n.trigger)], abs(n.offset), n.offset)):
        trigger = primary[str(link.trigger)]
        decay = _decay(int(trigger["formula_version"]), settings)
        inherited = round(trigger["score"] * decay, SCORE_DECIMALS)
        oid = str(link.neighbour.id)
        row = rows.get(oid)
        if row is None:
            if link.neighbour.id in excluded or link.neighbour.id in filtered_candidates.excluded:
                continue
            reason = exclusion_reason(link.neighbour, request, settings)
            if reason is not None:
                excluded[link.neighbour.id] = reason
                continue
            objects[link.neighbour.id] = link.neighbour
            row = {column: None for column in COLUMNS}
            row.update(
                object_id=oid, formula_version=trigger["formula_version"], score=-1.0, paths=(),
                path_count=1, node_type=str(link.neighbour.node_type),
                stated_time=link.neighbour.stated_time, semantic_relevance=0.0,
                session_trigger=None, session_offset=None, session_decay=None, session_lift=None,
            )
            rows[oid] = row
        if PathType.SESSION_CONTEXT.value not in row["paths"]:
            row["paths"] = tuple(row["paths"]) + (PathType.SESSION_CONTEXT.value,)
        row["semantic_relevance"] = max(row["semantic_relevance"] or 0.0, trigger["semantic_relevance"] or 0.0)
        if inherited > row["score"]:
            row.update(score=inherited, session_trigger=str(link.trigger), session_offset=link.offset,
                       session_decay=decay)
    if settings.session.lift > 0:
        _lift_strong_sessions(rows, primary, objects, settings)
    frame = pd.DataFrame(list(rows.values()), columns=COLUMNS + SESSION_COLUMNS)
    if not frame.empty:
        frame = frame.sort_values(
            ["score", "path_count", "object_id"], ascending=[False, False, True], kind="mergesort"
        ).reset_index(drop=True)
    return RankedCandidates(frame=frame, objects=objects, excluded=excluded)


def _lift_strong_sessions(
    rows: dict[str, dict], primary: dict[str, dict], objects: dict[UUID, MemoryObject], settings: RetrievalSettings
) -> None:
    """Scale every scored turn by its session's strength: the sum of the session's best
    `lift_turns` fused scores, relative to the strongest session (the lever "session-level
    evidence": evidence of one question tends to cluster in one or two sessions)."""
    cfg = settings.session

    def session_of(oid: str) -> tuple[str, str] | None:
        obj = objects.get(UUID(oid))
        return (obj.namespace, obj.session_id) if obj is not None and obj.session_id else None

    scores: dict[tuple[str, str], list[float]] = {}
    for oid, row in primary.items():
        key = session_of(oid)
        if key is not None and row["score"] > 0:
            scores.setdefault(key, []).append(row["score"])
    strength = {key: sum(sorted(values, reverse=True)[: cfg.lift_turns]) for key, values in scores.items()}
    strongest = max(strength.values(), default=0.0)
    if strongest <= 0:
        return
    for oid, row in rows.items():
        key = session_of(oid)
        if key in strength and row["score"] > 0:
            factor = 1.0 + cfg.lift * strength[key] / strongest
            row.update(score=row["score"] * factor, session_lift=factor)
