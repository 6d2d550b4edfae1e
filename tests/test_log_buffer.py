"""The buffered retrieval log: a normal close or exit writes every record, a crash only the queued ones."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import warnings

import pytest

from rms_retrieval.dataflows.retrieval import LazyRecord
from rms_retrieval.stores.log.buffer import BufferedLogWriter
from rms_retrieval.stores.log.retrieval_log import RetrievalLogWarning, read_records
from tests.factories import append_around_a_fork, append_from_threads, appends_to_a_blocked_log, log_record

# A child that appends numbered records through a buffered writer, reporting each, and then exits
# without closing it (mode "exit"), or appends until killed (mode "forever").
CHILD = """
import sys
from pathlib import Path
from rms_retrieval.stores.log.buffer import BufferedLogWriter

directory, mode, capacity = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
writer = BufferedLogWriter(directory, capacity=capacity)
sequence = 0
while mode == "forever" or sequence < 500:
    writer.append({"request_id": str(sequence), "sequence": sequence,
                   "payload": {"query_embedding": [0.5] * 384, "query": "x" * 200}})
    print(sequence, flush=True)
    sequence += 1
"""


def _child(directory, mode: str, capacity: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", CHILD, str(directory), mode, str(capacity)],
                            stdout=subprocess.PIPE, text=True)


@pytest.mark.parametrize("threads, each", [(4, 40), pytest.param(8, 250, marks=pytest.mark.slow)])
def test_a_normal_close_writes_every_record_of_many_threads_in_their_order(tmp_path, threads, each):
    writer = BufferedLogWriter(tmp_path, capacity=32)  # fewer than the records: the queue fills and drains
    append_from_threads(writer, threads=threads, each=each)
    assert writer.path is None
    lines = b"".join(path.read_bytes() for path in tmp_path.glob("*.jsonl")).splitlines()
    assert len(lines) == threads * each  # on disk after close, no reader's flush needed
    records = read_records(tmp_path)
    for name in (f"t{index}" for index in range(threads)):
        assert [r["sequence"] for r in records if r["writer"] == name] == list(range(each))


def test_records_are_built_and_written_by_the_background_thread(tmp_path):
    built_on, built = [], threading.Event()

    def build() -> dict:
        built_on.append(threading.current_thread())
        built.set()
        return log_record(0)

    with BufferedLogWriter(tmp_path) as writer:
        assert writer.append(LazyRecord(build))
        assert built.wait(timeout=30)  # nobody flushes: the writer thread builds and writes it
        assert built_on[0] is not threading.current_thread() and built_on[0].name.startswith("retrieval-log")


def test_a_process_reads_its_own_queued_records(tmp_path):
    with BufferedLogWriter(tmp_path) as writer:
        for sequence in range(50):
            writer.append(log_record(sequence))
        assert [r["sequence"] for r in read_records(tmp_path)] == list(range(50))
        writer.append(log_record(50))
        assert [r["sequence"] for r in read_records(tmp_path, limit=1)] == [50]


def test_a_full_queue_is_written_by_its_caller(tmp_path):
    writer = BufferedLogWriter(tmp_path, capacity=4)
    # No writer thread drains the queue here (one that had started could take part of it at any
    # moment, and the fourth append would then not find it full): only the caller can write it.
    writer._thread = threading.current_thread()
    for sequence in range(3):
        writer.append(log_record(sequence))
    assert not list(tmp_path.glob("*.jsonl")) or not b"".join(p.read_bytes() for p in tmp_path.glob("*.jsonl"))
    writer.append(log_record(3))
    written = b"".join(path.read_bytes() for path in tmp_path.glob("*.jsonl")).splitlines()
    assert len(written) == 4  # the fourth append found the queue full and wrote it itself
    writer.close()


def test_normal_interpreter_exit_writes_everylog_record(tmp_path):
    child = _child(tmp_path, "exit", 1_000)
    out, _ = child.communicate()
    assert child.returncode == 0 and len(out.split()) == 500
    assert [r["sequence"] for r in read_records(tmp_path)] == list(range(500))


def test_a_sigkill_loses_at_most_the_queued_records_and_leaves_a_readable_log(tmp_path):
    capacity, reported = 16, []
    for _ in range(3):
        child = _child(tmp_path, "forever", capacity)
        for _ in range(100 + int.from_bytes(os.urandom(1), "little")):
            child.stdout.readline()
        child.send_signal(signal.SIGKILL)
        out, _ = child.communicate()
        reported.append(100 + len(out.split()))
    records = read_records(tmp_path)
    assert all(record["payload"]["query_embedding"] == [0.5] * 384 for record in records)
    assert len(records) >= sum(reported) - 3 * capacity


def test_an_unwritable_directory_warns_once_on_the_callers_thread(tmp_path):
    appended, caught = appends_to_a_blocked_log(BufferedLogWriter, tmp_path)
    assert appended == [False, False, False]
    assert [warning.category for warning in caught] == [RetrievalLogWarning]


def test_a_record_that_cannot_be_built_is_skipped_with_a_warning(tmp_path):
    def broken() -> dict:
        raise RuntimeError("no bundle")

    writer = BufferedLogWriter(tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        writer.append(LazyRecord(broken))
        writer.append(log_record(1))
        writer.close()
    assert [r["sequence"] for r in read_records(tmp_path)] == [1]
    assert len(caught) == 1 and "RuntimeError: no bundle" in str(caught[0].message)


def test_a_forked_child_writes_its_own_records_only(tmp_path):
    writer = BufferedLogWriter(tmp_path)
    append_around_a_fork(writer)
    records = read_records(tmp_path)
    assert [r["sequence"] for r in records if r["writer"] == "parent"] == [0, 1]
    assert [r["sequence"] for r in records if r["writer"] == "child"] == [0]
    assert len(list(tmp_path.glob("*.jsonl"))) == 2


def test_capacity_is_validated(tmp_path):
    with pytest.raises(ValueError, match="capacity must be positive"):
        BufferedLogWriter(tmp_path, capacity=0)
