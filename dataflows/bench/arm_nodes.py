"""Node variants for the benchmark's `ArmSettings` (`arm_settings.py`): Hamilton module overrides
of `lexical_candidates`, `fused_scores` and `packed_bundle` that read the arms' extra fields and
otherwise call the stage modules' own nodes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hamilton.function_modifiers import config

from rms_retrieval.dataflows.bench.arm_settings import ArmSettings
from rms_retrieval.dataflows.bench.feedback import feedback_terms, interpolated_hits
from rms_retrieval.nodes import candidate_generation, packing, scoring
from rms_retrieval.nodes.models import QueryAnalysis, QueryIntent, RetrievalRequest
from rms_retrieval.nodes.bundle import MemoryBundle
from rms_retrieval.nodes.pools import (CandidateLimits, CandidatePool, ChannelResult, FilteredPool, RankedCandidates,
                                       Selection)
from rms_retrieval.nodes.scored_pool import ScoredPool
from rms_retrieval.nodes.settings import RetrievalSettings
from rms_retrieval.stores.protocols import PLAIN_FIELDS, FieldWeights, LexicalHit, RetrievalStore


@dataclass(frozen=True)
class _FeedbackIndex:
    """The lexical index with RM3 feedback on its search: the first search's best hits vote for
    terms, searched for a second time and interpolated with the first."""

    store: RetrievalStore
    terms: int
    docs: int
    weight: float

    def search_lexical(self, query: str, namespaces: Sequence[str], limit: int,
                       fields: FieldWeights = PLAIN_FIELDS) -> list[LexicalHit]:
        found = self.store.search_lexical(query, namespaces, limit, fields)
        if not found:
            return found
        top = found[: self.docs]
        contents = self.store.get_objects([hit.object_id for hit in top], namespaces)
        terms = feedback_terms(query, [(contents[hit.object_id].content, hit.score) for hit in top
                                       if hit.object_id in contents], self.terms)
        if not terms:
            return found
        return interpolated_hits(found, self.store.search_lexical(" ".join(terms), namespaces, limit, fields), self.weight, limit)


def _arm(settings: RetrievalSettings) -> ArmSettings:
    if not isinstance(settings, ArmSettings):
        raise TypeError(f"the benchmark's node variants need ArmSettings, got {type(settings).__name__}")
    return settings


def lexical_candidates(
    store_snapshot: RetrievalStore,
    candidate_limits: CandidateLimits,
    request: RetrievalRequest,
    settings: RetrievalSettings,
) -> ChannelResult:
    """The stage's BM25 path; with feedback terms set, over the index with RM3 feedback."""
    cfg = _arm(settings).candidates
    index = (_FeedbackIndex(store_snapshot, cfg.lexical_feedback_terms, cfg.lexical_feedback_docs,
                            cfg.lexical_feedback_weight) if cfg.lexical_feedback_terms else store_snapshot)
    return candidate_generation.lexical_candidates(index, candidate_limits, request, settings)


def _scored_analysis(query_analysis: QueryAnalysis, settings: RetrievalSettings) -> QueryAnalysis:
    """The analysis scoring reads: without its dates, unless they count for its intent."""
    if _arm(settings).scoring.temporal_any_intent or query_analysis.intent is QueryIntent.TEMPORAL:
        return query_analysis
    return query_analysis.model_copy(update={"temporal_signals": ()})


@config.when(fusion="rrf")
def fused_scores__rrf(
    filtered_candidates: FilteredPool,
    query_analysis: QueryAnalysis,
    settings: RetrievalSettings,
    spoken_by_query_entities: frozenset[int] = frozenset(),
) -> ScoredPool:
    """Formula 2, the question's dates read as `temporal_any_intent` says."""
    return scoring.fused_scores__rrf(filtered_candidates, _scored_analysis(query_analysis, settings), settings,
                                     spoken_by_query_entities)


@config.when(fusion="weighted")
def fused_scores__weighted(
    filtered_candidates: FilteredPool,
    query_analysis: QueryAnalysis,
    request: RetrievalRequest,
    settings: RetrievalSettings,
    spoken_by_query_entities: frozenset[int] = frozenset(),
) -> ScoredPool:
    """Formula 1, the question's dates read as `temporal_any_intent` says."""
    return scoring.fused_scores__weighted(filtered_candidates, _scored_analysis(query_analysis, settings), request,
                                          settings, spoken_by_query_entities)


def packed_bundle(
    selected_candidates: Selection,
    ranked_candidates: RankedCandidates,
    filtered_candidates: FilteredPool,
    merged_candidates: CandidatePool,
    query_analysis: QueryAnalysis,
    request: RetrievalRequest,
    settings: RetrievalSettings,
) -> MemoryBundle:
    """The stage's bundle, items offered in the arm's density order."""
    exponent = _arm(settings).packing.density_exponent

    def priority(item: packing._Item) -> tuple:
        return (item.tier, -item.score / (max(item.tokens, 1) ** exponent), -item.score, item.obj.id.int)

    return packing._packed_bundle(selected_candidates, ranked_candidates, filtered_candidates, merged_candidates,
                                  query_analysis, request, settings, priority, priority_reads_tokens=True)
