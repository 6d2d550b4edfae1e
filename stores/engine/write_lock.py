"""The store's single-writer lock: `fcntl.flock` on `write.lock`, which names its holder.

Only writes take it; readers never do. The kernel drops a flock when its process dies, so a
killed writer never leaves the store locked. A second writer waits up to its timeout, then is
told who holds the lock and since when: never that the store is damaged.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from datetime import datetime, timezone
from pathlib import Path
from types import TracebackType

from rms_retrieval.stores.errors import StoreError

LOCK_FILE = "write.lock"
DEFAULT_WRITE_TIMEOUT_SECONDS = 30.0
_POLL_SECONDS = 0.02


class StoreBusyError(StoreError):
    """Another process is writing the store and did not finish within the timeout."""


class WriteLock:
    """Exclusive write access to one store directory for the duration of a `with` block."""

    def __init__(self, store: Path, timeout: float = DEFAULT_WRITE_TIMEOUT_SECONDS) -> None:
        self._path = store / LOCK_FILE
        self._timeout = timeout
        self._descriptor: int | None = None
        self.holder_died = False

    def __enter__(self) -> WriteLock:
        try:
            descriptor = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as error:
            raise StoreError(f"cannot take the write lock of store {self._path.parent}: opening {self._path.name} failed "
                             f"({error.strerror}); nothing was written, the store is as it was") from error
        deadline = time.monotonic() + self._timeout
        while True:
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    holder = _holder(descriptor)
                    os.close(descriptor)
                    raise StoreBusyError(f"store {self._path.parent} is being written by {holder}; "
                                         f"waited {self._timeout:g} s, try again when it is done") from None
                time.sleep(_POLL_SECONDS)
        # A holder empties the file when it lets go, so a name still in it is a writer that died
        # holding the lock: its write may have left files behind.
        try:
            self.holder_died = bool(os.pread(descriptor, 1, 0))
            holder = json.dumps({"pid": os.getpid(), "since": datetime.now(timezone.utc).isoformat(timespec="seconds")})
            os.ftruncate(descriptor, 0)
            os.pwrite(descriptor, holder.encode(), 0)
        except OSError as error:  # a full disk, say: let go at once, or every later write waits on us
            fcntl.flock(descriptor, fcntl.LOCK_UN)
            os.close(descriptor)
            raise StoreError(f"cannot take the write lock of store {self._path.parent}: writing {self._path.name} failed "
                             f"({error.strerror}); nothing was written, the store is as it was; free space and "
                             "try again") from error
        self._descriptor = descriptor
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None) -> None:
        assert self._descriptor is not None
        os.ftruncate(self._descriptor, 0)
        fcntl.flock(self._descriptor, fcntl.LOCK_UN)
        os.close(self._descriptor)
        self._descriptor = None


def _holder(descriptor: int) -> str:
    try:
        document = json.loads(os.pread(descriptor, 4096, 0).decode() or "{}")
        return f"process {document['pid']} since {document['since']}"
    except (ValueError, KeyError, OSError):
        return "another process (it has not written its name yet)"
