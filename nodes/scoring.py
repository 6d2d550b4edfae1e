"""Stage 5: scoring and ranking (RFC 7, 7.1, 7.2). Hamilton config `fusion` picks the formula.

`fused_scores` is a DataFrame, one row per candidate and one column per input, rank and applied
factor, so an auditor sees exactly how each score was made. Rows are in final order: score
descending, then path count, then object id.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from datetime import datetime

import pandas as pd
from hamilton.function_modifiers import config

from rms_retrieval.nodes.models import Candidate, FilteredPool, PathType, QueryAnalysis, QueryIntent, RetrievalRequest
from rms_retrieval.nodes.settings import RetrievalSettings
from rms_retrieval.nodes.temporal import temporal_affinity

SCORE_DECIMALS = 10
TIE_BREAK_SCALE = 1e-11
_UPDATE_WORDING = re.compile(
    r"\b(now|moved|changed|switched|updated|no longer|anymore|these days|currently|just started|new job)\b",
    re.IGNORECASE,
)

COLUMNS = [
    "object_id", "formula_version", "score", "semantic_relevance", "paths", "path_count", "node_type",
    "stated_time", "semantic", "semantic_rank", "lexical", "lexical_bm25", "lexical_rank",
    "graph_proximity", "graph_hops", "graph_rank", "recency", "salience", "confidence",
    "epistemic_weight", "epistemic_factor", "node_type_boost", "node_type_factor",
    "temporal_affinity", "temporal_factor", "recency_boost_factor", "tie_break",
    "current_update_factor", "base_score",
]


def _days(later: datetime, earlier: datetime) -> float:
    return max((later - earlier).total_seconds() / 86400.0, 0.0)


def _competition_ranks(values: dict[str, float]) -> dict[str, int]:
    """Rank by value, best first; tied values share the better rank (1, 2, 2, 4)."""
    ordered = sorted(values.values(), reverse=True)
    first = {}
    for position, value in enumerate(ordered, start=1):
        first.setdefault(value, position)
    return {key: first[value] for key, value in values.items()}


def _hit_value(candidate: Candidate, path: PathType, field: str) -> float | None:
    hit = candidate.hits.get(path)
    return None if hit is None else getattr(hit, field)


def _base_rows(filtered: FilteredPool, analysis: QueryAnalysis, settings: RetrievalSettings) -> list[dict]:
    """The inputs both formulas share, one dict per candidate."""
    dated = analysis.intent is QueryIntent.TEMPORAL or settings.scoring.temporal_any_intent
    window = analysis.temporal_window if dated else None
    rows = []
    for c in filtered.candidates:
        obj = c.object
        graph = c.hits.get(PathType.GRAPH)
        semantic = _hit_value(c, PathType.VECTOR, "raw_score")
        rows.append({
            "object_id": str(obj.id),
            "paths": tuple(str(p) for p in c.paths),
            "path_count": c.path_count,
            "node_type": str(obj.node_type),
            "stated_time": obj.stated_time,
            "semantic": semantic,
            "lexical": _hit_value(c, PathType.LEXICAL, "score"),
            "lexical_bm25": _hit_value(c, PathType.LEXICAL, "raw_score"),
            "graph_proximity": graph.score if graph else 0.0,
            "graph_hops": graph.detail.get("hops") if graph else None,
            "graph_channel_rank": graph.rank if graph else None,
            "salience": obj.salience,
            "confidence": obj.confidence,
            "epistemic_weight": settings.scoring.epistemic_weights[obj.epistemic_type],
            "node_type_boost": settings.scoring.node_type_boosts.get(obj.node_type, 1.0),
            "temporal_affinity": temporal_affinity(obj.stated_time, window),
            "semantic_relevance": max(semantic or 0.0, 0.0),
            "update_wording": bool(_UPDATE_WORDING.search(obj.content)),
            "updated_at": obj.updated_at,
            "created_at": obj.created_at,
        })
    return rows


def _frame(rows: list[dict], formula_version: int) -> pd.DataFrame:
    for row in rows:
        row["formula_version"] = formula_version
    frame = pd.DataFrame(rows, columns=COLUMNS)
    if frame.empty:
        return frame
    frame = frame.sort_values(
        ["score", "path_count", "object_id"], ascending=[False, False, True], kind="mergesort"
    )
    return frame.reset_index(drop=True)


def _pool_relative(rows: Sequence[dict], value_key: str, factor_key: str) -> None:
    """factor = value / the largest value in the pool, capped at 1.0 (RFC 7.2)."""
    largest = max((r[value_key] for r in rows), default=0.0)
    for r in rows:
        r[factor_key] = min(r[value_key] / largest, 1.0) if largest > 0 else 1.0


def _apply_current_update(rows: list[dict], analysis: QueryAnalysis, settings: RetrievalSettings, clock: str) -> None:
    """RFC 7.1: the newest candidate, if it presents itself as an update, gets the bounded multiplier."""
    for r in rows:
        r["current_update_factor"] = 1.0
    multiplier = settings.scoring.current_update_multiplier
    if not analysis.current_state or multiplier == 1.0 or not rows:
        return
    newest = max(r[clock] for r in rows)
    floor = settings.scoring.relevance_floor
    for r in rows:
        relevant = (r["semantic_relevance"] + (r["lexical"] or 0.0)) >= floor
        if r[clock] == newest and r["update_wording"] and relevant:
            r["current_update_factor"] = multiplier
            r["score"] *= multiplier


@config.when(fusion="rrf")
def fused_scores__rrf(
    filtered_candidates: FilteredPool, query_analysis: QueryAnalysis, settings: RetrievalSettings
) -> pd.DataFrame:
    """Score formula version 2: reciprocal rank fusion with pool-relative factors (RFC 7.2)."""
    fusion = settings.scoring.rank_fusion
    k = fusion.rrf_k
    rows = _base_rows(filtered_candidates, query_analysis, settings)
    semantic_ranks = _competition_ranks({r["object_id"]: r["semantic"] for r in rows if r["semantic"] is not None})
    lexical_ranks = _competition_ranks({r["object_id"]: r["lexical"] for r in rows if r["lexical"] is not None})
    graph_ranks = _competition_ranks(
        {r["object_id"]: -float(r["graph_channel_rank"]) for r in rows if r["graph_channel_rank"] is not None}
    )
    lists = 3 if fusion.graph_as_ranked_list else 2
    for r in rows:
        oid = r["object_id"]
        r["semantic_rank"] = semantic_ranks.get(oid)
        r["lexical_rank"] = lexical_ranks.get(oid)
        r["graph_rank"] = graph_ranks.get(oid)
        ranks = [r["semantic_rank"], r["lexical_rank"]]
        if fusion.graph_as_ranked_list:
            ranks.append(r["graph_rank"])
        r["base_score"] = sum(1.0 / (k + rank) for rank in ranks if rank is not None) * (k + 1) / lists
        r["on_channel"] = any(rank is not None for rank in ranks)
        r["temporal_value"] = 1.0 + settings.scoring.temporal_boost * r["temporal_affinity"]
    ranked = [r for r in rows if r["on_channel"]]
    _pool_relative(ranked, "epistemic_weight", "epistemic_factor")
    _pool_relative(ranked, "node_type_boost", "node_type_factor")
    _pool_relative(ranked, "temporal_value", "temporal_factor")

    boost = fusion.rrf_recency_boost if query_analysis.current_state else None
    newest = max((r["stated_time"] for r in ranked), default=None)
    lam = settings.scoring.weighted.recency_lambda_per_day
    for r in ranked:
        recency = math.exp(-lam * _days(newest, r["stated_time"]))
        r["recency"] = min(1.0, 2 * recency) if r["update_wording"] else recency
        r["recency_value"] = 1.0 + (boost or 0.0) * r["recency"]
    if boost:
        _pool_relative(ranked, "recency_value", "recency_boost_factor")

    times = sorted({r["stated_time"] for r in ranked}, reverse=True)
    place = {t: i / len(times) for i, t in enumerate(times)}
    for r in rows:
        if not r["on_channel"]:
            r.update(score=0.0, epistemic_factor=None, node_type_factor=None, temporal_factor=None,
                     recency=None, recency_boost_factor=None, tie_break=None)
            continue
        r.setdefault("recency_boost_factor", None)
        if not boost:
            r["recency"] = None
        r["tie_break"] = place[r["stated_time"]] if fusion.rrf_tie_break == "event_time" else None
        score = r["base_score"] * r["epistemic_factor"] * r["node_type_factor"] * r["temporal_factor"]
        score = round(score * (r["recency_boost_factor"] or 1.0), SCORE_DECIMALS)
        # Rounded first, so scores that differ keep their order; the tie-break only splits equals.
        if r["tie_break"] is not None and score > 0:
            score -= r["tie_break"] * TIE_BREAK_SCALE
        r["score"] = score
    _apply_current_update(rows, query_analysis, settings, clock="updated_at")
    return _frame(rows, formula_version=2)


@config.when(fusion="weighted")
def fused_scores__weighted(
    filtered_candidates: FilteredPool,
    query_analysis: QueryAnalysis,
    request: RetrievalRequest,
    settings: RetrievalSettings,
) -> pd.DataFrame:
    """Score formula version 1: the weighted sum of all eight inputs (RFC 7)."""
    w = settings.scoring.weighted
    rows = _base_rows(filtered_candidates, query_analysis, settings)
    if query_analysis.current_state and rows:
        anchor = max(r["stated_time"] for r in rows)
        clock = "stated_time"
    else:
        anchor, clock = request.reference_time, "updated_at"
    boost = settings.scoring.temporal_boost
    for r in rows:
        r["lexical"] = r["lexical"] or 0.0  # the input formula 1 reads: no lexical hit is zero relevance
        r["recency"] = math.exp(-w.recency_lambda_per_day * _days(anchor, r[clock]))
        r["semantic_rank"] = r["lexical_rank"] = r["graph_rank"] = None
        r["temporal_factor"] = (1.0 + boost * r["temporal_affinity"]) / (1.0 + boost)
        r["epistemic_factor"] = r["epistemic_weight"]
        r["node_type_factor"] = r["node_type_boost"]
        r["recency_boost_factor"] = r["tie_break"] = None
        additive = (
            w.w_semantic * r["semantic_relevance"]
            + w.w_lexical * r["lexical"]
            + w.w_graph * r["graph_proximity"]
            + w.w_recency * r["recency"]
            + w.w_salience * r["salience"]
            + w.w_confidence * r["confidence"]
        )
        r["base_score"] = additive
        r["score"] = round(
            additive * r["epistemic_factor"] * r["node_type_factor"] * r["temporal_factor"]
            + w.w_paths * min(r["path_count"] / 3.0, 1.0),
            SCORE_DECIMALS,
        )
    _apply_current_update(rows, query_analysis, settings, clock=clock)
    return _frame(rows, formula_version=1)
