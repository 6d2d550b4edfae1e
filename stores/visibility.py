"""The retrieval modes and what each lets a caller see (RFC 6, RFC-0003), as data.

One enum and one table serve the retrieval filter (`nodes/helpers/eligibility.py`, in Python) and exact
aggregation (`stores/exact/aggregation.py`, as SQL parameters), so the two can never disagree. They
live in stores because nodes import stores, never the other way round.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from rms_retrieval.stores.models import EpistemicType, LifecycleState


class RetrievalMode(StrEnum):
    """DEFAULT; EXPLICIT: the caller asked for uncertain memories by name; AUDIT: all but deleted."""

    DEFAULT = "DEFAULT"
    EXPLICIT = "EXPLICIT"
    AUDIT = "AUDIT"


# Below this confidence an UNVERIFIED memory is hidden in DEFAULT mode, unless a namespace sets its own.
DEFAULT_UNVERIFIED_THRESHOLD = 0.5


@dataclass(frozen=True)
class Visibility:
    dropped_epistemic_types: frozenset[EpistemicType]
    drops_unverified_below_threshold: bool
    kept_lifecycles: frozenset[LifecycleState]


MODE_VISIBILITY: dict[RetrievalMode, Visibility] = {
    RetrievalMode.DEFAULT: Visibility(
        frozenset({EpistemicType.DEPRECATED, EpistemicType.HYPOTHETICAL}), True, frozenset({LifecycleState.ACTIVE})
    ),
    RetrievalMode.EXPLICIT: Visibility(
        frozenset({EpistemicType.DEPRECATED}), False, frozenset({LifecycleState.ACTIVE, LifecycleState.TENTATIVE})
    ),
    RetrievalMode.AUDIT: Visibility(frozenset(), False, frozenset(LifecycleState) - {LifecycleState.DELETED}),
}
