from rms_retrieval.nodes.helpers.eligibility import exclusion_reason
from rms_retrieval.nodes.models import RetrievalMode
from rms_retrieval.nodes.settings import RetrievalSettings
from tests.factories import make_object, make_request


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
