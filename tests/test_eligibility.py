from datetime import timedelta

import pytest

from rms_retrieval.nodes.helpers.eligibility import (exclusion_reason, exclusion_reasons, filters_by_time,
                                                     visible_in_every_mode)
from rms_retrieval.nodes.models import RetrievalMode
from rms_retrieval.nodes.settings import RetrievalSettings
from rms_retrieval.stores.models import EpistemicType, LifecycleState
from tests.factories import BASE_TIME, make_object, make_request


def test_out_of_scope_namespace_is_refused_before_any_other_rule():
    obj = make_object("x", namespace="elsewhere", epistemic_type="DEPRECATED")
    assert exclusion_reason(obj, make_request(), RetrievalSettings()) == "namespace_out_of_scope"


def test_audit_mode_refuses_only_deleted_memories():
    settings = RetrievalSettings()
    audit = make_request(retrieval_mode=RetrievalMode.AUDIT)
    assert exclusion_reason(make_object("d", epistemic_type="DEPRECATED"), audit, settings) is None
    assert exclusion_reason(make_object("x", lifecycle_state="DELETED"), audit, settings) == "lifecycle:DELETED"


def test_a_bare_entity_serves_the_graph_but_never_a_bundle():
    settings = RetrievalSettings()
    bare = make_object("tomas", "Tomas", node_type="ENTITY", entity_canonical_name="Tomas")
    profile = make_object("p", "Tomas, a data engineer in Leeds", node_type="ENTITY", entity_canonical_name="Tomas")
    assert exclusion_reason(bare, make_request(), settings) == "bare_entity"
    assert exclusion_reason(profile, make_request(), settings) is None
    assert exclusion_reason(bare, make_request(retrieval_mode=RetrievalMode.AUDIT), settings) is None


def _objects() -> list:
    """Every epistemic type and lifecycle state, bare and described entities, in and out of scope."""
    objects = [make_object(f"{kind}-{state}", epistemic_type=kind, lifecycle_state=state, confidence=confidence)
               for kind in EpistemicType for state in LifecycleState for confidence in (0.2, 0.9)]
    objects += [make_object("bare", "Tomas", node_type="ENTITY", entity_canonical_name="Tomas"),
                make_object("described", "Tomas, a data engineer", node_type="ENTITY", entity_canonical_name="Tomas"),
                make_object("away", namespace="elsewhere"),
                make_object("late", days=40, valid_from=BASE_TIME + timedelta(days=40))]
    return objects


def test_visible_in_every_mode_is_what_no_mode_removes_whatever_the_thresholds():
    settings = RetrievalSettings(filtering={"unverified_threshold": 0.0, "namespace_thresholds": {"ns": 1.0}})
    for obj in _objects():
        passes = [exclusion_reason(obj, make_request(retrieval_mode=mode), thresholds) is None
                  for mode in RetrievalMode for thresholds in (RetrievalSettings(), settings)]
        if obj.namespace == "ns":
            assert visible_in_every_mode(obj) == (all(passes) and obj.epistemic_type is not EpistemicType.UNVERIFIED)
    assert not visible_in_every_mode(make_object("u", epistemic_type="UNVERIFIED", confidence=1.0))


@pytest.mark.parametrize("mode", list(RetrievalMode))
@pytest.mark.parametrize("filters", [{}, {"knowledge_at": BASE_TIME + timedelta(days=1)},
                                     {"time_to": BASE_TIME + timedelta(days=10)}, {"time_from": BASE_TIME},
                                     {"event_time_from": BASE_TIME + timedelta(days=1)},
                                     {"event_time_to": BASE_TIME - timedelta(days=1)}])
def test_reasons_for_many_objects_are_each_ones_reason(mode, filters):
    objects, settings = _objects(), RetrievalSettings()
    request = make_request(retrieval_mode=mode, **filters)
    expected = [exclusion_reason(obj, request, settings) for obj in objects]
    asked = []

    def visible(given):
        asked.append(len(given))
        return [visible_in_every_mode(obj) for obj in given]

    assert exclusion_reasons(objects, visible, request, settings) == expected
    assert filters_by_time(request) == bool(filters)
    assert asked == ([] if filters else [len(objects)])  # read only where it can decide


def test_a_visible_object_is_still_refused_outside_the_request_namespaces():
    away = make_object("away", namespace="elsewhere")
    assert exclusion_reasons([away], lambda given: [True] * len(given), make_request(),
                             RetrievalSettings()) == ["namespace_out_of_scope"]
