"""SIGKILL a real writer process at random moments: the store opens to a committed generation."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time

import pytest

from rms_retrieval.dataflows.bench import crash_bench
from tests import store_workers
from rms_retrieval.stores.engine.manifest import SEGMENTS_DIR, read_manifest
from rms_retrieval.stores.memory_store import MemoryStore
from rms_retrieval.stores.engine.segment_layout import TEMPORARY_PREFIX
from rms_retrieval.stores.engine.writer import never_named


@pytest.mark.slow  # the fast tier kills twice, through `rms bench crash` (tests/test_store_benches.py)
def test_five_random_kills_leave_a_consistent_store_and_no_leftovers(tmp_path):
    result = crash_bench.run_kills(tmp_path / "store", 5, seed=12)
    assert result["kills"] == 5 and result["problems"] == []
    with MemoryStore.open(tmp_path / "store", create=False, read_only=True) as store:
        assert store.snapshot().count_objects() == result["turns_at_end"]


def test_the_next_write_removes_a_dead_writes_files(tmp_path):
    path = tmp_path / "store"
    with MemoryStore.open(path, store_workers.encoder()) as store:
        store.add([store_workers.turn(0)])
        staged = path / SEGMENTS_DIR / f"{TEMPORARY_PREFIX}g00000002-deaddeaddead"
        staged.mkdir()
        (staged / "objects.parquet").write_bytes(b"half a file")
        renamed = path / SEGMENTS_DIR / "g00000002-0123456789ab"  # renamed into place, never named
        renamed.mkdir()
        (path / "manifest.json.tmp").write_text("{")
        (path / "write.lock").write_text('{"pid": 1, "since": "2026-01-01T00:00:00+00:00"}')  # as a killed writer leaves it
        before = store.snapshot().state_fingerprint()
        with MemoryStore.open(path, create=False, read_only=True) as reader:
            assert reader.snapshot().state_fingerprint() == before  # leftovers are invisible to readers
        store.add([store_workers.turn(1)])
    assert not staged.exists() and not renamed.exists() and not (path / "manifest.json.tmp").exists()
    assert never_named(path, read_manifest(path)) == []


def test_kill_round_reports_what_it_checked(tmp_path):
    MemoryStore.open(tmp_path / "store", store_workers.encoder()).close()
    report = crash_bench.kill_round(tmp_path / "store", random.Random(3), max_commits=2, max_delay=0.05)
    assert report["problems"] == [] and report["held"] >= 1


def test_sigkill_during_update_delete_erase_and_compaction_leaves_before_or_after(tmp_path):
    """Six kills of a process that updates, erases, deletes and compacts turns one by one."""
    from rms_retrieval.stores.engine.check import check_store

    path, total = tmp_path / "store", 36
    with MemoryStore.open(path, store_workers.encoder()) as store:
        store.add([store_workers.turn(number) for number in range(total)])
    rng = random.Random(22)
    for _ in range(6):
        with MemoryStore.open(path, create=False, read_only=True) as store:
            start = total - store.snapshot().count_objects()
        worker = subprocess.Popen([*store_workers.COMMAND, "forget", str(path), str(start), str(total)],
                                  stdout=subprocess.PIPE, text=True, cwd=store_workers.ROOT)
        assert worker.stdout is not None
        for _ in range(rng.randint(0, 2)):
            worker.stdout.readline()
        time.sleep(rng.uniform(0, 0.4))
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait()
        with MemoryStore.open(path, create=False, read_only=True) as store:
            assert store_workers.suffix_problems(store.snapshot(), total) == []
        assert check_store(path).problems == []
    with MemoryStore.open(path, store_workers.encoder()) as store:
        store.compact()  # a dead change's leftovers go with the next write
        assert store_workers.suffix_problems(store.snapshot(), total) == []
    assert never_named(path, read_manifest(path)) == []
