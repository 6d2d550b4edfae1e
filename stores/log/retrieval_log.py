"""The retrieval log as per-process append-only segment files: logging never needs the store's lock.

Layout, under the log directory:
- `<pid>-<start_ns>.jsonl`: one writer's segment, one JSON line per record,
  `{"logged_at_ns": ..., "record": ...}`. The writer holds an exclusive `flock` on it while it is
  open, which is how compaction tells a live segment from a closed one (the lock dies with the
  process, even on SIGKILL). It is created under a dot-name and renamed once locked, so no
  compaction can mistake a segment being opened for a closed one.
- `merged-<ns>.jsonl`: closed segments merged by `compact` (stores/log/compaction.py). Its first line,
  `{"compacted_from": [names]}`, names the segments it replaces; readers skip those, so a
  compaction killed before deleting its inputs shows no record twice, and the next one deletes them.

Each record is written with one `write` and no fsync (a process crash loses nothing written; a
power cut may lose the latest records). `retrieve()` does not write on the request path: the store
queues its records in a `BufferedLogWriter` (stores/log/buffer.py), whose thread writes them here. A torn or unparsable line is skipped by every reader.
The query embedding is stored as base64 little-endian float32 and read back as a list of floats.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import heapq
import json
import os
import threading
import time
import warnings
import weakref
from collections.abc import Collection, Iterator, Mapping
from datetime import datetime
from enum import Enum
from pathlib import Path
from typing import IO, Any
from uuid import UUID

import numpy as np

# The log's directory inside a store directory.
LOG_DIRECTORY = "log"
SEGMENT_SUFFIX = ".jsonl"
MERGED_PREFIX = "merged-"
# The key of a merged segment's first line, which lists the segments it replaces.
COMPACTED_FROM = "compacted_from"
EMBEDDING_ENCODING = "float32le_base64"
DEFAULT_MAX_SEGMENT_BYTES = 64 * 1024 * 1024
_READ_BLOCK = 64 * 1024
_READ_ATTEMPTS = 5


class RetrievalLogWarning(UserWarning):
    """The log cannot be written (e.g. a read-only file system); queries still answer."""


def json_default(value: Any) -> Any:
    """How a record's ids, times, enums, sets and numpy values are written."""
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, UUID):
        return str(value)
    if isinstance(value, (set, frozenset)):
        return sorted(value, key=str)
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def _encode_embedding(record: Mapping[str, Any]) -> Mapping[str, Any]:
    payload = record.get("payload")
    vector = payload.get("query_embedding") if isinstance(payload, Mapping) else None
    if vector is None or isinstance(vector, Mapping):
        return record
    encoded = base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")
    return {**record, "payload": {**payload, "query_embedding": {EMBEDDING_ENCODING: encoded}}}


def _decode_embedding(record: dict[str, Any]) -> dict[str, Any]:
    payload = record.get("payload")
    vector = payload.get("query_embedding") if isinstance(payload, dict) else None
    if isinstance(vector, dict) and EMBEDDING_ENCODING in vector:
        payload["query_embedding"] = np.frombuffer(base64.b64decode(vector[EMBEDDING_ENCODING]), dtype="<f4").tolist()
    return record


def encode_line(record: Mapping[str, Any], logged_at_ns: int) -> bytes:
    """One segment line for `record`."""
    body = json.dumps(_encode_embedding(dict(record)), sort_keys=True, default=json_default, separators=(",", ":"))
    return b'{"logged_at_ns":%d,"record":%s}\n' % (logged_at_ns, body.encode())


def parse_line(line: bytes) -> tuple[int, dict[str, Any]] | None:
    """(logged_at_ns, record) of a record line; None for a header, torn or foreign line."""
    try:
        entry = json.loads(line)
    except ValueError:
        return None
    if not isinstance(entry, dict) or not isinstance(entry.get("logged_at_ns"), int) or not isinstance(entry.get("record"), dict):
        return None
    return entry["logged_at_ns"], entry["record"]


# Every log writer of this process (this module's and stores/log/buffer.py's: each has `directory`,
# `flush()` and `after_fork_in_child()`), so that a forked child renews their locks (a parent's
# thread may hold one at the fork) and a reader here flushes queued records first.
LIVE_WRITERS: weakref.WeakSet = weakref.WeakSet()


def _renew_locks_in_child() -> None:
    for writer in list(LIVE_WRITERS):
        writer.after_fork_in_child()


os.register_at_fork(after_in_child=_renew_locks_in_child)


def flush_queued(directory: Path) -> None:
    """Write the records this process's writers still hold for `directory`, so a process reads its own."""
    wanted = Path(directory).absolute()
    for writer in list(LIVE_WRITERS):
        if writer.directory.absolute() == wanted:
            writer.flush()


class RetrievalLogWriter:
    """Appends records to this process's own segment under `directory`; thread-safe, opened lazily.

    A segment is closed and a new one started past `max_segment_bytes`, so a long-lived process's
    older records become compactable too. Failing to write warns once and never raises: the
    query it logs has already been answered.
    """

    def __init__(self, directory: Path, *, max_segment_bytes: int = DEFAULT_MAX_SEGMENT_BYTES) -> None:
        if max_segment_bytes <= 0:
            raise ValueError(f"max_segment_bytes must be positive, not {max_segment_bytes}")
        self.directory = Path(directory)
        self.max_segment_bytes = max_segment_bytes
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._pid = os.getpid()
        self._path: Path | None = None
        self._size = 0
        self._warned = False
        LIVE_WRITERS.add(self)

    @property
    def path(self) -> Path | None:
        """The segment being written, if one is open."""
        return self._path

    def append(self, record: Mapping[str, Any], *, logged_at_ns: int | None = None) -> bool:
        """Write one record, stamped `logged_at_ns` (default: now); False (after one warning per
        writer) if the log cannot be written."""
        with self._lock:
            line = encode_line(record, time.time_ns() if logged_at_ns is None else logged_at_ns)
            try:
                fd = self._segment(len(line))
                view = memoryview(line)
                while view:
                    view = view[os.write(fd, view):]
            except OSError as error:
                # A partly written line must not be followed by another; start afresh next time. A
                # segment that holds nothing is removed, so a full disk never fills the directory
                # with one empty file per query.
                empty = self._path if self._size == 0 else None
                self._release()
                if empty is not None:
                    with contextlib.suppress(OSError):
                        empty.unlink()
                self._warn(error)
                return False
            self._size += len(line)
            return True

    def ready(self) -> bool:
        """Open a segment now unless one is open; False (after the one warning) if none can be."""
        with self._lock:
            try:
                self._segment(0)
            except OSError as error:
                self._release()
                self._warn(error)
                return False
            return True

    def _warn(self, error: OSError) -> None:
        if not self._warned:
            self._warned = True
            warnings.warn(
                f"the retrieval log under {self.directory} cannot be written ({error}); "
                "queries still answer but are not logged",
                RetrievalLogWarning,
                stacklevel=3,
            )

    def flush(self) -> None:
        """Nothing to do: every `append` has been written when it returns."""

    def after_fork_in_child(self) -> None:
        """A new lock: the parent's may have been held, by a thread the child does not have."""
        self._lock = threading.Lock()

    def close(self) -> None:
        """Flush to disk and release the segment; a later `append` starts a new one."""
        with self._lock:
            if self._fd is not None and self._pid == os.getpid():
                try:
                    os.fsync(self._fd)
                except OSError:
                    pass  # the records already reached the OS; fsync only guards against power loss
            self._release()

    def __enter__(self) -> RetrievalLogWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _segment(self, incoming: int) -> int:
        if self._fd is not None and self._pid != os.getpid():
            # A forked child shares the parent's open segment (and its lock, which lasts while any
            # copy of the descriptor is open): it drops its copy and gets a segment of its own.
            os.close(self._fd)
            self._fd, self._path = None, None
        if self._fd is not None and self._size and self._size + incoming > self.max_segment_bytes:
            self._release()
        if self._fd is None:
            self._open_segment()
        assert self._fd is not None
        return self._fd

    def _open_segment(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        pid = os.getpid()
        while True:
            name = f"{pid}-{time.time_ns()}{SEGMENT_SUFFIX}"
            opening = self.directory / f".{name}.opening"
            try:
                fd = os.open(opening, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
                break
            except FileExistsError:
                continue  # another writer of this process started in the same nanosecond
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.rename(opening, self.directory / name)
        except OSError:
            os.close(fd)
            opening.unlink(missing_ok=True)
            raise
        self._fd, self._pid, self._path, self._size = fd, pid, self.directory / name, 0

    def _release(self) -> None:
        if self._fd is not None and self._pid == os.getpid():
            try:
                os.close(self._fd)
            except OSError:
                pass  # closing only releases the lock; the data was written or reported already
        self._fd, self._path, self._size = None, None, 0


# ----- reading -----------------------------------------------------------------------------------


def list_segments(directory: Path) -> tuple[list[Path], list[Path]]:
    """(segments to read, replaced segments a compaction left behind), each sorted by name."""
    try:
        paths = sorted(p for p in directory.iterdir()
                       if p.name.endswith(SEGMENT_SUFFIX) and not p.name.startswith(".") and p.is_file())
    except (FileNotFoundError, NotADirectoryError):
        return [], []
    replaced: set[str] = set()
    for path in paths:
        if path.name.startswith(MERGED_PREFIX):
            replaced.update(_replaced_by(path))
    return [p for p in paths if p.name not in replaced], [p for p in paths if p.name in replaced]


def _replaced_by(path: Path) -> list[str]:
    with open(path, "rb") as handle:
        first = handle.readline()
    try:
        return [str(name) for name in json.loads(first)[COMPACTED_FROM]]
    except (ValueError, KeyError, TypeError):
        return []  # not written by compact (which fsyncs before renaming): it replaces nothing


def _lines_backwards(handle: IO[bytes]) -> Iterator[bytes]:
    """Complete lines from the end of the file back to its start, reading block by block; what
    follows the last newline (nothing, or a torn line) is dropped."""
    position = handle.seek(0, os.SEEK_END)
    pending = b""
    past_last_newline = False
    while position > 0:
        step = min(_READ_BLOCK, position)
        position -= step
        handle.seek(position)
        lines = (handle.read(step) + pending).split(b"\n")
        pending, complete = lines[0], lines[1:]
        if complete and not past_last_newline:
            complete, past_last_newline = complete[:-1], True
        yield from reversed(complete)
    if pending and past_last_newline:
        yield pending


def _records_backwards(handle: IO[bytes]) -> Iterator[tuple[int, dict[str, Any]]]:
    for line in _lines_backwards(handle):
        parsed = parse_line(line)
        if parsed is not None:
            yield parsed


def _records_forwards(handle: IO[bytes]) -> Iterator[tuple[int, dict[str, Any]]]:
    for line in handle:
        if line.endswith(b"\n"):
            parsed = parse_line(line)
            if parsed is not None:
                yield parsed


def _open_segments(directory: Path) -> list[IO[bytes]]:
    """Open every segment a reader reads, listing again if a compaction replaced one meanwhile."""
    for attempt in range(_READ_ATTEMPTS):
        handles: list[IO[bytes]] = []
        try:
            for path in list_segments(directory)[0]:
                handles.append(open(path, "rb"))
            return handles
        except FileNotFoundError:
            for handle in handles:
                handle.close()
            if attempt == _READ_ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")


def within_namespaces(record: Mapping[str, Any], namespaces: Collection[str] | None) -> bool:
    """Whether a record's request read only `namespaces` (None: every record). A record that names
    no namespace (a request refused before it had any) belongs to no caller bound to some."""
    if namespaces is None:
        return True
    payload = record.get("payload")
    scope = payload.get("namespace_scope") if isinstance(payload, Mapping) else None
    return bool(scope) and set(scope) <= set(namespaces)


def entries_newest_first(directory: Path, namespaces: Collection[str] | None = None) -> Iterator[tuple[int, dict[str, Any]]]:
    """(logged_at_ns, record) of every segment's records (of requests that read only `namespaces`,
    when given), newest first, read lazily from the files' ends: finding a recent record (replay by
    request id) costs what lies after it, not the whole log."""
    handles = _open_segments(Path(directory))
    try:
        newest = heapq.merge(*map(_records_backwards, handles), key=lambda entry: entry[0], reverse=True)
        for logged_at_ns, record in newest:
            if within_namespaces(record, namespaces):
                yield logged_at_ns, _decode_embedding(record)
    finally:
        for handle in handles:
            handle.close()


def records_newest_first(directory: Path, namespaces: Collection[str] | None = None) -> Iterator[dict[str, Any]]:
    """Every segment's records, newest first, read lazily (`entries_newest_first`)."""
    entries = entries_newest_first(directory, namespaces)
    try:
        for _, record in entries:
            yield record
    finally:
        entries.close()


def read_records(directory: Path, limit: int | None = None, namespaces: Collection[str] | None = None) -> list[dict[str, Any]]:
    """Every segment's records merged in time order, oldest first; with `limit`, the newest `limit`,
    read from the files' ends (O(limit), not O(log)); with `namespaces`, only the records of
    requests that read nothing but those namespaces."""
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be 0 or more, not {limit}")
    flush_queued(directory)
    if limit is not None:
        newest = records_newest_first(directory, namespaces)
        try:
            return list(reversed([record for _, record in zip(range(limit), newest)]))
        finally:
            newest.close()
    handles = _open_segments(Path(directory))
    try:
        merged = heapq.merge(*map(_records_forwards, handles), key=lambda entry: entry[0])
        return [_decode_embedding(record) for _, record in merged if within_namespaces(record, namespaces)]
    finally:
        for handle in handles:
            handle.close()
