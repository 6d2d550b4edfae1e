"""Stage 5, optional (RFC 7.3 and the experimental retrieval policies): a cross-encoder reorders
the top of the scored pool, after scoring and before session context.

Hamilton config `reranker` switches it: `off` passes `fused_scores` through unchanged;
`cross_encoder` scores the first `rerank.top_k` rows with the model (`cross_encoder_scores`,
the only node that runs it) and reorders them (`reranked_scores`). The prefix's new order is
the blend `prior_weight × own score / the prefix's largest + (1 − prior_weight) × sigmoid(model
score)`, ties by object id. Then, by `rerank.policy`:

- `legacy`: the prefix carries the blend as its score and the whole pool is sorted again, so a
  blend can fall below the untouched tail (the scale failure the envelope policies fix).
- `score_envelope`: the prefix takes its original sorted score multiset in the new order; the
  tail keeps its scores and order; equal scores keep the id tie-break.
- `anchored_score_envelope`: as `score_envelope`, with the original highest-scored ordinary
  candidate found by two or more paths put first, where it is in the prefix. Instructions, pinned
  records (salience 1.0, active tasks and intents) are never anchors. A priority, not a guarantee
  that it stays packed.

Every reranked row keeps its provenance in the score trace (`ScoreFactors.rerank_*`: the model
score, the prior weight, the blend, the score before, the place assigned); replay hands the
logged model scores to `cross_encoder_scores` and never runs the model.
"""

from __future__ import annotations


import numpy as np
from hamilton.function_modifiers import config

from rms_retrieval.nodes.helpers.rounding import rounded
from rms_retrieval.nodes.models import RetrievalRequest
from rms_retrieval.nodes.pools import CrossEncoderScores, PathType, RerankedPool, path_mask
from rms_retrieval.nodes.scored_pool import ScoredPool, rank_order
from rms_retrieval.nodes.scoring import SCORE_DECIMALS
from rms_retrieval.nodes.settings import RetrievalSettings
from rms_retrieval.stores.models import MemoryObject, NodeType
from rms_retrieval.stores.protocols import CrossEncoder

_PINNED_BIT = path_mask([PathType.PINNED])
ENVELOPE_POLICIES = frozenset({"score_envelope", "anchored_score_envelope"})


@config.when(reranker="cross_encoder")
def cross_encoder_scores(
    fused_scores: ScoredPool, request: RetrievalRequest, cross_encoder: CrossEncoder, settings: RetrievalSettings
) -> CrossEncoderScores:
    """The cross-encoder's score of (question, content) for each of the first `rerank.top_k` rows."""
    prefix = fused_scores.objects[: settings.rerank.top_k]
    scores = np.asarray(cross_encoder.score(request.query, [obj.content for obj in prefix]), dtype=np.float64)
    return CrossEncoderScores(tuple(obj.id for obj in prefix), scores, cross_encoder.identity)


@config.when(reranker="off")
def reranked_scores__off(fused_scores: ScoredPool) -> RerankedPool:
    """The scored pool as it is: the reranker is off."""
    return RerankedPool(pool=fused_scores)


def _ordinary(obj: MemoryObject, mask: int) -> bool:
    """May be an anchor: not an instruction, not pinned (salience 1.0, an active task or intent)."""
    return obj.node_type is not NodeType.INSTRUCTION and not obj.is_pinned and not mask & _PINNED_BIT


def _sigmoid(values: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-values))


def _model_scores(pool: ScoredPool, size: int, given: CrossEncoderScores) -> np.ndarray:
    by_id = dict(zip(given.object_ids, given.scores.tolist()))
    missing = [obj.id for obj in pool.objects[:size] if obj.id not in by_id]
    if missing:
        raise ValueError(f"the cross-encoder scores lack {len(missing)} of the {size} reranked candidates "
                         f"(first {missing[0]}); scores recorded for another pool cannot rerank this one")
    return np.array([by_id[obj.id] for obj in pool.objects[:size]], dtype=np.float64)


@config.when(reranker="cross_encoder")
def reranked_scores__cross_encoder(
    fused_scores: ScoredPool, cross_encoder_scores: CrossEncoderScores, settings: RetrievalSettings
) -> RerankedPool:
    """The scored pool with its first `rerank.top_k` rows reordered by the cross-encoder under `rerank.policy`."""
    cfg = settings.rerank
    pool = fused_scores
    size = min(cfg.top_k, len(pool))
    if size == 0:
        return RerankedPool(pool=pool, policy=cfg.policy, model=cross_encoder_scores.model)
    model = _model_scores(pool, size, cross_encoder_scores)
    before = pool.score[:size]
    largest = float(before.max())
    prior = before / largest if largest > 0 else np.zeros(size)
    blend = cfg.prior_weight * prior + (1.0 - cfg.prior_weight) * _sigmoid(model)
    prefix_objects = pool.objects[:size]
    order = rank_order(blend, np.zeros(size, dtype=np.int64), prefix_objects)
    anchor = None
    if cfg.policy == "anchored_score_envelope":
        # The prefix is in score order, so the first ordinary multi-path row is the highest-scored one.
        found = next((i for i in range(size) if pool.path_count[i] >= 2
                      and _ordinary(pool.objects[i], int(pool.path_mask[i]))), None)
        if found is not None:
            anchor = pool.objects[found].id
            order = np.concatenate([[found], order[order != found]])
    score = pool.score.copy()
    if cfg.policy in ENVELOPE_POLICIES:
        score[order] = np.sort(before)[::-1]
    else:
        score[:size] = rounded(blend, SCORE_DECIMALS)
    assigned = np.empty(size)
    assigned[order] = np.arange(1, size + 1, dtype=float)
    columns = {"rerank_model_score": model, "rerank_prior_weight": np.full(size, cfg.prior_weight),
               "rerank_blend": blend, "rerank_prior_score": before, "rerank_rank": assigned}
    factors = pool.factors.replaced(**{
        name: np.concatenate([values, getattr(pool.factors, name)[size:]]) for name, values in columns.items()})
    reranked = ScoredPool(formula_version=pool.formula_version, objects=pool.objects, score=score,
                          semantic_relevance=pool.semantic_relevance, path_mask=pool.path_mask,
                          path_count=pool.path_count, factors=factors)
    final = reranked.take(rank_order(score, pool.path_count, pool.objects))
    return RerankedPool(pool=final, policy=cfg.policy, reranked=size, anchor=anchor, model=cross_encoder_scores.model)
