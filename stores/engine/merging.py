"""Tiered merges, off the write path (after tantivy's segment updater).

A write commits its one segment and returns; when ten or more neighbouring segments of one size
tier (a power of ten of rows) are in the list, the writing process's merge thread
(`BackgroundMerger`) rewrites them as one segment of the next tier. It builds the merged segment from the sources' files with
no lock held, under `segments/.merge-<id>/`, so readers and the next write go on meanwhile. It
then takes the write lock for the commit alone: it renames the staged segment into place, writes
its deletion file from the sources' dead rows *as they are now* (a delete or update that came in
meanwhile is carried over), and switches the manifest with the merged segment in the sources'
place, so later segments stay later (the later segment's edge wins). If the sources are no longer
the live run (a compaction rewrote them, another process merged them), the staged segment is
dropped and the merge planned again from the live generation.

`merge.lock` (flock) lets one merge thread of all processes run at a time. Its holder's process id
is in it, so whoever takes it next after a holder died (the next merge thread, or the next write
when no merge is running: `remove_dead_merges`) removes the `.merge-*` directories that merge left. A merged segment is named by its
newest source's generation, so ordering segments by generation (as `rms repair` does) still puts
it before every segment written after its sources.
"""

from __future__ import annotations

import fcntl
import math
import os
import shutil
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pyarrow as pa

from rms_retrieval.stores.engine.manifest import SEGMENTS_DIR, Manifest, SegmentEntry, committed_generation, write_manifest
from rms_retrieval.stores.engine.segment_writing import segment_text_tokens, write_deletions, write_table_segment
from rms_retrieval.stores.engine.edge_columns import merged_edge_arrays
from rms_retrieval.stores.engine.segment_layout import new_segment_id, segment_generation
from rms_retrieval.stores.engine.segments import LoadedSegment
from rms_retrieval.stores.engine.segment_vectors import SegmentVectors
from rms_retrieval.stores.errors import StoreError
from rms_retrieval.stores.indexes.postings import TermPostings
from rms_retrieval.stores.snapshot import StoreSnapshot

# Once this many segments of one size tier end the list, they become one segment of the next
# tier. Each row is rewritten once per tier, so a write costs amortised O(size of the write x
# number of tiers), and a store keeps few segments.
MERGE_FACTOR = 10
MERGE_PREFIX = ".merge-"
MERGE_LOCK_FILE = "merge.lock"


def _tier(rows: int) -> int:
    return int(math.log10(max(rows, 1)))


def merge_run(entries: Sequence[SegmentEntry]) -> tuple[int, int] | None:
    """The positions [start, stop) of the run to merge now, or None: the last run of MERGE_FACTOR
    or more neighbouring segments of one tier. Merges that run behind the writes leave small
    segments after a run; it is merged all the same, in place."""
    stop = len(entries)
    while stop > 0:
        tier, start = _tier(entries[stop - 1].rows), stop - 1
        while start > 0 and _tier(entries[start - 1].rows) == tier:
            start -= 1
        if stop - start >= MERGE_FACTOR:
            return start, stop
        stop = start
    return None


@dataclass(frozen=True)
class StagedMerge:
    """A merged segment written under `segments/.merge-<id>/`, not yet named by any manifest.
    `new_row[offsets[i] + row]` is where row `row` of source `i` went."""

    segment: LoadedSegment
    sources: tuple[SegmentEntry, ...]
    new_row: np.ndarray
    offsets: tuple[int, ...]

    @property
    def staging(self) -> Path:
        return self.segment.directory.parent / f"{MERGE_PREFIX}{self.segment.entry.id}"


class GiveWay:
    """Lets a process's merge thread give way to that process's foreground work: an add, or a
    request answered from the store (`MemoryStore.answering`), runs inside `busy()`. The merge
    thread calls `begin()` as a merge starts, and the `wait()` it returns between the merge's
    steps: that returns at once when nothing is busy, else when the work busy then has ended. A
    merge waits at most as long as it has worked, and `MAX_WAIT_SECONDS` at a time, so work back
    to back slows it to half speed but never stalls it, and a store keeps about as few segments.

    Why: a merge runs beside the adds and requests on two cores, but its Python steps take the GIL,
    which the add or request then waits for at each of its own releases (file writes, numpy, the
    model). One-turn adds that overlapped a merge took twice as long as the others, and so did
    questions asked right after a write (BENCHMARKS.md). Updates and deletes do not make it wait:
    their merges keep pace with them, and a store of more segments made them slower."""

    MAX_WAIT_SECONDS = 0.25

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._running = 0
        self._ended = 0
        self._started = self._waited = 0.0

    @contextmanager
    def busy(self) -> Iterator[None]:
        with self._changed:
            self._running += 1
        try:
            yield
        finally:
            with self._changed:
                self._running -= 1
                self._ended += 1
                self._changed.notify_all()

    def begin(self) -> Callable[[], None]:
        """A merge starts: its waits may add up to its working time, no more; returns `wait`."""
        self._started, self._waited = time.perf_counter(), 0.0
        return self.wait

    def wait(self) -> None:
        with self._changed:
            working = time.perf_counter() - self._started - self._waited
            if self._running and self._waited < working:
                target = self._ended + self._running
                began = time.perf_counter()
                self._changed.wait_for(lambda: self._ended >= target, min(self.MAX_WAIT_SECONDS, working - self._waited))
                self._waited += time.perf_counter() - began


def _no_writes() -> None:
    return None


def staged_merge(store: Path, segments: Sequence[LoadedSegment], give_way: Callable[[], None] = _no_writes) -> StagedMerge:
    """One segment holding `segments`' rows, vectors, latest edges and postings, regrouped by
    namespace, staged. Rows move as Arrow columns (nothing is decoded and encoded again) and
    postings as arrays; deleted rows are carried over when the merge commits. `give_way` is called
    between steps (`GiveWay.wait`)."""
    give_way()
    namespaces = [namespace for segment in segments for namespace in segment.namespace_of_row]
    order = np.asarray(sorted(range(len(namespaces)), key=namespaces.__getitem__), dtype=np.int64)
    new_row = np.empty(len(order), dtype=np.int64)
    new_row[order] = np.arange(len(order))
    joined = TermPostings.concatenate([segment.postings for segment in segments])
    posting_rows = new_row[joined.rows].astype(np.int32)
    by_term = np.lexsort((posting_rows, joined.term_ids))
    lengths = np.empty_like(joined.lengths)
    lengths[new_row] = joined.lengths
    postings = TermPostings(joined.vocabulary, joined.term_ids[by_term], posting_rows[by_term], joined.tfs[by_term], lengths)
    give_way()
    vectors = SegmentVectors.concatenate([segment.rewritten_vectors() for segment in segments]).take(order)
    objects = pa.concat_tables([_given_way(segment.objects_table, give_way) for segment in segments]).take(pa.array(order))
    objects = objects.set_column(0, "row", pa.array(np.arange(len(order), dtype=np.int64)))
    offsets = np.cumsum([0, *(segment.entry.rows for segment in segments)]).tolist()
    give_way()
    edges = merged_edge_arrays([(segment.edge_columns, new_row[offset:offset + segment.entry.rows])
                                for segment, offset in zip(segments, offsets)])
    segment_id = new_segment_id(segment_generation(segments[-1].entry.id))
    text_tokens = np.concatenate([segment_text_tokens(segment) for segment in segments])[order]
    give_way()
    merged = write_table_segment(
        store, segment_id, objects, vectors, edges, postings,
        sources=tuple(segment.entry.id for segment in segments), staging_prefix=MERGE_PREFIX, publish=False,
        text_tokens=text_tokens,
    )
    return StagedMerge(merged, tuple(segment.entry for segment in segments), new_row, tuple(offsets[:-1]))


def _given_way(read: Callable[[], pa.Table], give_way: Callable[[], None]) -> pa.Table:
    give_way()
    return read()


def committed_merge(store: Path, snapshot: StoreSnapshot, staged: StagedMerge) -> tuple[Manifest, list[LoadedSegment]] | None:
    """Under the write lock: name `staged` in a new generation in its sources' place, with their
    dead rows as they are in `snapshot`; None (nothing written) if its sources are not a run of
    `snapshot`'s segments any more."""
    ids = [segment.entry.id for segment in snapshot.segments]
    wanted = [entry.id for entry in staged.sources]
    start = ids.index(wanted[0]) if wanted[0] in ids else -1
    if start < 0 or ids[start:start + len(wanted)] != wanted:
        return None
    sources = snapshot.segments[start:start + len(wanted)]
    previous = snapshot.manifest
    generation = previous.generation + 1
    merged, final = staged.segment, staged.segment.directory
    os.rename(staged.staging, final)  # made durable by the manifest switch that names it
    try:
        dead = sorted(int(staged.new_row[offset + row]) for segment, offset in zip(sources, staged.offsets)
                      for row in segment.dead_rows)
        if dead:
            merged = merged.with_deletions(replace(merged.entry, deletions=write_deletions(store, merged.entry.id, generation, dead)))
        for segment_id in wanted:  # the retirement time GarbageCollector counts the grace from
            os.utime(store / SEGMENTS_DIR / segment_id)
        segments = [*snapshot.segments[:start], merged, *snapshot.segments[start + len(wanted):]]
        manifest = Manifest(generation, previous.embedding, tuple(segment.entry for segment in segments), tuple(wanted),
                            previous.expansion)
        write_manifest(store, manifest)
    except BaseException:
        if committed_generation(store) != generation:  # a failed merge leaves the store as it was
            shutil.rmtree(final, ignore_errors=True)
        raise
    return manifest, segments


def due_sources(segments: Sequence[LoadedSegment]) -> Sequence[LoadedSegment]:
    """The run of segments to merge now (empty: none is due)."""
    run = merge_run([segment.entry for segment in segments])
    return segments[run[0]:run[1]] if run else ()


class BackgroundMerger:
    """Runs a store's due merges on one thread, started when a commit leaves a merge due (`wanted`).

    `merge_once()` plans, builds and commits one merge and says whether there was one to do. The
    thread is not a daemon, so an interpreter that exits lets a merge it started finish. A merge
    that fails (a full disk, say) warns once, removes what it staged and leaves the store as it
    was; `wait()` raises its error.
    """

    def __init__(self, store: Path, merge_once: Callable[[], bool]) -> None:
        self._store, self._merge_once = store, merge_once
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._again = False
        self._error: BaseException | None = None

    def wanted(self) -> None:
        """A commit left a merge due: start the thread, or have the running one look again."""
        with self._lock:
            if self._thread is not None:
                self._again = True
                return
            self._thread = threading.Thread(target=self._run, name=f"rms-merge {self._store.name}")
            self._thread.start()

    def wait(self) -> None:
        """Block until no merge is running or due; raise the error of one that failed since the last wait."""
        with self._lock:
            thread = self._thread
        if thread is not None:
            thread.join()
        with self._lock:
            error, self._error = self._error, None
        if error is not None:
            raise StoreError(f"a background merge of store {self._store} failed: {error}; the store is as it was "
                             "before it, and the next write tries again") from error

    def _run(self) -> None:
        try:
            with MergeLock(self._store):
                while True:
                    while self._merge_once():
                        pass
                    with self._lock:
                        if not self._again:
                            self._thread = None
                            return
                        self._again = False
        except BaseException as error:
            with self._lock:
                self._thread, self._again, self._error = None, False, error
            warnings.warn(f"rms-retrieval: a background merge of store {self._store} failed: {error}", RuntimeWarning,
                          stacklevel=1)


def dead_merges(store: Path) -> list[Path]:
    """The `.merge-*` directories of `store`."""
    directory = store / SEGMENTS_DIR
    return sorted(directory.glob(f"{MERGE_PREFIX}*")) if directory.exists() else []


def remove_dead_merges(store: Path) -> None:
    """Remove what killed merges staged, if the last holder of the merge lock died holding it and
    no merge runs now: one `stat` when none did (a holder empties the file when it lets go)."""
    try:
        if not os.stat(store / MERGE_LOCK_FILE).st_size:
            return
    except FileNotFoundError:
        return
    with MergeLock(store, wait=False):  # taking it (if free) removes them
        pass


class MergeLock:
    """`merge.lock`, held by the one merge thread of all processes that runs; with `wait=False`,
    taken only if it is free (`held` says whether it was). The holder writes its process id into
    the file and empties it when it lets go, so a non-empty file with no holder is a dead merge's:
    whoever takes the lock then removes the `.merge-*` directories that merge left."""

    def __init__(self, store: Path, *, wait: bool = True) -> None:
        self._path = store / MERGE_LOCK_FILE
        self._wait = wait
        self._descriptor: int | None = None
        self.held = False

    def __enter__(self) -> MergeLock:
        self._descriptor = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._descriptor, fcntl.LOCK_EX if self._wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
            self.held = True
            if os.fstat(self._descriptor).st_size:  # the last holder died holding it
                for child in dead_merges(self._path.parent):
                    shutil.rmtree(child, ignore_errors=True)
            os.pwrite(self._descriptor, str(os.getpid()).encode(), 0)
        except BlockingIOError:
            pass
        except BaseException:
            os.close(self._descriptor)
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        assert self._descriptor is not None
        if self.held:
            os.ftruncate(self._descriptor, 0)
            fcntl.flock(self._descriptor, fcntl.LOCK_UN)
        os.close(self._descriptor)
        self.held = False
