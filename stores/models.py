"""The stored memory object and its enumerations (RFC-0001 shapes, as this project keeps them)."""

from __future__ import annotations

import math
import unicodedata
from datetime import datetime, timezone
from enum import StrEnum
from typing import Any
from uuid import UUID, uuid4

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, field_validator, model_validator

from rms_retrieval.stores.analysis.claims import Assertion, QuantityOfAssertion


class NodeType(StrEnum):
    TURN = "TURN"
    FACT = "FACT"
    ENTITY = "ENTITY"
    EVENT = "EVENT"
    PREFERENCE = "PREFERENCE"
    DECISION = "DECISION"
    TASK = "TASK"
    INSTRUCTION = "INSTRUCTION"
    INTENT = "INTENT"
    SUMMARY = "SUMMARY"


class EpistemicType(StrEnum):
    OBSERVED = "OBSERVED"
    ASSERTED = "ASSERTED"
    INFERRED = "INFERRED"
    UNVERIFIED = "UNVERIFIED"
    HYPOTHETICAL = "HYPOTHETICAL"
    DEPRECATED = "DEPRECATED"


class LifecycleState(StrEnum):
    ACTIVE = "ACTIVE"
    TENTATIVE = "TENTATIVE"
    ARCHIVED = "ARCHIVED"
    SUPERSEDED = "SUPERSEDED"
    DELETED = "DELETED"


# Unicode control (Cc, e.g. NUL) and format (Cf, e.g. zero-width space) characters print as nothing.
_INVISIBLE_CATEGORIES = frozenset({"Cc", "Cf"})


def is_blank(text: str) -> bool:
    """True when `text` is nothing but whitespace, control and format characters: no memory."""
    return all(ch.isspace() or unicodedata.category(ch) in _INVISIBLE_CATEGORIES for ch in text)


def _utc_now() -> datetime:
    return datetime.now(timezone.utc)


# Metadata is stored as JSON: bounded so that one object cannot exhaust the recursion limit or the
# memory of whoever reads it back.
MAX_METADATA_DEPTH = 32
MAX_METADATA_CHARACTERS = 1_000_000


def _check_encodable(text: str, what: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise ValueError(f"{what} holds {text[error.start:error.end]!r} at position {error.start}, a lone surrogate "
                         "that UTF-8 cannot store; remove it, or decode the source text with errors='replace'") from None


def _check_metadata(value: dict[str, Any]) -> None:
    """Depth at most MAX_METADATA_DEPTH, at most MAX_METADATA_CHARACTERS of text, JSON values only,
    every string encodable; walked without recursion, so any input gets this one-line answer."""
    pending: list[tuple[Any, int, str]] = [(value, 1, "metadata")]
    characters = 0
    while pending:
        item, depth, where = pending.pop()
        if depth > MAX_METADATA_DEPTH:
            raise ValueError(f"metadata is nested more than {MAX_METADATA_DEPTH} levels deep (at {where}); flatten it")
        if isinstance(item, dict):
            for key, child in item.items():
                if not isinstance(key, str):
                    raise ValueError(f"{where} has the key {key!r}; metadata keys are strings")
                _check_encodable(key, f"a key of {where}")
                characters += len(key)
                pending.append((child, depth + 1, f"{where}.{key}"))
        elif isinstance(item, list | tuple):
            pending.extend((child, depth + 1, f"{where}[{index}]") for index, child in enumerate(item))
        elif isinstance(item, str):
            _check_encodable(item, where)
            characters += len(item)
        elif isinstance(item, float) and not math.isfinite(item):
            raise ValueError(f"{where} is {item!r}; JSON has no such number")
        elif item is not None and not isinstance(item, bool | int | float):
            raise ValueError(f"{where} is a {type(item).__name__}; metadata holds JSON values only "
                             "(objects, lists, strings, numbers, true, false, null)")
        if characters > MAX_METADATA_CHARACTERS:
            raise ValueError(f"metadata holds more than {MAX_METADATA_CHARACTERS:,} characters of text; store "
                             "large documents as content, or keep a reference to them in metadata")


class MemoryObject(BaseModel):
    """One stored memory: a dialogue turn, a fact, an entity, a task, ...

    Validated and frozen. Times must carry a timezone; `namespace` is the isolation boundary
    every retrieval path filters on.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", validate_default=True)

    id: UUID = Field(default_factory=uuid4)
    namespace: str = Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:\-]*$")
    owner: str = Field(default="default", min_length=1)
    scope: str = Field(default="default", min_length=1)
    session_id: str | None = None
    session_seq: int | None = Field(default=None, ge=0, description="Position within its session.")
    node_type: NodeType = NodeType.TURN
    content: str = Field(min_length=1)
    entity_canonical_name: str | None = None
    epistemic_type: EpistemicType = EpistemicType.OBSERVED
    confidence: float = Field(default=1.0, ge=0.0, le=1.0)
    salience: float = Field(default=0.5, ge=0.0, le=1.0)
    lifecycle_state: LifecycleState = LifecycleState.ACTIVE
    created_at: AwareDatetime = Field(default_factory=_utc_now)
    updated_at: AwareDatetime = Field(default_factory=_utc_now)
    event_time: AwareDatetime | None = None
    valid_from: AwareDatetime | None = None
    valid_to: AwareDatetime | None = None
    evidence_refs: tuple[str, ...] = ()
    source_ref: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    assertion: Assertion | None = None
    quantity: QuantityOfAssertion = None

    @field_validator("content")
    @classmethod
    def _content_not_blank(cls, value: str) -> str:
        if is_blank(value):
            raise ValueError("content is blank (nothing but whitespace or control characters); "
                             "a memory needs text to retrieve")
        return value

    @field_validator("created_at", "updated_at", "event_time", "valid_from", "valid_to")
    @classmethod
    def _representable_in_utc(cls, value: datetime | None) -> datetime | None:
        """Times are stored in UTC: one whose UTC form falls outside years 1 to 9999 cannot be."""
        if value is not None:
            try:
                value.astimezone(timezone.utc)
            except (OverflowError, ValueError):
                raise ValueError(f"{value.isoformat()} lies outside years 1 to 9999 once converted to UTC; "
                                 "give a time between 0001-01-02 and 9999-12-30") from None
        return value

    @field_validator("evidence_refs")
    @classmethod
    def _storable_refs(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for ref in value:  # pydantic checks plain str fields itself, not the items of a tuple
            _check_encodable(ref, "an evidence ref")
        return value

    @field_validator("metadata")
    @classmethod
    def _storable_metadata(cls, value: dict[str, Any]) -> dict[str, Any]:
        _check_metadata(value)
        return value

    @field_validator("metadata")
    @classmethod
    def _aliases_are_names(cls, value: dict[str, Any]) -> dict[str, Any]:
        """`aliases` is a list of names; a bare string is one name, never split into letters."""
        aliases = value.get("aliases")
        if isinstance(aliases, str):
            return {**value, "aliases": [aliases]}
        if aliases is not None and not (isinstance(aliases, list | tuple) and all(isinstance(a, str) for a in aliases)):
            raise ValueError(f"metadata.aliases must be a list of names, e.g. [\"Bob\"], got {aliases!r}")
        return value

    @field_validator("confidence", "salience")
    @classmethod
    def _finite(cls, value: float) -> float:
        if not math.isfinite(value):
            raise ValueError("must be a finite number in [0, 1]")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> MemoryObject:
        if self.valid_from and self.valid_to and self.valid_to < self.valid_from:
            raise ValueError("valid_to is before valid_from")
        if self.node_type is NodeType.ENTITY and not self.entity_canonical_name:
            raise ValueError("an ENTITY object needs entity_canonical_name")
        return self

    @property
    def is_pinned(self) -> bool:
        """Pinned (RFC 4.4): salience 1.0, or an ACTIVE TASK or INTENT. The one place this rule lives."""
        return self.salience == 1.0 or (
            self.node_type in (NodeType.TASK, NodeType.INTENT) and self.lifecycle_state is LifecycleState.ACTIVE
        )

    @property
    def is_bare_entity(self) -> bool:
        """An ENTITY whose text is only its own name (a speaker, a name spotted at ingestion): a graph
        node that says nothing else. Retrieval leaves it out of bundles outside AUDIT mode, and the
        store keeps no vector of it. The one place this rule lives."""
        if self.node_type is not NodeType.ENTITY:
            return False
        return self.content.strip().casefold() == (self.entity_canonical_name or "").strip().casefold()

    @property
    def stated_time(self) -> datetime:
        """When the memory was stated: its event time, else when it was stored (RFC 7.2)."""
        return self.event_time or self.created_at
