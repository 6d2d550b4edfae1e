from datetime import timedelta

import pytest

from rms_retrieval.nodes.filtering import filtered_candidates, text_path_exclusions
from rms_retrieval.nodes.models import RetrievalMode
from rms_retrieval.nodes.pools import CandidatePool, TextPathCandidates, TextPathExclusions
from rms_retrieval.nodes.settings import FilterSettings, RetrievalSettings
from rms_retrieval.stores.models import NodeType
from tests.factories import BASE_TIME, make_candidate, make_object, make_request

OBJECTS = {
    "ok": {},
    "deprecated": {"epistemic_type": "DEPRECATED"},
    "hypothetical": {"epistemic_type": "HYPOTHETICAL"},
    "unverified_low": {"epistemic_type": "UNVERIFIED", "confidence": 0.3},
    "unverified_high": {"epistemic_type": "UNVERIFIED", "confidence": 0.8},
    "tentative": {"lifecycle_state": "TENTATIVE"},
    "archived": {"lifecycle_state": "ARCHIVED"},
    "deleted": {"lifecycle_state": "DELETED"},
}


def _run(mode=RetrievalMode.DEFAULT, settings=None, **request_fields):
    candidates = tuple(make_candidate(make_object(name, **fields), VECTOR=(1, 0.5)) for name, fields in OBJECTS.items())
    names = {c.object_id: name for c, name in zip(candidates, OBJECTS)}
    result = filtered_candidates(CandidatePool(candidates), make_request(retrieval_mode=mode, **request_fields),
                                 settings or RetrievalSettings())
    return {names[c.object_id] for c in result.candidates}, {names[k]: v for k, v in result.excluded.items()}


def test_default_mode_removes_what_rfc_6_lists_with_reasons():
    kept, excluded = _run()
    assert kept == {"ok", "unverified_high"}
    assert excluded == {
        "deprecated": "DEPRECATED", "hypothetical": "HYPOTHETICAL",
        "unverified_low": "UNVERIFIED_BELOW_THRESHOLD", "tentative": "lifecycle:TENTATIVE",
        "archived": "lifecycle:ARCHIVED", "deleted": "lifecycle:DELETED",
    }


def test_namespace_threshold_overrides_the_default():
    settings = RetrievalSettings(filtering=FilterSettings(namespace_thresholds={"ns": 0.9}))
    kept, excluded = _run(settings=settings)
    assert excluded["unverified_high"] == "UNVERIFIED_BELOW_THRESHOLD"


def test_explicit_mode_keeps_uncertain_but_not_retired_memories():
    kept, _ = _run(RetrievalMode.EXPLICIT)
    assert kept == {"ok", "hypothetical", "unverified_low", "unverified_high", "tentative"}


def test_audit_mode_keeps_everything_but_deleted():
    kept, excluded = _run(RetrievalMode.AUDIT)
    assert excluded == {"deleted": "lifecycle:DELETED"}


@pytest.mark.parametrize("field, offset, reason", [
    ("event_time_from", 1, "event_before_event_time_from"),
    ("event_time_to", -1, "event_after_event_time_to"),
])
def test_explicit_event_time_filters(field, offset, reason):
    _, excluded = _run(**{field: BASE_TIME + timedelta(days=offset)})
    assert excluded["ok"] == reason


def test_validity_window_filters_but_exempts_entities_and_preferences():
    future = BASE_TIME + timedelta(days=10)
    objs = [make_object("fact", valid_from=future), make_object("pref", node_type=NodeType.PREFERENCE, valid_from=future)]
    pool = CandidatePool(tuple(make_candidate(o, VECTOR=(1, 0.5)) for o in objs))
    result = filtered_candidates(pool, make_request(time_to=BASE_TIME), RetrievalSettings())
    assert [c.object.node_type for c in result.candidates] == [NodeType.PREFERENCE]
    assert list(result.excluded.values()) == ["valid_after_time_to"]


def test_time_from_removes_what_stopped_being_valid_before_it_but_exempts_entities_and_preferences():
    past = BASE_TIME - timedelta(days=10)
    objs = [make_object("fact", valid_to=past), make_object("still", valid_to=BASE_TIME + timedelta(days=1)),
            make_object("entity", "Tomas, a runner", node_type=NodeType.ENTITY, entity_canonical_name="Tomas",
                        valid_to=past),
            make_object("pref", node_type=NodeType.PREFERENCE, valid_to=past)]
    pool = CandidatePool(tuple(make_candidate(o, VECTOR=(1, 0.5)) for o in objs))
    result = filtered_candidates(pool, make_request(time_from=BASE_TIME), RetrievalSettings())
    assert {c.object.content for c in result.candidates} == {"memory still", "Tomas, a runner", "memory pref"}
    assert result.excluded == {objs[0].id: "valid_before_time_from"}


def test_event_time_filters_have_no_entity_or_preference_exemption():
    objs = [make_object("entity", "Tomas, a runner", node_type=NodeType.ENTITY, entity_canonical_name="Tomas"),
            make_object("pref", node_type=NodeType.PREFERENCE)]
    pool = CandidatePool(tuple(make_candidate(o, VECTOR=(1, 0.5)) for o in objs))
    result = filtered_candidates(pool, make_request(event_time_from=BASE_TIME + timedelta(days=1)), RetrievalSettings())
    assert result.candidates == ()
    assert set(result.excluded.values()) == {"event_before_event_time_from"}


def test_the_text_paths_decisions_are_read_for_the_very_objects_they_were_made_for():
    ok, deprecated = make_object("ok"), make_object("old", epistemic_type="DEPRECATED")
    request, settings = make_request(), RetrievalSettings()
    found = TextPathCandidates(objects={o.id: o for o in (ok, deprecated)}, hits={})
    decided = text_path_exclusions(found, request, settings)
    assert {obj.content: reason for obj, reason in decided.reasons.values()} == {"memory ok": None, "memory old": "DEPRECATED"}
    pool = CandidatePool(tuple(make_candidate(o, LEXICAL=(1, 0.5)) for o in (ok, deprecated)))
    assert filtered_candidates(pool, request, settings, decided) == filtered_candidates(pool, request, settings)
    # A recorded decision is what the filter applies to that object ...
    said = TextPathExclusions({ok.id.int: (ok, "lifecycle:ARCHIVED"), deprecated.id.int: (deprecated, None)})
    assert filtered_candidates(pool, request, settings, said).excluded == {ok.id: "lifecycle:ARCHIVED"}
    # ... and only to that object: another object with the same id (a newer version) is decided again.
    newer = CandidatePool(tuple(make_candidate(o.model_copy(), LEXICAL=(1, 0.5)) for o in (ok, deprecated)))
    assert filtered_candidates(newer, request, settings, said).excluded == {deprecated.id: "DEPRECATED"}
