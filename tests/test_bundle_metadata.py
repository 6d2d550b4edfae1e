"""The bundle's retrieval metadata helpers: exclusion scores and aggregation coverage, called directly."""

from __future__ import annotations

from rms_retrieval.nodes.bundle import ExclusionScore
from rms_retrieval.nodes.helpers.bundle_metadata import aggregation_coverage, exclusion_scores
from rms_retrieval.nodes.models import AggregationKind, QueryAnalysis
from rms_retrieval.nodes.pools import CandidatePool, FilteredPool, PathType, Selection
from rms_retrieval.nodes.scoring import fused_scores__rrf
from rms_retrieval.nodes.settings import RetrievalSettings
from tests.factories import BASE_TIME, make_candidate, make_object

ANALYSIS = QueryAnalysis(raw_query="q", namespace_scope=("ns",), reference_time=BASE_TIME)
COUNT = ANALYSIS.model_copy(update={"aggregation": AggregationKind.COUNT})


def _selection(candidates, **fields) -> Selection:
    return Selection(pool=fused_scores__rrf(FilteredPool(tuple(candidates), {}), ANALYSIS, RetrievalSettings()), **fields)


def test_exclusion_scores_take_selections_scores_and_a_removed_objects_floored_cosine_in_excluded_order():
    cut = make_candidate(make_object("cut"), VECTOR=(1, 0.4))
    near = make_candidate(make_object("near", epistemic_type="DEPRECATED"), VECTOR=(2, 0.6))
    below = make_candidate(make_object("below", epistemic_type="DEPRECATED"), VECTOR=(3, -0.2))
    lexical = make_candidate(make_object("lexical", epistemic_type="DEPRECATED"), LEXICAL=(1, 1.0))
    chosen = ExclusionScore(score=0.25, semantic_relevance=0.4)
    selection = _selection([], excluded={cut.object_id: "limit"}, excluded_scores={cut.object_id: chosen})
    removed = (near, below, lexical)
    filtered = FilteredPool((), {c.object_id: "DEPRECATED" for c in removed}, removed)
    excluded = {lexical.object_id: "DEPRECATED", cut.object_id: "limit", near.object_id: "DEPRECATED",
                below.object_id: "DEPRECATED"}
    scores = exclusion_scores(excluded, selection, filtered, rank_fused=True)
    assert list(scores) == list(excluded)
    assert scores == {cut.object_id: chosen, near.object_id: ExclusionScore(score=None, semantic_relevance=0.6),
                      below.object_id: ExclusionScore(score=None, semantic_relevance=0.0),
                      lexical.object_id: ExclusionScore(score=None, semantic_relevance=0.0)}
    weighted = exclusion_scores(excluded, selection, filtered, rank_fused=False)
    assert weighted[near.object_id] == ExclusionScore(score=None, semantic_relevance=None)
    # Scores of ids selection left out that `excluded` does not name are not reported.
    stray = make_object("stray").id
    wider = _selection([], excluded={cut.object_id: "limit", stray: "limit"},
                       excluded_scores={stray: chosen, cut.object_id: chosen})
    assert list(exclusion_scores(excluded, wider, filtered, rank_fused=True)) == list(excluded)


def test_aggregation_coverage_names_every_limit_a_count_bundle_ran_into():
    hikes = [make_candidate(make_object(f"hike{i}"), VECTOR=(i + 1, 0.8)) for i in range(3)]
    selection = _selection(hikes[:2])
    assert aggregation_coverage(selection, CandidatePool(tuple(hikes)), ANALYSIS, 2, 0, True) is None
    clean = aggregation_coverage(selection, CandidatePool(tuple(hikes)), COUNT, 2, 0, True)
    assert clean.limitation_codes == ("semantic_matching",)
    assert (clean.unique_candidates, clean.returned, clean.packed) == (3, 2, 2)
    limited = CandidatePool(tuple(hikes), backend_failures={PathType.GRAPH: "backend_error: x"},
                            paths_at_limit=(PathType.VECTOR,))
    cut = _selection(hikes[:2], excluded={hikes[2].object_id: "limit"})
    every = aggregation_coverage(cut, limited, COUNT, 1, 1, True)
    assert every.limitation_codes == ("semantic_matching", "candidate_limit", "backend_failure", "score_selection",
                                      "token_budget")
    assert every.candidate_limit_paths == (PathType.VECTOR,)
    unfit = aggregation_coverage(selection, CandidatePool(tuple(hikes)), COUNT, 0, 0, False)
    assert unfit.limitation_codes == ("semantic_matching", "token_budget")
