"""Values that flow between the retrieval nodes: the request, the query analysis, the question's embedding
and its reformulations. The candidate pool is in `pools`, the bundle in `bundle`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any
from uuid import UUID

import numpy as np
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, field_validator, model_validator

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
    limit: int | None = Field(default=None, ge=0, description="At most this many memories, pinned ones included; "
                                                               "0 asks for an empty selection.")
    min_score: float = Field(default=0.0, ge=0.0, allow_inf_nan=False, description=(
        "The floor (RFC amendment): on semantic_relevance under rank fusion, on the score under weighted scoring, "
        "where a score can exceed 1."))
    max_per_source: int | None = Field(default=None, ge=1)
    max_per_evidence: int | None = Field(
        default=None, ge=1, description="At most this many memories citing the same exact evidence_refs set, "
                                         "whatever their text (RFC-0005 section 5); memories without evidence are not capped.")
    cross_scope_namespaces: tuple[str, ...] = Field(
        default=(), description="Namespaces, outside `namespaces`, that may offer cross-scope hints (RFC-0005 amendment): "
                                "a vector pass of their own, returned apart from the bundle's items, never packed.")
    cross_scope_top_n: int = Field(default=3, ge=1, le=100,
                                   description="At most this many cross-scope hints (their own cap).")
    knowledge_at: AwareDatetime | None = Field(
        default=None, description="Ingestion-time cutoff (RFC-0005 amendment): objects stored after it are left out; "
                                  "current lifecycle states and indexes are used, not a replay of the past.")

    @field_validator("query")
    @classmethod
    def _query_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("the query is empty; ask a question in words")
        return value

    @field_validator("namespaces", "cross_scope_namespaces")
    @classmethod
    def _namespaces_sorted(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if any(not ns.strip() for ns in value):
            raise ValueError("a namespace name is empty")
        return tuple(sorted(set(value)))

    @model_validator(mode="after")
    def _hints_from_other_namespaces(self) -> RetrievalRequest:
        both = sorted(set(self.namespaces or ()) & set(self.cross_scope_namespaces))
        if both:
            raise ValueError(f"cross_scope_namespaces repeats {', '.join(map(repr, both))} of namespaces; "
                             "hints come from other namespaces only, so leave it out of one of them")
        return self

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
    # The chat roles it names as its speakers: "assistant" alone when it asks back for what the
    # assistant said, else "user" when it is in the first person (nodes/query_analysis.py).
    speaker_roles: tuple[str, ...] = ()
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
