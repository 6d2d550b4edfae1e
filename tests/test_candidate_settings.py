"""Stage 2 settings: their bounds, and `boost_fields` from the settings to a real store's BM25."""

from __future__ import annotations

from datetime import timedelta
from uuid import UUID

import pytest

from rms_retrieval.dataflows.retrieval import retrieve
from rms_retrieval.nodes.candidate_settings import BoostFields, CandidateSettings
from rms_retrieval.nodes.pools import PathType
from rms_retrieval.nodes.settings import RetrievalSettings
from rms_retrieval.stores.memory_store import MemoryStore
from rms_retrieval.stores.models import MemoryObject, NodeType
from tests.factories import BASE_TIME


@pytest.mark.parametrize("build, message", [
    (lambda: CandidateSettings(graph_max_hops=4), "graph_max_hops"),
    (lambda: CandidateSettings(enabled_paths={PathType.SESSION_CONTEXT}), "not primary paths"),
    (lambda: BoostFields(value=float("nan")), "value"),
    (lambda: BoostFields(entity_canonical_name=float("inf")), "entity_canonical_name"),
    (lambda: BoostFields(value=-1.0), "value"),
    (lambda: BoostFields(value=0.0, entity_canonical_name=0.0), "leaves no field to search"),
    (lambda: BoostFields.model_validate([]), "leaves no field to search"),
    (lambda: BoostFields.model_validate(["value", "title"]), r"names \['title'\]; the lexical fields are"),
    (lambda: BoostFields(body=1.0), "body"),
])
def test_bad_candidate_settings_are_rejected_naming_the_field(build, message):
    with pytest.raises(ValueError, match=message):
        build()


def test_boost_fields_as_a_list_or_a_mapping():
    assert BoostFields.model_validate(["value", "entity_canonical_name"]) == BoostFields()
    assert BoostFields.model_validate(["value"]) == BoostFields(value=1.0, entity_canonical_name=0.0)
    assert BoostFields.model_validate({"entity_canonical_name": 3}) == BoostFields(value=1.0, entity_canonical_name=3.0)
    settings = RetrievalSettings(candidates={"boost_fields": ["entity_canonical_name"]})
    assert settings.candidates.boost_fields == BoostFields(value=0.0, entity_canonical_name=1.0)


def test_boost_fields_move_the_fingerprint_only_when_they_differ_from_the_default():
    default = RetrievalSettings().fingerprint()
    assert RetrievalSettings(candidates={"boost_fields": ["value", "entity_canonical_name"]}).fingerprint() == default
    boosted = {RetrievalSettings(candidates={"boost_fields": fields}).fingerprint()
               for fields in ({"entity_canonical_name": 2.0}, {"value": 2.0}, ["value"])}
    assert len(boosted) == 3 and default not in boosted


def _memory(number: int, content: str, **extra) -> MemoryObject:
    return MemoryObject(id=UUID(int=number), namespace="ns", content=content,
                        created_at=BASE_TIME + timedelta(minutes=number), **extra)


def test_a_heavier_entity_name_puts_the_named_entity_first_on_the_lexical_path(tmp_path, encoder):
    """The weights reach the store's BM25 from the settings, on the segment as written and as read
    back from disk (where the names' share of each posting is rebuilt from the stored names)."""
    turn = _memory(1, "Caroline told Caroline's sister about Caroline's support group")
    entity = _memory(2, "a counsellor in town", node_type=NodeType.ENTITY, entity_canonical_name="Caroline")
    other = _memory(3, "the weather was mild")
    boosted = RetrievalSettings(candidates={"boost_fields": {"entity_canonical_name": 6.0}})
    without_names = RetrievalSettings(candidates={"boost_fields": ["value"]})

    def lexical_order(store, settings):
        result = retrieve(store, "Caroline", namespaces=["ns"], reference_time=BASE_TIME + timedelta(days=1),
                          settings=settings, extra_nodes=["lexical_candidates"], log=False)
        return [hit.object_id for hit in result.nodes["lexical_candidates"].hits]

    with MemoryStore.open(tmp_path / "store", encoder) as store:
        store.add([turn, entity, other])
        written = [lexical_order(store, settings) for settings in (RetrievalSettings(), boosted, without_names)]
    with MemoryStore.open(tmp_path / "store", read_only=True) as store:
        read = [lexical_order(store, settings) for settings in (RetrievalSettings(), boosted, without_names)]
    assert written == read == [[turn.id, entity.id], [entity.id, turn.id], [turn.id]]
