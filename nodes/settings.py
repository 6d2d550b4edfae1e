"""Validated retrieval settings: every number the pipeline reads, checked when it is built.

Structural switches (the score formula) are Hamilton config, not settings: see
`rms_retrieval.dataflows.pipeline`. A subclass may name node variants that replace nodes of the DAG
(`dataflow_variants`); the benchmark's arms that reproduce earlier behaviour do. A bad value is rejected with pydantic's message, which names the field.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import warnings
import weakref
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from rms_retrieval.nodes.candidate_settings import BoostFields, CandidateSettings
from rms_retrieval.nodes.policy_settings import ReformulationSettings, RerankSettings
from rms_retrieval.stores.models import EpistemicType, NodeType
from rms_retrieval.stores.visibility import DEFAULT_UNVERIFIED_THRESHOLD

_FROZEN = ConfigDict(frozen=True, extra="forbid")
_FINGERPRINTS: dict[int, str] = {}  # RetrievalSettings.fingerprint's, by the id of a live settings object


class IgnoredSettingWarning(UserWarning):
    """A setting was given that the chosen configuration never reads."""


def _check_finite(name: str, value: float) -> None:
    if not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")


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
    recency_time: Literal["event_time"] | None = Field(
        default=None,
        description="Unset, recency on a question not about the current state counts from a memory's updated_at; "
                    "'event_time' dates every memory by when it was stated (its event_time, else its created_at), "
                    "the clock of rank fusion's boost and tie-break (RFC 7). Off by default: on LoCoMo it lost "
                    "4.5 to 4.8 points (RFC 7, issue #83).",
    )
    current_state_recency_weight: float | None = Field(
        default=None, gt=0.0, lt=1.0,
        description="RFC 7.2's weight shift on current-state questions: a w_recency below this is raised to it, the "
                    "other five additive weights scaled down to keep the sum 1; meanwhile the decay is at least 0.05 "
                    "per day and update-worded memories count twice as recent, up to 1. Unset: no shift.",
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
    pronoun_speakers: tuple[Literal["user", "assistant"], ...] = Field(
        default=(),
        description='The chat roles a question names as its speakers, lifted by speaker_boost as a named '
                    'speaker\'s turns are: "assistant" for a question that asks back for what the assistant said '
                    '("you mentioned", "you recommended", "our previous conversation", "we talked"), and then the '
                    'assistant alone; otherwise "user" for a question in the first person (I, me, my). A request '
                    '("can you suggest ...") names no assistant. A turn\'s role is its metadata role, or a leading '
                    '"user:" or "assistant:" label.',
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

    @model_validator(mode="after")
    def _warn_of_ignored_rank_fusion(self) -> ScoringSettings:
        # RFC 7.2: weighted scoring ignores a supplied rrf_k, rrf_recency_boost or rrf_tie_break
        # with a warning; `RetrievalSettings.fingerprint` leaves them out.
        if self.fusion == "weighted" and self.rank_fusion != RankFusionScoring():
            given = ", ".join(f"{k}={v!r}" for k, v in _changed(self.rank_fusion, RankFusionScoring()).items())
            warnings.warn(
                f"scoring.fusion='weighted' ignores scoring.rank_fusion ({given}); remove them or set "
                "fusion='rrf' to use them", IgnoredSettingWarning, stacklevel=2,
            )
        return self

    @model_validator(mode="after")
    def _warn_of_ignored_recency_time(self) -> ScoringSettings:
        # RFC 7: rank fusion drops recency_time with a warning; its recency boost and tie-break
        # already date memories by when they were stated.
        if self.fusion == "rrf" and self.weighted.recency_time is not None:
            warnings.warn(
                f"scoring.fusion='rrf' ignores scoring.weighted.recency_time={self.weighted.recency_time!r} (rank "
                "fusion dates memories by event time already); remove it or set fusion='weighted'",
                IgnoredSettingWarning, stacklevel=2,
            )
        if self.fusion == "rrf" and self.weighted.current_state_recency_weight is not None:
            warnings.warn(
                "scoring.fusion='rrf' ignores scoring.weighted.current_state_recency_weight (rank fusion shifts no "
                "weights; its rrf_recency_boost lifts recent memories instead); remove it or set fusion='weighted'",
                IgnoredSettingWarning, stacklevel=2,
            )
        return self

    def effective(self) -> ScoringSettings:
        """These settings without what the chosen formula never reads (rank fusion's under weighted,
        recency_time and the current-state weight shift under rank fusion)."""
        effective = self
        if self.fusion == "weighted" and self.rank_fusion != RankFusionScoring():
            effective = effective.model_copy(update={"rank_fusion": RankFusionScoring()})
        weighted_only = {"recency_time": None, "current_state_recency_weight": None}
        if self.fusion == "rrf" and any(getattr(self.weighted, name) is not None for name in weighted_only):
            effective = effective.model_copy(update={"weighted": self.weighted.model_copy(update=weighted_only)})
        return effective


def _changed(model: BaseModel, default: BaseModel) -> dict:
    return {name: getattr(model, name) for name in type(model).model_fields
            if getattr(model, name) != getattr(default, name)}


class FilterSettings(BaseModel):
    """Stage 4 (RFC 6)."""

    model_config = _FROZEN

    unverified_threshold: float = Field(default=DEFAULT_UNVERIFIED_THRESHOLD, ge=0.0, le=1.0)
    namespace_thresholds: dict[str, float] = Field(default_factory=dict)

    @field_validator("namespace_thresholds")
    @classmethod
    def _thresholds_in_range(cls, value: dict[str, float]) -> dict[str, float]:
        for namespace, threshold in value.items():
            if not 0.0 <= threshold <= 1.0:  # False for NaN too
                raise ValueError(
                    f"namespace_thresholds[{namespace!r}] must be a number from 0 to 1, got {threshold!r}"
                )
        return value

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
    context_packing: bool = Field(
        default=False,
        description="RFC 4.5's opt-in session context packing: the session path counts toward path_count, each "
                    "neighbour that is not itself a trigger is linked to the highest-ranked trigger whose window "
                    "holds it (BundleItem.session_context_link), and packing puts it in tier 2 when its trigger "
                    "is in tier 2 or 1.",
    )


class PackingSettings(BaseModel):
    """Stage 6 (RFC 8, RFC-0006)."""

    model_config = _FROZEN

    item_format: Literal["dated_groups", "reader", "plain"] = "dated_groups"
    fold_repeated_text: bool = Field(
        default=False,
        description="Under the reader format: a memory whose text a packed line already holds adds its day to that "
                    "line (\"[2025-03-03, 2025-04-19] text\") instead of a line of its own. Other formats ignore it, "
                    "with a warning.",
    )
    temporal_guidance: bool = Field(
        default=False,
        description="RFC 3: a temporal question (TEMPORAL intent, or when/before/after/last in it) gets one line "
                    "of guidance on reading the memories' dates at the head of the context, where it fits.",
    )
    order: Literal["score", "balanced", "adjacent"] = Field(
        default="score",
        description="The order packing offers items in within a tier: score; balanced (PRMEConfig's default): the "
                    "ordinary multi-path tier (with tier_order=score, every ordinary item) by score / tokens ** 0.25, so a "
                    "short memory can go before a long one of a slightly higher score (routed episode and evidence "
                    "records keep score order); or adjacent "
                    "(RFC 4.5, needs session.context_packing): score order, with each trigger's linked neighbours "
                    "offered with it as one block in session order, so a window is packed and read together.",
    )
    tier_order: Literal["tiered", "score"] = Field(
        default="tiered",
        description='tiered: RFC 8\'s priority tiers, the multi-path tier before the rest; score: tiers 2 and 3 '
                    "offered as one, by `order`, so a strong single-path memory can go before a weaker multi-path "
                    "one (pinned records and active tasks stay first; each item keeps its tier in the bundle).",
    )
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
    episode_context_top_k: int = Field(
        default=0, ge=0, le=1000,
        description="RFC 4.6: route up to this many episodes (exact session groups of the pool) whose candidate text "
                    "best matches the question by BM25; 0, the default, leaves the pool as it was.",
    )
    episode_context_local_k: int = Field(
        default=3, ge=1, le=1000,
        description="RFC 4.6: at most this many records of each routed episode, the best by BM25 within it, are "
                    "marked EPISODE_CONTEXT.",
    )
    episode_decay: float = Field(
        default=0.85, gt=0.0, le=1.0,
        description="RFC 4.6: a marked record inherits its episode's strongest score times this, when higher.",
    )
    evidence_projection_top_k: int = Field(
        default=0, ge=0, le=1000,
        description="RFC 4.7: the top this many exact nonempty evidence_refs groups of the scored pool are each "
                    "replaced by the stored objects their references name (EVIDENCE_CONTEXT, the group's "
                    "strongest score); 0, the default, leaves the pool as it was.",
    )
    evidence_projection_max_sources: int = Field(
        default=1, ge=1, le=100, description="RFC 4.7: at most this many direct sources replace one group.",
    )
    evidence_augmentation_top_k: int = Field(
        default=0, ge=0, le=1000,
        description="RFC 4.7: as evidence_projection_top_k, but the sources join beside the group, which stays.",
    )
    evidence_augmentation_max_sources: int = Field(
        default=1, ge=1, le=100, description="RFC 4.7: at most this many direct sources join beside one group.",
    )
    evidence_anchor_policy: Literal["all", "non_entity"] = Field(
        default="all",
        description="RFC 4.7: all: a group's strongest candidate routes it; non_entity: ENTITY objects never "
                    "route, and the quota is filled from later groups.",
    )

    @model_validator(mode="after")
    def _warn_of_ignored_folding(self) -> PackingSettings:
        # RFC 7.2: packing ignores fold_repeated_text outside the reader format, and the
        # fingerprint leaves it out there.
        if self.fold_repeated_text and self.item_format != "reader":
            warnings.warn(f"packing.item_format={self.item_format!r} ignores packing.fold_repeated_text; remove it "
                          "or set item_format='reader'", IgnoredSettingWarning, stacklevel=2)
        return self

    @model_validator(mode="after")
    def _one_evidence_mode(self) -> PackingSettings:
        if self.evidence_projection_top_k and self.evidence_augmentation_top_k:
            raise ValueError("evidence_projection_top_k and evidence_augmentation_top_k exclude each other "
                             "(RFC 4.7): set one of them to 0")
        return self


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
    rerank: RerankSettings = RerankSettings()
    reformulation: ReformulationSettings = ReformulationSettings()
    execution: Literal["sequential", "threads"] = Field(
        default="sequential",
        description="How the DAG's nodes run: one after another, or on a thread pool (Hamilton's FutureAdapter), so "
                    "that the candidate paths run in parallel (RFC 4). The same bundle either way, so it is not part "
                    "of the fingerprint; on two cores threads measured slower (BENCHMARKS.md).",
    )

    @model_validator(mode="after")
    def _adjacent_needs_links(self) -> RetrievalSettings:
        if self.packing.order == "adjacent" and not self.session.context_packing:
            raise ValueError("packing.order='adjacent' keeps session windows together, which needs "
                             "session.context_packing=True (RFC 4.5): set it, or choose another order")
        return self

    def fingerprint(self) -> str:
        """A short hash of these settings; equal fingerprints retrieve alike. Settings the chosen
        formula never reads do not count, nor do the opt-in policies while they are at their
        defaults, so settings without them keep the fingerprint (and bundles keep the bytes) they
        had before the policies existed. Made once per settings object (they are frozen; a copy
        with changes is another object), as every bundle's metadata carries it."""
        found = _FINGERPRINTS.get(id(self))
        if found is None:
            found = _FINGERPRINTS[id(self)] = self._fingerprint()
            weakref.finalize(self, _FINGERPRINTS.pop, id(self), None)  # an id is reused once its object is gone
        return found

    def _fingerprint(self) -> str:
        scoring = self.scoring.effective()
        effective = self if scoring is self.scoring else self.model_copy(update={"scoring": scoring})
        dumped = effective.model_dump(mode="json")
        del dumped["execution"]  # how the nodes run never changes what they return
        if dumped["packing"]["item_format"] != "reader":
            dumped["packing"]["fold_repeated_text"] = False  # ignored there (PackingSettings)
        for name in _OPT_IN_SECTIONS:
            if dumped[name] == _DEFAULT_SECTIONS[name]:
                del dumped[name]
        for path, default in _OPT_IN_FIELDS:
            *sections, name = path.split(".")
            values = functools.reduce(dict.__getitem__, sections, dumped)
            if values[name] == default:
                del values[name]
        payload = json.dumps(dumped, sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:16]

    def hamilton_config(self) -> dict[str, str]:
        """The structural switches, as Hamilton `@config.when` reads them."""
        return {
            "fusion": self.scoring.fusion,
            "reranker": "cross_encoder" if self.rerank.enabled else "off",
            "reformulation": "on" if self.reformulation.enabled else "off",
        }


_OPT_IN_SECTIONS = ("rerank", "reformulation")
# Options added after fingerprints were first logged, left out at their defaults for the same reason.
_OPT_IN_FIELDS = (("scoring.weighted.recency_time", None), ("scoring.weighted.current_state_recency_weight", None), ("candidates.boost_fields", BoostFields().model_dump(mode="json")), ("session.context_packing", False),
                  ("packing.episode_context_top_k", 0), ("packing.episode_context_local_k", 3),
                  ("packing.episode_decay", 0.85), ("packing.evidence_projection_top_k", 0),
                  ("packing.evidence_projection_max_sources", 1), ("packing.evidence_augmentation_top_k", 0),
                  ("packing.evidence_augmentation_max_sources", 1), ("packing.evidence_anchor_policy", "all"),
                  ("packing.order", "score"), ("packing.temporal_guidance", False),
                  ("packing.fold_repeated_text", False), ("scoring.pronoun_speakers", []),
                  ("packing.tier_order", "tiered"))
_DEFAULT_SECTIONS = {"rerank": RerankSettings().model_dump(mode="json"),
                     "reformulation": ReformulationSettings().model_dump(mode="json")}
