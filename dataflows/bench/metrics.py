"""Benchmark metrics: pure functions on ranked ids, per-question outcomes and latencies.

Ids are any hashable values (dia_ids, UUIDs). A question without relevant ids has no defined
recall, so every metric refuses it; such questions are excluded and reported upstream.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np
import pandas as pd

_GROUPABLE = ("category", "question_key")
_BOOTSTRAP_CELLS = 2_000_000  # resample rows drawn per block, to bound memory


def precision_at_k(ranked_ids: Sequence[Hashable], relevant: Collection[Hashable], k: int) -> float:
    """Relevant ids among the top `k`, divided by `k` (short rankings are not rescaled)."""
    return len(_hits(ranked_ids, relevant, k)) / k


def recall_at_k(ranked_ids: Sequence[Hashable], relevant: Collection[Hashable], k: int) -> float:
    """Share of the relevant ids found in the top `k`."""
    return len(_hits(ranked_ids, relevant, k)) / len(set(relevant))


def all_in_top_k(ranked_ids: Sequence[Hashable], relevant: Collection[Hashable], k: int) -> bool:
    """Whether every relevant id is in the top `k`."""
    return _hits(ranked_ids, relevant, k) == set(relevant)


def all_packed(packed_ids: Iterable[Hashable], relevant: Collection[Hashable]) -> bool:
    """Whether every relevant id made it into the packed context."""
    relevant_set = _relevant_set(relevant)
    return relevant_set <= set(packed_ids)


def _relevant_set(relevant: Collection[Hashable]) -> set[Hashable]:
    relevant_set = set(relevant)
    if not relevant_set:
        raise ValueError("no relevant ids: the metric is undefined for this question")
    return relevant_set


def _hits(ranked_ids: Sequence[Hashable], relevant: Collection[Hashable], k: int) -> set[Hashable]:
    relevant_set = _relevant_set(relevant)
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}")
    # Counted once each, so a ranking that repeats an id cannot score above 1.
    return set(ranked_ids[:k]) & relevant_set


@dataclass(frozen=True, slots=True)
class QuestionOutcome:
    """One question's metric values, e.g. {"recall@10": 0.5, "all_packed": True}."""

    question_key: str
    category: int
    metrics: Mapping[str, float | bool] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "metrics", MappingProxyType(dict(self.metrics)))


def summarise(outcomes: Sequence[QuestionOutcome], by: str = "category") -> pd.DataFrame:
    """Mean of each metric per group and over all questions (row "all"), with counts in "n".

    Booleans average to the share of questions where they hold. Every outcome must report the
    same metrics, so each mean is over the same questions as its row's "n".
    """
    if by not in _GROUPABLE:
        raise ValueError(f"by must be one of {_GROUPABLE}, got {by!r}")
    if not outcomes:
        raise ValueError("no outcomes to summarise")
    names = list(outcomes[0].metrics)
    for outcome in outcomes:
        if list(outcome.metrics) != names:
            raise ValueError(
                f"{outcome.question_key} reports {sorted(outcome.metrics)}, "
                f"expected {sorted(names)}"
            )
    frame = pd.DataFrame(
        [{by: getattr(o, by), **{n: float(o.metrics[n]) for n in names}} for o in outcomes]
    )
    grouped = frame.groupby(by, sort=True)
    per_group = grouped[names].mean()
    per_group.insert(0, "n", grouped.size())
    overall = pd.DataFrame([{"n": len(frame), **frame[names].mean().to_dict()}], index=["all"])
    table = pd.concat([per_group.astype(object), overall.astype(object)])
    table.index.name = by
    return table.astype({"n": int, **{n: float for n in names}})


@dataclass(frozen=True, slots=True)
class PairedComparison:
    """System a against system b on the same questions; the interval is for mean(a - b)."""

    n: int
    mean_a: float
    mean_b: float
    difference: float
    wins: int
    losses: int
    ties: int
    low: float
    high: float


def paired_comparison(
    a: Sequence[bool | float],
    b: Sequence[bool | float],
    *,
    confidence: float = 0.95,
    resamples: int = 10_000,
    seed: int = 0,
) -> PairedComparison:
    """Wins, losses and ties of a over b per question, and a paired bootstrap interval.

    The interval is the percentile interval of the mean difference over `resamples` resamples
    of whole questions, drawn with `numpy.random.default_rng(seed)`: the same inputs always give
    the same interval.
    """
    first = _as_scores(a, "a")
    second = _as_scores(b, "b")
    if len(first) != len(second):
        raise ValueError(f"a has {len(first)} values and b has {len(second)}; they must pair up")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    if resamples < 1:
        raise ValueError(f"resamples must be at least 1, got {resamples!r}")
    differences = first - second
    n = len(differences)
    rng = np.random.default_rng(seed)
    block = max(1, _BOOTSTRAP_CELLS // n)
    means = np.concatenate(
        [
            differences[rng.integers(0, n, size=(min(block, resamples - start), n))].mean(axis=1)
            for start in range(0, resamples, block)
        ]
    )
    # Rounded so that 0.95 asks for the 2.5th percentile, not the 2.5000000000000022th.
    tail = round((1.0 - confidence) / 2.0 * 100.0, 10)
    low, high = np.percentile(means, [tail, 100.0 - tail], method="linear")
    return PairedComparison(
        n=n,
        mean_a=float(first.mean()),
        mean_b=float(second.mean()),
        difference=float(differences.mean()),
        wins=int((differences > 0).sum()),
        losses=int((differences < 0).sum()),
        ties=int((differences == 0).sum()),
        low=float(low),
        high=float(high),
    )


def _as_scores(values: Sequence[bool | float], name: str) -> np.ndarray:
    scores = np.asarray(values, dtype=float)
    if scores.ndim != 1 or scores.size == 0:
        raise ValueError(f"{name} must be a non-empty flat sequence of numbers")
    if not np.isfinite(scores).all():
        raise ValueError(f"{name} holds a non-finite value")
    return scores


def latency_percentiles(samples_seconds: Sequence[float]) -> dict[str, float | int]:
    """p50, p95 and p99 in milliseconds (linear interpolation), and the sample count n."""
    samples = np.asarray(samples_seconds, dtype=float)
    if samples.ndim != 1 or samples.size == 0:
        raise ValueError("no latency samples")
    if not np.isfinite(samples).all() or (samples < 0).any():
        raise ValueError("latencies must be finite and non-negative")
    p50, p95, p99 = np.percentile(samples * 1000.0, [50, 95, 99], method="linear")
    return {"p50": float(p50), "p95": float(p95), "p99": float(p99), "n": int(samples.size)}
