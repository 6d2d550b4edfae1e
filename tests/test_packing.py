"""Selection and packing (RFC 8): tiers, density, the cl100k_base budget, selection rules."""

from __future__ import annotations

import math
from datetime import timedelta

import pytest
from hypothesis import given, settings as hsettings, strategies as st
from pydantic import ValidationError

from rms_retrieval.nodes.bundle import ExclusionScore
from rms_retrieval.nodes.filtering import filtered_candidates
from rms_retrieval.nodes.models import QueryAnalysis
from rms_retrieval.nodes.pools import CandidatePool, FilteredPool, PathType, RerankedPool
from rms_retrieval.nodes.helpers.formatting import format_item, group_header
from rms_retrieval.nodes.packing import SEPARATOR, packed_bundle, selected_candidates
from rms_retrieval.nodes.scoring import fused_scores__rrf, fused_scores__weighted
from rms_retrieval.nodes.session_context import ranked_candidates
from rms_retrieval.nodes.settings import IgnoredSettingWarning, RetrievalSettings
from rms_retrieval.nodes.helpers.tokens import ITEM_TOKENS, count_tokens
from rms_retrieval.stores.models import NodeType, is_blank
from tests.factories import BASE_TIME, make_candidate, make_object, make_request

SETTINGS = RetrievalSettings()


def _bundle(candidates, request=None, settings=SETTINGS, backend_failures=None, weighted=False):
    request = request or make_request()
    pool = FilteredPool(tuple(candidates), {})
    merged = CandidatePool(tuple(candidates), backend_failures=backend_failures or {})
    analysis = QueryAnalysis(raw_query="q", namespace_scope=("ns",), reference_time=BASE_TIME)
    score = fused_scores__weighted(pool, analysis, request, settings) if weighted else fused_scores__rrf(pool, analysis, settings)
    ranked = ranked_candidates(RerankedPool(score), [], pool, request, settings, {})
    selection = selected_candidates(ranked, merged, request)
    return packed_bundle(selection, ranked, pool, merged, analysis, request, settings)


def test_tiers_pinned_then_multi_path_then_the_rest():
    single = make_candidate(make_object("single", "alpha"), VECTOR=(1, 0.99))
    multi = make_candidate(make_object("multi", "beta"), VECTOR=(2, 0.5), LEXICAL=(1, 1.0))
    pinned = make_candidate(make_object("pin", "gamma", salience=1.0), PINNED=(1, 1.0))
    task = make_candidate(make_object("task", "delta", node_type=NodeType.TASK), PINNED=(2, 1.0))
    bundle = _bundle([single, multi, pinned, task])
    assert [i.tier for i in bundle.items] == [1, 1, 2, 3]
    assert [i.content for i in bundle.items][2:] == ["beta", "alpha"]


@pytest.mark.parametrize("item_format", ["dated_groups", "reader", "plain"])
def test_budget_is_counted_in_cl100k_tokens_including_formatting(item_format):
    objs = [make_candidate(make_object(f"o{i}", f"memory number {i} " * 5, days=i % 3), VECTOR=(i, 1 - i / 100))
            for i in range(1, 30)]
    settings = RetrievalSettings(packing={"item_format": item_format})
    bundle = _bundle(objs, make_request(token_budget=90), settings)
    assert bundle.tokens_used == count_tokens(bundle.context) <= 90
    assert all(item.tokens == count_tokens(item.text) for item in bundle.items)
    assert bundle.items[0].text == format_item(objs[0].object, item_format)
    assert all(item.text in bundle.context for item in bundle.items)


def test_dated_groups_put_one_date_line_over_each_day_in_time_order():
    objs = [make_candidate(make_object(f"d{i}", f"event {i}", days=-i), VECTOR=(i + 1, 0.9 - i / 10)) for i in range(3)]
    objs.append(make_candidate(make_object("same-day", "also that day", days=-1.9), VECTOR=(9, 0.1)))
    bundle = _bundle(objs)
    assert bundle.context.splitlines() == [
        "[2025-05-30]", "event 2", "also that day", "[2025-05-31]", "event 1", "[2025-06-01]", "event 0"]




def test_tier_order_score_offers_tiers_two_and_three_as_one_and_keeps_each_items_tier():
    strong = make_candidate(make_object("strong", "alpha"), VECTOR=(1, 0.99))
    multi = make_candidate(make_object("multi", "beta"), VECTOR=(6, 0.1), LEXICAL=(6, 0.1))
    pinned = make_candidate(make_object("pin", "gamma", salience=1.0), PINNED=(1, 1.0))
    # single-path fillers push the multi-path memory to rank 6 of both lists
    fillers = [make_candidate(make_object(f"f{i}", f"filler {i}"), **{path: (i, 0.9 - i / 10)})
               for i in range(1, 6) for path in ("LEXICAL",)] + [
        make_candidate(make_object(f"v{i}", f"vector {i}"), VECTOR=(i + 1, 0.8 - i / 10)) for i in range(1, 5)]
    sharp = {"rank_fusion": {"rrf_k": 1, "rrf_tie_break": None}}  # rank 1 of one list outscores rank 6 of both
    pool = [strong, multi, pinned, *fillers]

    def order(bundle):
        return [(i.content, i.tier) for i in bundle.items if i.content in ("alpha", "beta", "gamma")]

    tiered = _bundle(pool, settings=RetrievalSettings(scoring=sharp, packing={"tier_path_depth": None}))
    assert order(tiered) == [("gamma", 1), ("beta", 2), ("alpha", 3)]
    merged = _bundle(pool, settings=RetrievalSettings(scoring=sharp, packing={"tier_path_depth": None,
                                                                               "tier_order": "score"}))
    assert order(merged) == [("gamma", 1), ("alpha", 3), ("beta", 2)]
    assert [i.score for i in merged.items[1:]] == sorted((i.score for i in merged.items[1:]), reverse=True)


def test_score_decides_inside_a_tier_when_the_budget_is_tight():
    long = make_candidate(make_object("long", "word " * 12), VECTOR=(1, 0.9))
    short = make_candidate(make_object("short", "brief"), VECTOR=(2, 0.89))
    # the long item, its date line and the newline between them fill the budget
    budget = count_tokens(long.object.content) + count_tokens(group_header(long.object)) + count_tokens(SEPARATOR)
    request = make_request(token_budget=budget)
    # the better-scored long item fills the budget, though the short one packs more score per token
    assert [i.content for i in _bundle([long, short], request).items] == ["word " * 12]


def test_min_score_compares_the_cosine_under_rank_fusion():
    high = make_candidate(make_object("high"), VECTOR=(1, 0.7))
    low = make_candidate(make_object("low"), VECTOR=(2, 0.2))
    bundle = _bundle([high, low], make_request(min_score=0.5))
    assert [i.id for i in bundle.items] == [high.object_id]
    assert bundle.retrieval_metadata.excluded == {low.object_id: "min_score"}
    assert bundle.retrieval_metadata.min_score_skipped is False


def test_the_pools_formula_decides_what_min_score_compares_and_what_the_bundle_reports():
    # Formula 1's score is a relevance: min_score compares it, and a lexical-only pool does not fail open.
    lexical_only = make_candidate(make_object("lex"), LEXICAL=(1, 1.0))
    weighted = _bundle([lexical_only], make_request(min_score=0.5), weighted=True)
    assert weighted.items == () and weighted.retrieval_metadata.min_score_skipped is False
    assert weighted.retrieval_metadata.formula_version == 1 and weighted.retrieval_metadata.rrf_k is None
    vector = make_candidate(make_object("vec"), VECTOR=(1, 0.9))
    assert _bundle([vector], weighted=True).items[0].semantic_relevance is None
    ranked = _bundle([vector])
    assert ranked.retrieval_metadata.formula_version == 2 and ranked.retrieval_metadata.rrf_k == 60
    assert ranked.items[0].semantic_relevance == 0.9


@pytest.mark.parametrize("failure", ["backend_error: RuntimeError: down", "embedding_mismatch"])
def test_min_score_fails_open_when_the_vector_search_failed(failure):
    lexical_only = make_candidate(make_object("lex"), LEXICAL=(1, 1.0))
    bundle = _bundle([lexical_only], make_request(min_score=0.5), backend_failures={PathType.VECTOR: failure})
    assert [i.id for i in bundle.items] == [lexical_only.object_id]
    assert bundle.retrieval_metadata.min_score_skipped is True
    empty = _bundle([], make_request(min_score=0.5), backend_failures={PathType.VECTOR: failure})
    assert empty.retrieval_metadata.min_score_skipped is True


def test_min_score_keeps_the_floor_when_the_vector_search_ran_and_found_nothing():
    """RFC 7.2: vector_k=0, the vector path off or a store without vectors is no failure."""
    lexical_only = make_candidate(make_object("lex"), LEXICAL=(1, 1.0))
    bundle = _bundle([lexical_only], make_request(min_score=0.5))
    assert bundle.items == ()
    assert bundle.retrieval_metadata.excluded == {lexical_only.object_id: "min_score"}
    assert bundle.retrieval_metadata.min_score_skipped is False
    failed_elsewhere = _bundle([lexical_only], make_request(min_score=0.5),
                               backend_failures={PathType.GRAPH: "backend_error: RuntimeError: down"})
    assert failed_elsewhere.items == ()
    assert failed_elsewhere.retrieval_metadata.min_score_skipped is False


def test_min_score_keeps_the_floor_when_a_result_has_a_cosine_despite_a_vector_failure():
    with_cosine = make_candidate(make_object("vec"), VECTOR=(1, 0.2), LEXICAL=(1, 1.0))
    bundle = _bundle([with_cosine], make_request(min_score=0.5), backend_failures={PathType.VECTOR: "embedding_mismatch"})
    assert bundle.items == ()
    assert bundle.retrieval_metadata.min_score_skipped is False


def test_limit_and_max_per_source():
    same = [make_candidate(make_object(f"dup{i}", "same claim", evidence_refs=("e1",)), VECTOR=(i, 1 - i / 10)) for i in range(1, 4)]
    other = make_candidate(make_object("other", "other claim", evidence_refs=("e2",)), VECTOR=(5, 0.3))
    bundle = _bundle(same + [other], make_request(max_per_source=1))
    assert [i.content for i in bundle.items] == ["same claim", "other claim"]
    limited = _bundle(same + [other], make_request(limit=2))
    assert len(limited.items) == 2
    assert sorted(limited.retrieval_metadata.excluded.values()) == ["limit", "limit"]


def test_max_per_evidence_caps_one_evidence_set_whatever_the_text_and_fills_from_later_groups():
    cited = [make_candidate(make_object(f"c{i}", f"claim {i}", evidence_refs=("e2", "e1")), VECTOR=(i, 1 - i / 10))
             for i in range(1, 4)]
    subset = make_candidate(make_object("subset", "claim from e1", evidence_refs=("e1",)), VECTOR=(4, 0.55))
    free = [make_candidate(make_object(f"f{i}", f"no evidence {i}"), VECTOR=(5 + i, 0.5 - i / 10)) for i in range(2)]
    pool = cited + [subset] + free
    bundle = _bundle(pool, make_request(max_per_evidence=2, limit=4))
    assert [i.content for i in bundle.items] == ["claim 1", "claim 2", "claim from e1", "no evidence 0"]
    excluded = bundle.retrieval_metadata.excluded
    assert excluded[cited[2].object.id] == "evidence_limit" and excluded[free[1].object.id] == "limit"
    # max_per_source caps a repeated text only; max_per_evidence caps the set
    assert len(_bundle(pool, make_request(max_per_source=1)).items) == len(pool)


def test_an_explicit_limit_wins_over_pins_and_active_tasks():
    pinned = make_candidate(make_object("pin", "gamma", salience=1.0), PINNED=(1, 1.0))
    task = make_candidate(make_object("task", "delta", node_type=NodeType.TASK), PINNED=(2, 1.0))
    best = make_candidate(make_object("best", "alpha"), VECTOR=(1, 0.9))
    assert len(_bundle([pinned, task, best]).items) == 3
    bundle = _bundle([pinned, task, best], make_request(limit=1))
    assert [i.id for i in bundle.items] == [best.object_id]  # the first in rank order
    assert bundle.retrieval_metadata.excluded == {pinned.object_id: "limit", task.object_id: "limit"}
    assert len(_bundle([pinned, task, best], make_request(limit=2)).items) == 2


def test_pins_obey_an_explicit_min_score():
    pinned = make_candidate(make_object("pin", salience=1.0), PINNED=(1, 1.0))
    best = make_candidate(make_object("best"), VECTOR=(1, 0.9))
    bundle = _bundle([pinned, best], make_request(min_score=0.5))
    assert [i.id for i in bundle.items] == [best.object_id]
    assert bundle.retrieval_metadata.excluded == {pinned.object_id: "min_score"}


@hsettings(max_examples=40, deadline=None)
@given(
    budget=st.integers(min_value=1, max_value=400),
    texts=st.lists(st.text(min_size=1, max_size=80).filter(lambda text: not is_blank(text)), min_size=1, max_size=12),
)
def test_packing_never_exceeds_the_budget_and_scores_are_finite(budget, texts):
    candidates = [make_candidate(make_object(f"h{i}", t), VECTOR=(i + 1, 0.9 - i / 100)) for i, t in enumerate(texts)]
    bundle = _bundle(candidates, make_request(token_budget=budget))
    assert bundle.tokens_used <= budget
    assert bundle.tokens_used == (count_tokens(bundle.context) if bundle.context else 0)
    assert all(item.score == item.score and abs(item.score) != float("inf") for item in bundle.items)


@hsettings(max_examples=30, deadline=None)
@given(kinds=st.lists(st.sampled_from(["OBSERVED", "DEPRECATED", "HYPOTHETICAL", "UNVERIFIED"]), min_size=1, max_size=10))
def test_no_excluded_object_is_ever_packed(kinds):
    from rms_retrieval.nodes.filtering import filtered_candidates

    candidates = [make_candidate(make_object(f"k{i}", f"text {i}", epistemic_type=k, confidence=0.2), VECTOR=(i + 1, 0.5))
                  for i, k in enumerate(kinds)]
    request = make_request()
    merged = CandidatePool(tuple(candidates))
    filtered = filtered_candidates(merged, request, SETTINGS)
    analysis = QueryAnalysis(raw_query="q", namespace_scope=("ns",), reference_time=BASE_TIME)
    ranked = ranked_candidates(RerankedPool(fused_scores__rrf(filtered, analysis, SETTINGS)), [], filtered, request,
                               SETTINGS, {})
    bundle = packed_bundle(selected_candidates(ranked, merged, request), ranked, filtered, merged, analysis, request,
                           SETTINGS)
    packed = {item.id for item in bundle.items}
    assert packed.isdisjoint(filtered.excluded)
    assert all(k in bundle.retrieval_metadata.excluded for k in filtered.excluded)


def _count_bundle(candidates, budget):
    from rms_retrieval.nodes.models import AggregationKind

    request = make_request("How many times did Caroline go hiking?", token_budget=budget)
    pool = FilteredPool(tuple(candidates), {})
    analysis = QueryAnalysis(raw_query=request.query, aggregation=AggregationKind.COUNT,
                             namespace_scope=("ns",), reference_time=BASE_TIME)
    ranked = ranked_candidates(RerankedPool(fused_scores__rrf(pool, analysis, SETTINGS)), [], pool, request, SETTINGS,
                               {})
    merged = CandidatePool(tuple(candidates))
    return packed_bundle(selected_candidates(ranked, merged, request), ranked, pool, merged, analysis, request, SETTINGS)


def test_a_count_question_starts_with_the_coverage_warning_and_reports_coverage():
    from rms_retrieval.nodes.packing import COVERAGE_WARNING

    hikes = [make_candidate(make_object(f"hike{i}", f"Caroline went hiking {i}"), VECTOR=(i + 1, 0.8)) for i in range(3)]
    bundle = _count_bundle(hikes, 500)
    assert bundle.context.splitlines()[0] == COVERAGE_WARNING
    assert bundle.tokens_used == count_tokens(bundle.context) <= 500
    assert bundle.retrieval_metadata.aggregation_coverage.model_dump(mode="json") == {
        "kind": "COUNT", "unique_candidates": 3, "returned": 3, "packed": 3,
        "limitation_codes": ["semantic_matching"], "candidate_limit_paths": [], "exhaustive": False,
    }


def test_when_the_warning_cannot_fit_nothing_unqualified_is_packed():
    hikes = [make_candidate(make_object("hike", "hiking"), VECTOR=(1, 0.8))]
    bundle = _count_bundle(hikes, 5)
    assert bundle.items == () and bundle.context == "" and bundle.tokens_used == 0
    assert "token_budget" in bundle.retrieval_metadata.aggregation_coverage.limitation_codes


def test_other_questions_have_no_coverage_block():
    bundle = _bundle([make_candidate(make_object("x"), VECTOR=(1, 0.5))])
    assert bundle.retrieval_metadata.aggregation_coverage is None


def test_tier_path_depth_counts_a_path_for_tier_two_only_near_the_top_of_its_channel():
    candidates = [
        make_candidate(make_object("single", "single"), VECTOR=(1, 0.99)),
        make_candidate(make_object("strong", "strong"), VECTOR=(2, 0.9), LEXICAL=(1, 1.0)),
        make_candidate(make_object("near", "near"), VECTOR=(3, 0.8), LEXICAL=(2, 0.9)),
        make_candidate(make_object("vector", "vector"), VECTOR=(4, 0.7)),
        make_candidate(make_object("deep", "deep"), VECTOR=(5, 0.6), LEXICAL=(4, 0.5)),
        make_candidate(make_object("lexical", "lexical"), LEXICAL=(3, 0.7)),
    ]
    sharp = {"rank_fusion": {"rrf_k": 1, "rrf_tie_break": None}}  # deep (ranks 5 and 4) scores below single
    every_path = _bundle(candidates, settings=RetrievalSettings(
        scoring=sharp, packing={"item_format": "plain", "tier_path_depth": None}))
    assert [(i.content, i.tier) for i in every_path.items][:4] == [
        ("strong", 2), ("near", 2), ("deep", 2), ("single", 3)]
    settings = RetrievalSettings(scoring=sharp, packing={"item_format": "plain", "tier_path_depth": 3})
    bundle = _bundle(candidates, settings=settings)
    assert [(i.content, i.tier, i.path_count) for i in bundle.items][:4] == [
        ("strong", 2, 2), ("near", 2, 2), ("single", 3, 1), ("deep", 3, 2)]  # path_count still counts every path


def test_selection_exclusions_carry_their_score_and_semantic_relevance():
    """RFC amendment: responses give selection exclusions with reasons and scores."""
    high = make_candidate(make_object("high"), VECTOR=(1, 0.7))
    low = make_candidate(make_object("low"), VECTOR=(2, 0.2), LEXICAL=(1, 1.0))
    ranked = _bundle([high, low])
    low_score = next(i.score for i in ranked.items if i.id == low.object_id)
    meta = _bundle([high, low], make_request(min_score=0.5)).retrieval_metadata
    assert meta.exclusion_scores == {low.object_id: ExclusionScore(score=low_score, semantic_relevance=0.2)}
    weighted = _bundle([high, low], make_request(limit=1), weighted=True).retrieval_metadata
    (left_out,) = weighted.exclusion_scores.values()
    assert left_out["score"] is not None and left_out["semantic_relevance"] is None  # omitted under weighted


def test_an_object_removed_before_scoring_has_no_score_but_its_cosine():
    gone = make_candidate(make_object("gone", epistemic_type="DEPRECATED"), VECTOR=(1, 0.8))
    lexical = make_candidate(make_object("lexical", epistemic_type="DEPRECATED"), LEXICAL=(1, 1.0))
    kept = make_candidate(make_object("kept"), VECTOR=(2, 0.5))
    request = make_request()
    merged = CandidatePool((gone, lexical, kept))
    pool = filtered_candidates(merged, request, SETTINGS)
    analysis = QueryAnalysis(raw_query="q", namespace_scope=("ns",), reference_time=BASE_TIME)
    ranked = ranked_candidates(RerankedPool(fused_scores__rrf(pool, analysis, SETTINGS)), [], pool, request, SETTINGS, {})
    meta = packed_bundle(selected_candidates(ranked, merged, request), ranked, pool, merged, analysis, request,
                         SETTINGS).retrieval_metadata
    assert meta.excluded == {gone.object_id: "DEPRECATED", lexical.object_id: "DEPRECATED"}
    assert meta.exclusion_scores == {gone.object_id: ExclusionScore(score=None, semantic_relevance=0.8),
                                     lexical.object_id: ExclusionScore(score=None, semantic_relevance=0.0)}


def test_the_budget_cuts_are_named_in_packing_order():
    """RFC amendment: token-budget exclusions stay in the bundle."""
    candidates = [make_candidate(make_object(f"c{i}", f"claim number {i} " * 3), VECTOR=(i, 1 - i / 10))
                  for i in range(1, 6)]
    whole = _bundle(candidates)
    assert whole.retrieval_metadata.budget_cuts == () and len(whole.items) == 5
    budget = count_tokens(group_header(candidates[0].object)) + 2 * count_tokens(candidates[0].object.content) + 3
    bundle = _bundle(candidates, make_request(token_budget=budget))
    packed = [i.id for i in bundle.items]
    order = [i.id for i in whole.items]
    assert 0 < len(packed) < 5
    assert bundle.retrieval_metadata.budget_cuts == tuple(oid for oid in order if oid not in packed)
    assert bundle.retrieval_metadata.cut_by_budget == 5 - len(packed)


def test_a_limit_of_zero_is_an_empty_selection_that_stays_empty():
    pinned = make_candidate(make_object("pin", "gamma", salience=1.0), PINNED=(1, 1.0))
    best = make_candidate(make_object("best", "alpha"), VECTOR=(1, 0.9))
    bundle = _bundle([pinned, best], make_request(limit=0))
    assert bundle.items == () and bundle.context == ""
    assert bundle.retrieval_metadata.excluded == {pinned.object_id: "limit", best.object_id: "limit"}


def test_min_score_is_any_finite_nonnegative_number():
    """A weighted score can exceed 1 (the current-update multiplier), so the floor is not capped at 1."""
    candidate = make_candidate(make_object("c"), VECTOR=(1, 1.0), LEXICAL=(1, 1.0))
    score = _bundle([candidate], weighted=True).items[0].score
    assert [i.id for i in _bundle([candidate], make_request(min_score=score), weighted=True).items] == [candidate.object_id]
    high = _bundle([candidate], make_request(min_score=1.5), weighted=True)
    assert high.items == () and high.retrieval_metadata.excluded == {candidate.object_id: "min_score"}
    for bad in (math.inf, math.nan, -0.1):
        with pytest.raises(ValidationError, match="min_score"):
            make_request(min_score=bad)


def test_the_balanced_order_puts_a_short_multi_path_memory_before_a_slightly_better_long_one():
    """RFC 7.2 (PRMEConfig's "balanced"): the multi-path tier by score / tokens ** 0.25; other tiers by score."""
    long = make_candidate(make_object("long", "long claim " * 20), VECTOR=(1, 0.9), LEXICAL=(1, 1.0))
    short = make_candidate(make_object("short", "short claim"), VECTOR=(2, 0.8), LEXICAL=(2, 0.9))
    single_long = make_candidate(make_object("single_long", "lone claim " * 20), VECTOR=(3, 0.7))
    single_short = make_candidate(make_object("single_short", "lone"), LEXICAL=(3, 0.5))
    pool = [long, short, single_long, single_short]
    plain = RetrievalSettings(packing={"item_format": "plain"})
    balanced = RetrievalSettings(packing={"item_format": "plain", "order": "balanced"})
    by_score = [i.id for i in _bundle(pool, settings=plain).items]
    assert by_score[:2] == [long.object_id, short.object_id]
    ordered = [i.id for i in _bundle(pool, settings=balanced).items]
    assert ordered[:2] == [short.object_id, long.object_id]
    assert ordered[2:] == by_score[2:]  # tier 3 keeps score order
    assert balanced.fingerprint() != plain.fingerprint()
    assert RetrievalSettings(packing={"order": "score"}).fingerprint() == RetrievalSettings().fingerprint()


def test_with_one_tier_the_balanced_order_puts_a_short_single_path_memory_before_a_long_multi_path_one():
    """tier_order="score" offers tiers 2 and 3 as one, so the balanced order weighs every ordinary item."""
    long = make_candidate(make_object("long", "long claim " * 40), VECTOR=(1, 0.9), LEXICAL=(1, 1.0))
    short = make_candidate(make_object("short", "short claim"), VECTOR=(2, 0.85))
    pool = [long, short]
    one_tier = {"item_format": "plain", "tier_order": "score", "tier_path_depth": None}
    by_score = [(i.id, i.tier) for i in _bundle(pool, settings=RetrievalSettings(packing=one_tier)).items]
    assert by_score == [(long.object_id, 2), (short.object_id, 3)]
    balanced = _bundle(pool, settings=RetrievalSettings(packing={**one_tier, "order": "balanced"}))
    assert [(i.id, i.tier) for i in balanced.items] == [(short.object_id, 3), (long.object_id, 2)]
    tiered = _bundle(pool, settings=RetrievalSettings(packing={"item_format": "plain", "order": "balanced",
                                                               "tier_path_depth": None}))
    assert [i.id for i in tiered.items] == [long.object_id, short.object_id]  # tier 2 first when tiered


def test_an_item_too_long_for_the_room_left_is_skipped_without_being_counted():
    first = make_candidate(make_object("first", "a short first line"), VECTOR=(1, 0.9))
    long_text = " ".join(f"unseen{number}" for number in range(300))  # 300 words: at least 300 tokens
    long = make_candidate(make_object("long", long_text), VECTOR=(2, 0.8))
    last = make_candidate(make_object("last", "a short last line"), VECTOR=(3, 0.7))
    plain = {"item_format": "plain"}
    bundle = _bundle([first, long, last], make_request(token_budget=100), settings=RetrievalSettings(packing=plain))
    assert [i.id for i in bundle.items] == [first.object_id, last.object_id]
    assert ITEM_TOKENS.known(long_text) is None  # never counted
    assert [i.tokens for i in bundle.items] == [count_tokens("a short first line"), count_tokens("a short last line")]
    balanced = _bundle([first, long, last], make_request(token_budget=100),
                       settings=RetrievalSettings(packing={**plain, "order": "balanced"}))
    assert [i.id for i in balanced.items] == [first.object_id, last.object_id]
    assert ITEM_TOKENS.known(long_text) == count_tokens(long_text)  # the balanced order weighs every item's tokens


def test_temporal_guidance_heads_a_temporal_questions_context_when_asked_for_and_where_it_fits():
    """RFC 3: temporal intent, and the words when/before/after/last, select the temporal context guidance."""
    from rms_retrieval.nodes.packing import TEMPORAL_GUIDANCE

    memory = make_candidate(make_object("m", "Tomas moved to Leeds."), VECTOR=(1, 0.9))
    guided = RetrievalSettings(packing={"temporal_guidance": True})
    asked = _bundle([memory], make_request("When did Tomas move?"), settings=guided)
    assert asked.context.splitlines()[0] == TEMPORAL_GUIDANCE and asked.tokens_used <= asked.token_budget
    assert TEMPORAL_GUIDANCE not in _bundle([memory], make_request("When did Tomas move?")).context  # off by default
    for question in ("Where does Tomas live?", "Tell me about the aftermath", "Was it the lastest?"):
        assert TEMPORAL_GUIDANCE not in _bundle([memory], make_request(question), settings=guided).context
    tight = count_tokens(TEMPORAL_GUIDANCE) - 1  # the guidance cannot fit: the memory is packed without it
    small = _bundle([make_candidate(make_object("s", "ok"), VECTOR=(1, 0.9))],
                    make_request("What happened before May?", token_budget=tight), settings=guided)
    assert TEMPORAL_GUIDANCE not in small.context and len(small.items) == 1
    assert guided.fingerprint() != RetrievalSettings().fingerprint()


def test_fold_repeated_text_gives_a_repeated_memory_its_day_on_the_first_line_under_the_reader_format():
    """RFC 7.2 (fold_repeated_text, reader format only): a repeated text costs its day, not a line."""
    first = make_candidate(make_object("first", "Tomas works in Leeds.", days=0), VECTOR=(1, 0.9))
    again = make_candidate(make_object("again", "Tomas works in Leeds.", days=30), VECTOR=(2, 0.85))
    same_day = make_candidate(make_object("same_day", "Tomas works in Leeds.", days=0.1), VECTOR=(3, 0.8))
    other = make_candidate(make_object("other", "Priya lives in York.", days=2), VECTOR=(4, 0.7))
    pool = [first, again, same_day, other]
    reader = RetrievalSettings(packing={"item_format": "reader"})
    folding = RetrievalSettings(packing={"item_format": "reader", "fold_repeated_text": True})
    plain = _bundle(pool, settings=reader)
    assert plain.context.count("Tomas works in Leeds.") == 3
    bundle = _bundle(pool, settings=folding)
    day0, day30 = (f"{(BASE_TIME + timedelta(days=d)):%Y-%m-%d}" for d in (0, 30))
    assert bundle.context.splitlines() == [f"[{day0}, {day30}] Tomas works in Leeds.",
                                           format_item(other.object, "reader")]
    items = {item.id: item for item in bundle.items}
    assert items[again.object_id].folded_into == items[same_day.object_id].folded_into == first.object_id
    assert items[same_day.object_id].tokens == 0 and items[again.object_id].tokens > 0
    assert items[first.object_id].folded_into is None and '"folded_into"' not in plain.to_json()
    assert bundle.tokens_used < plain.tokens_used and bundle.tokens_used == count_tokens(bundle.context)
    with pytest.warns(IgnoredSettingWarning, match="ignores packing.fold_repeated_text"):
        ignored = RetrievalSettings(packing={"fold_repeated_text": True})
    assert ignored.fingerprint() == RetrievalSettings().fingerprint()
    assert _bundle(pool, settings=ignored).context == _bundle(pool).context
