"""Compaction of the retrieval log: closed segments merged into one, within a retention.

A segment is closed when no writer holds its `flock` (stores/log/retrieval_log.py). `compact` merges
the closed ones into `merged-<ns>.jsonl` (temp file, fsync, rename), whose first line names the
segments it replaces, then deletes them: readers skip a replaced segment, so a compaction killed
at any moment shows every record once, and the next compaction removes what it left. Live
segments are never touched, so processes keep appending while it runs.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from rms_retrieval.stores.errors import StoreError
from rms_retrieval.stores.engine.manifest import fsync_path
from rms_retrieval.stores.log.retrieval_log import (
    COMPACTED_FROM,
    MERGED_PREFIX,
    SEGMENT_SUFFIX,
    list_segments,
    parse_line,
)

_COMPACTION_LOCK = ".compact.lock"
_HEADER_START = b'{"' + COMPACTED_FROM.encode() + b'"'
_NS_PER_DAY = 86_400 * 10**9
_OPENING_GRACE_NS = 600 * 10**9


class LogRetention(BaseModel):
    """What `compact` keeps of closed segments: records younger than `max_age_days`, and of those
    the newest `max_records`. Unset limits keep everything."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_age_days: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    max_records: int | None = Field(default=None, gt=0)


@dataclass(frozen=True)
class CompactReport:
    segments_merged: int
    records_kept: int
    records_dropped: int
    unreadable_lines: int
    leftovers_removed: int
    bytes_before: int
    bytes_after: int
    output: Path | None


def _closed(path: Path) -> bool:
    """Whether no writer holds `path`'s lock. A writer locks its segment before naming it and never
    reopens it once released, so a closed segment stays closed: the answer cannot go stale. A
    file that vanished since it was listed (a writer renamed its `.opening` file) is not closed."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True


def _remove_dead_leftovers(directory: Path) -> int:
    """Temp files of dead compactions (the caller holds the compaction lock) and segments whose
    writer died before naming them."""
    removed = 0
    for path in directory.iterdir():
        if path.name.startswith(f".{MERGED_PREFIX}") and path.name.endswith(".tmp"):
            path.unlink(missing_ok=True)
            removed += 1
        elif path.name.startswith(".") and path.name.endswith(".opening") and _older_than(path, _OPENING_GRACE_NS):
            # Unlocked is not enough: a writer locks its new file just after creating it.
            if _closed(path):
                path.unlink(missing_ok=True)
                removed += 1
    return removed


def _older_than(path: Path, age_ns: int) -> bool:
    """False for a file that vanished since it was listed: a writer renamed or removed it."""
    try:
        return time.time_ns() - path.stat().st_mtime_ns > age_ns
    except FileNotFoundError:
        return False


def compact(directory: Path, retention: LogRetention, *, now_ns: int | None = None) -> CompactReport:
    """Merge the closed segments into one, keeping what `retention` allows, atomically; live
    segments are left to their writers. Compactions of one directory run one at a time."""
    directory = Path(directory)
    if not directory.is_dir():
        return CompactReport(0, 0, 0, 0, 0, 0, 0, None)
    now_ns = time.time_ns() if now_ns is None else now_ns
    try:
        lock = os.open(directory / _COMPACTION_LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as error:
        raise StoreError(f"cannot compact the retrieval log in {directory}: {error}") from error
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        segments, leftovers = list_segments(directory)
        for path in leftovers:
            path.unlink(missing_ok=True)
        removed = len(leftovers) + _remove_dead_leftovers(directory)
        closed = [path for path in segments if _closed(path)]
        merged_already = len(closed) == 1 and closed[0].name.startswith(MERGED_PREFIX)
        if not closed or (merged_already and retention == LogRetention()):
            return CompactReport(0, 0, 0, 0, removed, 0, 0, None)
        entries, unreadable, bytes_before = [], 0, 0
        for path in closed:
            with open(path, "rb") as handle:
                for line in handle:
                    bytes_before += len(line)
                    parsed = parse_line(line) if line.endswith(b"\n") else None
                    if parsed is not None:
                        entries.append((parsed[0], line))
                    elif not line.startswith(_HEADER_START):
                        unreadable += 1
        entries.sort(key=lambda entry: entry[0])  # stable: each file keeps its own order on ties
        kept = entries
        if retention.max_age_days is not None:
            oldest = now_ns - int(retention.max_age_days * _NS_PER_DAY)
            kept = [entry for entry in kept if entry[0] >= oldest]
        if retention.max_records is not None:
            kept = kept[-retention.max_records :]
        output = directory / f"{MERGED_PREFIX}{time.time_ns()}{SEGMENT_SUFFIX}"
        temporary = directory / f".{output.name}.tmp"
        header = json.dumps({COMPACTED_FROM: [path.name for path in closed]}).encode() + b"\n"
        with open(temporary, "wb") as handle:
            handle.write(header)
            handle.writelines(line for _, line in kept)
            handle.flush()
            os.fsync(handle.fileno())
        os.rename(temporary, output)
        fsync_path(directory)
        for path in closed:
            path.unlink(missing_ok=True)
        fsync_path(directory)
        return CompactReport(
            segments_merged=len(closed),
            records_kept=len(kept),
            records_dropped=len(entries) - len(kept),
            unreadable_lines=unreadable,
            leftovers_removed=removed,
            bytes_before=bytes_before,
            bytes_after=output.stat().st_size,
            output=output,
        )
    except OSError as error:
        raise StoreError(f"cannot compact the retrieval log in {directory}: {error}") from error
    finally:
        os.close(lock)


def log_size(directory: Path) -> int:
    """Bytes on disk of the segments a reader reads under `directory`."""
    return sum(path.stat().st_size for path in list_segments(Path(directory))[0])


def forget(directory: Path, needles: Iterable[bytes]) -> int:
    """Rewrite every log file under `directory` without the lines that contain any of `needles`
    (an erased namespace, id or text, as it appears in a JSON record), each file atomically (temp
    file, fsync, rename), under the compaction lock; the number of lines dropped. Every other
    file and line stays. A process still appending to a rewritten file goes on writing to the
    unlinked old one, which is no longer in the directory."""
    directory = Path(directory)
    wanted = [needle for needle in needles if needle]
    if not directory.is_dir() or not wanted:
        return 0
    dropped = 0
    lock = os.open(directory / _COMPACTION_LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for path in sorted(directory.iterdir()):
            if not path.is_file() or path.name == _COMPACTION_LOCK:
                continue
            lines = path.read_bytes().splitlines(keepends=True)
            kept = [line for line in lines if not any(needle in line for needle in wanted)]
            if len(kept) == len(lines):
                continue
            dropped += len(lines) - len(kept)
            temporary = directory / f".{path.name}.forget"
            with open(temporary, "wb") as handle:
                handle.writelines(kept)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temporary, path)
        fsync_path(directory)
    except OSError as error:
        raise StoreError(f"cannot remove erased records from the retrieval log in {directory}: {error}") from error
    finally:
        os.close(lock)
    return dropped
