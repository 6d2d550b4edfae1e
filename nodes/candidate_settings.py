"""Validated settings of stage 2, candidate generation (RFC 4.1 to 4.4): each path's limits, the
lexical fields' weights, the graph walk's bounds and the aggregation widening."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_serializer, field_validator, model_validator

from rms_retrieval.nodes.pools import PRIMARY_PATHS, PathType

_FROZEN = ConfigDict(frozen=True, extra="forbid")


class BoostFields(BaseModel):
    """RFC 4.3 `boost_fields`: how much a term counts in each field of a lexical document, the
    content (`value`) and the entity name. Both at 1 (the RFC's default list) is match_bm25 over
    the two as one text; a weight of 0 leaves the field out. Given as a list, the named fields
    count 1 and the others 0; given as a mapping, a field it does not name keeps 1."""

    model_config = _FROZEN

    value: float = Field(default=1.0, ge=0.0, le=100.0)
    entity_canonical_name: float = Field(default=1.0, ge=0.0, le=100.0)

    @model_validator(mode="before")
    @classmethod
    def _listed_fields(cls, data: object) -> object:
        if isinstance(data, (list, tuple)):
            unknown = sorted(set(map(str, data)) - set(cls.model_fields))
            if unknown:
                raise ValueError(f"boost_fields names {unknown}; the lexical fields are {sorted(cls.model_fields)}")
            return {name: 1.0 if name in data else 0.0 for name in cls.model_fields}
        return data

    @model_validator(mode="after")
    def _some_field(self) -> BoostFields:
        if self.value == 0 and self.entity_canonical_name == 0:
            raise ValueError("boost_fields leaves no field to search; give value or entity_canonical_name a weight above 0")
        return self


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
    boost_fields: BoostFields = BoostFields()
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
