"""The mode table's meaning, and the retrieval filter and exact aggregation agreeing on it."""

from __future__ import annotations

from collections import Counter
from itertools import product

import pytest

from rms_retrieval.nodes.helpers.eligibility import exclusion_reason
from rms_retrieval.nodes.settings import RetrievalSettings
from rms_retrieval.stores.exact.aggregation import AssertionQuery, aggregate_assertions
from rms_retrieval.stores.memory_store import MemoryStore
from rms_retrieval.stores.models import EpistemicType, LifecycleState
from rms_retrieval.stores.visibility import MODE_VISIBILITY, RetrievalMode
from tests.factories import FakeEncoder, claim, make_request


def _visible(mode: RetrievalMode) -> set[tuple[EpistemicType, LifecycleState]]:
    rule = MODE_VISIBILITY[mode]
    return {(kind, state) for kind, state in product(EpistemicType, LifecycleState)
            if kind not in rule.dropped_epistemic_types and state in rule.kept_lifecycles}


def test_each_mode_sees_at_least_what_the_stricter_one_sees_and_none_sees_deleted():
    assert set(MODE_VISIBILITY) == set(RetrievalMode)
    default, explicit, audit = (_visible(mode) for mode in RetrievalMode)
    assert default < explicit < audit
    assert (EpistemicType.OBSERVED, LifecycleState.ACTIVE) in default
    assert all(state is not LifecycleState.DELETED for _, state in audit)


# Every epistemic type and lifecycle; UNVERIFIED also just below, at and just above the threshold.
MEMORIES = [
    claim(f"{kind}-{state}-{confidence}", "I", "bought", "books", epistemic_type=kind, lifecycle_state=state,
          confidence=confidence)
    for kind, state, confidence in [
        *product(EpistemicType, LifecycleState, [0.8]),
        *product([EpistemicType.UNVERIFIED], LifecycleState, [0.3, 0.49, 0.5, 0.51]),
    ]
]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    with MemoryStore.open(tmp_path_factory.mktemp("visibility") / "store", FakeEncoder()) as opened:
        opened.add(MEMORIES)
        yield opened


@pytest.mark.parametrize("mode", list(RetrievalMode))
def test_retrieval_and_aggregation_keep_and_exclude_the_same_memories(store, mode):
    reasons = {memory.id: exclusion_reason(memory, make_request(retrieval_mode=mode), RetrievalSettings())
               for memory in MEMORIES}
    result = aggregate_assertions(store, AssertionQuery(namespace="ns", mode=mode, max_samples=len(MEMORIES)))
    counted = {sample.object_id for group in result.groups for sample in group.samples}
    assert counted == {object_id for object_id, reason in reasons.items() if reason is None}
    assert result.exclusions == Counter(reason for reason in reasons.values() if reason is not None)
