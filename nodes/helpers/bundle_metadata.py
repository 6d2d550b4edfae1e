"""The Memory Bundle's retrieval metadata (RFC 7.2, 8 and the amendment's exclusions): what each
stage found, kept and left out with its reason and score, and what a count or list question's
bundle can claim. Built by `packed_bundle` from the stages' typed values."""

from __future__ import annotations

from collections.abc import Mapping
from uuid import UUID

from rms_retrieval.nodes.bundle import AggregationCoverage, ExclusionScore, HistoricalCoverage, RetrievalMetadata
from rms_retrieval.nodes.models import QueryAnalysis
from rms_retrieval.nodes.pools import CandidatePool, FilteredPool, PathType, RankedCandidates, Selection
from rms_retrieval.nodes.settings import RetrievalSettings


def aggregation_coverage(
    selection: Selection, pool: CandidatePool, analysis: QueryAnalysis, packed: int, budget_cut: int,
    warning_fits: bool,
) -> AggregationCoverage | None:
    """RFC "aggregation coverage": what a count or list question's bundle can and cannot claim."""
    if analysis.aggregation is None:
        return None
    codes = ["semantic_matching"]
    if pool.paths_at_limit:
        codes.append("candidate_limit")
    if pool.backend_failures:
        codes.append("backend_failure")
    if selection.excluded:
        codes.append("score_selection")
    if budget_cut or not warning_fits:
        codes.append("token_budget")
    return AggregationCoverage(
        kind=analysis.aggregation, unique_candidates=len(pool.candidates), returned=len(selection.pool),
        packed=packed, limitation_codes=tuple(codes), candidate_limit_paths=pool.paths_at_limit,
    )


def retrieval_metadata(
    selection: Selection,
    ranked: RankedCandidates,
    filtered: FilteredPool,
    pool: CandidatePool,
    analysis: QueryAnalysis,
    settings: RetrievalSettings,
    budget_cuts: tuple[UUID, ...],
    coverage: AggregationCoverage | None,
    historical: HistoricalCoverage | None = None,
) -> RetrievalMetadata:
    """The bundle's retrieval metadata: what each stage found, kept and left out, and why."""
    excluded = dict(sorted({**filtered.excluded, **ranked.excluded, **selection.excluded}.items(),
                           key=lambda kv: kv[0].int))
    # Every value below is already of its field's type, built by the stages; constructing skips
    # re-validating hundreds of exclusions per request (the same JSON, a fraction of the time).
    return RetrievalMetadata.model_construct(
        intent=analysis.intent,
        current_state=analysis.current_state,
        entities=tuple(e.name for e in analysis.entities),
        temporal_window=analysis.temporal_window,
        reference_time=analysis.reference_time,
        retrieval_mode=analysis.retrieval_mode,
        formula_version=ranked.pool.formula_version,
        rrf_k=settings.scoring.rank_fusion.rrf_k if ranked.pool.rank_fused else None,
        configuration_fingerprint=settings.fingerprint(),
        candidates_generated=len(pool.candidates),
        candidates_after_filter=len(filtered.candidates),
        candidates_ranked=len(ranked.pool),
        candidates_selected=len(selection.pool),
        cut_by_budget=len(budget_cuts),
        paths_at_limit=pool.paths_at_limit,
        embedding_mismatch=pool.embedding_mismatch,
        backend_failures=dict(sorted(pool.backend_failures.items(), key=lambda kv: str(kv[0]))),
        min_score_skipped=selection.min_score_skipped,
        excluded=excluded,
        exclusion_scores=exclusion_scores(excluded, selection, filtered, ranked.pool.rank_fused),
        budget_cuts=budget_cuts,
        aggregation_coverage=coverage,
        historical_coverage=historical,
    )


def exclusion_scores(excluded: Mapping[UUID, str], selection: Selection, filtered: FilteredPool,
                      rank_fused: bool) -> dict[UUID, ExclusionScore]:
    """How each left-out id scored, in `excluded`'s order: selection's from the ranked pool; one
    removed before scoring has no score, and its relevance is its cosine floored at 0 (0 where no
    vector search found it)."""
    # Made from the two dictionaries as they are, which hash no id again (a UUID hashes through
    # Python code): every id of `excluded` in its order, then selection's scores put in place.
    scores: dict[UUID, ExclusionScore | None] = dict.fromkeys(excluded)
    scores.update(selection.excluded_scores)
    if len(scores) != len(excluded):  # selection scored an id that `excluded` lacks: leave it out
        scores = {oid: scores[oid] for oid in excluded}
    unscored = [oid for oid, found in scores.items() if found is None]
    if unscored:
        removed = {c.object_id: c for c in filtered.removed}
        for oid in unscored:
            vector = removed[oid].hits.get(PathType.VECTOR) if oid in removed else None
            scores[oid] = ExclusionScore(score=None, semantic_relevance=(max(vector.raw_score, 0.0) if vector else 0.0)
                                         if rank_fused else None)
    return scores
