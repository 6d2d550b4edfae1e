"""What each retrieval mode lets a caller see (RFC 6, RFC-0003), as data.

One table serves the retrieval filter (`nodes/eligibility.py`, in Python) and exact aggregation
(`stores/aggregation.py`, as SQL parameters), so the two can never disagree. Keyed by the mode's
name: DEFAULT, EXPLICIT (the caller asked for uncertain memories by name) and AUDIT.
"""

from __future__ import annotations

from dataclasses import dataclass

from rms_retrieval.stores.models import EpistemicType, LifecycleState


@dataclass(frozen=True)
class Visibility:
    dropped_epistemic_types: frozenset[EpistemicType]
    drops_unverified_below_threshold: bool
    kept_lifecycles: frozenset[LifecycleState]


MODE_VISIBILITY: dict[str, Visibility] = {
    "DEFAULT": Visibility(
        frozenset({EpistemicType.DEPRECATED, EpistemicType.HYPOTHETICAL}), True, frozenset({LifecycleState.ACTIVE})
    ),
    "EXPLICIT": Visibility(
        frozenset({EpistemicType.DEPRECATED}), False, frozenset({LifecycleState.ACTIVE, LifecycleState.TENTATIVE})
    ),
    "AUDIT": Visibility(frozenset(), False, frozenset(LifecycleState) - {LifecycleState.DELETED}),
}
