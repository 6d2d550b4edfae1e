"""Interleaving the latency arms: shuffled order, untimed preparation, warm-up coverage."""

from __future__ import annotations

import gc
import time
from datetime import datetime, timezone

import pytest

from rms_retrieval.dataflows.bench.interleaving import (collections_line, interleaved, warming_queries, without_collections,
                                                       without_collections_line)
from rms_retrieval.dataflows.bench.speed_bench import BenchQuery


def test_interleaving_runs_every_arm_once_per_query_in_an_order_shuffled_per_query():
    calls = []
    arms = {name: (lambda q, name=name: calls.append((name, q))) for name in "abcd"}
    queries = list(range(40))
    seconds = interleaved(arms, queries).seconds
    assert {name: len(v) for name, v in seconds.items()} == {name: 40 for name in "abcd"}
    orders = [[name for name, q in calls if q == query] for query in queries]
    assert all(sorted(order) == list("abcd") for order in orders) and len({tuple(o) for o in orders}) > 4
    # no arm always follows the same one (in a rotated order each would)
    before = {name: {order[order.index(name) - 1] for order in orders if order.index(name)} for name in "abcd"}
    assert all(len(arms_before) > 1 for arms_before in before.values())
    calls_again = list(calls)
    calls.clear()
    interleaved(arms, queries)
    assert calls == calls_again  # seeded: a run repeats its order


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
    assert timings.met_collection == {"a": [False, True]}  # the query that collected met it, the other not


def test_the_requests_without_a_full_collection_are_counted_and_their_spread_taken_apart():
    seconds = [0.010] * 90 + [0.050] + [0.020] * 10  # the 50 ms request met the collector
    found = without_collections(seconds, [False] * 90 + [True] + [False] * 10)
    assert found["met"] == 1 and found["requests"] == 101 and found["p99_over_p50"] == pytest.approx(2.0)
    assert without_collections_line(found) == "1 of its 101 requests met one, p99 over p50 of the others 2.00x"
    alone = without_collections([0.01, 0.02], [True, False])
    assert alone["p99_over_p50"] is None and without_collections_line(alone) == "1 of its 2 requests met one"


def test_the_collections_line_counts_the_full_collections_and_names_the_longest():
    assert collections_line([]) == "full collections while timed: 0"
    assert collections_line([3.0, 12.25, 7.5]) == "full collections while timed: 3, longest 12.2 ms"


def test_the_after_update_arm_updates_one_of_the_namespaces_first_turns_before_each_query(tmp_path):
    from uuid import UUID

    from rms_retrieval.dataflows.bench.interleaving import AfterUpdateArm
    from rms_retrieval.stores.memory_store import MemoryStore
    from rms_retrieval.stores.models import MemoryObject
    from tests.factories import FakeEncoder

    when = datetime(2023, 1, 1, tzinfo=timezone.utc)
    with MemoryStore.open(tmp_path / "store", encoder=FakeEncoder()) as store:
        store.add([MemoryObject(id=UUID(int=number), namespace="a", content=f"turn {number} about tea", created_at=when)
                   for number in range(1, 4)])
        arm = AfterUpdateArm(store, FakeEncoder())
        question = BenchQuery("what about tea?", ("a",), when)

        def saliences() -> dict[int, float]:
            return {memory.id.int: memory.salience
                    for memory in store.snapshot().get_objects([UUID(int=number) for number in range(1, 4)], ["a"]).values()}

        seen = [saliences()]
        for _ in range(4):
            arm.prepare(question)
            seen.append(saliences())
            assert arm(question).items
        assert arm.updates == 4 and store.snapshot().count_objects(["a"]) == 3
        changed = [next(key for key in now if now[key] != then[key]) for then, now in zip(seen, seen[1:])]
        assert changed == [2, 3, 1, 2]  # the first turns by id, in turn
        assert len({now[key] for now, key in zip(seen[1:], changed)}) == 4  # each update a salience of its own


def test_a_ratio_over_the_quiet_arm_is_taken_at_p50_and_p99():
    from rms_retrieval.dataflows.bench.interleaving import over_quiet

    table = {"quiet": {"p50": 10.0, "p95": 12.0, "p99": 20.0}, "after": {"p50": 12.0, "p95": 30.0, "p99": 25.0}}
    assert over_quiet(table, "after", "quiet") == {"p50": 1.2, "p99": 1.25}
