"""Validated retrieval settings: every number the pipeline reads, checked when it is built.

Structural switches (the score formula) are Hamilton config, not settings: see
`rms_retrieval.dataflows.pipeline`. A subclass may name node variants that replace nodes of the DAG
(`dataflow_variants`); the benchmark's arms that reproduce earlier behaviour do. A bad value is rejected with pydantic's message, which names the field.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_serializer, field_validator, model_validator

from rms_retrieval.nodes.models import PRIMARY_PATHS, PathType
from rms_retrieval.stores.models import EpistemicType, NodeType
from rms_retrieval.stores.visibility import DEFAULT_UNVERIFIED_THRESHOLD

_FROZEN = ConfigDict(frozen=True, extra="forbid")


def _check_finite(name: str, value: float) -> None:
    if not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")


class CandidateSettings(BaseModel):
    """Stage 2 limits (RFC 4.1 to 4.4)."""

    model_config = _FROZEN

    # 300, not the RFC reference's 500 nor 150 (the default before issue 15's third round): deeper
    # lists crowd the ranking unless packing.tier_path_depth keeps deep hits out of tier 2 and
    # scoring.speaker_boost puts the named person's turns first. Proven on LoCoMo's confirm split in
    # two steps (BENCHMARKS.md, issue 15, third round): all evidence packed at 8K for 0.919 against
    # 0.897 (200 lists, boost 1), then 0.931 (300 lists, boost 2); 0.859 against 0.843 at 4K.
    vector_k: int = Field(default=300, ge=0, le=100_000)
    lexical_k: int = Field(default=300, ge=0, le=100_000)
    graph_max_hops: int = Field(default=2, ge=1, le=3, description="RFC 4.1 hard limit: 3.")
    graph_min_edge_confidence: float = Field(default=0.40, ge=0.0, le=1.0)
    graph_max_candidates: int = Field(default=50, ge=0, le=10_000)
    enabled_paths: frozenset[PathType] = frozenset(
        {PathType.VECTOR, PathType.LEXICAL, PathType.GRAPH, PathType.PINNED}
    )
    on_embedding_mismatch: Literal["lexical_only", "error"] = Field(
        default="lexical_only",
        description="RFC 4.2: empty the vector path and flag the bundle, or reject the request.",
    )
    aggregation_k_multiplier: float = Field(default=3.0, ge=1.0, le=100.0)
    aggregation_k_max: int = Field(default=2000, ge=1, le=100_000)

    keyword_scan_hits_per_term: int = Field(default=50, ge=0, le=10_000)
    entity_scan_hits_per_entity: int = Field(default=20, ge=0, le=10_000)

    @field_serializer("enabled_paths")
    def _paths_in_order(self, value: frozenset[PathType]) -> list[str]:
        # A frozenset iterates in hash-seed order; serialise sorted so fingerprints, bundles and
        # logged settings are the same in every process.
        return sorted(str(p) for p in value)

    @field_validator("enabled_paths")
    @classmethod
    def _primary_paths_only(cls, value: frozenset[PathType]) -> frozenset[PathType]:
        extra = set(value) - PRIMARY_PATHS
        if extra:
            raise ValueError(
                f"{sorted(extra)} are not primary paths; session context is set by session.window, "
                "keyword scans by keyword_scan_hits_per_term"
            )
        return value


class WeightedScoring(BaseModel):
    """Score formula version 1 (RFC 7). The six additive weights must sum to 1.0.

    The RFC's listed defaults sum to 0.95 without w_epistemic (a multiplier), which its own rule
    forbids; the missing 0.05 goes to the semantic weight.
    """

    model_config = _FROZEN

    w_semantic: float = 0.35
    w_lexical: float = 0.15
    w_graph: float = 0.20
    w_recency: float = 0.10
    w_salience: float = 0.10
    w_confidence: float = 0.10
    w_paths: float = Field(default=0.0, description="Tie-breaker only.")
    recency_lambda_per_day: float = Field(
        default=0.05, gt=0.0, le=10.0,
        description="Recency decay per day; formula 2 reads it too, for its recency boost.",
    )

    @model_validator(mode="after")
    def _weights_sum_to_one(self) -> WeightedScoring:
        names = ("w_semantic", "w_lexical", "w_graph", "w_recency", "w_salience", "w_confidence", "w_paths")
        for name in names:
            value = getattr(self, name)
            _check_finite(name, value)
            if value < 0:
                raise ValueError(f"{name} must not be negative, got {value}")
        total = sum(getattr(self, n) for n in names[:-1])
        if abs(total - 1.0) > 1e-9:
            raise ValueError(
                f"w_semantic + w_lexical + w_graph + w_recency + w_salience + w_confidence must sum "
                f"to 1.0 (RFC 7), got {total:.6f}"
            )
        return self


class RankFusionScoring(BaseModel):
    """Score formula version 2, reciprocal rank fusion (RFC 7.2), the default."""

    model_config = _FROZEN

    rrf_k: int = Field(default=60, ge=1, le=10_000)
    rrf_recency_boost: float | None = Field(default=0.25, gt=0.0, le=4.0)
    rrf_tie_break: Literal["event_time"] | None = "event_time"
    graph_as_ranked_list: bool = Field(
        default=False, description="Fuse graph proximity as a third ranked list (RFC 7.2)."
    )


class ScoringSettings(BaseModel):
    """Which formula scores (Hamilton config `fusion`), and the inputs both formulas share."""

    model_config = _FROZEN

    fusion: Literal["rrf", "weighted"] = Field(
        default="rrf", description="rrf: formula version 2, the default; weighted: version 1."
    )
    weighted: WeightedScoring = WeightedScoring()
    rank_fusion: RankFusionScoring = RankFusionScoring()
    epistemic_weights: dict[EpistemicType, float] = Field(
        default_factory=lambda: {
            EpistemicType.OBSERVED: 1.0,
            EpistemicType.ASSERTED: 0.9,
            EpistemicType.INFERRED: 0.7,
            EpistemicType.UNVERIFIED: 0.5,
            EpistemicType.HYPOTHETICAL: 0.3,
            EpistemicType.DEPRECATED: 0.1,
        }
    )
    node_type_boosts: dict[NodeType, float] = Field(default_factory=dict)
    # Temporal affinity reads the question's date window whatever its intent, not only under
    # TEMPORAL (entity-first ordering makes most dated questions ENTITY_LOOKUP): on LoCoMo's confirm
    # split that packed all evidence for 0.812 of the questions at 4K against 0.801 (+0.011, paired
    # 95% interval [+0.004, +0.019]), 0.897 against 0.893 at 8K (README, "Decisions").
    temporal_boost: float = Field(default=0.5, ge=0.0, le=10.0)
    # 2.0: issue 15's third round (see CandidateSettings.vector_k). When a LoCoMo question names
    # one of the two speakers, 95% of its evidence turns are that speaker's.
    speaker_boost: float = Field(
        default=2.0, ge=0.0, le=10.0,
        description="A candidate spoken by a person the question names (a SPOKEN_BY edge into one of its "
                    "entities) has its score multiplied by 1 + speaker_boost, pool-relative as RFC 7.2's factors.",
    )
    current_update_multiplier: float = Field(default=1.30, ge=1.0, le=4.0)
    relevance_floor: float = Field(default=0.2, ge=0.0, le=1.0)

    @field_validator("epistemic_weights", "node_type_boosts")
    @classmethod
    def _finite_non_negative(cls, value: dict) -> dict:
        for key, weight in value.items():
            _check_finite(f"{key}", weight)
            if weight < 0:
                raise ValueError(f"{key} must not be negative, got {weight}")
        return value

    @model_validator(mode="after")
    def _all_epistemic_types(self) -> ScoringSettings:
        missing = set(EpistemicType) - set(self.epistemic_weights)
        if missing:
            raise ValueError(f"epistemic_weights lacks {sorted(missing)}")
        return self


class FilterSettings(BaseModel):
    """Stage 4 (RFC 6)."""

    model_config = _FROZEN

    unverified_threshold: float = Field(default=DEFAULT_UNVERIFIED_THRESHOLD, ge=0.0, le=1.0)
    namespace_thresholds: dict[str, float] = Field(default_factory=dict)

    def threshold_for(self, namespace: str) -> float:
        return self.namespace_thresholds.get(namespace, self.unverified_threshold)


class SessionSettings(BaseModel):
    """Adjacent session context (RFC 4.5). `window` 0 turns it off."""

    model_config = _FROZEN

    # 2: on LoCoMo, window 1 packed all evidence for 0.787 of a 300-question sample, 2 for
    # 0.807, 3 for 0.790 (4K tokens).
    window: int = Field(default=2, ge=0, le=50)
    top_triggers: int = Field(default=10, ge=0, le=1000)
    score_decay: float = Field(default=0.85, gt=0.0, le=1.0)
    rank_fusion_score_decay: float | None = Field(default=0.6, gt=0.0, le=1.0)


class PackingSettings(BaseModel):
    """Stage 6 (RFC 8, RFC-0006)."""

    model_config = _FROZEN

    item_format: Literal["dated_groups", "reader", "plain"] = "dated_groups"
    # 50: a vector or lexical hit counts toward tier 2 ("found by two or more paths", RFC 8) only
    # within the first 50 of the pool's hits of that path, so a turn deep in both lists does not
    # jump every strong single-path turn; path_count still counts every path. Part of issue 15's
    # third-round change.
    tier_path_depth: int | None = Field(
        default=50, ge=1, le=100_000,
        description="A vector or lexical hit counts toward tier 2 only within this rank among the pool's "
                    "hits of its path (the score trace's semantic_rank, lexical_rank); "
                    "None: every primary path counts, as RFC 8 words it.",
    )


class RetrievalSettings(BaseModel):
    """All retrieval numbers. Build once, reuse for every request."""

    model_config = _FROZEN
    # Importable modules whose nodes replace the stage modules' nodes of the same name (Hamilton
    # module overrides); none for these settings.
    dataflow_variants: ClassVar[tuple[str, ...]] = ()

    candidates: CandidateSettings = CandidateSettings()
    scoring: ScoringSettings = ScoringSettings()
    filtering: FilterSettings = FilterSettings()
    session: SessionSettings = SessionSettings()
    packing: PackingSettings = PackingSettings()
    query_intent_order: Literal["entity_first", "temporal_first"] = "entity_first"

    def fingerprint(self) -> str:
        """A short hash of these settings; equal fingerprints retrieve alike."""
        payload = json.dumps(self.model_dump(mode="json"), sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:16]

    def hamilton_config(self) -> dict[str, str]:
        """The structural switches, as Hamilton `@config.when` reads them."""
        return {"fusion": self.scoring.fusion}
