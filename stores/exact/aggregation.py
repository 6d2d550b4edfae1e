"""Exact aggregation over structured claims (RFC-0005): assertion counts and grounded quantity totals.

No vector, lexical, graph or model selection: the store's SQL (stores/engine/store_sql.py) visits every record of the namespace
(and scope) of the chosen node types. Selectors are ANDed across fields and ORed within one; an
empty selector matches every value. Values match exactly after `rms_retrieval.stores.analysis.claims` normalisation.

Retrieval modes apply the retrieval filter's own table (`rms_retrieval.stores.visibility`):
DEFAULT drops DEPRECATED, HYPOTHETICAL, UNVERIFIED below `unverified_min_confidence` and
anything not ACTIVE; EXPLICIT drops DEPRECATED, ARCHIVED, SUPERSEDED and DELETED; AUDIT drops
only DELETED. An explicit `lifecycle` set replaces the mode's lifecycle rule (it is authoritative
here), the epistemic rules stay. Event-time bounds are inclusive on the stated time (event time,
else ingestion time); `valid_at` keeps objects whose validity window contains it; `knowledge_at`
keeps objects ingested by then (current state only).

Quantity totals are exact: each decimal becomes a scaled integer and Python's unbounded integers
add them. Neither DuckDB's DECIMAL (at most 38 digits) nor the process decimal context (28
significant digits by default) could hold a 40-digit total without rounding or overflow.

Coverage: `stored_set_exhaustive` is true when every selected record was visited and the store
did not change during the call. Whether the source conversation was fully extracted into claims,
and how claims map to real-world events, stay unknown.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from datetime import datetime
from decimal import Decimal
from typing import Any, Literal
from uuid import UUID

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError, model_validator

from rms_retrieval.stores.analysis.claims import (
    Assertion,
    Polarity,
    Quantity,
    decimal_text,
    decimal_value,
    normalize_predicate,
    normalize_value,
    scaled_integer,
)
from rms_retrieval.stores.protocols import ClaimSelection, QuantityRow, RecordReader, SnapshotSource, snapshot_of
from rms_retrieval.stores.models import LifecycleState, NodeType
from rms_retrieval.stores.visibility import DEFAULT_UNVERIFIED_THRESHOLD, MODE_VISIBILITY, RetrievalMode

CLAIM_NODE_TYPES = (NodeType.FACT, NodeType.DECISION, NodeType.PREFERENCE)



class AssertionQuery(BaseModel):
    """What to count. Selector values are normalised before matching; `()` matches every value."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    namespace: str = Field(min_length=1)
    scope: str | None = None
    subjects: tuple[str, ...] = ()
    predicates: tuple[str, ...] = ()
    objects: tuple[str, ...] = ()
    polarities: tuple[Polarity, ...] = ("positive",)
    node_types: tuple[NodeType, ...] = Field(default=CLAIM_NODE_TYPES, min_length=1)
    lifecycle: tuple[LifecycleState, ...] | None = Field(
        default=None, description="None: the mode's lifecycle rule; a set (even empty) is authoritative."
    )
    mode: RetrievalMode = RetrievalMode.DEFAULT
    unverified_min_confidence: float = Field(default=DEFAULT_UNVERIFIED_THRESHOLD, ge=0.0, le=1.0)
    event_time_from: AwareDatetime | None = None
    event_time_to: AwareDatetime | None = None
    valid_at: AwareDatetime | None = None
    knowledge_at: AwareDatetime | None = None
    max_groups: int = Field(default=100, ge=1, le=10_000)
    max_samples: int = Field(default=3, ge=0, le=100)

    @model_validator(mode="after")
    def _consistent(self) -> AssertionQuery:
        if self.event_time_from and self.event_time_to and self.event_time_to < self.event_time_from:
            raise ValueError("event_time_to is before event_time_from")
        for name, normalised in self.normalized_selectors().items():
            if "" in normalised:
                raise ValueError(f"{name} has a blank value; leave the selector empty to match every value")
        return self

    def normalized_selectors(self) -> dict[str, tuple[str, ...]]:
        """The selector values as they are matched."""
        return {
            "subjects": tuple(normalize_value(value) for value in self.subjects),
            "predicates": tuple(normalize_predicate(value) for value in self.predicates),
            "objects": tuple(normalize_value(value) for value in self.objects),
        }


class ClaimSample(BaseModel):
    """One counted record: its id, evidence and claim as stored."""

    model_config = ConfigDict(frozen=True)

    object_id: UUID
    evidence_refs: tuple[str, ...]
    stated_time: AwareDatetime
    assertion: Assertion


class AssertionGroup(BaseModel):
    """One normalised claim and how many selected records state it."""

    model_config = ConfigDict(frozen=True)

    subject: str
    predicate: str
    object: str
    polarity: Polarity
    occurrence_count: int
    samples: tuple[ClaimSample, ...]
    samples_truncated: bool


class AssertionAggregation(BaseModel):
    """Occurrences (records) and distinct groups (claims) apart, with what was left out and why."""

    model_config = ConfigDict(frozen=True)

    query: AssertionQuery
    normalized_selectors: dict[str, tuple[str, ...]]
    occurrence_count: int
    distinct_group_count: int
    groups: tuple[AssertionGroup, ...]
    groups_truncated: bool
    exclusions: dict[str, int]
    stored_set_exhaustive: bool
    source_extraction_coverage: Literal["unknown"] = "unknown"
    semantic_equivalence: Literal["normalized_exact_only"] = "normalized_exact_only"
    real_world_coverage: Literal["unknown"] = "unknown"


def aggregate_assertions(store: RecordReader | SnapshotSource, query: AssertionQuery) -> AssertionAggregation:
    """Count the selected structured claims, grouped by normalised subject, predicate, object, polarity."""
    store = snapshot_of(store)  # one generation for the groups and the exclusions
    fingerprint = store.state_fingerprint()
    selection = _claim_selection(query, require_quantity=False)
    rows = store.assertion_groups(selection, query.max_groups, query.max_samples)
    exclusions = store.exclusion_counts(selection)
    groups = tuple(
        AssertionGroup(
            subject=row.subject, predicate=row.predicate, object=row.object, polarity=row.polarity,
            occurrence_count=row.occurrences, samples=tuple(_claim_sample(sample) for sample in row.samples),
            samples_truncated=row.occurrences > query.max_samples,
        )
        for row in rows
    )
    group_count = rows[0].group_count if rows else 0
    return AssertionAggregation(
        query=query,
        normalized_selectors=query.normalized_selectors(),
        occurrence_count=rows[0].occurrence_total if rows else 0,
        distinct_group_count=group_count,
        groups=groups,
        groups_truncated=group_count > len(groups),
        exclusions=exclusions,
        stored_set_exhaustive=store.state_fingerprint() == fingerprint,
    )


def _claim_selection(query: AssertionQuery, *, require_quantity: bool) -> ClaimSelection:
    """The records a query selects, under its retrieval mode's rules."""
    rule = MODE_VISIBILITY[query.mode]
    lifecycles = rule.kept_lifecycles if query.lifecycle is None else frozenset(query.lifecycle)
    selectors = query.normalized_selectors()
    return ClaimSelection(
        namespace=query.namespace,
        scope=query.scope,
        node_types=tuple(sorted(node_type.value for node_type in set(query.node_types))),
        subjects=tuple(selectors["subjects"]),
        predicates=tuple(selectors["predicates"]),
        objects=tuple(selectors["objects"]),
        polarities=tuple(sorted(set(query.polarities))),
        predicate_prefixes=tuple(selectors.get("predicate_prefixes", ())),
        dropped_epistemic_types=tuple(sorted(kind.value for kind in rule.dropped_epistemic_types)),
        drop_low_unverified=rule.drops_unverified_below_threshold,
        unverified_min_confidence=query.unverified_min_confidence,
        lifecycles=tuple(sorted(state.value for state in lifecycles)),
        event_time_from=query.event_time_from,
        event_time_to=query.event_time_to,
        valid_at=query.valid_at,
        knowledge_at=query.knowledge_at,
        require_quantity=require_quantity,
    )


def _claim_sample(sample: Mapping[str, Any]) -> ClaimSample:
    """A ClaimSample from the struct the SQL builds (JSON columns arrive as text)."""
    return ClaimSample(
        object_id=sample["object_id"],
        evidence_refs=tuple(json.loads(sample["evidence_refs"])),
        stated_time=sample["stated_time"],
        assertion=Assertion.model_validate_json(sample["assertion"]),
    )


# ----- grounded quantities ---------------------------------------------------------------------

QUANTITY_BATCH_SIZE = 1_000  # rows per keyset page of the admitted quantities
GroupField = Literal["subject", "predicate", "object", "polarity"]


class QuantityQuery(AssertionQuery):
    """An AssertionQuery over grounded quantities, grouped by normalised unit (and `group_by` fields).

    `predicate_prefixes` match a normalised predicate equal to the prefix or continuing it after
    an underscore ("raised" matches "raised_amount_for", not "fundraised"); they are ORed with
    `predicates`. `units` selects normalised units exactly: no conversion, no currency inference.
    """

    predicate_prefixes: tuple[str, ...] = ()
    units: tuple[str, ...] = ()
    group_by: tuple[GroupField, ...] = ()

    def normalized_selectors(self) -> dict[str, tuple[str, ...]]:
        return {
            **super().normalized_selectors(),
            "predicate_prefixes": tuple(normalize_predicate(value) for value in self.predicate_prefixes),
            "units": tuple(normalize_value(value) for value in self.units),
        }


class QuantitySample(BaseModel):
    """One contribution: the value and unit as written, the text that states them, and their record."""

    model_config = ConfigDict(frozen=True)

    object_id: UUID
    value: str
    unit: str
    source_text: str
    evidence_refs: tuple[str, ...]
    stated_time: AwareDatetime
    assertion: Assertion


class QuantityGroup(BaseModel):
    """The exact total of one normalised unit (and the `group_by` fields, else None). Decimals are text."""

    model_config = ConfigDict(frozen=True)

    unit: str
    subject: str | None = None
    predicate: str | None = None
    object: str | None = None
    polarity: Polarity | None = None
    total: str
    minimum: str
    maximum: str
    contribution_count: int
    distinct_evidence_count: int
    earliest_event_time: AwareDatetime
    latest_event_time: AwareDatetime
    samples: tuple[QuantitySample, ...]
    samples_truncated: bool


class QuantityAggregation(BaseModel):
    """Per-unit totals of the admitted quantities, and the missing and invalid ones counted apart."""

    model_config = ConfigDict(frozen=True)

    query: QuantityQuery
    normalized_selectors: dict[str, tuple[str, ...]]
    contribution_count: int
    distinct_group_count: int
    groups: tuple[QuantityGroup, ...]
    groups_truncated: bool
    missing_quantity_count: int
    invalid_quantity_count: int
    exclusions: dict[str, int]
    stored_set_exhaustive: bool
    source_extraction_coverage: Literal["unknown"] = "unknown"
    semantic_equivalence: Literal["normalized_exact_only", "normalized_exact_and_predicate_prefix"]
    real_world_coverage: Literal["unknown"] = "unknown"


class _Group:
    """Running exact total (scaled integer), extremes, evidence, times and first samples of a group."""

    def __init__(self, key: tuple[str, ...]) -> None:
        self.key = key
        self.units, self.scale, self.count = 0, 0, 0
        self.minimum = self.maximum = Decimal(0)
        self.earliest = self.latest = datetime.max
        self.evidence: set[str] = set()
        self.samples: list[QuantitySample] = []

    def add(self, value: Decimal, sample: QuantitySample, max_samples: int) -> None:
        units, scale = scaled_integer(value)
        if scale > self.scale:
            self.units *= 10 ** (scale - self.scale)
            self.scale = scale
        self.units += units * 10 ** (self.scale - scale)
        first = self.count == 0
        self.count += 1
        self.minimum = value if first else min(self.minimum, value)
        self.maximum = value if first else max(self.maximum, value)
        self.earliest = sample.stated_time if first else min(self.earliest, sample.stated_time)
        self.latest = sample.stated_time if first else max(self.latest, sample.stated_time)
        self.evidence.update(sample.evidence_refs)
        if len(self.samples) < max_samples:
            self.samples.append(sample)


def aggregate_quantities(store: RecordReader | SnapshotSource, query: QuantityQuery) -> QuantityAggregation:
    """Exact per-unit totals of the selected, grounded, re-validated quantities."""
    store = snapshot_of(store)  # one generation for the groups and the exclusions
    fingerprint = store.state_fingerprint()
    selection = _claim_selection(query, require_quantity=True)
    exclusions = store.exclusion_counts(selection)
    selectors = query.normalized_selectors()
    units = set(selectors["units"])
    groups: dict[tuple[str, ...], _Group] = {}
    invalid: dict[str, int] = {}
    for row in _admitted_quantity_rows(store, selection):
        checked = _read_time_checked(row)
        if isinstance(checked, str):
            invalid[checked] = invalid.get(checked, 0) + 1
            continue
        value, sample = checked
        unit = normalize_value(sample.unit)
        if units and unit not in units:
            continue
        key = (unit, *(getattr(row, name) for name in query.group_by))
        groups.setdefault(key, _Group(key)).add(value, sample, query.max_samples)
    ordered = sorted(groups.values(), key=lambda group: (-group.count, group.key))
    return QuantityAggregation(
        query=query,
        normalized_selectors=selectors,
        contribution_count=sum(group.count for group in ordered),
        distinct_group_count=len(ordered),
        groups=tuple(_quantity_group(group, query.group_by) for group in ordered[: query.max_groups]),
        groups_truncated=len(ordered) > query.max_groups,
        missing_quantity_count=exclusions.get("quantity_missing", 0),
        invalid_quantity_count=sum(invalid.values()),
        exclusions=dict(sorted({**exclusions, **invalid}.items())),
        stored_set_exhaustive=store.state_fingerprint() == fingerprint,
        semantic_equivalence="normalized_exact_and_predicate_prefix" if query.predicate_prefixes else "normalized_exact_only",
    )


def _admitted_quantity_rows(store: RecordReader, selection: ClaimSelection) -> Iterator[QuantityRow]:
    after_id = None
    while True:
        rows = store.quantity_page(selection, after_id, QUANTITY_BATCH_SIZE)
        yield from rows
        if len(rows) < QUANTITY_BATCH_SIZE:
            return
        after_id = rows[-1].object_id


def _read_time_checked(row: QuantityRow) -> tuple[Decimal, QuantitySample] | str:
    """The value and sample of a stored quantity that still validates, else why it does not."""
    object_id, evidence_json, stated_time, assertion_json, quantity_json = row[:5]
    try:
        quantity = Quantity.model_validate_json(quantity_json)
    except ValidationError as error:
        location = error.errors()[0]["loc"]
        return f"quantity_invalid:{location[0] if location else 'source_text'}"
    try:
        assertion = Assertion.model_validate_json(assertion_json)
    except ValidationError:
        return "quantity_invalid:assertion"
    evidence = json.loads(evidence_json)
    if not evidence or not all(isinstance(ref, str) and ref.strip() for ref in evidence):
        return "quantity_invalid:evidence"
    sample = QuantitySample(
        object_id=object_id, value=quantity.value, unit=quantity.unit, source_text=quantity.source_text,
        evidence_refs=tuple(evidence), stated_time=stated_time, assertion=assertion,
    )
    return decimal_value(quantity.value), sample


def _quantity_group(group: _Group, group_by: tuple[GroupField, ...]) -> QuantityGroup:
    return QuantityGroup(
        unit=group.key[0],
        **dict(zip(group_by, group.key[1:])),
        total=decimal_text(group.units, group.scale),
        minimum=decimal_text(*scaled_integer(group.minimum)),
        maximum=decimal_text(*scaled_integer(group.maximum)),
        contribution_count=group.count,
        distinct_evidence_count=len(group.evidence),
        earliest_event_time=group.earliest,
        latest_event_time=group.latest,
        samples=tuple(group.samples),
        samples_truncated=group.count > len(group.samples),
    )

