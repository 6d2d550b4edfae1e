"""The cross-encoder reranker's node (RFC 7.3, the experimental policies) on hand-built pools with
exact expectations: the blend order, the three policies, the anchor, the tail and the provenance."""

from __future__ import annotations

import numpy as np
import pytest

from rms_retrieval.dataflows.frames import scored_frame
from rms_retrieval.nodes.models import QueryAnalysis
from rms_retrieval.nodes.pools import CrossEncoderScores, FilteredPool, RerankedPool
from rms_retrieval.nodes.reranking import cross_encoder_scores, reranked_scores__cross_encoder, reranked_scores__off
from rms_retrieval.nodes.scoring import fused_scores__rrf
from rms_retrieval.nodes.policy_settings import RerankSettings
from rms_retrieval.nodes.settings import RankFusionScoring, RetrievalSettings, ScoringSettings
from rms_retrieval.stores.models import NodeType
from rms_retrieval.stores.protocols import CrossEncoder
from tests.factories import BASE_TIME, make_candidate, make_object, make_request

NO_TIE = ScoringSettings(rank_fusion=RankFusionScoring(rrf_tie_break=None))


def _settings(policy="legacy", top_k=3, prior_weight=0.3) -> RetrievalSettings:
    return RetrievalSettings(scoring=NO_TIE, rerank=RerankSettings(enabled=True, policy=policy, top_k=top_k,
                                                                   prior_weight=prior_weight))


def _fused(*candidates):
    analysis = QueryAnalysis(raw_query="q", namespace_scope=("ns",), reference_time=BASE_TIME)
    return fused_scores__rrf(FilteredPool(candidates=tuple(candidates), excluded={}), analysis,
                             RetrievalSettings(scoring=NO_TIE))


def _pool():
    """a > b > c > d by fused score; a and c are multi-path, d is the tail at top_k 3."""
    return _fused(
        make_candidate(make_object("a"), VECTOR=(1, 0.9), LEXICAL=(1, 1.0)),
        make_candidate(make_object("b"), VECTOR=(2, 0.8)),
        make_candidate(make_object("c"), VECTOR=(3, 0.7), LEXICAL=(2, 0.5)),
        make_candidate(make_object("d"), VECTOR=(4, 0.6)),
    )


def _model(pool, **logits) -> CrossEncoderScores:
    by_content = {f"memory {name}": value for name, value in logits.items()}
    prefix = pool.objects[: len(logits)]
    return CrossEncoderScores(tuple(o.id for o in prefix), np.array([by_content[o.content] for o in prefix]), "m@1")


def _names(pool) -> list[str]:
    return [obj.content.removeprefix("memory ") for obj in pool.objects]


def test_the_fused_order_and_scores_the_tests_start_from():
    pool = _pool()
    assert _names(pool) == ["a", "c", "b", "d"]
    assert pool.score.tolist() == pytest.approx([1.0, 0.976062468, 0.491935484, 0.4765625], abs=1e-8)


def test_off_passes_the_scored_pool_through():
    pool = _pool()
    assert reranked_scores__off(pool).pool is pool and reranked_scores__off(pool).policy is None


def test_score_envelope_reorders_the_prefix_and_gives_it_the_original_sorted_scores():
    pool = _pool()
    result = reranked_scores__cross_encoder(pool, _model(pool, a=-5.0, c=0.0, b=5.0), _settings("score_envelope"))
    assert _names(result.pool) == ["b", "c", "a", "d"]
    assert result.pool.score.tolist() == pytest.approx(sorted(pool.score[:3].tolist(), reverse=True) + [pool.score[3]])
    # The tail keeps its score and its place.
    assert result.pool.score[3] == pool.score[3] and result.reranked == 3 and result.anchor is None
    frame = scored_frame(result).set_index("object_id")
    b = frame.loc[str(result.pool.objects[0].id)]
    assert b["rerank_model_score"] == 5.0 and b["rerank_rank"] == 1 and b["rerank_prior_weight"] == 0.3
    assert b["rerank_blend"] == pytest.approx(0.3 * 0.49193548 + 0.7 / (1 + np.exp(-5.0)), abs=1e-8)
    assert b["rerank_prior_score"] == pool.score[2]
    assert np.isnan(frame.loc[str(pool.objects[3].id)]["rerank_model_score"])


def test_legacy_carries_the_blend_as_the_score_and_can_drop_below_the_tail():
    pool = _pool()
    result = reranked_scores__cross_encoder(pool, _model(pool, a=-10.0, c=-10.0, b=5.0), _settings("legacy"))
    blend_a = 0.3 * 1.0 + 0.7 / (1 + np.exp(10.0))
    assert _names(result.pool) == ["b", "d", "a", "c"]  # the unjudged tail d now outranks a and c
    assert result.pool.score[2] == pytest.approx(round(blend_a, 10))


def test_prior_weight_zero_follows_the_model_alone():
    pool = _pool()
    model = _model(pool, a=1.0, c=3.0, b=2.0)
    result = reranked_scores__cross_encoder(pool, model, _settings("score_envelope", prior_weight=0.0))
    assert _names(result.pool) == ["c", "b", "a", "d"]
    with_prior = reranked_scores__cross_encoder(pool, _model(pool, a=1.0, c=1.05, b=1.1), _settings("score_envelope"))
    assert _names(with_prior.pool)[:3] == ["a", "c", "b"]  # near-equal model scores: the prior decides


def test_anchored_puts_the_best_ordinary_multi_path_candidate_first():
    pool = _pool()
    result = reranked_scores__cross_encoder(pool, _model(pool, a=-5.0, c=0.0, b=5.0),
                                            _settings("anchored_score_envelope"))
    assert result.anchor == pool.objects[0].id
    assert _names(result.pool) == ["a", "b", "c", "d"]
    assert result.pool.score.tolist()[:3] == pytest.approx(sorted(pool.score[:3].tolist(), reverse=True))


def test_instructions_and_pinned_records_are_never_anchors():
    pool = _fused(
        make_candidate(make_object("a", node_type=NodeType.INSTRUCTION), VECTOR=(1, 0.9), LEXICAL=(1, 1.0)),
        make_candidate(make_object("p", salience=1.0), VECTOR=(2, 0.85), LEXICAL=(2, 0.9)),
        make_candidate(make_object("b"), VECTOR=(3, 0.8)),
        make_candidate(make_object("c"), VECTOR=(4, 0.7), LEXICAL=(3, 0.5)),
    )
    assert _names(pool) == ["a", "p", "c", "b"]
    model = _model(pool, a=0.0, p=1.0, c=-5.0, b=5.0)
    result = reranked_scores__cross_encoder(pool, model, _settings("anchored_score_envelope", top_k=4))
    assert result.anchor == pool.objects[2].id and _names(result.pool) == ["c", "b", "p", "a"]
    outside = reranked_scores__cross_encoder(pool, _model(pool, a=0.0, p=1.0), _settings("anchored_score_envelope",
                                                                                         top_k=2))
    assert outside.anchor is None  # the only ordinary multi-path candidate is outside the prefix


def test_equal_assigned_scores_keep_the_id_tie_break():
    pool = _fused(
        make_candidate(make_object("x"), VECTOR=(1, 0.9)),
        make_candidate(make_object("y"), LEXICAL=(1, 0.9)),
    )
    assert pool.score[0] == pool.score[1]
    model = CrossEncoderScores(pool.object_ids, np.array([-1.0, 1.0]) if pool.objects[0].content == "memory x"
                               else np.array([1.0, -1.0]), "m@1")
    result = reranked_scores__cross_encoder(pool, model, _settings("score_envelope", top_k=2))
    assert result.pool.object_ids == tuple(sorted(pool.object_ids, key=lambda u: u.int))


def test_scores_recorded_for_another_pool_are_refused():
    pool = _pool()
    other = CrossEncoderScores(pool.object_ids[1:4], np.zeros(3), "m@1")
    with pytest.raises(ValueError, match="lack 1 of the 3 reranked candidates"):
        reranked_scores__cross_encoder(pool, other, _settings())


class _Lengths(CrossEncoder):
    """A real scorer, not a stand-in for the model: the negated text length."""

    identity = "lengths@0"

    def score(self, question, texts):
        return np.array([-float(len(t)) for t in texts])


def test_cross_encoder_scores_reads_the_question_and_the_top_k_contents():
    pool = _pool()
    scores = cross_encoder_scores(pool, make_request("q"), _Lengths(), _settings(top_k=2))
    assert scores.object_ids == pool.object_ids[:2] and scores.scores.tolist() == [-8.0, -8.0]
    assert scores.model == "lengths@0"
    assert isinstance(reranked_scores__cross_encoder(pool, scores, _settings(top_k=2)), RerankedPool)
