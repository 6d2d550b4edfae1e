"""Merges off the write path: adds return while a merge waits or runs, the merge thread gives way to
its process's adds, a merge carries over what changed while it was built, drops itself when its
sources were rewritten or plans again when they were removed, and a killed or failed merge leaves
the store as it was."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from rms_retrieval.dataflows.retrieval import retrieve
from rms_retrieval.stores.engine import merging
from rms_retrieval.stores.engine.check import check_store
from rms_retrieval.stores.engine.manifest import SEGMENTS_DIR, read_manifest
from rms_retrieval.stores.engine.merging import MERGE_FACTOR, MERGE_PREFIX, MergeLock
from rms_retrieval.stores.engine.write_lock import WriteLock
from rms_retrieval.stores.errors import StoreError
from rms_retrieval.stores.memory_store import MemoryStore
from tests import store_workers
from tests.factories import RandomEncoder

NAMESPACE = store_workers.NAMESPACE
ROOT = Path(__file__).resolve().parents[1]


def _turn_ids(numbers) -> set:
    return {store_workers.turn(number).id for number in numbers}


def _staging(path: Path) -> list[str]:
    return sorted(child.name for child in (path / SEGMENTS_DIR).glob(f"{MERGE_PREFIX}*"))


@contextlib.contextmanager
def _merges_held_back(store: MemoryStore, turns: int = MERGE_FACTOR) -> Iterator[None]:
    """`turns` one-turn adds while another merge holds the merge lock, so this process's merge
    thread waits until the block ends."""
    with MergeLock(store.path):
        for number in range(turns):
            store.add([store_workers.turn(number)])
        yield


def test_adds_return_while_a_merge_waits_and_the_merge_follows(tmp_path):
    path = tmp_path / "store"
    with MemoryStore.open(path, store_workers.encoder()) as store:
        with _merges_held_back(store, MERGE_FACTOR + 2):
            assert [entry.rows for entry in store.snapshot().manifest.segments] == [1] * (MERGE_FACTOR + 2)
            answer = retrieve(store, "which turn?", namespaces=[NAMESPACE], encoder=store_workers.encoder(),
                              reference_time=store_workers.turn(99).created_at, log=False)
            assert answer.bundle.items
        assert store.wait_for_merges() == MERGE_FACTOR + 3  # the twelve adds, then one merge
        merged = store.snapshot().manifest
        assert [entry.rows for entry in merged.segments] == [MERGE_FACTOR + 2] and len(merged.retired) == MERGE_FACTOR + 2
        assert store_workers.snapshot_problems(store.snapshot()) == []
    assert _staging(path) == [] and check_store(path).problems == []


def test_a_merge_carries_over_the_deletes_and_updates_committed_while_it_was_built(tmp_path):
    path = tmp_path / "store"
    with MemoryStore.open(path, store_workers.encoder(), retired_grace=3600) as store:
        with _merges_held_back(store):
            staged = merging.staged_merge(path, merging.due_sources(store.snapshot().segments))
            store.delete(NAMESPACE, [store_workers.turn(3).id])
            store.update(NAMESPACE, store_workers.turn(5).id, metadata={"checked": True})
            store.add([store_workers.turn(MERGE_FACTOR)])
            with WriteLock(path):
                manifest, segments = merging.committed_merge(path, store.snapshot(), staged)
        assert not staged.staging.exists() and read_manifest(path) == manifest
        # the merged segment stands where its sources stood; what was written after it stays after it
        # (turn 4, indexed with turn 3 before it, was indexed again without it)
        assert [entry.rows for entry in manifest.segments] == [MERGE_FACTOR, 1, 1, 1]
        assert manifest.segments[0].deletions.rows == 3  # turn 3, and the old versions of turns 4 and 5
        wanted = _turn_ids(number for number in range(MERGE_FACTOR + 1) if number != 3)
        assert store_workers.live_problems(store.snapshot(), wanted) == []
        assert store.snapshot().get_objects([store_workers.turn(5).id], [NAMESPACE])[store_workers.turn(5).id].metadata == \
            {"checked": True}
        store.wait_for_merges()
    with MemoryStore.open(path, create=False, read_only=True) as reader:
        assert store_workers.live_problems(reader.snapshot(), wanted) == []
    assert check_store(path).problems == []


def test_a_merge_whose_sources_were_rewritten_meanwhile_is_dropped(tmp_path):
    path = tmp_path / "store"
    with MemoryStore.open(path, store_workers.encoder()) as store:
        with _merges_held_back(store):
            staged = merging.staged_merge(path, merging.due_sources(store.snapshot().segments))
            store.delete(NAMESPACE, [store_workers.turn(MERGE_FACTOR - 1).id])
            store.compact()  # the last source held only the deleted turn: it is gone
            before = read_manifest(path)
            with WriteLock(path):
                assert merging.committed_merge(path, store.snapshot(), staged) is None
            assert read_manifest(path) == before and staged.staging.exists()
            shutil.rmtree(staged.staging)  # what the merge thread does with a dropped merge
        store.wait_for_merges()  # nine segments: nothing is due
        assert _staging(path) == [] and len(read_manifest(path).segments) == MERGE_FACTOR - 1
        assert store_workers.live_problems(store.snapshot(), _turn_ids(range(MERGE_FACTOR - 1))) == []


def test_a_merge_killed_while_it_builds_leaves_the_store_as_it_was_and_the_next_merge_cleans_up(tmp_path):
    path = tmp_path / "store"
    child = textwrap.dedent(f"""
        import os, signal
        from pathlib import Path
        from rms_retrieval.stores.engine import merging
        from rms_retrieval.stores.memory_store import MemoryStore
        from tests import store_workers
        path = Path({str(path)!r})
        store = MemoryStore.open(path, store_workers.encoder())
        with merging.MergeLock(path):  # its own merge thread waits; this thread builds the merge
            for number in range({MERGE_FACTOR}):
                store.add([store_workers.turn(number)])
            merging.staged_merge(path, merging.due_sources(store.snapshot().segments))
            print("staged", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
    """)
    killed = subprocess.run([sys.executable, "-c", child], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert killed.returncode == -signal.SIGKILL and killed.stdout == "staged\n", killed.stderr
    before = read_manifest(path)
    assert len(_staging(path)) == 1 and len(before.segments) == MERGE_FACTOR and check_store(path).problems == []
    with MemoryStore.open(path, store_workers.encoder()) as store:
        assert store_workers.snapshot_problems(store.snapshot()) == []
        store.add([store_workers.turn(MERGE_FACTOR)])
        store.wait_for_merges()
        assert _staging(path) == [] and [entry.rows for entry in store.snapshot().manifest.segments] == [MERGE_FACTOR + 1]
        assert store_workers.snapshot_problems(store.snapshot()) == []


def test_a_failed_merge_warns_and_wait_raises_and_the_store_is_as_it_was(tmp_path):
    path = tmp_path / "store"
    with MemoryStore.open(path, store_workers.encoder()) as store:
        # Recording from before the merge lock is let go: the merge thread may fail and warn at once.
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with _merges_held_back(store):
                before = read_manifest(path)
                (path / SEGMENTS_DIR / before.segments[4].id / "objects.parquet").write_bytes(b"damaged")
            with pytest.raises(StoreError, match="background merge of store .* failed: .*objects.parquet.*rms check"):
                store.wait_for_merges()
        assert [warning.category for warning in caught] == [RuntimeWarning]
        assert read_manifest(path) == before and _staging(path) == []
        store.wait_for_merges()  # raised once: the next wait has nothing to say


def test_one_merge_thread_of_all_processes_runs_at_a_time(tmp_path):
    path = tmp_path / "store"
    with MemoryStore.open(path, store_workers.encoder()):
        pass
    held = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        from pathlib import Path
        from rms_retrieval.stores.engine.merging import MergeLock
        with MergeLock(Path({str(path)!r})):
            print("held", flush=True)
            sys.stdin.readline()
    """)], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert held.stdout.readline() == "held\n"
        with MemoryStore.open(path, store_workers.encoder()) as store:
            for number in range(MERGE_FACTOR):
                store.add([store_workers.turn(number)])
            assert len(read_manifest(path).segments) == MERGE_FACTOR  # the other process's merge runs
            held.stdin.write("\n")
            held.stdin.flush()
            assert held.wait(timeout=60) == 0
            store.wait_for_merges()
            assert [entry.rows for entry in read_manifest(path).segments] == [MERGE_FACTOR]
    finally:
        if held.poll() is None:
            os.kill(held.pid, signal.SIGKILL)


def test_a_killed_merge_is_cleaned_up_by_the_next_lock_holder_and_never_a_running_one(tmp_path):
    path = tmp_path / "store"
    child = textwrap.dedent(f"""
        import os, signal
        from pathlib import Path
        from rms_retrieval.stores.engine import merging
        from rms_retrieval.stores.memory_store import MemoryStore
        from tests import store_workers
        path = Path({str(path)!r})
        store = MemoryStore.open(path, store_workers.encoder())
        for number in range(3):
            store.add([store_workers.turn(number)])
        with merging.MergeLock(path):
            merging.staged_merge(path, store.snapshot().segments)
            print("staged", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
    """)
    killed = subprocess.run([sys.executable, "-c", child], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert killed.returncode == -signal.SIGKILL and killed.stdout == "staged\n", killed.stderr
    assert len(_staging(path)) == 1 and (path / merging.MERGE_LOCK_FILE).read_text() != ""
    running = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import shutil, sys
        from pathlib import Path
        from rms_retrieval.stores.engine import merging
        from rms_retrieval.stores.memory_store import MemoryStore
        path = Path({str(path)!r})
        with MemoryStore.open(path, create=False, read_only=True) as store, merging.MergeLock(path):
            staged = merging.staged_merge(path, store.snapshot().segments)
            print(len(list((path / "segments").glob(".merge-*"))), flush=True)
            sys.stdin.readline()
            shutil.rmtree(staged.staging)
    """)], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert running.stdout.readline() == "1\n"  # taking the lock removed the dead merge's staging
        with MemoryStore.open(path, store_workers.encoder()) as store:
            store.add([store_workers.turn(3)])  # a merge is running: its staging is not the write's to remove
            assert len(_staging(path)) == 1
            running.stdin.write("\n")
            running.stdin.flush()
            assert running.wait(timeout=60) == 0
            store.add([store_workers.turn(4)])
            assert _staging(path) == [] and len(store.snapshot().segments) == 5
            assert store_workers.snapshot_problems(store.snapshot()) == []
    finally:
        if running.poll() is None:
            os.kill(running.pid, signal.SIGKILL)


def test_the_next_write_removes_a_killed_merge_s_staging(tmp_path):
    path = tmp_path / "store"
    with MemoryStore.open(path, store_workers.encoder()) as store:
        store.add([store_workers.turn(0)])
    killed = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
        import os, signal
        from pathlib import Path
        from rms_retrieval.stores.engine import merging
        from rms_retrieval.stores.memory_store import MemoryStore
        path = Path({str(path)!r})
        with MemoryStore.open(path, create=False, read_only=True) as store, merging.MergeLock(path):
            merging.staged_merge(path, store.snapshot().segments)
            os.kill(os.getpid(), signal.SIGKILL)
    """)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert killed.returncode == -signal.SIGKILL and len(_staging(path)) == 1, killed.stderr
    with MemoryStore.open(path, store_workers.encoder()) as store:
        store.add([store_workers.turn(1)])
        assert _staging(path) == [] and (path / merging.MERGE_LOCK_FILE).read_text() == ""


def _held_add(give_way: merging.GiveWay, order: list[str]) -> tuple[threading.Event, threading.Event, threading.Thread]:
    """A thread inside `give_way.busy()` until `release` is set, as an add is."""
    entered, release = threading.Event(), threading.Event()

    def add() -> None:
        with give_way.busy():
            entered.set()
            release.wait()
        order.append("add ended")

    thread = threading.Thread(target=add)
    thread.start()
    entered.wait()
    return entered, release, thread


def test_a_merge_gives_way_to_a_running_add_until_it_ends():
    give_way, order = merging.GiveWay(), []
    give_way.begin()
    give_way.wait()  # no add runs: nothing to wait for
    time.sleep(0.6)  # the merge has worked 0.6 s, so it may wait up to MAX_WAIT_SECONDS (0.25 s)
    _, release, thread = _held_add(give_way, order)
    threading.Timer(0.05, release.set).start()
    give_way.wait()
    order.append("merge went on")
    thread.join()
    assert order == ["add ended", "merge went on"]


def test_a_merge_waits_no_longer_than_it_has_worked():
    give_way, order = merging.GiveWay(), []
    _, release, thread = _held_add(give_way, order)
    give_way.begin()  # the merge has not worked yet: it goes on beside the add
    give_way.wait()
    order.append("merge went on")
    release.set()
    thread.join()
    assert order == ["merge went on", "add ended"]


class _OnFirstWait(merging.GiveWay):
    """The merge thread's pauses, with `step` run at the first: what another write does meanwhile."""

    def __init__(self, step) -> None:
        super().__init__()
        self._step = step

    def wait(self) -> None:
        step, self._step = self._step, None
        if step is not None:
            step()


def test_a_merge_whose_sources_a_compaction_removed_while_it_was_built_plans_again(tmp_path):
    path = tmp_path / "store"
    with MemoryStore.open(path, store_workers.encoder()) as store:
        def delete_and_compact() -> None:
            store.delete(NAMESPACE, [store_workers.turn(MERGE_FACTOR - 1).id])
            store.compact()  # no grace period: the last source, which held only that turn, is removed now

        with _merges_held_back(store):
            store._give_way = _OnFirstWait(delete_and_compact)
            assert store._merge_once()  # its source's files are gone, and the generation moved: plan again
        store.wait_for_merges()  # nine segments: nothing is due
        assert _staging(path) == [] and len(read_manifest(path).segments) == MERGE_FACTOR - 1
        assert store_workers.live_problems(store.snapshot(), _turn_ids(range(MERGE_FACTOR - 1))) == []


def test_a_source_file_gone_while_the_generation_stays_is_an_error(tmp_path):
    path = tmp_path / "store"
    with MemoryStore.open(path, store_workers.encoder()) as store:
        with _merges_held_back(store):
            victim = path / SEGMENTS_DIR / read_manifest(path).segments[3].id / "objects.parquet"
            aside = victim.with_name("moved-away")
            store._give_way = _OnFirstWait(lambda: victim.rename(aside))
            with pytest.raises(FileNotFoundError, match="objects.parquet"):
                store._merge_once()
            assert _staging(path) == [] and len(read_manifest(path).segments) == MERGE_FACTOR
            aside.rename(victim)  # put back before the merge thread may run
        store.wait_for_merges()
        assert [entry.rows for entry in read_manifest(path).segments] == [MERGE_FACTOR]


class _GatedEncoder(RandomEncoder):
    """The random encoder, which embeds a question only once `go` is set: a request held open."""

    def __init__(self, dimension: int, order: list[str]) -> None:
        super().__init__(dimension)
        self.entered, self.go, self._order = threading.Event(), threading.Event(), order

    def encode(self, texts):
        self.entered.set()
        self.go.wait()
        self._order.append("question embedded")
        return super().encode(texts)


def test_a_merge_gives_way_to_a_question_answered_from_the_store(tmp_path):
    order: list[str] = []
    with MemoryStore.open(tmp_path / "store", store_workers.encoder()) as store:
        store.add([store_workers.turn(number) for number in range(3)])
        gated = _GatedEncoder(store_workers.DIMENSION, order)
        asked = threading.Thread(target=retrieve, args=(store, "which turn?"), kwargs=dict(
            namespaces=[NAMESPACE], encoder=gated, reference_time=store_workers.turn(9).created_at, log=False))
        wait = store._give_way.begin()
        time.sleep(0.6)  # the merge has worked 0.6 s, so it may wait up to MAX_WAIT_SECONDS (0.25 s)
        asked.start()
        gated.entered.wait()  # retrieve() embeds inside store.answering()
        threading.Timer(0.05, gated.go.set).start()
        wait()
        order.append("merge went on")
        asked.join()
    assert order == ["question embedded", "merge went on"]
