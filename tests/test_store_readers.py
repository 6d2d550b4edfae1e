"""Readers write nothing: a store on a read-only mount answers queries, and `rms check` verifies it."""

from __future__ import annotations

import gc
import subprocess
import warnings

import pytest

from tests import store_workers
from rms_retrieval.dataflows.cli import main
from rms_retrieval.dataflows.retrieval import retrieve
from rms_retrieval.stores.engine.manifest import read_manifest
from rms_retrieval.stores.memory_store import MemoryStore
from rms_retrieval.stores.log.retrieval_log import RetrievalLogWarning
from rms_retrieval.stores.protocols import ScanSelection


def _tree(path) -> dict[str, tuple[int, int]]:
    return {str(item.relative_to(path)): (item.stat().st_mtime_ns, item.stat().st_size) for item in path.rglob("*")}


def _live_file(path, name: str):
    """A file of the live generation's first segment (retired segments stay on disk a while)."""
    return path / "segments" / read_manifest(path).segments[0].id / name


def _built(path, turns: int = 12):
    with MemoryStore.open(path, store_workers.encoder()) as store:
        for number in range(turns):
            store.add([store_workers.turn(number)])
            store.wait_for_merges()


def _ask(store: MemoryStore):
    return retrieve(store, "which turn was about the river?", namespaces=[store_workers.NAMESPACE],
                    encoder=store_workers.encoder(), reference_time=store_workers.turn(99).created_at, log=False)


def test_a_reader_writes_nothing_in_the_store(tmp_path):
    _built(tmp_path / "store")
    before = _tree(tmp_path / "store")
    with MemoryStore.open(tmp_path / "store", create=False) as store:
        assert _ask(store).bundle.items
        store.snapshot().scan_page(ScanSelection(store_workers.NAMESPACE, None, ("TURN",), ("ACTIVE",), None, 4))
    assert _tree(tmp_path / "store") == before


@pytest.fixture
def read_only_mount(tmp_path):
    """A read-only bind mount of a built store (root and a working `mount` needed, else skipped)."""
    source, mounted = tmp_path / "store", tmp_path / "ro"
    _built(source)
    mounted.mkdir()
    if subprocess.run(["mount", "--bind", str(source), str(mounted)], capture_output=True).returncode:
        pytest.skip("cannot bind-mount here (needs root); test_a_reader_writes_nothing_in_the_store covers readers")
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(mounted)], check=True, capture_output=True)
        yield mounted
    finally:
        gc.collect()  # a closed store's snapshots, in reference cycles, keep its index files mapped until collected
        subprocess.run(["umount", str(mounted)], check=True)


def test_a_store_on_a_read_only_mount_answers_and_logging_fails_open(read_only_mount):
    with pytest.raises(OSError):
        (read_only_mount / "probe").touch()
    with MemoryStore.open(read_only_mount, create=False) as store:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = retrieve(store, "which turn was about the river?", namespaces=[store_workers.NAMESPACE],
                              encoder=store_workers.encoder(), reference_time=store_workers.turn(99).created_at)
            retrieve(store, "guitar", namespaces=[store_workers.NAMESPACE], encoder=store_workers.encoder(),
                     reference_time=store_workers.turn(99).created_at)
        assert result.bundle.items
        assert [warning.category for warning in caught] == [RetrievalLogWarning]  # one warning, not one per query
    assert main(["check", "--store", str(read_only_mount)]) == 0


def test_rms_check_names_a_damaged_file_and_exits_1(tmp_path, capsys):
    _built(tmp_path / "store")
    assert main(["check", "--store", str(tmp_path / "store")]) == 0
    assert "ok: generation 13, 3 segments, 12 objects" in capsys.readouterr().out
    vectors = _live_file(tmp_path / "store", "index.npz")
    data = bytearray(vectors.read_bytes())
    data[len(data) // 2] ^= 0x01  # one bit of one float (vectors are most of the file): a different answer if unnoticed
    vectors.write_bytes(bytes(data))
    assert main(["check", "--store", str(tmp_path / "store")]) == 1
    assert str(vectors) in capsys.readouterr().out


@pytest.mark.parametrize("victim", ["objects.parquet", "index.npz"])
def test_replay_never_calls_an_answer_from_a_damaged_store_identical(tmp_path, capsys, victim):
    _built(tmp_path / "store")
    with MemoryStore.open(tmp_path / "store", create=False) as store:
        retrieve(store, "which turn was about the river?", namespaces=[store_workers.NAMESPACE],
                 encoder=store_workers.encoder(), reference_time=store_workers.turn(99).created_at)
    assert main(["replay", "--store", str(tmp_path / "store"), "--last", "1"]) == 0
    assert "1 of 1 replayed bundles are identical" in capsys.readouterr().out
    damaged = _live_file(tmp_path / "store", victim)
    data = bytearray(damaged.read_bytes())
    data[len(data) // 2] ^= 0x01
    damaged.write_bytes(bytes(data))
    code = main(["replay", "--store", str(tmp_path / "store"), "--last", "1"])
    captured = capsys.readouterr()
    assert code != 0 and "identical" not in captured.out
    assert str(damaged) in captured.err and "Traceback" not in captured.err


def _scanned(snapshot) -> list:
    from rms_retrieval.stores.exact.enumeration import iter_objects

    return [memory.id for memory in iter_objects(snapshot, namespace=store_workers.NAMESPACE, batch_size=5)]


def _swap_first_two_objects_files(path) -> None:
    first, second = (path / "segments" / entry.id / "objects.parquet" for entry in read_manifest(path).segments[:2])
    second.write_bytes(first.read_bytes())


def test_an_open_process_never_scans_a_file_swapped_under_it(tmp_path):
    """Issue 21 #3: scans read the Parquet files again, unchecked, and returned duplicates."""
    from rms_retrieval.stores.errors import StoreError

    swapped, checked = tmp_path / "swapped", tmp_path / "checked"
    _built(swapped)
    _built(checked)
    with MemoryStore.open(swapped, create=False) as store:
        snapshot = store.snapshot()
        _swap_first_two_objects_files(swapped)
        with pytest.raises(StoreError, match="objects.parquet is damaged"):
            _scanned(snapshot)
    with MemoryStore.open(checked, create=False) as store:  # what was checked before a swap stays right
        expected = _scanned(store.snapshot())
        _swap_first_two_objects_files(checked)
        assert _scanned(store.snapshot()) == expected and len(set(expected)) == len(expected) == 12


def test_a_snapshot_older_than_the_retired_grace_says_so(tmp_path):
    """Issue 21 #10: a raw DuckDB IOException 'No files found'."""
    from rms_retrieval.stores.errors import StoreError
    from rms_retrieval.stores.engine.merging import MERGE_FACTOR

    path = tmp_path / "store"
    with MemoryStore.open(path, store_workers.encoder(), retired_grace=0) as store:
        store.add([store_workers.turn(0)])
        old = store.snapshot()
        for number in range(1, MERGE_FACTOR + 2):  # a merge retires the first segment, the next write removes it
            store.add([store_workers.turn(number)])
            store.wait_for_merges()
        with pytest.raises(StoreError, match="older than the store's retired grace.*take a new snapshot"):
            _scanned(old)
        assert len(_scanned(store.snapshot())) == MERGE_FACTOR + 2
