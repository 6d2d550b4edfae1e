"""Issue 21 #4, #7 and #9: a full disk, on a small tmpfs the test mounts (root needed, else skipped)."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from tests import store_workers
from rms_retrieval.dataflows.retrieval import retrieve
from rms_retrieval.stores.errors import StoreError
from rms_retrieval.stores.memory_store import MemoryStore
from rms_retrieval.stores.log.retrieval_log import RetrievalLogWarning

DISK_BYTES = 4 * 1024 * 1024


@pytest.fixture
def disk(tmp_path):
    """A 4 MiB tmpfs at tmp_path/disk."""
    mounted = tmp_path / "disk"
    mounted.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_BYTES}", "tmpfs", str(mounted)],
                      capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (needs root); the disk-full paths are not exercised")
    try:
        yield mounted
    finally:
        subprocess.run(["umount", "-l", str(mounted)], check=True)


def _fill(disk: Path, leave: int = 0) -> Path:
    """Fill `disk` until at most `leave` bytes are free; the filler file, to delete to free it."""
    filler = disk / "filler"
    with open(filler, "wb") as handle:
        while True:
            free = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
            if free <= leave:
                break
            try:
                handle.write(b"\0" * min(free - leave, 1 << 20))
                handle.flush()
            except OSError as error:
                assert error.errno == errno.ENOSPC
                break
    return filler


def _tree(path: Path) -> dict[str, bytes]:
    return {str(item.relative_to(path)): item.read_bytes() for item in sorted(path.rglob("*"))
            if item.is_file() and item.name != "write.lock"}


def _store(disk: Path) -> Path:
    path = disk / "store"
    with MemoryStore.open(path, store_workers.encoder()) as store:
        store.add([store_workers.turn(0)])
    return path


def _add_in_another_process(path: Path) -> str:
    code = ("import sys; from tests import store_workers as w; "
            "from rms_retrieval.stores.memory_store import MemoryStore\n"
            "with MemoryStore.open(sys.argv[1], w.encoder(), write_timeout=2) as s: "
            "s.add([w.turn(7)]); print(s.snapshot().count_objects())")
    done = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=120,
                          cwd=store_workers.ROOT)
    return done.stdout.strip() or done.stderr.strip().splitlines()[-1]


def test_a_full_disk_while_taking_the_write_lock_never_leaks_it(disk):
    """#4: the flock stayed held after the holder's name could not be written."""
    path = _store(disk)
    with MemoryStore.open(path, store_workers.encoder()) as store:
        filler = _fill(disk)
        with pytest.raises(StoreError, match=r"cannot take the write lock .*No space left on device.*nothing was written"):
            store.add([store_workers.turn(1)])
        filler.unlink()
        store.add([store_workers.turn(2)])  # this process again
        assert _add_in_another_process(path) == "3"  # and any other


def test_a_full_disk_during_a_write_says_which_store_and_step_and_leaves_it_as_it_was(disk):
    """#9: a bare `OSError: [Errno 28] No space left on device`."""
    path = _store(disk)
    before = _tree(path)
    with MemoryStore.open(path, store_workers.encoder()) as store:
        filler = _fill(disk, leave=4096)
        many = [store_workers.turn(number) for number in range(1, 400)]
        with pytest.raises(StoreError) as raised:
            store.add(many)
        message = str(raised.value)
        assert f"cannot write store {path}: No space left on device while" in message
        assert "nothing was written, the store is as it was at generation 1; free space and try again" in message
        assert "\n" not in message
        assert _tree(path) == before and store.snapshot().count_objects() == 1
        filler.unlink()
        store.add(many)
        assert store.snapshot().count_objects() == 400


def test_queries_on_a_full_disk_leave_no_empty_log_files(disk):
    """#7: every query opened a new log file, which stayed there empty."""
    path = _store(disk)
    with MemoryStore.open(path, create=False) as store:
        _fill(disk)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RetrievalLogWarning)
            for _ in range(30):
                retrieve(store, "which turn?", namespaces=[store_workers.NAMESPACE], encoder=store_workers.encoder(),
                         reference_time=store_workers.turn(9).created_at)
                store.close()  # writes the queued record now
    files = list((path / "log").iterdir()) if (path / "log").exists() else []
    assert [item.name for item in files if item.stat().st_size == 0] == []
