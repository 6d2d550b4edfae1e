"""The scored pool's columns: its declared schema, its factors reordered and padded (gathered when
read, equal to the columns made whole), and the final rank order."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from rms_retrieval.nodes.scored_pool import FACTOR_NAMES, ScoredPool, ScoreFactors, rank_order
from tests.factories import make_object


def _factors(size: int, seed: int = 0) -> ScoreFactors:
    rng = np.random.default_rng(seed)
    return ScoreFactors(**{name: rng.random(size) for name in FACTOR_NAMES})


def _scored(size=2, **changes):
    fields = dict(formula_version=2, objects=tuple(make_object(f"o{i}") for i in range(size)), score=np.zeros(size),
                  semantic_relevance=np.zeros(size), path_mask=np.zeros(size, dtype=np.int64),
                  path_count=np.ones(size, dtype=np.int64), factors=_factors(size))
    return ScoredPool(**{**fields, **changes})


def test_a_scored_pool_is_checked_against_its_declared_schema():
    assert len(_scored()) == 2
    with pytest.raises(ValueError, match="column score must be float64 of shape \\(2,\\)"):
        _scored(score=np.zeros(3))
    with pytest.raises(ValueError, match="column path_count must be int64"):
        _scored(path_count=np.ones(2))
    with pytest.raises(ValueError, match="must be finite"):
        _scored(score=np.array([0.5, np.nan]))
    with pytest.raises(ValueError, match="formula_version"):
        _scored(formula_version=3)
    with pytest.raises(ValueError, match="column tie_break must be float64 of shape \\(2,\\)"):
        _scored(factors=_factors(2).replaced(tie_break=np.zeros(2, dtype=np.int64)))


def test_factors_taken_and_padded_are_the_columns_made_whole():
    factors = _factors(6)
    whole = {name: getattr(factors, name) for name in FACTOR_NAMES}
    order = np.array([5, 0, 3, 3, 1])
    padded = factors.take(order).padded(2)
    again = padded.take(np.array([6, 0, 2, 5]))  # a padded row, then rows of the taken ones
    for name in FACTOR_NAMES:
        made = np.concatenate([whole[name][order], np.full(2, np.nan)])
        assert np.array_equal(getattr(padded, name), made, equal_nan=True)
        assert np.array_equal(getattr(again, name), made[[6, 0, 2, 5]], equal_nan=True)
    assert len(padded) == 7 and len(again) == 4 and len(factors.padded(0)) == 6
    assert len(ScoreFactors(**{name: np.zeros(0) for name in FACTOR_NAMES}).padded(3).take(np.array([2, 0]))) == 2
    # Read once, a column is kept; a pickled copy and a replaced one read the same values.
    assert padded.semantic is padded.semantic
    copy = pickle.loads(pickle.dumps(again))
    replaced = again.replaced(rerank_rank=np.arange(4.0))
    for name in FACTOR_NAMES:
        assert np.array_equal(getattr(copy, name), getattr(again, name), equal_nan=True)
        if name != "rerank_rank":
            assert np.array_equal(getattr(replaced, name), getattr(again, name), equal_nan=True)
    assert replaced.rerank_rank.tolist() == [0.0, 1.0, 2.0, 3.0]
    with pytest.raises(AttributeError, match="no attribute 'nonsense'"):
        padded.nonsense


def test_a_pool_takes_its_factors_with_its_rows_and_is_checked_by_their_count():
    pool = _scored(4)
    taken = pool.take(np.array([3, 1]))
    assert taken.objects == (pool.objects[3], pool.objects[1])
    assert taken.factors.semantic.tolist() == pool.factors.semantic[[3, 1]].tolist()
    with pytest.raises(ValueError, match="factors must have 3 rows of their 4"):
        _scored(3, factors=pool.factors.take(np.array([0, 1])))
    # A source whose columns break the schema fails however its rows are taken.
    wrong = _factors(2).replaced(semantic=np.zeros(2, dtype=np.float32))
    with pytest.raises(ValueError, match="column semantic must be float64"):
        _scored(2, factors=wrong.take(np.array([1, 0])))


def test_the_rank_order_is_score_then_path_count_then_id():
    objects = [make_object(name) for name in "abcd"]
    by_id = sorted(range(4), key=lambda i: objects[i].id.int)
    score = np.array([0.5, 0.9, 0.5, 0.5])
    path_count = np.array([1, 1, 2, 1])
    order = rank_order(score, path_count, objects).tolist()
    assert order[:2] == [1, 2] and order[2:] == [i for i in by_id if i in (0, 3)]


@pytest.mark.parametrize("seed", range(4))
def test_the_rank_order_equals_a_sort_by_score_path_count_and_id_with_many_ties(seed):
    rng = np.random.default_rng(seed)
    objects = [make_object(f"o{seed}-{i}") for i in range(80)]
    rng.shuffle(objects)
    score = rng.choice([0.0, -0.0, 0.25, 0.5, 0.75], size=80) if seed % 2 else rng.random(80).round(1)
    path_count = rng.integers(1, 3, size=80)
    expected = sorted(range(80), key=lambda i: (-score[i], -path_count[i], objects[i].id.int))
    assert rank_order(score, path_count, objects).tolist() == expected
    keys = [obj.id.int for obj in objects]
    assert rank_order(score, path_count, objects, keys).tolist() == expected
    distinct = np.arange(80, dtype=float)
    assert rank_order(distinct, path_count, objects).tolist() == list(range(79, -1, -1))

