"""Both score formulas (RFC 7, 7.1, 7.2) on hand-built pools with exact expectations."""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from datetime import timedelta

import pytest
from hypothesis import given, strategies as st

from rms_retrieval.dataflows.frames import scored_frame
from rms_retrieval.nodes.models import QueryAnalysis, QueryIntent, TemporalSignal, TemporalType
from rms_retrieval.nodes.candidate_generation import candidate_objects, text_path_candidates
from rms_retrieval.nodes.filtering import filtered_candidates, text_path_exclusions
from rms_retrieval.nodes.merging import merged_candidates__primary
from rms_retrieval.nodes.pools import (OBJECT_COLUMNS, TEXT_HIT_COLUMNS, ChannelHit, ChannelResult, FilteredPool,
                                       PathType)
from rms_retrieval.nodes.scoring import (
    UPDATE_WORDS, _update_worded, fused_scores__rrf, fused_scores__weighted, text_path_score_inputs,
)
from rms_retrieval.nodes.settings import RankFusionScoring, RetrievalSettings, ScoringSettings, WeightedScoring
from tests.factories import BASE_TIME, FakeStore, make_candidate, make_object, make_request


def _pool(*candidates) -> FilteredPool:
    return FilteredPool(candidates=tuple(candidates), excluded={})


def _analysis(intent=QueryIntent.SEMANTIC, current_state=False, window=None) -> QueryAnalysis:
    signals = ()
    if window:
        signals = (TemporalSignal(type=TemporalType.ABSOLUTE, text="x", start=window[0], end=window[1]),)
    return QueryAnalysis(raw_query="q", intent=intent, current_state=current_state, temporal_signals=signals,
                         namespace_scope=("ns",), reference_time=BASE_TIME)


def _rrf(*candidates, analysis=None, settings=None):
    frame = scored_frame(fused_scores__rrf(_pool(*candidates), analysis or _analysis(), settings or RetrievalSettings()))
    return frame.set_index("object_id")


NO_TIE = RetrievalSettings(scoring=ScoringSettings(rank_fusion=RankFusionScoring(rrf_tie_break=None)))


def test_first_on_both_channels_scores_one_and_a_single_channel_at_most_half():
    a = make_candidate(make_object("a"), VECTOR=(1, 0.9), LEXICAL=(1, 1.0))
    b = make_candidate(make_object("b"), VECTOR=(2, 0.5))
    graph_only = make_candidate(make_object("g"), GRAPH=(1, 1.0))
    frame = _rrf(a, b, graph_only, settings=NO_TIE)
    assert frame.loc[str(a.object_id), "score"] == 1.0
    assert frame.loc[str(b.object_id), "score"] == pytest.approx(61 / 62 / 2, abs=1e-10)
    assert frame.loc[str(graph_only.object_id), "score"] == 0.0
    assert list(frame.index)[0] == str(a.object_id)


def test_ranks_are_competition_ranks_within_the_pool():
    objs = [make_candidate(make_object(n), VECTOR=(i, s)) for i, (n, s) in enumerate([("a", .9), ("b", .7), ("c", .7), ("d", .1)], 1)]
    frame = _rrf(*objs, settings=NO_TIE)
    assert [frame.loc[str(c.object_id), "semantic_rank"] for c in objs] == [1, 2, 2, 4]


def test_epistemic_factor_is_divided_by_the_pool_maximum():
    observed = make_candidate(make_object("o"), VECTOR=(1, 0.9))
    inferred = make_candidate(make_object("i", epistemic_type="INFERRED"), VECTOR=(2, 0.8))
    frame = _rrf(observed, inferred, settings=NO_TIE)
    assert frame.loc[str(observed.object_id), "epistemic_factor"] == 1.0
    assert frame.loc[str(inferred.object_id), "epistemic_factor"] == pytest.approx(0.7)
    only_inferred = _rrf(inferred, settings=NO_TIE)
    assert only_inferred.loc[str(inferred.object_id), "epistemic_factor"] == 1.0


def test_temporal_affinity_reads_the_window_whatever_the_intent():
    window = (BASE_TIME, BASE_TIME + timedelta(days=1))
    inside = make_candidate(make_object("in", days=0.5), VECTOR=(2, 0.5))
    outside = make_candidate(make_object("out", days=-60), VECTOR=(1, 0.6))
    settings = NO_TIE
    temporal = _rrf(inside, outside, analysis=_analysis(QueryIntent.TEMPORAL, window=window), settings=settings)
    assert temporal.index[0] == str(inside.object_id)
    dated = _rrf(inside, outside, analysis=_analysis(QueryIntent.ENTITY_LOOKUP, window=window), settings=settings)
    assert dated.index[0] == str(inside.object_id)
    assert dated.loc[str(inside.object_id), "temporal_affinity"] == 1.0
    undated = _rrf(inside, outside, analysis=_analysis(QueryIntent.ENTITY_LOOKUP), settings=settings)
    assert undated.index[0] == str(outside.object_id)


def test_event_time_tie_break_orders_equal_scores_newest_first():
    old = make_candidate(make_object("old", days=-5), VECTOR=(1, 0.9), LEXICAL=(2, 0.5))
    new = make_candidate(make_object("new", days=0), VECTOR=(2, 0.8), LEXICAL=(1, 1.0))
    frame = _rrf(old, new)
    assert frame.index[0] == str(new.object_id)
    assert frame.loc[str(new.object_id), "tie_break"] == 0.0
    assert frame.loc[str(old.object_id), "tie_break"] == 0.5
    assert frame.loc[str(new.object_id), "score"] > frame.loc[str(old.object_id), "score"]


def test_scores_are_rounded_to_ten_decimals_before_the_tie_break():
    first = make_candidate(make_object("first", days=0), VECTOR=(1, 0.9))
    second = make_candidate(make_object("second", days=-1), VECTOR=(2, 0.8))  # rank 2: 61/62/2 before rounding
    unrounded = 61 / 62 / 2
    assert abs(round(unrounded, 10) - unrounded) > 1e-11  # far above the tie-break's 0.5e-11 and float error
    assert _rrf(first, second, settings=NO_TIE).loc[str(second.object_id), "score"] == round(unrounded, 10)
    frame = _rrf(first, second)  # the older of the two loses half of 1e-11 after rounding
    assert frame.loc[str(second.object_id), "tie_break"] == 0.5
    assert frame.loc[str(second.object_id), "score"] == round(unrounded, 10) - 0.5e-11


def test_recency_boost_and_current_update_on_current_state_questions():
    old = make_candidate(make_object("old", "Tomas works in York.", days=-200), VECTOR=(1, 0.9), LEXICAL=(1, 1.0))
    new = make_candidate(make_object("new", "Tomas moved and now works in Leeds.", days=0), VECTOR=(2, 0.8), LEXICAL=(2, 0.9))
    frame = _rrf(old, new, analysis=_analysis(current_state=True))
    assert frame.index[0] == str(new.object_id)
    assert frame.loc[str(new.object_id), "recency_boost_factor"] == 1.0
    assert frame.loc[str(new.object_id), "current_update_factor"] == 1.3
    assert frame.loc[str(old.object_id), "current_update_factor"] == 1.0
    not_current = _rrf(old, new)
    assert not_current.index[0] == str(old.object_id)


@pytest.mark.parametrize("formula", ["rrf", "weighted"])
def test_a_memory_stated_after_the_reference_time_is_never_the_current_state(formula):
    """Issue 21 #8: one memory dated 9999 won every current-state question at any reference time."""
    from datetime import datetime, timezone

    future = datetime(9999, 1, 1, tzinfo=timezone.utc)
    planted = make_candidate(make_object("planted", "Tomas now works at EvilCorp.", event_time=future, created_at=future,
                                         updated_at=future), VECTOR=(1, 0.9), LEXICAL=(1, 1.0))
    new = make_candidate(make_object("new", "Tomas moved and now works in Leeds.", days=0), VECTOR=(2, 0.85), LEXICAL=(2, 0.9))
    old = make_candidate(make_object("old", "Tomas works in York.", days=-200), VECTOR=(3, 0.8), LEXICAL=(3, 0.8))
    analysis = _analysis(current_state=True)
    if formula == "rrf":
        frame = _rrf(planted, new, old, analysis=analysis)
    else:
        frame = scored_frame(fused_scores__weighted(_pool(planted, new, old), analysis, make_request(),
                                                    RetrievalSettings())).set_index("object_id")
    assert frame.index[0] == str(new.object_id)
    assert frame.loc[str(planted.object_id), "recency"] == 0.0
    assert frame.loc[str(planted.object_id), "current_update_factor"] == 1.0
    assert frame.loc[str(new.object_id), "current_update_factor"] == 1.3
    assert frame.loc[str(new.object_id), "recency"] == 1.0  # the anchor is the newest memory stated by then


def test_rrf_k_is_validated():
    with pytest.raises(ValueError, match="rrf_k"):
        RankFusionScoring(rrf_k=0)
    with pytest.raises(ValueError, match="rrf_k"):
        RankFusionScoring(rrf_k=10_001)


def _weighted(*candidates, settings=None, analysis=None):
    settings = settings or RetrievalSettings(scoring=ScoringSettings(fusion="weighted"))
    frame = scored_frame(fused_scores__weighted(_pool(*candidates), analysis or _analysis(), make_request(), settings))
    return frame.set_index("object_id")


def test_recency_time_event_time_dates_an_imported_memory_by_when_it_was_stated():
    """History stored at the reference time but stated weeks before has full recency by updated_at;
    with recency_time="event_time" it decays from when it was stated (RFC 7, recency clock)."""
    imported = BASE_TIME + timedelta(days=30)  # make_request's reference time
    old = make_candidate(make_object("old", days=2, created_at=imported, updated_at=imported), VECTOR=(1, 0.8))
    new = make_candidate(make_object("new", days=29, created_at=imported, updated_at=imported), VECTOR=(2, 0.8))
    ids = [str(old.object.id), str(new.object.id)]
    assert list(_weighted(old, new).loc[ids, "recency"]) == [1.0, 1.0]
    stated = _weighted(old, new, settings=RetrievalSettings(scoring=ScoringSettings(
        fusion="weighted", weighted=WeightedScoring(recency_time="event_time")))).loc[ids]
    assert list(stated["recency"]) == pytest.approx([math.exp(-0.05 * 28), math.exp(-0.05 * 1)])
    assert stated["score"].iloc[1] > stated["score"].iloc[0]


@pytest.mark.parametrize("change", [
    {"obj": {"salience": 0.9}}, {"obj": {"confidence": 0.4}}, {"obj": {"epistemic_type": "INFERRED"}},
    {"obj": {"days": -300}}, {"hits": {"VECTOR": (1, 0.2)}}, {"hits": {"LEXICAL": (1, 0.1)}},
    {"hits": {"GRAPH": (1, 0.5)}},
])
def test_weighted_formula_reads_every_input(change):
    base_hits = {"VECTOR": (1, 0.8), "LEXICAL": (1, 0.6), "GRAPH": (1, 1.0)}
    base = make_candidate(make_object("a"), **base_hits)
    changed = make_candidate(make_object("a", **change.get("obj", {})), **{**base_hits, **change.get("hits", {})})
    assert _weighted(base)["score"].iloc[0] != _weighted(changed)["score"].iloc[0]


def test_weighted_score_is_the_documented_sum():
    cand = make_candidate(make_object("a", salience=0.5, confidence=1.0), VECTOR=(1, 0.8), LEXICAL=(1, 0.6), GRAPH=(1, 1.0))
    row = _weighted(cand).iloc[0]
    w = WeightedScoring()
    expected = (w.w_semantic * 0.8 + w.w_lexical * 0.6 + w.w_graph * 1.0 + w.w_recency * row["recency"]
                + w.w_salience * 0.5 + w.w_confidence * 1.0) * 1.0 * 1.0 * (1 / 1.5)
    assert row["score"] == pytest.approx(expected, abs=1e-10)
    assert row["formula_version"] == 1


@pytest.mark.parametrize("bad, message", [
    ({"w_semantic": 0.5}, "must sum to 1.0 (RFC 7), got 1.150000"),
    ({"w_lexical": float("nan")}, "w_lexical must be a finite number, got nan"),
    ({"w_graph": float("inf")}, "w_graph must be a finite number, got inf"),
    ({"w_recency": -0.1}, "w_recency must not be negative, got -0.1"),
])
def test_weights_are_validated_when_the_configuration_is_built(bad, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        WeightedScoring(**bad)


def test_nested_boosts_reject_non_finite_values():
    with pytest.raises(ValueError, match="TURN"):
        ScoringSettings(node_type_boosts={"TURN": float("nan")})


def test_speaker_factor_lifts_the_named_persons_turns_pool_relative():
    said = make_candidate(make_object("said"), VECTOR=(2, 0.5))
    other = make_candidate(make_object("other"), VECTOR=(1, 0.9))
    settings = RetrievalSettings(scoring={"speaker_boost": 1.0, "rank_fusion": {"rrf_tie_break": None}})
    pool, analysis = _pool(said, other), _analysis()
    frame = scored_frame(fused_scores__rrf(pool, analysis, settings, frozenset({said.object_id.int})))
    frame = frame.set_index("object_id")
    assert frame.loc[str(said.object_id), "speaker_factor"] == 1.0
    assert frame.loc[str(other.object_id), "speaker_factor"] == 0.5
    assert frame.index[0] == str(said.object_id)  # rank 2 doubled beats rank 1 halved
    no_boost = RetrievalSettings(scoring={"speaker_boost": 0.0, "rank_fusion": {"rrf_tie_break": None}})
    off = scored_frame(fused_scores__rrf(pool, analysis, no_boost, frozenset({said.object_id.int})))
    assert off["speaker_factor"].tolist() == [1.0, 1.0] and off["object_id"].iloc[0] == str(other.object_id)
    weighted = RetrievalSettings(scoring={"fusion": "weighted", "speaker_boost": 1.0})
    frame = scored_frame(fused_scores__weighted(pool, analysis, make_request(), weighted, frozenset({said.object_id.int})))
    assert frame.set_index("object_id").loc[str(other.object_id), "speaker_factor"] == 0.5
    nobody = scored_frame(fused_scores__weighted(pool, analysis, make_request(), weighted, frozenset()))
    assert nobody["speaker_factor"].tolist() == [1.0, 1.0]  # no named speaker in the pool: no factor


def test_the_pronouns_speakers_are_lifted_as_named_speakers_when_asked_to():
    mine = make_candidate(make_object("mine", "I keep my bike in the garage", metadata={"role": "user"}), VECTOR=(2, 0.5))
    labelled = make_candidate(make_object("labelled", "user: my bike is red"), VECTOR=(3, 0.4))
    reply = make_candidate(make_object("reply", "assistant: a garage keeps a bike dry"), VECTOR=(1, 0.9))
    pool = _pool(mine, labelled, reply)

    def factors(roles, asked):
        settings = RetrievalSettings(scoring={"speaker_boost": 1.0, "pronoun_speakers": roles,
                                              "rank_fusion": {"rrf_tie_break": None}})
        frame = scored_frame(fused_scores__rrf(pool, _analysis().model_copy(update={"speaker_roles": asked}), settings))
        frame = frame.set_index("object_id")
        return [frame.loc[str(c.object_id), "speaker_factor"] for c in (mine, labelled, reply)], frame.index[0]

    # a first-person question: the user's turns (metadata role, or a "user:" label) are lifted
    assert factors(("user",), ("user",)) == ([1.0, 1.0, 0.5], str(mine.object_id))  # rank 2 lifted beats rank 1
    assert factors(("user", "assistant"), ("user",))[0] == [1.0, 1.0, 0.5]
    # a second-person question lifts the assistant's turns only where "assistant" is asked for
    assert factors(("user", "assistant"), ("assistant",))[0] == [0.5, 0.5, 1.0]
    assert factors(("user",), ("assistant",))[0] == [1.0] * 3
    # both persons: both roles lifted, so nobody is lifted over the other; the default lifts nobody
    assert factors(("user", "assistant"), ("user", "assistant"))[0] == [1.0] * 3
    assert factors((), ("user",))[0] == [1.0] * 3


def test_weighted_current_state_recency_reads_event_time_else_updated_at():
    """RFC 7's current-state clock under the weighted formula: a memory without an event time that
    was updated yesterday is as recent as yesterday, not as when it was first stored."""
    stored = BASE_TIME - timedelta(days=100)
    revised = make_candidate(make_object("revised", "Tomas now works in Leeds.", event_time=None, created_at=stored,
                                         updated_at=BASE_TIME - timedelta(days=1)), VECTOR=(1, 0.8))
    dated = make_candidate(make_object("dated", "Tomas now works in York.", days=-10), VECTOR=(2, 0.8))
    frame = _weighted(revised, dated, analysis=_analysis(current_state=True))
    assert frame.loc[str(revised.object_id), "recency"] == 1.0  # the newest by its clock: the anchor
    assert frame.loc[str(dated.object_id), "recency"] == pytest.approx(math.exp(-0.05 * 9))
    assert frame.index[0] == str(revised.object_id)


def test_under_the_weighted_formula_the_relevance_floor_caps_the_score_at_the_relevance():
    """RFC 7.1: a memory whose semantic plus lexical relevance is below `relevance_floor` scores
    at most that relevance, however salient, recent or confident it is; above the floor, nothing
    is capped."""
    faint = make_candidate(make_object("faint", "The weather was fine.", salience=1.0, confidence=1.0, days=30),
                           VECTOR=(1, 0.05))
    plain = make_candidate(make_object("plain", "Tomas works in Leeds.", salience=0.1, days=0), VECTOR=(2, 0.6))
    frame = _weighted(faint, plain)
    assert frame.loc[str(faint.object_id), "score"] == pytest.approx(0.05)
    assert frame.loc[str(faint.object_id), "base_score"] > 0.05  # what the weights alone gave it
    assert frame.loc[str(plain.object_id), "score"] > 0.6 * WeightedScoring().w_semantic
    assert frame.index[0] == str(plain.object_id)


def test_a_multiplier_of_one_turns_the_current_update_off_and_the_relevance_floor_gates_it():
    old = make_candidate(make_object("old", "Tomas works in York.", days=-200), VECTOR=(1, 0.9), LEXICAL=(1, 1.0))
    new = make_candidate(make_object("new", "Tomas moved and now works in Leeds.", days=0), VECTOR=(2, 0.8),
                         LEXICAL=(2, 0.9))
    current = _analysis(current_state=True)
    assert _rrf(old, new, analysis=current).loc[str(new.object_id), "current_update_factor"] == 1.3
    off = RetrievalSettings(scoring=ScoringSettings(current_update_multiplier=1.0))
    assert set(_rrf(old, new, analysis=current, settings=off)["current_update_factor"]) == {1.0}
    # the same update, now found by the vector path alone with a faint cosine: below the floor
    faint = make_candidate(new.object, VECTOR=(2, 0.1))
    assert _rrf(old, faint, analysis=current).loc[str(faint.object_id), "current_update_factor"] == 1.0
    lower = RetrievalSettings(scoring=ScoringSettings(relevance_floor=0.05))
    assert _rrf(old, faint, analysis=current, settings=lower).loc[str(faint.object_id), "current_update_factor"] == 1.3


@pytest.mark.parametrize("field, key", [("epistemic_weights", "OBSERVED"), ("node_type_boosts", "TURN")])
def test_negative_epistemic_weights_and_node_type_boosts_are_rejected(field, key):
    values = dict(getattr(ScoringSettings(), field))
    values[key] = -0.5
    with pytest.raises(ValueError, match=f"{key} must not be negative, got -0.5"):
        ScoringSettings(**{field: values})


def _shifted(weight=0.25, **weights) -> RetrievalSettings:
    return RetrievalSettings(scoring=ScoringSettings(
        fusion="weighted", weighted=WeightedScoring(current_state_recency_weight=weight, **weights)))


def test_the_current_state_shift_raises_w_recency_and_scales_the_other_weights():
    """RFC 7.2's weight shift, when asked for: on a current-state question w_recency 0.10 becomes
    0.25 and the other five keep their proportions in the remaining 0.75, so a newer memory the
    question matches a little less comes first; other questions keep the plain weights."""
    old = make_candidate(make_object("old", "Tomas works in York.", days=-40), VECTOR=(1, 0.9), LEXICAL=(1, 1.0))
    new = make_candidate(make_object("new", "Tomas works in Leeds.", days=0), VECTOR=(2, 0.85))
    current = _analysis(current_state=True)
    plain = _weighted(old, new, analysis=current)
    shifted = _weighted(old, new, analysis=current, settings=_shifted())
    assert plain.index[0] == str(old.object_id) and shifted.index[0] == str(new.object_id)
    recency = math.exp(-0.05 * 40)
    assert shifted.loc[str(old.object_id), "recency"] == plain.loc[str(old.object_id), "recency"] == pytest.approx(recency)
    others = plain.loc[str(old.object_id), "base_score"] - WeightedScoring().w_recency * recency
    assert shifted.loc[str(old.object_id), "base_score"] == pytest.approx(others * 0.75 / 0.9 + 0.25 * recency)
    other = _weighted(old, new, settings=_shifted())
    assert other["base_score"].tolist() == _weighted(old, new)["base_score"].tolist()


def test_while_shifted_update_wording_doubles_recency_and_the_decay_is_at_least_five_hundredths():
    anchor = make_candidate(make_object("anchor", "Tomas works in Leeds.", days=0), VECTOR=(1, 0.9))
    moved = make_candidate(make_object("moved", "Tomas moved to Leeds.", days=-20), VECTOR=(2, 0.9))
    stayed = make_candidate(make_object("stayed", "Tomas works in York.", days=-20), VECTOR=(3, 0.9))
    slow = _shifted(recency_lambda_per_day=0.01)
    frame = _weighted(anchor, moved, stayed, analysis=_analysis(current_state=True), settings=slow)
    assert frame.loc[str(stayed.object_id), "recency"] == pytest.approx(math.exp(-0.05 * 20))
    assert frame.loc[str(moved.object_id), "recency"] == pytest.approx(2 * math.exp(-0.05 * 20))
    unshifted = _weighted(anchor, moved, stayed, analysis=_analysis(current_state=True),
                          settings=_shifted(weight=0.1, recency_lambda_per_day=0.01))
    assert unshifted.loc[str(moved.object_id), "recency"] == pytest.approx(math.exp(-0.01 * 20))  # w_recency 0.1 is not below 0.1


def test_update_wording_is_found_whatever_its_case_and_only_as_whole_words():
    assert _update_worded("I MOVED to Leeds") and _update_worded("Now I work at home") and _update_worded("No Longer there")
    assert not _update_worded("Snow fell; she knows the unchanged route") and not _update_worded("")


_PIECES = st.sampled_from([*UPDATE_WORDS, "NOW", "Moved.", "snow", "knows", "unchanged", "no", "longer", "nowhere",
                           "currentlyX", "_now", "ß", "İ", " ", "\n", ",", "-"])


@given(st.lists(st.one_of(_PIECES, st.text(max_size=4)), max_size=12))
def test_update_wording_is_the_whole_word_search_of_the_case_folded_text(pieces):
    text = "".join(pieces)
    _update_worded.cache_clear()
    expected = re.search(r"\b(" + "|".join(UPDATE_WORDS) + r")\b", text.casefold()) is not None
    assert _update_worded(text) is expected


@pytest.mark.parametrize("formula", [_rrf, _weighted])
def test_a_turns_text_is_searched_for_update_wording_only_by_a_current_state_question(formula):
    moved = make_candidate(make_object("moved", "Ines moved to Porto and now rows there.", days=-3),
                           VECTOR=(1, 0.9), LEXICAL=(1, 1.0))
    _update_worded.cache_clear()
    formula(moved)
    assert _update_worded.cache_info().misses == 0
    formula(moved, analysis=_analysis(current_state=True), **({"settings": _shifted()} if formula is _weighted else {}))
    assert _update_worded.cache_info().misses == 1


def _channel(path, *objects):
    hits = tuple(ChannelHit(o.id, path, rank, 1.0 / rank, 1.0 / rank, {"hops": 1} if path is PathType.GRAPH else {})
                 for rank, o in enumerate(objects, start=1))
    return ChannelResult(path=path, hits=hits)


@pytest.mark.parametrize("fusion", ["rrf", "weighted"])
def test_score_inputs_made_with_the_text_paths_are_read_for_the_very_objects_they_were_made_for(fusion):
    settings = RetrievalSettings(scoring=ScoringSettings(fusion=fusion, speaker_boost=0.5))
    analysis = _analysis(window=(BASE_TIME, BASE_TIME + timedelta(days=1)))
    a, b, c, d = (make_object("a", salience=0.9), make_object("b", days=3, salience=0.2), make_object("c", days=9),
                  make_object("d", days=5))
    store, request = FakeStore([a, b, c, d]), make_request()
    text = [_channel(PathType.LEXICAL, a, b, c), _channel(PathType.GRAPH, c, a)]
    channels = [*text, _channel(PathType.VECTOR, d, b, a)]  # d: the vector path's alone
    found = text_path_candidates(text, store, request)
    merged = merged_candidates__primary(found, channels, candidate_objects(found, channels[-1], store, request))
    pool = filtered_candidates(merged, request, settings)
    spoken = frozenset({b.id.int})
    node = fused_scores__rrf if fusion == "rrf" else functools.partial(fused_scores__weighted, request=request)

    def frame(made=None, scored=pool):
        scores = node(scored, analysis, settings=settings, spoken_by_query_entities=spoken, text_path_score_inputs=made)
        return scored_frame(scores).set_index("object_id")

    made = text_path_score_inputs(text_path_exclusions(found, request, settings), found, analysis, settings, spoken)
    assert sorted(made.rows) == sorted(o.id.int for o in (a, b, c))
    fresh = frame()
    assert frame(made).equals(fresh) and fresh.loc[str(b.id), "speaker_factor"] == 1.0
    assert fresh.loc[str(c.id), "graph_hops"] == 1.0 and math.isnan(fresh.loc[str(d.id), "lexical_bm25"])
    # The merge's columns score as the same candidates made one by one.
    made_one_by_one = dataclasses.replace(pool, candidates=tuple(pool.candidates))
    assert frame(scored=made_one_by_one).equals(fresh) and frame(made, made_one_by_one).equals(fresh)

    def altered(column, value, obj=a, **fields):
        table = made.table.copy()
        table[made.rows[obj.id.int], column] = value
        return dataclasses.replace(made, table=table, **fields)

    # A row is read for its object, and for no other object with the same id.
    salience = len(TEXT_HIT_COLUMNS) + OBJECT_COLUMNS.index("salience")
    assert frame(altered(salience, 0.0)).loc[str(a.id), "salience"] == 0.0
    copies = list(made.objects)
    copies[made.rows[a.id.int]] = a.model_copy()
    assert frame(dataclasses.replace(altered(salience, 0.0), objects=tuple(copies))).equals(fresh)
    # Its hit columns only for a pool merged from the same text paths (not one a reformulation merged).
    bm25 = TEXT_HIT_COLUMNS.index("lexical_bm25")
    assert frame(altered(bm25, 7.0)).loc[str(a.id), "lexical_bm25"] == 7.0
    assert frame(altered(bm25, 7.0), dataclasses.replace(pool, merged_from=None)).equals(fresh)
    # Its speaker value only for the same spoken objects.
    assert frame(altered(-1, 9.0)).loc[str(a.id), "score"] != fresh.loc[str(a.id), "score"]
    assert frame(altered(-1, 9.0, spoken=frozenset())).equals(fresh)


@pytest.mark.parametrize("fusion", ["rrf", "weighted"])
def test_text_paths_that_found_nothing_score_an_empty_pool(fusion):
    settings = RetrievalSettings(scoring=ScoringSettings(fusion=fusion))
    found = text_path_candidates([], FakeStore([]), make_request())
    made = text_path_score_inputs(text_path_exclusions(found, make_request(), settings), found, _analysis(), settings)
    assert made.table.shape == (0, len(TEXT_HIT_COLUMNS) + len(OBJECT_COLUMNS) + 1) and made.times.shape == (0, 3)
    node = fused_scores__rrf if fusion == "rrf" else functools.partial(fused_scores__weighted, request=make_request())
    pool = FilteredPool((), {}, merged_from=found)
    assert len(node(pool, _analysis(), settings=settings, text_path_score_inputs=made)) == 0
