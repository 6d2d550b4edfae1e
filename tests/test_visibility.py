from rms_retrieval.stores.models import EpistemicType, LifecycleState
from rms_retrieval.stores.visibility import MODE_VISIBILITY


def test_every_mode_is_defined_and_only_audit_sees_retired_memories():
    assert set(MODE_VISIBILITY) == {"DEFAULT", "EXPLICIT", "AUDIT"}
    assert EpistemicType.DEPRECATED in MODE_VISIBILITY["EXPLICIT"].dropped_epistemic_types
    assert MODE_VISIBILITY["AUDIT"].kept_lifecycles == frozenset(LifecycleState) - {LifecycleState.DELETED}
    assert MODE_VISIBILITY["DEFAULT"].kept_lifecycles == {LifecycleState.ACTIVE}
