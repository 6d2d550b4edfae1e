"""The retrieval log off the request path: records are queued, and a background thread writes them.

`BufferedLogWriter.append` stamps the record's time, puts it in a bounded queue and returns; a
daemon thread per writer encodes the queued records and appends them, in the order they came, to
this process's segment (`RetrievalLogWriter`, stores/log/retrieval_log.py). A record may be a lazy
mapping (`dataflows.retrieval.LazyRecord`): it is then built on that thread, not on the request's.

- **What a crash may lose.** A process killed (SIGKILL, a segfault, `os._exit`) loses the records
  queued and not yet written: at most `capacity`, normally only those of the last milliseconds.
  What was written stays readable (a torn last line is skipped).
- **What is never lost.** `flush()`, `close()` and a normal interpreter exit (an `atexit` hook)
  write everything queued. A reader in this process (`read_records`, `MemoryStore.retrieval_log`)
  flushes the writers of the directory it reads first, so a process always reads its own records.
- **Bounded memory.** An append that finds the queue full writes the queue itself, on the caller's
  thread: a burst beyond `capacity` slows its callers instead of growing the queue.
- Opening a segment happens on the caller's thread, so a log that cannot be written (a read-only
  file system) warns once, where the request runs, and `append` returns False.
"""

from __future__ import annotations

import atexit
import threading
import time
import warnings
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rms_retrieval.stores.log.retrieval_log import (
    DEFAULT_MAX_SEGMENT_BYTES,
    LIVE_WRITERS,
    RetrievalLogWarning,
    RetrievalLogWriter,
)

DEFAULT_CAPACITY = 256


class BufferedLogWriter:
    """A `RetrievalLogWriter` whose appends are queued and written by a background thread."""

    def __init__(
        self, directory: Path, *, capacity: int = DEFAULT_CAPACITY, max_segment_bytes: int = DEFAULT_MAX_SEGMENT_BYTES
    ) -> None:
        if capacity <= 0:
            raise ValueError(f"capacity must be positive, not {capacity}")
        self.directory = Path(directory)
        self.capacity = capacity
        self._segment = RetrievalLogWriter(self.directory, max_segment_bytes=max_segment_bytes)
        self._unencodable_warned = False
        self._renew()
        LIVE_WRITERS.add(self)

    def _renew(self) -> None:
        self._pending: deque[tuple[Mapping[str, Any], int]] = deque()
        self._queued = threading.Condition()  # guards _pending, _thread and _stopping
        self._drain_lock = threading.Lock()  # one drain at a time: records reach the file in queue order
        self._thread: threading.Thread | None = None
        self._stopping = False

    @property
    def path(self) -> Path | None:
        """The segment being written, if one is open."""
        return self._segment.path

    def append(self, record: Mapping[str, Any]) -> bool:
        """Queue one record, stamped now; False (after one warning) if the log cannot be written."""
        logged_at_ns = time.time_ns()
        if self._segment.path is None and not self._segment.ready():
            return False
        with self._queued:
            self._pending.append((record, logged_at_ns))
            full = len(self._pending) >= self.capacity
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=f"retrieval-log {self.directory}", daemon=True)
                self._thread.start()
            self._queued.notify()
        if full:
            self.flush()
        return True

    def flush(self) -> None:
        """Write every record queued before this call."""
        with self._drain_lock:
            with self._queued:
                batch = list(self._pending)
                self._pending.clear()
            for record, logged_at_ns in batch:
                try:
                    self._segment.append(record, logged_at_ns=logged_at_ns)
                except Exception as error:  # a record that cannot be built or encoded must not stop the rest
                    self._warn_unencodable(error)

    def close(self) -> None:
        """Write everything queued, stop the thread, fsync and release the segment; a later
        `append` starts afresh."""
        with self._queued:
            thread, self._stopping = self._thread, True
            self._queued.notify_all()
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        self.flush()
        self._segment.close()
        with self._queued:
            self._stopping = False

    def after_fork_in_child(self) -> None:
        """A forked child drops the queue (the parent writes those records) and the parent's thread
        and locks; its first append opens a segment of its own."""
        self._renew()

    def __enter__(self) -> BufferedLogWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _run(self) -> None:
        while True:
            with self._queued:
                while not self._pending and not self._stopping:
                    self._queued.wait()
                if not self._pending:
                    self._thread = None
                    return
            self.flush()

    def _warn_unencodable(self, error: Exception) -> None:
        if not self._unencodable_warned:
            self._unencodable_warned = True
            warnings.warn(f"a retrieval log record under {self.directory} could not be written "
                          f"({type(error).__name__}: {error}); it is not logged", RetrievalLogWarning, stacklevel=2)


def _close_all() -> None:
    for writer in list(LIVE_WRITERS):
        if isinstance(writer, BufferedLogWriter):
            writer.close()


atexit.register(_close_all)
