"""Values that flow between the retrieval nodes: the request, the query analysis, candidates, the bundle."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from types import MappingProxyType
from typing import Annotated, Any, NamedTuple
from uuid import UUID

import numpy as np
from pydantic import (AwareDatetime, BaseModel, ConfigDict, Field, PlainSerializer, SerializerFunctionWrapHandler,
                      field_validator, model_serializer, model_validator)

from rms_retrieval.stores.models import MemoryObject
from rms_retrieval.stores.protocols import EmbeddingIdentity
from rms_retrieval.stores.visibility import RetrievalMode

# The token budget of a request that names none (cl100k_base tokens).
DEFAULT_TOKEN_BUDGET = 4096
# The longest question a request takes (characters); the README documents it.
MAX_QUERY_CHARS = 8192


class RetrievalRequest(BaseModel):
    """One question and everything that varies per request. `reference_time` is fixed by then."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    query: str = Field(min_length=1, max_length=MAX_QUERY_CHARS)
    namespaces: tuple[str, ...] = Field(min_length=1)
    reference_time: AwareDatetime
    token_budget: int = Field(default=DEFAULT_TOKEN_BUDGET, ge=1, le=10_000_000)
    retrieval_mode: RetrievalMode = RetrievalMode.DEFAULT
    time_from: AwareDatetime | None = None
    time_to: AwareDatetime | None = None
    event_time_from: AwareDatetime | None = None
    event_time_to: AwareDatetime | None = None
    limit: int | None = Field(default=None, ge=1)
    min_score: float = Field(default=0.0, ge=0.0, le=1.0)
    max_per_source: int | None = Field(default=None, ge=1)
    knowledge_at: AwareDatetime | None = Field(
        default=None, description="Ingestion-time cutoff (RFC-0005 amendment): objects stored after it are left out; "
                                  "current lifecycle states and indexes are used, not a replay of the past.")

    @field_validator("query")
    @classmethod
    def _query_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("the query is empty; ask a question in words")
        return value

    @field_validator("namespaces")
    @classmethod
    def _namespaces_sorted(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if any(not ns.strip() for ns in value):
            raise ValueError("a namespace name is empty")
        return tuple(sorted(set(value)))

    @model_validator(mode="after")
    def _windows_ordered(self) -> RetrievalRequest:
        for low, high in (("time_from", "time_to"), ("event_time_from", "event_time_to")):
            a, b = getattr(self, low), getattr(self, high)
            if a and b and b < a:
                raise ValueError(f"{high} is before {low}")
        return self


# ---- Stage 1 -------------------------------------------------------------------------------


class EntityType(StrEnum):
    PERSON = "PERSON"
    PLACE = "PLACE"
    ORGANIZATION = "ORGANIZATION"
    OTHER = "OTHER"


class QueryEntity(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    type: EntityType = EntityType.OTHER
    confidence: float = Field(ge=0.0, le=1.0)
    matched_ids: tuple[UUID, ...] = ()


class TemporalType(StrEnum):
    ABSOLUTE = "ABSOLUTE"
    RELATIVE = "RELATIVE"
    DURATION = "DURATION"
    RECURRING = "RECURRING"


class TemporalSignal(BaseModel):
    """A date phrase in the query and the window it resolves to (inclusive start, exclusive end)."""

    model_config = ConfigDict(frozen=True)

    type: TemporalType
    text: str
    start: AwareDatetime | None = None
    end: AwareDatetime | None = None
    # Why a phrase that reads as a date has no window (e.g. it falls outside years 1-9999).
    note: str | None = None


class QueryIntent(StrEnum):
    ENTITY_LOOKUP = "ENTITY_LOOKUP"
    TEMPORAL = "TEMPORAL"
    RELATIONAL = "RELATIONAL"
    FACTUAL = "FACTUAL"
    SEMANTIC = "SEMANTIC"


class AggregationKind(StrEnum):
    COUNT = "COUNT"
    LIST = "LIST"


class QueryAnalysis(BaseModel):
    model_config = ConfigDict(frozen=True)

    raw_query: str
    entities: tuple[QueryEntity, ...] = ()
    temporal_signals: tuple[TemporalSignal, ...] = ()
    intent: QueryIntent = QueryIntent.SEMANTIC
    current_state: bool = False
    aggregation: AggregationKind | None = None
    namespace_scope: tuple[str, ...]
    retrieval_mode: RetrievalMode = RetrievalMode.DEFAULT
    reference_time: AwareDatetime

    @property
    def temporal_window(self) -> tuple[datetime, datetime] | None:
        """The union of the resolved windows, or None when no signal resolved."""
        starts = [s.start for s in self.temporal_signals if s.start]
        ends = [s.end for s in self.temporal_signals if s.end]
        if not starts or not ends:
            return None
        return min(starts), max(ends)


# ---- Stage 2 and 3 -------------------------------------------------------------------------


@dataclass(frozen=True)
class QueryEmbedding:
    """The query's unit vector and the identity of the model that made it (kept for replay)."""

    vector: np.ndarray
    identity: EmbeddingIdentity


@dataclass(frozen=True)
class Reformulations:
    """A provider's alternative questions (experimental policies), each with its query vector (None
    while the vector path is off), and the provider failure that left none, counted apart."""

    alternatives: tuple[str, ...] = ()
    embeddings: tuple[QueryEmbedding | None, ...] = ()
    provider: str | None = None
    provider_failure: str | None = None

    def as_record(self) -> dict[str, Any]:
        """The log's form: replay reads it back with `from_record` and asks no provider."""
        return {
            "provider": self.provider, "provider_failure": self.provider_failure,
            "alternatives": list(self.alternatives),
            "embeddings": [None if e is None else {"vector": [float(x) for x in e.vector],
                                                   "model": e.identity.model_name, "model_hash": e.identity.model_hash}
                           for e in self.embeddings],
        }

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Reformulations:
        embeddings = tuple(
            None if e is None else QueryEmbedding(
                np.asarray(e["vector"], dtype=np.float32),
                EmbeddingIdentity(e["model"], e["model_hash"], len(e["vector"])))
            for e in record["embeddings"])
        return cls(tuple(record["alternatives"]), embeddings, record.get("provider"), record.get("provider_failure"))


@dataclass(frozen=True, slots=True)
class CandidateLimits:
    """Per-path candidate limits for one request; count and list questions widen them (RFC 4.3)."""

    vector_k: int
    lexical_k: int
    graph_max_candidates: int
    widened: bool = False


class PathType(StrEnum):
    VECTOR = "VECTOR"
    LEXICAL = "LEXICAL"
    GRAPH = "GRAPH"
    PINNED = "PINNED"
    SESSION_CONTEXT = "SESSION_CONTEXT"
    KEYWORD_SCAN = "KEYWORD_SCAN"


PRIMARY_PATHS = frozenset({PathType.VECTOR, PathType.LEXICAL, PathType.GRAPH, PathType.PINNED})


class ChannelHit(NamedTuple):
    """One object found by one path: its 1-based rank there, raw score and normalised score (a
    named tuple: immutable, and made in a fifth of a frozen dataclass's time, ~700 per request)."""

    object_id: UUID
    path: PathType
    rank: int
    raw_score: float
    score: float
    detail: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True)
class ChannelResult:
    """Everything one candidate path returned, or why it returned nothing."""

    path: PathType
    hits: tuple[ChannelHit, ...] = ()
    objects: Mapping[UUID, MemoryObject] = field(default_factory=dict)
    limit: int = 0
    failure: str | None = None
    embedding_mismatch: bool = False

    @property
    def at_limit(self) -> bool:
        return self.limit > 0 and len(self.hits) >= self.limit


@dataclass(frozen=True)
class Candidate:
    """One object with every path that found it."""

    object: MemoryObject
    hits: Mapping[PathType, ChannelHit]

    @property
    def object_id(self) -> UUID:
        return self.object.id

    @property
    def paths(self) -> tuple[PathType, ...]:
        return tuple(p for p in PathType if p in self.hits)

    @property
    def path_count(self) -> int:
        """Primary retrieval paths that found it (RFC 5); session context and the count/list
        keyword scans widen the pool without counting as evidence of relevance."""
        return sum(1 for p in self.hits if p in PRIMARY_PATHS)


@dataclass(frozen=True)
class CandidatePool:
    """Merged candidates in object-id order, with what each path reported."""

    candidates: tuple[Candidate, ...]
    backend_failures: Mapping[PathType, str] = field(default_factory=dict)
    embedding_mismatch: bool = False
    paths_at_limit: tuple[PathType, ...] = ()

    @property
    def by_id(self) -> dict[UUID, Candidate]:
        return {c.object_id: c for c in self.candidates}


@dataclass(frozen=True)
class AlternatePasses:
    """What the vector, lexical and graph paths found for each alternative question, and the
    stored objects behind their hits (experimental policies, query reformulation)."""

    passes: tuple[tuple[ChannelResult, ...], ...] = ()
    objects: Mapping[UUID, MemoryObject] = field(default_factory=dict)


@dataclass(frozen=True)
class FilteredPool:
    """Candidates that may be scored, the removed ones, and each removed object's reason."""

    candidates: tuple[Candidate, ...]
    excluded: Mapping[UUID, str]
    removed: tuple[Candidate, ...] = ()


# ---- Stage 5 and 6: the scored pool as columns ---------------------------------------------

_PATH_BITS = {path: 1 << position for position, path in enumerate(PathType)}


def path_mask(paths: Iterable[PathType]) -> int:
    """The paths as one integer, a bit per `PathType`."""
    mask = 0
    for path in paths:
        mask |= _PATH_BITS[path]
    return mask


def mask_paths(mask: int) -> tuple[PathType, ...]:
    """The paths of a mask in `PathType` order, except session context last: it joins after scoring."""
    found = tuple(p for p in PathType if p is not PathType.SESSION_CONTEXT and mask & _PATH_BITS[p])
    return found + ((PathType.SESSION_CONTEXT,) if mask & _PATH_BITS[PathType.SESSION_CONTEXT] else ())


def _take(record: Any, order: np.ndarray) -> dict[str, Any]:
    """Every array field of a column record reordered (or subset) by the positions `order`."""
    taken = {}
    for f in dataclasses.fields(record):
        value = getattr(record, f.name)
        if isinstance(value, np.ndarray):
            taken[f.name] = value[order]
        elif isinstance(value, tuple):
            taken[f.name] = tuple(value[i] for i in order)
        else:
            taken[f.name] = value
    return taken


@dataclass(frozen=True, eq=False)
class ScoreFactors:
    """Every input and factor of the scores, for audits; NaN where a candidate lacks one.

    Ranks are competition ranks within the pool (1, 2, 2, 4); `graph_hops` and the ranks are
    whole numbers stored as floats so that a missing one can be NaN."""

    semantic: np.ndarray
    semantic_rank: np.ndarray
    lexical: np.ndarray
    lexical_bm25: np.ndarray
    lexical_rank: np.ndarray
    graph_proximity: np.ndarray
    graph_hops: np.ndarray
    graph_rank: np.ndarray
    recency: np.ndarray
    salience: np.ndarray
    confidence: np.ndarray
    epistemic_weight: np.ndarray
    epistemic_factor: np.ndarray
    node_type_boost: np.ndarray
    node_type_factor: np.ndarray
    temporal_affinity: np.ndarray
    temporal_factor: np.ndarray
    speaker_factor: np.ndarray
    recency_boost_factor: np.ndarray
    tie_break: np.ndarray
    current_update_factor: np.ndarray
    base_score: np.ndarray
    # The cross-encoder (RFC 7.3), NaN outside the reranked prefix: the model's score, the prior
    # weight the blend gave the candidate's own score, the blend, the score before reranking and
    # the 1-based place the policy assigned.
    rerank_model_score: np.ndarray
    rerank_prior_weight: np.ndarray
    rerank_blend: np.ndarray
    rerank_prior_score: np.ndarray
    rerank_rank: np.ndarray

    def take(self, order: np.ndarray) -> ScoreFactors:
        return ScoreFactors(**_take(self, order))

    def padded(self, extra: int) -> ScoreFactors:
        """These factors and `extra` candidates that have none (session neighbours new to the pool)."""
        return ScoreFactors(**{f.name: np.concatenate([getattr(self, f.name), np.full(extra, np.nan)])
                               for f in dataclasses.fields(self)})


WEIGHTED_FORMULA, RANK_FUSION_FORMULA = 1, 2


@dataclass(frozen=True, eq=False)
class ScoredPool:
    """The scored candidates as aligned columns, in final order: score descending, then path
    count descending, then object id. `formula_version` records which formula made the scores
    (the Hamilton config `fusion` picked the scoring node); later stages read it here."""

    formula_version: int
    objects: tuple[MemoryObject, ...]
    score: np.ndarray
    semantic_relevance: np.ndarray
    path_mask: np.ndarray
    path_count: np.ndarray
    factors: ScoreFactors

    def __post_init__(self) -> None:
        check_scored_pool(self)

    def __len__(self) -> int:
        return len(self.objects)

    @property
    def rank_fused(self) -> bool:
        """Scored by formula version 2 (reciprocal rank fusion), whose scores are no relevance."""
        return self.formula_version == RANK_FUSION_FORMULA

    @property
    def object_ids(self) -> tuple[UUID, ...]:
        return tuple(obj.id for obj in self.objects)

    def take(self, order: np.ndarray) -> ScoredPool:
        """The rows at positions `order`, in that order."""
        fields = _take(self, order)
        fields["factors"] = self.factors.take(order)
        return ScoredPool(**fields)


# The declared schema of `fused_scores` and every later pool: a dtype per column, one entry per object.
SCORED_POOL_SCHEMA: Mapping[str, type] = {
    "score": np.float64, "semantic_relevance": np.float64, "path_mask": np.int64, "path_count": np.int64,
    **{f.name: np.float64 for f in dataclasses.fields(ScoreFactors)},
}


def check_scored_pool(pool: ScoredPool) -> None:
    """Raise ValueError unless `pool` matches `SCORED_POOL_SCHEMA`."""
    if pool.formula_version not in (WEIGHTED_FORMULA, RANK_FUSION_FORMULA):
        raise ValueError(f"formula_version must be 1 or 2, got {pool.formula_version!r}")
    size = len(pool.objects)
    for name, dtype in SCORED_POOL_SCHEMA.items():
        column = getattr(pool.factors, name) if hasattr(pool.factors, name) else getattr(pool, name)
        if column.dtype != dtype or column.shape != (size,):
            raise ValueError(
                f"scored pool column {name} must be {np.dtype(dtype)} of shape ({size},), "
                f"got {column.dtype} of shape {column.shape}"
            )
    if not np.isfinite(pool.score).all():
        raise ValueError("scored pool scores must be finite numbers; a NaN or infinite score cannot be ranked")


_LOW_64 = (1 << 64) - 1


def rank_order(score: np.ndarray, path_count: np.ndarray, objects: Sequence[MemoryObject]) -> np.ndarray:
    """Positions in final order: score descending, then path count descending, then object id.

    Ids compare as their 128-bit integers, two 64-bit halves: the order of their hex strings.
    """
    ints = [obj.id.int for obj in objects]
    high = np.fromiter((i >> 64 for i in ints), dtype=np.uint64, count=len(ints))
    low = np.fromiter((i & _LOW_64 for i in ints), dtype=np.uint64, count=len(ints))
    return np.lexsort((low, high, -path_count, -score))


RERANK_COLUMNS = ("rerank_model_score", "rerank_prior_weight", "rerank_blend", "rerank_prior_score", "rerank_rank")


@dataclass(frozen=True)
class CrossEncoderScores:
    """The cross-encoder's score for each object of the reranked prefix, and which model gave them:
    what the log records and replay hands back instead of running the model."""

    object_ids: tuple[UUID, ...]
    scores: np.ndarray
    model: str

    def __post_init__(self) -> None:
        if self.scores.shape != (len(self.object_ids),) or not np.isfinite(self.scores).all():
            raise ValueError(f"cross-encoder scores must be {len(self.object_ids)} finite numbers, "
                             f"got shape {self.scores.shape}")


@dataclass(frozen=True, eq=False)
class RerankedPool:
    """The scored pool after the optional cross-encoder, in final order (RFC 7.3). `policy` is None
    when the reranker is off (the pool is `fused_scores` itself); `anchor` is the candidate the
    anchored policy put first, if any."""

    pool: ScoredPool
    policy: str | None = None
    reranked: int = 0
    anchor: UUID | None = None
    model: str | None = None


@dataclass(frozen=True, eq=False)
class RankedCandidates:
    """The scored pool after session context, in final order, with each row's session provenance
    (`session_trigger` None and NaN offset and decay where the row kept its own score) and the
    neighbours the filter removed."""

    pool: ScoredPool
    session_trigger: tuple[UUID | None, ...]
    session_offset: np.ndarray
    session_decay: np.ndarray
    excluded: Mapping[UUID, str] = field(default_factory=dict)


@dataclass(frozen=True, eq=False)
class Selection:
    """Candidates allowed into packing, in rank order, and why the others were left out."""

    pool: ScoredPool
    excluded: Mapping[UUID, str] = field(default_factory=dict)
    min_score_skipped: bool = False


# ---- Stage 6: the bundle -------------------------------------------------------------------

BUNDLE_VERSION = 1


class BundleItem(BaseModel):
    model_config = ConfigDict(frozen=True)

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


class RetrievalMetadata(BaseModel):
    """How the bundle was made: the question's analysis, the formula, the pipeline's counts and
    what was left out (by object id, with the reason). Part of the bundle's versioned JSON, in
    this field order."""

    model_config = ConfigDict(frozen=True, extra="forbid")

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
    aggregation_coverage: AggregationCoverage | None
    historical_coverage: HistoricalCoverage | None = None

    @model_serializer(mode="wrap")
    def _without_absent_history(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """`historical_coverage` only on `knowledge_at` bundles: other bundles keep their bytes."""
        dumped = handler(self)
        if dumped.get("historical_coverage") is None:
            dumped.pop("historical_coverage", None)
        return dumped


class MemoryBundle(BaseModel):
    """What an application puts into an LLM's context. Its JSON form is versioned and stable."""

    model_config = ConfigDict(frozen=True)

    bundle_version: int = BUNDLE_VERSION
    query: str
    namespaces: tuple[str, ...]
    reference_time: AwareDatetime
    token_budget: int
    tokens_used: int
    items: tuple[BundleItem, ...]
    context: str = Field(description="The packed text, items joined in order, counted in cl100k_base tokens.")
    retrieval_metadata: RetrievalMetadata

    def to_json(self) -> str:
        return self.model_dump_json(indent=None)
