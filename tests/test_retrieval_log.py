"""The retrieval log's segments: round trip, real concurrent processes, SIGKILL, tails, compaction."""

from __future__ import annotations

import builtins
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from uuid import uuid4

import numpy as np
import pytest

from rms_retrieval.stores.log import retrieval_log
from rms_retrieval.stores.log.compaction import LogRetention, compact
from rms_retrieval.stores.log.retrieval_log import (
    EMBEDDING_ENCODING,
    RetrievalLogWarning,
    RetrievalLogWriter,
    read_records,
    records_newest_first,
)

from tests.factories import append_around_a_fork, append_from_threads, appends_to_a_blocked_log, log_record


# A child that appends numbered records, reporting each, until told how many or killed.
WRITER_SCRIPT = """
import sys
from pathlib import Path
from rms_retrieval.stores.log.retrieval_log import RetrievalLogWriter

directory, name, count = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
writer = RetrievalLogWriter(directory, max_segment_bytes=int(sys.argv[4]))
sequence = 0
while count < 0 or sequence < count:
    writer.append({"request_id": f"{name}-{sequence}", "writer": name, "sequence": sequence,
                   "payload": {"query_embedding": [0.5] * 384, "query": "x" * 200}})
    print(sequence, flush=True)
    sequence += 1
writer.close()
"""


def _spawn(directory: Path, name: str, count: int, max_segment_bytes: int = 64 << 20) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", WRITER_SCRIPT, str(directory), name, str(count), str(max_segment_bytes)],
        stdout=subprocess.PIPE, text=True,
    )


def _logged_times(directory: Path) -> dict[str, int]:
    """request_id -> logged_at_ns of every record line on disk."""
    times = {}
    for path in directory.glob("*.jsonl"):
        for line in path.read_bytes().splitlines():
            entry = json.loads(line)
            if "logged_at_ns" in entry:
                times[entry["record"]["request_id"]] = entry["logged_at_ns"]
    return times


def test_round_trip_keeps_the_record_shape_and_stores_the_embedding_as_binary(tmp_path):
    vector = np.random.default_rng(1).standard_normal(384).astype(np.float32)
    record = {
        "op_type": "RETRIEVAL_REQUEST", "request_id": str(uuid4()),
        "payload": {"query": "Where did Caroline go?", "query_embedding": [float(x) for x in vector],
                    "scores": {"a": 0.5}, "excluded": {}, "error": None},
    }
    with RetrievalLogWriter(tmp_path / "log") as writer:
        assert writer.append(record)
        segment = writer.path
    assert read_records(tmp_path / "log") == [record]
    stored = json.loads(segment.read_bytes())["record"]["payload"]["query_embedding"]
    assert set(stored) == {EMBEDDING_ENCODING} and len(segment.read_bytes()) < 2_500  # 384 float32 = 2,048 base64 bytes


def test_records_without_an_embedding_round_trip(tmp_path):
    failed = {"request_id": "r", "payload": {"query_embedding": None, "status": "failed"}}
    with RetrievalLogWriter(tmp_path) as writer:
        writer.append(failed)
        writer.append({"request_id": "s"})
    assert read_records(tmp_path) == [failed, {"request_id": "s"}]


def test_a_missing_directory_reads_as_empty(tmp_path):
    assert read_records(tmp_path / "absent") == []
    assert read_records(tmp_path / "absent", limit=3) == []


def test_close_flushes_everything_and_a_later_append_starts_a_new_segment(tmp_path):
    writer = RetrievalLogWriter(tmp_path)
    for sequence in range(100):
        writer.append(log_record(sequence))
    first = writer.path
    writer.close()
    assert writer.path is None and len(first.read_bytes().splitlines()) == 100
    writer.append(log_record(100))
    assert writer.path != first
    writer.close()
    assert [record["sequence"] for record in read_records(tmp_path)] == list(range(101))


@pytest.mark.parametrize("threads, each", [(4, 25), pytest.param(8, 100, marks=pytest.mark.slow)])
def test_threads_share_one_writer(tmp_path, threads, each):
    append_from_threads(RetrievalLogWriter(tmp_path), threads=threads, each=each)
    records = read_records(tmp_path)
    assert len(records) == threads * each
    for name in (f"t{index}" for index in range(threads)):
        assert [r["sequence"] for r in records if r["writer"] == name] == list(range(each))


def test_processes_appending_at_once_merge_in_time_order_while_compaction_runs(tmp_path):
    directory = tmp_path / "log"
    children = [_spawn(directory, f"p{index}", 150, max_segment_bytes=40_000) for index in range(4)]
    compactions = 0
    while any(child.poll() is None for child in children):
        compact(directory, LogRetention())
        compactions += 1
    for child in children:
        child.communicate()
        assert child.returncode == 0
    compact(directory, LogRetention())
    records = read_records(directory)
    assert len(records) == 600 and compactions > 0
    for name in ("p0", "p1", "p2", "p3"):
        assert [r["sequence"] for r in records if r["writer"] == name] == list(range(150))
    times = _logged_times(directory)
    order = [times[record["request_id"]] for record in records]
    assert len(times) == 600 and order == sorted(order)  # merged in time order across processes
    assert len(list(directory.glob("*.jsonl"))) == 1  # every writer closed, so all merged into one
    assert records[0]["payload"]["query_embedding"] == [0.5] * 384


def test_a_sigkilled_writer_leaves_a_readable_log(tmp_path):
    for _ in range(3):
        child = _spawn(tmp_path, "k", -1)
        for _ in range(50 + int.from_bytes(os.urandom(1), "little")):
            child.stdout.readline()
        child.send_signal(signal.SIGKILL)
        child.wait()
    records = read_records(tmp_path)
    assert len(records) >= 150
    assert all(record["payload"]["query_embedding"] == [0.5] * 384 for record in records)
    report = compact(tmp_path, LogRetention())
    assert report.segments_merged == 3 and read_records(tmp_path) == records


def test_torn_and_foreign_lines_are_skipped_by_readers_and_compaction(tmp_path):
    with RetrievalLogWriter(tmp_path) as writer:
        writer.append(log_record(0))
        writer.append(log_record(1))
        segment = writer.path
    with open(segment, "ab") as handle:
        handle.write(b'{"logged_at_ns": 1, "rec')  # a writer killed mid-line
    assert [r["sequence"] for r in read_records(tmp_path)] == [0, 1]
    assert [r["sequence"] for r in read_records(tmp_path, limit=5)] == [0, 1]
    (tmp_path / "1-1.jsonl").write_bytes(b"not json\n\x00\x01\n")
    assert [r["sequence"] for r in read_records(tmp_path)] == [0, 1]
    report = compact(tmp_path, LogRetention())
    assert (report.records_kept, report.unreadable_lines, report.segments_merged) == (2, 3, 2)


def test_last_n_reads_only_the_ends_of_the_files(tmp_path, monkeypatch):
    for name in ("a", "b"):
        with RetrievalLogWriter(tmp_path) as writer:
            for sequence in range(25_000):
                writer.append(log_record(sequence, name))
    total = sum(path.stat().st_size for path in tmp_path.glob("*.jsonl"))
    expected = read_records(tmp_path)[-10:]
    read_bytes = []
    real_open = builtins.open

    class Counting:
        def __init__(self, handle):
            self._handle = handle

        def read(self, *args):
            data = self._handle.read(*args)
            read_bytes.append(len(data))
            return data

        def readline(self, *args):
            data = self._handle.readline(*args)
            read_bytes.append(len(data))
            return data

        def __iter__(self):
            for line in self._handle:
                read_bytes.append(len(line))
                yield line

        def __getattr__(self, name):
            return getattr(self._handle, name)

    monkeypatch.setattr(retrieval_log, "open", lambda *a, **k: Counting(real_open(*a, **k)), raising=False)
    assert read_records(tmp_path, limit=10) == expected
    assert total > 5_000_000 and sum(read_bytes) <= 2 * 2 * 64 * 1024
    read_bytes.clear()
    assert len(read_records(tmp_path, limit=1_000)) == 1_000
    assert sum(read_bytes) < total / 10


def test_last_n_equals_the_tail_of_the_full_read(tmp_path):
    with RetrievalLogWriter(tmp_path, max_segment_bytes=3_000) as writer:
        for sequence in range(300):
            writer.append(log_record(sequence))
    everything = read_records(tmp_path)
    assert len(list(tmp_path.glob("*.jsonl"))) > 5
    for limit in (0, 1, 7, 299, 300, 1_000):
        assert read_records(tmp_path, limit=limit) == (everything[-limit:] if limit else [])
    with pytest.raises(ValueError, match="limit must be 0 or more"):
        read_records(tmp_path, limit=-1)


def test_an_unwritable_directory_fails_open_with_one_warning(tmp_path):
    appended, caught = appends_to_a_blocked_log(RetrievalLogWriter, tmp_path)
    assert appended == [False, False, False]
    assert len(caught) == 1 and issubclass(caught[0].category, RetrievalLogWarning)
    assert "queries still answer" in str(caught[0].message)


def test_newest_first_is_lazy_and_closes_its_files(tmp_path):
    with RetrievalLogWriter(tmp_path, max_segment_bytes=20_000) as writer:
        for sequence in range(500):
            writer.append(log_record(sequence))
    newest = records_newest_first(tmp_path)
    assert [next(newest)["sequence"] for _ in range(3)] == [499, 498, 497]
    newest.close()
    assert [record["sequence"] for record in records_newest_first(tmp_path)] == list(range(499, -1, -1))


def test_a_forked_child_writes_a_segment_of_its_own(tmp_path):
    append_around_a_fork(RetrievalLogWriter(tmp_path))
    segments = sorted(tmp_path.glob("*.jsonl"))
    writers = sorted([name for name in ("child", "parent") if f'"{name}"' in path.read_text()] for path in segments)
    assert writers == [["child"], ["parent"]]  # each process wrote its own segment only
    assert [r["sequence"] for r in read_records(tmp_path) if r["writer"] == "parent"] == [0, 1]


def test_max_segment_bytes_is_validated():
    with pytest.raises(ValueError, match="max_segment_bytes must be positive"):
        RetrievalLogWriter(Path("."), max_segment_bytes=0)
