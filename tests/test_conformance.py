"""RFC-0005 section 12: one test per conformance requirement, named after it."""

from __future__ import annotations

import inspect

import pytest

from rms_retrieval.dataflows.frames import scored_frame
from rms_retrieval.dataflows.pipeline import build_driver
from rms_retrieval.dataflows.retrieval import retrieve
from rms_retrieval.nodes import scoring
from rms_retrieval.nodes.helpers.graph_walk import walk
from rms_retrieval.stores.indexes.adjacency import uuid_keys
from rms_retrieval.nodes.pools import PathType
from rms_retrieval.nodes.candidate_settings import CandidateSettings
from rms_retrieval.nodes.settings import RetrievalSettings, ScoringSettings, WeightedScoring
from rms_retrieval.stores.errors import EmbeddingMismatchError
from rms_retrieval.stores.models import NodeType
from rms_retrieval.stores.protocols import Edge, EmbeddingIdentity
from tests.factories import BASE_TIME, FakeEncoder, FakeStore, conversation_store, make_object, make_request


def _retrieve(store, query="What did Caroline do at the support group?", settings=None, **kw):
    return retrieve(store, query, namespaces=["ns"], reference_time=BASE_TIME, settings=settings,
                    encoder=FakeEncoder(), **kw)


def test_all_four_candidate_generation_paths_must_be_implemented():
    dr = build_driver()
    for node in ("vector_candidates", "lexical_candidates", "graph_candidates", "pinned_candidates"):
        assert node in {v.name for v in dr.list_available_variables()}
    paths = {p for item in _retrieve(conversation_store()).bundle.items for p in item.paths}
    assert {PathType.VECTOR, PathType.LEXICAL, PathType.GRAPH, PathType.PINNED} <= paths


def test_epistemic_filtering_must_occur_before_scoring():
    dr = build_driver()
    upstream = {v.name for v in dr.what_is_upstream_of("fused_scores")}
    assert "filtered_candidates" in upstream
    assert set(inspect.signature(scoring.fused_scores__rrf).parameters) >= {"filtered_candidates"}
    assert "merged_candidates" not in inspect.signature(scoring.fused_scores__rrf).parameters
    result = _retrieve(conversation_store(), extra_nodes=["fused_scores", "filtered_candidates"])
    excluded = {str(k) for k in result.nodes["filtered_candidates"].excluded}
    assert excluded and excluded.isdisjoint(set(scored_frame(result.nodes["fused_scores"])["object_id"]))


def test_composite_score_formula_version_1_must_include_all_eight_inputs():
    settings = RetrievalSettings(scoring=ScoringSettings(fusion="weighted"))
    frame = scored_frame(_retrieve(conversation_store(), settings=settings, extra_nodes=["fused_scores"]).nodes["fused_scores"])
    for column in ("semantic_relevance", "lexical", "graph_proximity", "recency", "salience", "confidence",
                   "epistemic_factor", "path_count"):
        assert frame[column].notna().all(), column
    assert set(frame["formula_version"]) == {1}


def test_weights_must_sum_to_one_excluding_epistemic_multiplier_and_path_tiebreaker():
    w = WeightedScoring()
    assert w.w_semantic + w.w_lexical + w.w_graph + w.w_recency + w.w_salience + w.w_confidence == pytest.approx(1.0)
    WeightedScoring(w_paths=0.5)  # the tie-breaker is outside the sum
    with pytest.raises(ValueError, match="sum to 1.0"):
        WeightedScoring(w_semantic=0.30)


def test_embedding_version_mismatch_must_be_detected_and_handled():
    store = FakeStore(list(conversation_store().objects.values()), identity=EmbeddingIdentity("other", "f" * 16, 4))
    bundle = _retrieve(store).bundle
    assert bundle.retrieval_metadata.embedding_mismatch is True
    assert all(PathType.VECTOR not in item.paths for item in bundle.items)
    assert bundle.items  # lexical, graph and pinned paths still answer
    strict = RetrievalSettings(candidates=CandidateSettings(on_embedding_mismatch="error"))
    with pytest.raises(EmbeddingMismatchError):
        _retrieve(store, settings=strict)


def test_every_retrieval_request_must_generate_a_retrieval_log_record():
    store = conversation_store()
    result = _retrieve(store)
    assert store.log[-1]["op_type"] == "RETRIEVAL_REQUEST"
    payload = store.log[-1]["payload"]
    assert payload["request_id"] == str(result.request_id) and payload["status"] == "ok"
    for field in ("namespace_scope", "retrieval_mode", "query_intent", "candidates_generated",
                  "candidates_after_filter", "objects_included_in_bundle", "tokens_used", "context_budget",
                  "scores", "excluded", "embedding_model_version"):
        assert field in payload, field
    store.fail.update({"vector"})
    with pytest.raises(ValueError):
        _retrieve(store, query="   ")
    assert store.log[-1]["payload"]["status"] == "failed"
    assert "query" in store.log[-1]["payload"]["error"]


def test_retrieval_must_be_deterministic_given_identical_inputs():
    store = conversation_store()
    first = _retrieve(store).bundle.to_json()
    assert all(_retrieve(store).bundle.to_json() == first for _ in range(20))


def test_graph_traversal_depth_must_not_exceed_three_hops():
    with pytest.raises(ValueError):
        CandidateSettings(graph_max_hops=4)
    chain = [make_object(f"e{i}", f"E{i}", node_type=NodeType.ENTITY, entity_canonical_name=f"E{i}") for i in range(6)]
    turn = make_object("end", "the end of the chain")
    edges = [Edge(i + 1, chain[i].id, chain[i + 1].id, "CO_MENTIONED", 0.9) for i in range(5)]
    edges.append(Edge(99, turn.id, chain[5].id, "MENTIONS", 0.9))
    store = FakeStore([*chain, turn], edges)
    settings = RetrievalSettings(candidates=CandidateSettings(graph_max_hops=3))
    graph = store.snapshot().adjacency(make_request().namespaces)
    reached = walk(graph, [chain[0].id], uuid_keys([c.id for c in chain]), max_hops=settings.candidates.graph_max_hops,
                   min_confidence=settings.candidates.graph_min_edge_confidence, max_candidates=50)
    assert reached.objects == ()  # the turn is six hops away
