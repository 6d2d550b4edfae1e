"""Compaction of the retrieval log: retention, live segments left alone, crash leftovers cleaned."""

from __future__ import annotations

import os
import time

import pydantic
import pytest

from rms_retrieval.stores.errors import StoreError
from rms_retrieval.stores.log.compaction import LogRetention, compact, log_size
from rms_retrieval.stores.log.retrieval_log import RetrievalLogWriter, read_records

DAY_NS = 86_400 * 10**9


def _record(sequence: int, writer: str = "w") -> dict:
    return {"request_id": f"{writer}-{sequence}", "writer": writer, "sequence": sequence}


def test_compaction_keeps_live_segments_and_applies_retention(tmp_path):
    old = RetrievalLogWriter(tmp_path)
    for sequence in range(5):
        old.append(_record(sequence, "old"))
    old.close()
    boundary = time.time_ns()
    recent = RetrievalLogWriter(tmp_path)
    for sequence in range(5):
        recent.append(_record(sequence, "recent"))
    recent.close()
    live = RetrievalLogWriter(tmp_path)
    live.append(_record(0, "live"))
    report = compact(tmp_path, LogRetention(max_age_days=1), now_ns=boundary + DAY_NS)
    assert (report.segments_merged, report.records_kept, report.records_dropped) == (2, 5, 5)
    assert live.path.exists()
    assert [r["writer"] for r in read_records(tmp_path)] == ["recent"] * 5 + ["live"]
    live.close()
    report = compact(tmp_path, LogRetention(max_records=3))
    assert (report.records_kept, report.records_dropped) == (3, 3)
    assert [(r["writer"], r["sequence"]) for r in read_records(tmp_path)] == [("recent", 3), ("recent", 4), ("live", 0)]
    assert report.bytes_after == log_size(tmp_path) < report.bytes_before


def test_a_rotating_writer_lets_its_older_segments_be_compacted(tmp_path):
    writer = RetrievalLogWriter(tmp_path, max_segment_bytes=2_000)
    for sequence in range(100):
        writer.append(_record(sequence))
    report = compact(tmp_path, LogRetention())
    assert report.segments_merged >= 2 and writer.path.exists()
    writer.append(_record(100))
    writer.close()
    assert [r["sequence"] for r in read_records(tmp_path)] == list(range(101))


def test_a_compaction_killed_before_deleting_its_inputs_shows_no_duplicates(tmp_path):
    with RetrievalLogWriter(tmp_path) as writer:
        for sequence in range(4):
            writer.append(_record(sequence))
        segment = writer.path
    kept = segment.read_bytes()
    compact(tmp_path, LogRetention())
    segment.write_bytes(kept)  # as if the input had not been deleted yet
    (tmp_path / ".merged-1.jsonl.tmp").write_bytes(b"half a compaction")
    assert [r["sequence"] for r in read_records(tmp_path)] == [0, 1, 2, 3]
    assert [r["sequence"] for r in read_records(tmp_path, limit=2)] == [2, 3]
    report = compact(tmp_path, LogRetention())
    assert report.leftovers_removed == 2 and not segment.exists()
    assert not (tmp_path / ".merged-1.jsonl.tmp").exists()
    assert [r["sequence"] for r in read_records(tmp_path)] == [0, 1, 2, 3]


def test_compaction_of_nothing_and_of_an_unwritable_directory(tmp_path):
    assert compact(tmp_path / "absent", LogRetention()).output is None
    assert compact(tmp_path, LogRetention()).segments_merged == 0
    (tmp_path / ".compact.lock").unlink()
    (tmp_path / ".compact.lock").mkdir()  # the lock cannot be opened, even by root
    with pytest.raises(StoreError, match="cannot compact the retrieval log"):
        compact(tmp_path, LogRetention())


def test_a_writer_that_died_while_opening_is_cleaned_up_once_old(tmp_path):
    stale, fresh = tmp_path / ".1-1.jsonl.opening", tmp_path / ".2-2.jsonl.opening"
    stale.write_bytes(b"")
    fresh.write_bytes(b"")
    os.utime(stale, ns=(0, 0))
    assert compact(tmp_path, LogRetention()).leftovers_removed == 1
    assert not stale.exists() and fresh.exists()


def test_retention_is_validated():
    with pytest.raises(pydantic.ValidationError):
        LogRetention(max_age_days=0)
    with pytest.raises(pydantic.ValidationError):
        LogRetention(max_records=-5)
    with pytest.raises(pydantic.ValidationError):
        LogRetention(max_days=3)


def test_two_writers_in_one_process_write_two_segments(tmp_path):
    first, second = RetrievalLogWriter(tmp_path), RetrievalLogWriter(tmp_path)
    for sequence in range(3):
        first.append(_record(sequence, "first"))
        second.append(_record(sequence, "second"))
    assert first.path != second.path
    assert compact(tmp_path, LogRetention()).segments_merged == 0  # both alive
    first.close()
    second.close()
    assert [r["writer"] for r in read_records(tmp_path)] == ["first", "second"] * 3


# A compaction that starts when told to, so the parent can kill it at a moment of its own choosing.
COMPACT_SCRIPT = """
import sys
from rms_retrieval.stores.log.compaction import LogRetention, compact
print("ready", flush=True)
sys.stdin.readline()
compact(sys.argv[1], LogRetention())
"""


def test_compactions_sigkilled_at_random_moments_show_every_record_once(tmp_path):
    import random
    import signal
    import subprocess
    import sys

    chance = random.Random(12)
    for round_index in range(6):
        for writer_index in range(3):
            with RetrievalLogWriter(tmp_path) as writer:
                for sequence in range(1_000):
                    writer.append({**_record(sequence, f"r{round_index}w{writer_index}"), "payload": {"query": "x" * 300}})
        expected = sorted(record["request_id"] for record in read_records(tmp_path))
        child = subprocess.Popen([sys.executable, "-c", COMPACT_SCRIPT, str(tmp_path)],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        child.stdout.readline()
        child.stdin.write("go\n")
        child.stdin.flush()
        time.sleep(chance.uniform(0.0, 0.5))  # a compaction here takes about 0.3 s
        child.send_signal(signal.SIGKILL)
        child.wait()
        assert sorted(record["request_id"] for record in read_records(tmp_path)) == expected
    compact(tmp_path, LogRetention())
    assert sorted(record["request_id"] for record in read_records(tmp_path)) == expected
    assert len(list(tmp_path.glob("*.jsonl"))) == 1 and not list(tmp_path.glob(".*.tmp"))


def test_forget_drops_only_the_lines_that_name_a_needle(tmp_path):
    from rms_retrieval.stores.log.compaction import forget

    (tmp_path / "a.jsonl").write_bytes(b'{"ns": "gone", "n": 1}\n{"ns": "kept", "n": 2}\n')
    (tmp_path / "b.jsonl").write_bytes(b'{"ns": "kept", "n": 3}\n')
    assert forget(tmp_path, [b'"gone"']) == 1
    assert (tmp_path / "a.jsonl").read_bytes() == b'{"ns": "kept", "n": 2}\n'
    assert (tmp_path / "b.jsonl").read_bytes() == b'{"ns": "kept", "n": 3}\n'
    assert forget(tmp_path, []) == 0
