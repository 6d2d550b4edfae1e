"""The benchmark's arms (dataflows/bench/arms.py), and those that give back earlier behaviour
(arm_settings.py and arm_nodes.py): at their defaults they retrieve as the product does; each lever does what it did."""

from __future__ import annotations

from datetime import timedelta

import pytest

from rms_retrieval.dataflows.bench import arm_nodes, arms
from rms_retrieval.dataflows.bench.arm_settings import ArmPacking, ArmScoring, ArmSettings
from rms_retrieval.dataflows.pipeline import FINAL_NODE, build_driver, pipeline_inputs
from rms_retrieval.nodes.helpers.formatting import group_header
from rms_retrieval.nodes.models import QueryAnalysis, QueryIntent, TemporalSignal, TemporalType
from rms_retrieval.nodes.pools import CandidatePool, FilteredPool, PathType, RerankedPool
from rms_retrieval.nodes.packing import SEPARATOR, selected_candidates
from rms_retrieval.nodes.session_context import ranked_candidates
from rms_retrieval.nodes.settings import RankFusionScoring, RetrievalSettings, ScoringSettings
from rms_retrieval.nodes.helpers.tokens import count_tokens
from tests.factories import BASE_TIME, FakeEncoder, conversation_store, make_candidate, make_object, make_request


def _bundle(settings: RetrievalSettings):
    request = make_request("What did Caroline do at the support group?")
    inputs = pipeline_inputs(conversation_store(), request, settings, FakeEncoder())
    return build_driver(settings).execute([FINAL_NODE], inputs=inputs)[FINAL_NODE]


@pytest.mark.parametrize("fusion", ["rrf", "weighted"])
def test_at_their_defaults_the_arm_nodes_retrieve_as_the_product_does(fusion):
    product = RetrievalSettings(scoring=ScoringSettings(fusion=fusion))
    arm = ArmSettings(scoring=ArmScoring(fusion=fusion))
    assert build_driver(arm) is not build_driver(product)
    ours, theirs = _bundle(product), _bundle(arm)
    assert ours.items and ours.model_copy(update={"retrieval_metadata": None}) == theirs.model_copy(
        update={"retrieval_metadata": None})
    assert ours.retrieval_metadata.model_copy(update={"configuration_fingerprint": ""}) == \
        theirs.retrieval_metadata.model_copy(update={"configuration_fingerprint": ""})


def test_the_arm_nodes_refuse_product_settings():
    with pytest.raises(TypeError, match="need ArmSettings"):
        arm_nodes._arm(RetrievalSettings())


@pytest.mark.parametrize("arm", sorted(arms.ARMS))
def test_every_arm_builds_and_executes(arm):
    bundle = _bundle(arms.arm_settings(arm))
    assert bundle.items and bundle.tokens_used <= bundle.token_budget


def _packed(candidates, settings, request):
    pool = FilteredPool(tuple(candidates), {})
    analysis = QueryAnalysis(raw_query="q", namespace_scope=("ns",), reference_time=BASE_TIME)
    ranked = ranked_candidates(RerankedPool(arm_nodes.fused_scores__rrf(pool, analysis, settings)), [], pool, request,
                               settings, {})
    merged = CandidatePool(tuple(candidates))
    return arm_nodes.packed_bundle(selected_candidates(ranked, merged, request), ranked, pool, merged,
                                   analysis, request, settings)


def test_density_and_score_order_arms_order_the_packing():
    long = make_candidate(make_object("long", "word " * 12), VECTOR=(1, 0.9))
    short = make_candidate(make_object("short", "brief"), VECTOR=(2, 0.89))
    budget = count_tokens(long.object.content) + count_tokens(group_header(long.object)) + count_tokens(SEPARATOR)
    request = make_request(token_budget=budget)
    dense = ArmSettings(packing=ArmPacking(density_exponent=0.25))
    assert [i.content for i in _packed([long, short], dense, request).items] == ["brief"]
    assert [i.content for i in _packed([long, short], ArmSettings(), request).items] == ["word " * 12]
    single = make_candidate(make_object("single", "alpha"), VECTOR=(1, 0.99))
    multi = make_candidate(make_object("multi", "beta"), VECTOR=(3, 0.5), LEXICAL=(3, 1.0))
    wide = make_request(token_budget=500)
    assert [i.content for i in _packed([single, multi], ArmSettings(), wide).items] == ["beta", "alpha"]
    merged = ArmSettings(packing=ArmPacking(tier_order="score"))
    scores = {i.content: i.score for i in _packed([single, multi], merged, wide).items}
    assert list(scores) == sorted(scores, key=lambda c: -scores[c])


def test_the_temporal_intent_only_arm_drops_the_dates_of_other_intents():
    window = (BASE_TIME, BASE_TIME + timedelta(days=1))
    signal = TemporalSignal(text="that day", type=TemporalType.ABSOLUTE, start=window[0], end=window[1])
    inside = make_candidate(make_object("in", days=0.5), VECTOR=(2, 0.5))
    outside = make_candidate(make_object("out", days=-60), VECTOR=(1, 0.6))
    pool = FilteredPool((inside, outside), {})
    no_tie = {"rank_fusion": RankFusionScoring(rrf_tie_break=None)}
    intent_only = ArmSettings(scoring=ArmScoring(temporal_any_intent=False, **no_tie))
    for intent, first in ((QueryIntent.ENTITY_LOOKUP, outside), (QueryIntent.TEMPORAL, inside)):
        analysis = QueryAnalysis(raw_query="q", namespace_scope=("ns",), reference_time=BASE_TIME, intent=intent,
                                 temporal_signals=(signal,))
        assert arm_nodes.fused_scores__rrf(pool, analysis, intent_only).objects[0].id == first.object_id
        assert arm_nodes.fused_scores__rrf(pool, analysis, ArmSettings(scoring=ArmScoring(**no_tie))).objects[0].id \
            == inside.object_id


def test_every_arm_builds_distinct_valid_settings():
    fingerprints = {arms.arm_settings(arm).fingerprint() for arm in arms.ARMS}
    assert len(fingerprints) == len(arms.ARMS)
    assert arms.settings_changes(arms.arm_settings("pipeline")) == {}
    assert arms.settings_changes(arms.arm_settings("rrf_vector_bm25")) == {
        "candidates.enabled_paths": ["LEXICAL", "VECTOR"], "scoring.temporal_boost": 0.0, "session.window": 0,
    }
    assert arms.settings_changes(arms.arm_settings("round3_off")) == {
        "candidates.lexical_k": 150, "candidates.vector_k": 150, "packing.tier_path_depth": None,
        "scoring.speaker_boost": 0.0,
    }
    no_graph = arms.arm_settings("no_graph")
    assert PathType.GRAPH not in no_graph.candidates.enabled_paths
    assert no_graph.session == RetrievalSettings().session and no_graph.scoring == RetrievalSettings().scoring
    with pytest.raises(ValueError, match="unknown arm"):
        arms.arm_settings("graph_only")
