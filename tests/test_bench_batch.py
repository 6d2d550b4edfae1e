"""`rms bench batch`: the requests it makes, the arms it runs, the table it prints."""

from __future__ import annotations

import shutil

import pytest

from rms_retrieval.dataflows.bench.batch_bench import engine_arm, locomo_requests, run_batch_bench, table_lines


@pytest.fixture(scope="module")
def store_copy(demo_store, tmp_path_factory):
    return str(shutil.copytree(demo_store.path, tmp_path_factory.mktemp("bench-batch") / "store"))


def test_questions_repeat_to_the_requested_count_on_their_own_conversation(demo_store):
    dataset = demo_store.corpus.dataset
    requests = locomo_requests(dataset, 2 * len(dataset.questions) + 1)
    assert [r.request_id for r in requests[:3]] == ["0", "1", "2"]
    assert requests[len(dataset.questions)].request.query == dataset.questions[0].question
    assert all(r.request.namespaces == (demo_store.namespace,) for r in requests)
    assert requests[0].request.reference_time == demo_store.reference_time


def test_the_sequential_and_local_arms_report_throughput_and_overhead(demo_store, store_copy):
    requests = locomo_requests(demo_store.corpus.dataset, 6)
    lines = []
    rows = run_batch_bench(store_copy, requests, ["sequential", "local"], shard_size=2, report=lines.append)
    assert [row["arm"] for row in rows] == ["sequential", "local"]
    assert [row["tasks"] for row in rows] == [6, 3] and all(row["failed"] == 0 for row in rows)
    assert all(row["requests_per_s"] > 0 for row in rows) and rows[1]["task_overhead_ms"] is not None
    assert rows[0]["bundle_kb"] == pytest.approx(rows[1]["bundle_kb"]) and rows[0]["bundle_kb"] > 0
    assert table_lines(rows)[2:] == lines and lines[1].startswith("| local | 1 | 6 | 3 |")


def test_an_unknown_arm_is_named(store_copy, demo_store):
    with pytest.raises(ValueError, match="unknown arm 'spark'"):
        engine_arm("spark-2", store_copy, locomo_requests(demo_store.corpus.dataset, 2), 2)
