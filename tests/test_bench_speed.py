"""Latency, node times, isolation, determinism and scaling on a small synthetic store (no model)."""

from __future__ import annotations

from datetime import datetime, timezone

import numpy as np
import pytest

from rms_retrieval.dataflows.bench import speed_bench
from rms_retrieval.dataflows.pipeline import EmptiedMemoExecutor
from rms_retrieval.stores.memory_store import MemoryStore
from tests.factories import RandomEncoder

WHEN = datetime(2030, 1, 1, tzinfo=timezone.utc)
NAMESPACES = 5


@pytest.fixture(scope="module")
def encoder():
    return RandomEncoder()


@pytest.fixture(scope="module")
def store(tmp_path_factory, encoder):
    opened = MemoryStore.open(tmp_path_factory.mktemp("synthetic") / "store", encoder=encoder)
    opened.add(speed_bench.synthetic_objects(0, 600, namespaces=NAMESPACES))
    yield opened
    opened.close()


def _queries(count: int) -> list[speed_bench.BenchQuery]:
    words = ["garden painting", "river camping guitar", "turn 7 museum", "violin hiking"]
    return [speed_bench.BenchQuery(words[i % len(words)], (f"synthetic-{i % NAMESPACES}",), WHEN) for i in range(count)]


def test_random_encoder_is_reproducible_unit_vectors(encoder):
    first, again = encoder.encode(["a", "b"]), encoder.encode(["a", "b"])
    assert first.shape == (2, 384) and first.dtype == np.float32
    assert np.array_equal(first, again) and not np.array_equal(first[0], first[1])
    assert np.allclose(np.linalg.norm(first, axis=1), 1.0, atol=1e-6)


def test_synthetic_objects_spread_over_namespaces_and_sessions():
    objects = speed_bench.synthetic_objects(0, 40, namespaces=4)
    assert len({o.id for o in objects}) == 40 and {o.namespace for o in objects} == {f"synthetic-{i}" for i in range(4)}
    assert max(o.session_seq for o in objects) == 9


def test_latency_reaches_every_bundle_size(store, encoder):
    report = speed_bench.latency_by_bundle_size(store, _queries(4), encoder, sizes=(10, 50), warmup=1)
    assert set(report) == {"10", "50"}
    for size, row in report.items():
        assert row["items_min"] == int(size) and row["queries_reaching_size"] == 4
        assert row["pipeline_ms"]["n"] == row["floor_ms"]["n"] == row["pipeline_cpu_ms"]["n"] == 4
        assert 0 < row["pipeline_cpu_ms"]["p50"]
        assert row["pipeline_ms"]["p50"] <= row["pipeline_ms"]["p95"] <= row["pipeline_ms"]["p99"]
        assert row["p50_over_floor_p50"] > 0


def test_node_times_cover_the_dag(store, encoder):
    times = speed_bench.node_times(store, _queries(2), encoder, limit=10)
    assert {"query_embedding", "vector_candidates", "fused_scores", "packed_bundle"} <= set(times)
    assert all(row["n"] == 2 and row["mean_ms"] >= 0 for row in times.values())
    timed = speed_bench.timed_driver(speed_bench.RetrievalSettings(), speed_bench.NodeTimer())
    assert isinstance(timed.graph_executor, EmptiedMemoExecutor)  # runs as retrieve() runs


def test_isolation_finds_no_leaks(store, encoder):
    namespaces = store.snapshot().namespaces()
    queries = speed_bench.isolation_queries(["garden painting", "river"], namespaces, WHEN, 12, seed=3)
    assert len(queries) == 12 and any(len(q.namespaces) == 2 for q in queries)
    checkpoints = []
    report = speed_bench.namespace_isolation(store, queries, encoder, checkpoint=checkpoints.append, checkpoint_every=5)
    assert report["queries"] == 12 and report["leaks"] == 0 and report["pool_leaks"] == 0
    assert report["bundle_items_checked"] > 0 and [c["queries"] for c in checkpoints] == [5, 10]
    with pytest.raises(ValueError, match="several namespaces"):
        speed_bench.isolation_queries(["x"], ["only"], WHEN, 3)


def test_determinism(store, encoder):
    report = speed_bench.determinism(store, _queries(2), encoder, repeats=3)
    assert report == {"queries": 2, "repeats": 3, "bundles_compared": 6, "identical": True,
                      "queries_with_differences": {}}


def test_scale_builds_and_times_small_stores(tmp_path):
    scale = speed_bench.run_scale(tmp_path, [300, 600], queries=3, progress=False, readers=2)
    assert [row["size"] for row in scale["sizes"]] == [300, 600]
    for row in scale["sizes"]:
        assert row["objects"] == row["size"] and row["size_mb"] > 0
        assert row["latency"]["pipeline_ms"]["n"] == 3
        assert row["latency"]["items_min"] == min(50, row["size"] // scale["namespaces"])
        assert row["latency"]["open_seconds"] > 0 and row["latency"]["node_times_ms"]["vector_candidates"]["n"] == 3
        memory = row["reader_memory"]
        assert memory["one"]["readers"] == 1 and len(memory["many"]["each"]) == 2 and memory["questions"] == 3
        assert memory["many"]["pss_mb_total"] > memory["one"]["pss_mb_total"] > 0 and memory["pss_ratio"] > 1
    again = speed_bench.scale_store(tmp_path / "stores" / "synthetic-300", 300)
    assert again["objects_added"] == 0
    with pytest.raises(ValueError, match="more than"):
        speed_bench.scale_store(tmp_path / "stores" / "synthetic-600", 300)


def test_summary_lines():
    speed = {"isolation": {"queries": 3, "namespaces": ["a", "b"], "bundle_items_checked": 9, "leaks": 0,
                           "pool_leaks": 0},
             "determinism": {"queries": 1, "repeats": 2, "identical": True}}
    assert speed_bench.summary_lines(speed) == [
        "isolation: 3 queries over 2 namespaces, 9 items checked, leaks 0 (pool leaks 0)",
        "determinism: 1 queries x 2 repeats, byte-identical: True",
    ]
