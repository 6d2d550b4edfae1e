"""Stage 6's value: the Memory Bundle, its items and its typed metadata (the public, versioned JSON)."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

from typing_extensions import TypedDict
from uuid import UUID

from pydantic import (AwareDatetime, BaseModel, ConfigDict, Field, PlainSerializer, SerializerFunctionWrapHandler,
                      model_serializer)

from rms_retrieval.nodes.models import AggregationKind, QueryIntent
from rms_retrieval.nodes.pools import PathType
from rms_retrieval.stores.visibility import RetrievalMode


BUNDLE_VERSION = 1


class _WrittenWhenSet(BaseModel):
    """A model whose `_WRITTEN_WHEN_SET` fields, added within a bundle_version, are left out of
    its dump while None: bundles without them keep their bytes."""

    _WRITTEN_WHEN_SET: ClassVar[tuple[str, ...]] = ()

    @model_serializer(mode="wrap")
    def _without_unset_additions(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        dumped = handler(self)
        for name in self._WRITTEN_WHEN_SET:
            if dumped.get(name) is None:
                dumped.pop(name, None)
        return dumped


class SessionContextLink(BaseModel):
    """Under session context packing (RFC 4.5): the trigger whose window brought this neighbour
    in, and the neighbour's offset from it in session order."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    trigger: UUID
    offset: int


class BundleItem(_WrittenWhenSet):
    model_config = ConfigDict(frozen=True)
    _WRITTEN_WHEN_SET = ("session_context_link", "folded_into")  # opt-in options only

    id: UUID
    namespace: str
    node_type: str
    content: str
    text: str = Field(description="The item exactly as packed into the context, formatting included.")
    score: float
    semantic_relevance: float | None = None
    paths: tuple[PathType, ...]
    path_count: int
    tier: int = Field(description="1 pinned and active tasks, 2 found by two or more paths, 3 the rest.")
    tokens: int
    event_time: AwareDatetime | None = None
    source_ref: str | None = None
    session_context_link: SessionContextLink | None = None
    folded_into: UUID | None = Field(
        default=None, description="Under packing.fold_repeated_text: the item whose line this memory's text repeats; "
                                  "its day joined that line, and `tokens` is what that cost.")


class CrossScopeHint(BaseModel):
    """A memory from one of the request's `cross_scope_namespaces` (RFC-0005 amendment): found by
    its own vector pass, scored within its own pool, held to the same min_score, never packed."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: UUID
    namespace: str
    node_type: str
    content: str
    score: float
    semantic_relevance: float | None = None
    event_time: AwareDatetime | None = None
    source_ref: str | None = None


# A time as the metadata's JSON has always written it, `datetime.isoformat()` ("+00:00", not "Z").
IsoTime = Annotated[AwareDatetime, PlainSerializer(lambda value: value.isoformat(), return_type=str, when_used="json")]


class AggregationCoverage(BaseModel):
    """RFC "aggregation coverage": what a count or list question's bundle can and cannot claim."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: AggregationKind
    unique_candidates: int
    returned: int
    packed: int
    limitation_codes: tuple[str, ...]
    candidate_limit_paths: tuple[PathType, ...]
    exhaustive: bool = False


class HistoricalCoverage(BaseModel):
    """What a `knowledge_at` bundle can and cannot claim (RFC amendment): objects stored after the
    cutoff are left out, but lifecycle states and derived indexes are today's, so it is no replay."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    knowledge_at: IsoTime
    exact_snapshot: bool
    limitations: tuple[str, ...]
    warning_fits: bool


class ExclusionScore(TypedDict):
    """How a left-out memory scored (RFC amendment "explicit selection"): `score` is its score in
    the ranked pool, None for a memory removed before scoring (the epistemic and time filters,
    a session neighbour the filter removed, a projected evidence member); `semantic_relevance`
    is its cosine floored at 0 under rank fusion (0 where no vector search found it, as for a
    result) and always None under weighted scoring. A typed dict, not a model: a bundle may
    carry hundreds, and a dict costs a fraction of a model to make."""

    score: float | None
    semantic_relevance: float | None


class RetrievalMetadata(_WrittenWhenSet):
    """How the bundle was made: the question's analysis, the formula, the pipeline's counts and
    what was left out (by object id, with the reason). Part of the bundle's versioned JSON, in
    this field order."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    _WRITTEN_WHEN_SET = ("historical_coverage",)  # knowledge_at bundles only

    intent: QueryIntent
    current_state: bool
    entities: tuple[str, ...]
    temporal_window: tuple[IsoTime, IsoTime] | None
    reference_time: IsoTime
    retrieval_mode: RetrievalMode
    formula_version: int
    rrf_k: int | None
    configuration_fingerprint: str
    candidates_generated: int
    candidates_after_filter: int
    candidates_ranked: int
    candidates_selected: int
    cut_by_budget: int
    paths_at_limit: tuple[PathType, ...]
    embedding_mismatch: bool
    backend_failures: dict[PathType, str]
    min_score_skipped: bool
    excluded: dict[UUID, str]
    exclusion_scores: dict[UUID, ExclusionScore] = Field(
        default_factory=dict, description="Every id of `excluded`, with how it scored.")
    budget_cuts: tuple[UUID, ...] = Field(
        default=(), description="The selected memories the token budget left out, in packing order.")
    aggregation_coverage: AggregationCoverage | None
    historical_coverage: HistoricalCoverage | None = None


class MemoryBundle(_WrittenWhenSet):
    """What an application puts into an LLM's context. Its JSON form is versioned and stable."""

    model_config = ConfigDict(frozen=True)
    _WRITTEN_WHEN_SET = ("cross_scope_hints",)  # requests that name cross_scope_namespaces only

    bundle_version: int = BUNDLE_VERSION
    query: str
    namespaces: tuple[str, ...]
    reference_time: AwareDatetime
    token_budget: int
    tokens_used: int
    items: tuple[BundleItem, ...]
    context: str = Field(description="The packed text, items joined in order, counted in cl100k_base tokens.")
    retrieval_metadata: RetrievalMetadata
    cross_scope_hints: tuple[CrossScopeHint, ...] | None = Field(
        default=None, description="Hints from the request's cross_scope_namespaces, best first; not in `context`.")

    def to_json(self) -> str:
        return self.model_dump_json(indent=None)
