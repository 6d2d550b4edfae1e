"""stores/models.py (the memory object), nodes/models.py (request, analysis) and nodes/pools.py (candidates)."""

import json
from datetime import datetime, timezone
from uuid import UUID

import pytest
from pydantic import ValidationError

from rms_retrieval.nodes.models import QueryAnalysis, RetrievalRequest, TemporalSignal, TemporalType
from rms_retrieval.nodes.pools import PathType
from rms_retrieval.stores.models import MemoryObject
from tests.factories import make_candidate, make_object

UTC = timezone.utc


@pytest.mark.parametrize("fields, message", [
    ({"content": "   "}, "content is blank"),
    ({"content": "\u0000"}, "content is blank"),
    ({"content": " \u200b\t\x07 "}, "content is blank"),
    ({"node_type": "ENTITY", "entity_canonical_name": "Bob", "metadata": {"aliases": [1]}}, "aliases must be a list"),
    ({"confidence": 1.5}, "less than or equal to 1"),
    ({"salience": float("nan")}, "salience"),
    ({"created_at": datetime(2025, 1, 1)}, "timezone"),
    ({"namespace": "has space"}, "namespace"),
    ({"node_type": "ENTITY"}, "entity_canonical_name"),
    ({"valid_from": datetime(2025, 2, 1, tzinfo=UTC), "valid_to": datetime(2025, 1, 1, tzinfo=UTC)}, "valid_to"),
    ({"colour": "red"}, "Extra inputs"),
])
def test_memory_object_rejects_bad_fields_by_name(fields, message):
    with pytest.raises(ValidationError, match=message):
        MemoryObject(**{"namespace": "ns", "content": "text", **fields})


def test_memory_object_is_frozen_and_dates_itself_by_event_time_else_creation():
    obj = make_object("a", event_time=None)
    with pytest.raises(ValidationError):
        obj.content = "changed"
    assert obj.stated_time == obj.created_at
    assert make_object("b").stated_time == make_object("b").event_time


def test_request_validation():
    ref = datetime(2025, 1, 1, tzinfo=UTC)
    request = RetrievalRequest(query="q", namespaces=("b", "a", "b"), reference_time=ref)
    assert request.namespaces == ("a", "b")
    for bad, message in (({"query": "  "}, "empty"), ({"namespaces": ()}, "at least 1"),
                         ({"token_budget": 0}, "greater than or equal to 1"),
                         ({"time_from": ref, "time_to": datetime(2024, 1, 1, tzinfo=UTC)}, "before time_from")):
        with pytest.raises(ValidationError, match=message):
            RetrievalRequest(**{"query": "q", "namespaces": ("a",), "reference_time": ref, **bad})


def test_path_count_counts_primary_paths_only():
    candidate = make_candidate(make_object("a"), VECTOR=(1, 0.5), SESSION_CONTEXT=(1, 0.3), KEYWORD_SCAN=(2, 0.1))
    assert candidate.paths == (PathType.VECTOR, PathType.SESSION_CONTEXT, PathType.KEYWORD_SCAN)
    assert candidate.path_count == 1


def test_temporal_window_spans_every_resolved_signal():
    day = lambda d: datetime(2025, 1, d, tzinfo=UTC)  # noqa: E731
    analysis = QueryAnalysis(raw_query="q", namespace_scope=("a",), reference_time=day(30), temporal_signals=(
        TemporalSignal(type=TemporalType.ABSOLUTE, text="x", start=day(5), end=day(6)),
        TemporalSignal(type=TemporalType.RECURRING, text="every Tuesday"),
        TemporalSignal(type=TemporalType.ABSOLUTE, text="y", start=day(2), end=day(3)),
    ))
    assert analysis.temporal_window == (day(2), day(6))


def test_a_bare_string_alias_is_one_name_never_its_letters():
    bob = MemoryObject(namespace="ns", node_type="ENTITY", entity_canonical_name="Robert", content="Robert",
                       metadata={"aliases": "Bob"})
    assert bob.metadata["aliases"] == ["Bob"]


def test_path_masks_list_paths_in_enum_order_with_session_context_last():
    from rms_retrieval.nodes.pools import mask_paths, path_mask

    mask = path_mask([PathType.KEYWORD_SCAN, PathType.EPISODE_CONTEXT, PathType.SESSION_CONTEXT, PathType.VECTOR])
    assert mask_paths(mask) == (PathType.VECTOR, PathType.KEYWORD_SCAN, PathType.SESSION_CONTEXT, PathType.EPISODE_CONTEXT)
    assert mask_paths(0) == ()


@pytest.mark.parametrize("field", ["event_time", "created_at", "valid_to"])
@pytest.mark.parametrize("moment", ["0001-01-01T00:00:00+05:00", "9999-12-31T23:00:00-05:00"])
def test_a_time_outside_years_1_to_9999_in_utc_is_refused_in_one_line(field, moment):
    """Issue 21 #6: `rms ingest` crashed with an OverflowError on such a time."""
    with pytest.raises(ValidationError, match="outside years 1 to 9999 once converted to UTC") as raised:
        MemoryObject(namespace="a", content="x", **{field: datetime.fromisoformat(moment)})
    assert field in str(raised.value)


def test_metadata_nested_too_deep_too_large_or_not_json_is_refused_in_one_line():
    """Issue 21 #11: RecursionError and UnicodeEncodeError came raw out of add()."""
    deep: dict = {}
    for _ in range(1000):
        deep = {"x": deep}
    with pytest.raises(ValidationError, match="nested more than 32 levels deep"):
        MemoryObject(namespace="a", content="x", metadata=deep)
    with pytest.raises(ValidationError, match="more than 1,000,000 characters"):
        MemoryObject(namespace="a", content="x", metadata={"blob": "y" * 1_000_001})
    with pytest.raises(ValidationError, match="JSON has no such number"):
        MemoryObject(namespace="a", content="x", metadata={"n": float("nan")})
    with pytest.raises(ValidationError, match="JSON values only"):
        MemoryObject(namespace="a", content="x", metadata={"when": datetime(2024, 1, 1)})
    ok = {"speaker": "Ann", "tags": ["a", {"b": [1, 2.5, True, None]}]}
    assert MemoryObject(namespace="a", content="x", metadata=ok).metadata == ok


@pytest.mark.parametrize(("fields", "message"), [
    ({"metadata": {"k": "\udfff"}}, "lone surrogate that UTF-8 cannot store"),
    ({"metadata": {"\ud800": 1}}, "lone surrogate that UTF-8 cannot store"),
    ({"content": "bad \ud800 text"}, "unable to parse raw data as a unicode string"),  # pydantic's own check
    ({"evidence_refs": ("D1:\ud800",)}, "lone surrogate that UTF-8 cannot store"),
])
def test_a_lone_surrogate_is_refused_where_it_is(fields, message):
    with pytest.raises(ValidationError, match=message):
        MemoryObject(namespace="a", **{"content": "x", **fields})


def test_bundle_metadata_is_typed_and_its_json_keeps_the_published_form():
    from rms_retrieval.nodes.bundle import AggregationCoverage, ExclusionScore, MemoryBundle, RetrievalMetadata
    from tests.factories import make_metadata

    window = (datetime(2023, 5, 1, tzinfo=timezone.utc), datetime(2023, 5, 2, tzinfo=timezone.utc))
    gone = UUID(int=7)
    cut = UUID(int=8)
    meta = make_metadata(temporal_window=window, entities=("Caroline",), excluded={gone: "DEPRECATED"},
                         exclusion_scores={gone: ExclusionScore(score=None, semantic_relevance=0.25)},
                         budget_cuts=(cut,),
                         backend_failures={PathType.GRAPH: "backend_error: down"}, paths_at_limit=(PathType.VECTOR,),
                         aggregation_coverage=AggregationCoverage(
                             kind="COUNT", unique_candidates=3, returned=2, packed=1,
                             limitation_codes=("semantic_matching",), candidate_limit_paths=(PathType.VECTOR,)))
    assert json.loads(meta.model_dump_json()) == {
        "intent": "SEMANTIC", "current_state": False, "entities": ["Caroline"],
        "temporal_window": ["2023-05-01T00:00:00+00:00", "2023-05-02T00:00:00+00:00"],
        "reference_time": meta.reference_time.isoformat(), "retrieval_mode": "DEFAULT", "formula_version": 2,
        "rrf_k": 60, "configuration_fingerprint": "0" * 16, "candidates_generated": 0, "candidates_after_filter": 0,
        "candidates_ranked": 0, "candidates_selected": 0, "cut_by_budget": 0, "paths_at_limit": ["VECTOR"],
        "embedding_mismatch": False, "backend_failures": {"GRAPH": "backend_error: down"}, "min_score_skipped": False,
        "excluded": {str(gone): "DEPRECATED"},
        "exclusion_scores": {str(gone): {"score": None, "semantic_relevance": 0.25}}, "budget_cuts": [str(cut)],
        "aggregation_coverage": {"kind": "COUNT", "unique_candidates": 3, "returned": 2, "packed": 1,
                                 "limitation_codes": ["semantic_matching"], "candidate_limit_paths": ["VECTOR"],
                                 "exhaustive": False},
    }
    # every field, in order; historical_coverage only on a knowledge_at bundle
    assert list(json.loads(meta.model_dump_json())) == [name for name in RetrievalMetadata.model_fields
                                                        if name != "historical_coverage"]
    assert RetrievalMetadata.model_validate_json(meta.model_dump_json()) == meta
    with pytest.raises(ValidationError, match="unknown_key"):
        RetrievalMetadata.model_validate({**meta.model_dump(), "unknown_key": 1})
    assert MemoryBundle.model_fields["retrieval_metadata"].annotation is RetrievalMetadata
