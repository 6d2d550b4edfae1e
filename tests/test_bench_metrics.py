"""Benchmark metrics: exact values on tiny hand-made rankings and outcomes."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from rms_retrieval.dataflows.bench.metrics import (
    PairedComparison,
    QuestionOutcome,
    all_in_top_k,
    all_packed,
    latency_percentiles,
    paired_comparison,
    precision_at_k,
    recall_at_k,
    summarise,
)

RANKED = ["d3", "d1", "d7", "d2", "d9"]
RELEVANT = {"d1", "d2"}


@pytest.mark.parametrize(
    ("k", "precision", "recall", "all_in"),
    [
        (1, 0.0, 0.0, False),
        (2, 0.5, 0.5, False),
        (3, 1 / 3, 0.5, False),
        (4, 0.5, 1.0, True),
        (5, 0.4, 1.0, True),
        (10, 0.2, 1.0, True),  # a short ranking is still divided by k
    ],
)
def test_ranking_metrics(k, precision, recall, all_in):
    assert precision_at_k(RANKED, RELEVANT, k) == pytest.approx(precision)
    assert recall_at_k(RANKED, RELEVANT, k) == recall
    assert all_in_top_k(RANKED, RELEVANT, k) is all_in


def test_repeated_ids_count_once():
    assert precision_at_k(["d1", "d1"], {"d1", "d2"}, 2) == 0.5
    assert recall_at_k(["d1", "d1"], ["d1", "d2"], 2) == 0.5


def test_all_packed():
    assert all_packed(["d2", "d5", "d1"], RELEVANT) is True
    assert all_packed(["d2", "d5"], RELEVANT) is False
    assert all_packed([], {"d1"}) is False


@pytest.mark.parametrize(
    "metric",
    [
        lambda: precision_at_k(RANKED, set(), 3),
        lambda: recall_at_k(RANKED, [], 3),
        lambda: all_in_top_k(RANKED, (), 3),
        lambda: all_packed(RANKED, set()),
    ],
)
def test_empty_relevant_is_refused(metric):
    with pytest.raises(ValueError, match="no relevant ids"):
        metric()


@pytest.mark.parametrize("k", [0, -1, 2.0, True])
def test_k_must_be_a_positive_integer(k):
    with pytest.raises(ValueError, match="k must be a positive integer"):
        precision_at_k(RANKED, RELEVANT, k)


def test_question_outcome_is_frozen():
    outcome = QuestionOutcome("conv-1#0", 1, {"recall@5": 0.5})
    with pytest.raises(AttributeError):
        outcome.category = 2  # type: ignore[misc]
    with pytest.raises(TypeError):
        outcome.metrics["recall@5"] = 1.0  # type: ignore[index]
    assert outcome == QuestionOutcome("conv-1#0", 1, {"recall@5": 0.5})


OUTCOMES = [
    QuestionOutcome("c#0", 2, {"recall@5": 1.0, "all_packed": True}),
    QuestionOutcome("c#1", 1, {"recall@5": 0.5, "all_packed": False}),
    QuestionOutcome("c#2", 1, {"recall@5": 0.0, "all_packed": True}),
    QuestionOutcome("c#3", 2, {"recall@5": 0.5, "all_packed": True}),
    QuestionOutcome("c#4", 1, {"recall@5": 1.0, "all_packed": True}),
]


def test_summarise_by_category():
    table = summarise(OUTCOMES)
    expected = pd.DataFrame(
        {"n": [3, 2, 5], "recall@5": [0.5, 0.75, 0.6], "all_packed": [2 / 3, 1.0, 0.8]},
        index=pd.Index([1, 2, "all"], name="category", dtype=object),
    )
    pd.testing.assert_frame_equal(table, expected)


def test_summarise_by_question_key():
    table = summarise(OUTCOMES[:2], by="question_key")
    assert list(table.index) == ["c#0", "c#1", "all"]
    assert list(table["n"]) == [1, 1, 2]
    assert list(table["recall@5"]) == [1.0, 0.5, 0.75]


def test_summarise_refuses_bad_input():
    with pytest.raises(ValueError, match="no outcomes"):
        summarise([])
    with pytest.raises(ValueError, match="by must be one of"):
        summarise(OUTCOMES, by="colour")
    mixed = OUTCOMES + [QuestionOutcome("c#5", 1, {"recall@5": 1.0})]
    with pytest.raises(ValueError, match="c#5 reports"):
        summarise(mixed)


def test_paired_comparison_counts_and_means():
    a = [1.0, True, 0.0, 0.5, False, 1.0]
    b = [0.0, True, 1.0, 0.25, False, 0.5]
    result = paired_comparison(a, b)
    assert (result.n, result.wins, result.losses, result.ties) == (6, 3, 1, 2)
    assert result.mean_a == pytest.approx(3.5 / 6)
    assert result.mean_b == pytest.approx(2.75 / 6)
    assert result.difference == pytest.approx(0.75 / 6)
    assert result.low <= result.difference <= result.high


def test_paired_comparison_interval_contains_difference_and_is_deterministic():
    a = [True] * 30 + [False] * 20
    b = [True, False] * 25
    first = paired_comparison(a, b)
    second = paired_comparison(a, b)
    assert first == second
    assert first.difference == pytest.approx(0.1)
    assert first.low < 0.1 < first.high
    assert first.high - first.low < 0.6
    narrower = paired_comparison(a, b, confidence=0.5)
    assert first.low < narrower.low < narrower.high < first.high


def test_paired_comparison_matches_a_plain_bootstrap():
    rng = np.random.default_rng(42)
    a = rng.random(1_000)
    b = rng.random(1_000)
    result = paired_comparison(a.tolist(), b.tolist(), resamples=3_000, seed=7)
    differences = a - b
    draws = np.random.default_rng(7).integers(0, 1_000, size=(3_000, 1_000))
    low, high = np.percentile(differences[draws].mean(axis=1), [2.5, 97.5])
    assert (result.low, result.high) == (float(low), float(high))
    assert paired_comparison(a.tolist(), b.tolist(), resamples=3_000, seed=8) != result


def test_paired_comparison_constant_difference_gives_a_point_interval():
    result = paired_comparison([1, 1, 1], [0, 0, 0])
    assert result == PairedComparison(
        n=3, mean_a=1.0, mean_b=0.0, difference=1.0, wins=3, losses=0, ties=0, low=1.0, high=1.0
    )


@pytest.mark.parametrize(
    ("a", "b", "kwargs", "message"),
    [
        ([1, 0], [1], {}, "must pair up"),
        ([], [], {}, "non-empty"),
        ([1.0, math.nan], [1, 0], {}, "non-finite"),
        ([1], [0], {"confidence": 1.0}, "confidence"),
        ([1], [0], {"resamples": 0}, "resamples"),
    ],
)
def test_paired_comparison_refuses_bad_input(a, b, kwargs, message):
    with pytest.raises(ValueError, match=message):
        paired_comparison(a, b, **kwargs)


def test_latency_percentiles_in_milliseconds():
    result = latency_percentiles([0.004, 0.001, 0.003, 0.002])
    assert result["n"] == 4
    assert result["p50"] == pytest.approx(2.5)
    assert result["p95"] == pytest.approx(3.85)
    assert result["p99"] == pytest.approx(3.97)
    assert latency_percentiles([0.25]) == {"p50": 250.0, "p95": 250.0, "p99": 250.0, "n": 1}


@pytest.mark.parametrize("samples", [[], [0.1, -0.001], [math.inf]])
def test_latency_percentiles_refuses_bad_samples(samples):
    with pytest.raises(ValueError):
        latency_percentiles(samples)
