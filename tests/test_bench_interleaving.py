"""Interleaving the latency arms: rotated order, untimed preparation, warm-up coverage."""

from __future__ import annotations

import gc
import time
from datetime import datetime, timezone

from rms_retrieval.dataflows.bench.interleaving import collections_line, interleaved, warming_queries
from rms_retrieval.dataflows.bench.speed_bench import BenchQuery


def test_interleaving_runs_every_arm_once_per_query_in_rotated_order():
    calls = []
    arms = {name: (lambda q, name=name: calls.append((name, q))) for name in "abc"}
    seconds = interleaved(arms, [1, 2, 3]).seconds
    assert {name: len(v) for name, v in seconds.items()} == {"a": 3, "b": 3, "c": 3}
    assert [name for name, _ in calls] == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]


def test_an_arms_prepare_runs_before_each_timed_query_and_not_in_the_warm_up():
    class Slow:
        def __init__(self):
            self.prepared = []

        def prepare(self, query):
            self.prepared.append(query)
            time.sleep(0.05)

        def __call__(self, query):
            return query

    arm = Slow()
    seconds = interleaved({"slow": arm}, [1, 2], warmup=[0]).seconds
    assert arm.prepared == [1, 2] and max(seconds["slow"]) < 0.05


def test_warming_covers_the_first_queries_and_every_namespace_once():
    queries = [BenchQuery(f"q{i}", (namespace,), datetime(2023, 1, 1, tzinfo=timezone.utc))
               for i, namespace in enumerate("aabbcab")]
    assert [q.text for q in warming_queries(queries, first=1)] == ["q0", "q2", "q4"]
    assert [q.text for q in warming_queries(queries)] == ["q0", "q1", "q2", "q4"]


def test_the_timed_queries_run_with_the_warm_process_frozen_and_their_full_collections_timed():
    seen = []

    def arm(query):
        seen.append(gc.get_freeze_count())
        if query == 2:
            gc.collect()

    before = gc.get_freeze_count()
    timings = interleaved({"a": arm}, [1, 2], warmup=[0])
    assert seen[0] == before and min(seen[1:]) > before  # the warm-up ran unfrozen, the timed queries frozen
    assert gc.get_freeze_count() == before  # and the process gets its collector back
    assert len(timings.full_collections_ms) == 1 and timings.full_collections_ms[0] >= 0


def test_the_collections_line_counts_the_full_collections_and_names_the_longest():
    assert collections_line([]) == "full collections while timed: 0"
    assert collections_line([3.0, 12.25, 7.5]) == "full collections while timed: 3, longest 12.2 ms"
