"""Readers and a writer at once: threads on one MemoryStore, and real processes on one directory."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests import store_workers
from rms_retrieval.dataflows.retrieval import retrieve
from rms_retrieval.stores.engine.manifest import read_manifest
from rms_retrieval.stores.memory_store import MemoryStore
from rms_retrieval.stores.engine.write_lock import StoreBusyError, WriteLock
from rms_retrieval.stores.engine.merging import MERGE_FACTOR

QUESTIONS = ("What did Caroline research?", "When did Melanie paint a sunrise?", "Where does Tomas work?",
             "What is Caroline's identity?", "Who went camping?")
WORKER = store_workers.COMMAND


@pytest.mark.parametrize("threads, calls", [(4, 10), pytest.param(8, 20, marks=pytest.mark.slow)])
def test_threads_sharing_one_store_get_the_serial_bundles(demo_store, demo_copy, encoder, threads, calls):
    with MemoryStore.open(demo_copy, create=False) as store:
        def answer(question: str) -> str:
            return retrieve(store, question, namespaces=[demo_store.namespace, "demo-other-conversation"],
                            reference_time=demo_store.reference_time, encoder=encoder).bundle.to_json()

        logged_before = len(store.retrieval_log())
        serial = {question: answer(question) for question in QUESTIONS}
        calls = [QUESTIONS[number % len(QUESTIONS)] for number in range(threads * calls)]
        with ThreadPoolExecutor(threads) as pool:
            answers = list(pool.map(answer, calls))
        assert [answer_ == serial[question] for question, answer_ in zip(calls, answers)] == [True] * len(calls)
        assert len(store.retrieval_log()) == logged_before + len(QUESTIONS) + len(calls)


def test_a_second_writer_waits_then_is_told_who_writes(tmp_path):
    MemoryStore.open(tmp_path / "store").close()
    held = threading.Event()
    release = threading.Event()

    def hold() -> None:
        with WriteLock(tmp_path / "store"):
            held.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    held.wait(10)
    try:
        with MemoryStore.open(tmp_path / "store", store_workers.encoder(), write_timeout=0.2) as store:
            with pytest.raises(StoreBusyError, match=r"is being written by process \d+ since 20\d\d-") as raised:
                store.add([store_workers.turn(0)])
            assert "corrupt" not in str(raised.value) and "damaged" not in str(raised.value)
    finally:
        release.set()
        holder.join()
    with MemoryStore.open(tmp_path / "store", store_workers.encoder(), write_timeout=0.2) as store:
        store.add([store_workers.turn(0)])  # the lock is free again
        assert store.snapshot().count_objects() == 1


def test_an_open_reader_sees_each_new_generation_on_its_next_request(tmp_path):
    with MemoryStore.open(tmp_path / "store", store_workers.encoder()) as writer_store, \
            MemoryStore.open(tmp_path / "store", create=False, read_only=True) as reader:
        pinned = reader.snapshot()
        for number in range(3):
            writer_store.add([store_workers.turn(number)])
            assert reader.snapshot().count_objects() == number + 1 and store_workers.snapshot_problems(reader.snapshot()) == []
        assert pinned.snapshot().count_objects() == 0  # a snapshot never changes under its request


@pytest.mark.parametrize("reader_count, turns", [(2, 30), pytest.param(4, 100, marks=pytest.mark.slow)])
def test_reader_processes_and_one_writer_process(tmp_path, reader_count, turns):
    """Readers check, answer, enumerate and explain every snapshot they see while a writer adds
    turns one at a time (merges run every MERGE_FACTOR writes)."""
    path = tmp_path / "store"
    with MemoryStore.open(path, store_workers.encoder()) as store:
        store.add([store_workers.turn(0)])
    stop = tmp_path / "stop"
    readers = [subprocess.Popen([*WORKER, "read", str(path), str(stop)], stdout=subprocess.PIPE, text=True,
                                cwd=store_workers.ROOT) for _ in range(reader_count)]
    try:
        store_workers.wait_until_ready(stop, readers)
        writer = subprocess.run([*WORKER, "write", str(path), "1", str(turns - 1)], capture_output=True, text=True,
                                timeout=600, cwd=store_workers.ROOT)
    finally:
        stop.touch()
    assert writer.returncode == 0, writer.stderr
    summaries = [json.loads(reader.communicate(timeout=120)[0]) for reader in readers]
    for summary in summaries:
        assert summary["errors"] == [] and summary["problems"] == []
        assert summary["requests"] > 0 and summary["explained"] > 0 and len(summary["generations"]) > 1
    with MemoryStore.open(path, create=False, read_only=True) as store:
        assert store.snapshot().count_objects() == turns and store_workers.snapshot_problems(store.snapshot()) == []


def test_a_request_on_an_old_generation_still_reads_the_segments_merges_retired(tmp_path):
    """A reader process enumerates and aggregates its snapshot after a writer process merged its
    segments away and wrote on: retired segments outlive the grace period, not one more write."""
    path = tmp_path / "store"
    with MemoryStore.open(path, store_workers.encoder()) as store:
        for number in range(MERGE_FACTOR - 1):
            store.add([store_workers.turn(number)])
    ready, go = tmp_path / "ready", tmp_path / "go"
    holder = subprocess.Popen([*WORKER, "hold", str(path), str(ready), str(go)], stdout=subprocess.PIPE, text=True,
                              cwd=store_workers.ROOT)
    try:
        for _ in range(600):
            if ready.exists() or holder.poll() is not None:
                break
            time.sleep(0.05)
        before = read_manifest(path)
        writer = subprocess.run([*WORKER, "write", str(path), str(MERGE_FACTOR - 1), "3"], capture_output=True, text=True,
                                timeout=300, cwd=store_workers.ROOT)
        assert writer.returncode == 0, writer.stderr
        after = read_manifest(path)
        assert not set(before.segment_ids) & set(after.segment_ids)  # every segment the reader holds is retired
    finally:
        go.touch()
    summary = json.loads(holder.communicate(timeout=120)[0])
    assert summary["errors"] == []
    assert summary["generation"] == MERGE_FACTOR - 1 and summary["scanned"] == list(range(MERGE_FACTOR - 1))
    assert summary["exclusions"] == {"no_assertion": MERGE_FACTOR - 1}


def test_retired_segments_go_once_their_grace_has_passed(tmp_path):
    path = tmp_path / "store"
    with MemoryStore.open(path, store_workers.encoder(), retired_grace=0.5) as store:
        for number in range(MERGE_FACTOR):
            store.add([store_workers.turn(number)])
        store.wait_for_merges()
        retired = set(store.snapshot().manifest.retired)
        assert len(retired) == MERGE_FACTOR
        store.add([store_workers.turn(MERGE_FACTOR)])
        assert retired <= {child.name for child in (path / "segments").iterdir()}  # within the grace
        time.sleep(0.6)
        store.add([store_workers.turn(MERGE_FACTOR + 1)])
        assert not retired & {child.name for child in (path / "segments").iterdir()}
    with MemoryStore.open(path, store_workers.encoder(), retired_grace=0) as other_process:  # lists the directory
        other_process.add([store_workers.turn(MERGE_FACTOR + 2)])
        assert {child.name for child in (path / "segments").iterdir()} == set(other_process.snapshot().manifest.segment_ids)


def test_reader_processes_see_each_update_delete_erase_and_compaction_whole(tmp_path):
    path, total = tmp_path / "store", 40
    with MemoryStore.open(path, store_workers.encoder()) as store:
        for number in range(total):
            store.add([store_workers.turn(number)])
    stop = tmp_path / "stop"
    readers = [subprocess.Popen([*WORKER, "watch", str(path), str(stop), str(total)], stdout=subprocess.PIPE, text=True)
               for _ in range(2)]
    try:
        store_workers.wait_until_ready(stop, readers)
        subprocess.run([*WORKER, "forget", str(path), "0", "30"], check=True, capture_output=True, timeout=600)
    finally:
        stop.touch()
    summaries = [json.loads(reader.communicate(timeout=120)[0]) for reader in readers]
    for summary in summaries:
        assert summary["problems"] == [] and summary["errors"] == []
        assert summary["requests"] > 0 and len(summary["generations"]) > 1
    with MemoryStore.open(path, create=False, read_only=True) as store:
        assert store_workers.suffix_problems(store.snapshot(), total) == [] and store.snapshot().count_objects() == 10
