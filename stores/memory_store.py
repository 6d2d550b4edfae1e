"""The memory store: a directory of immutable segments named by one manifest (stores/README.md).

`MemoryStore` is what callers open. Any number of processes read a store at once and one writes
at a time. Every request reads one immutable `StoreSnapshot` (`snapshot()`), and a reader picks
up a newly committed generation on its next request (one `stat` of `manifest.json` tells),
loading only the segments it has not seen. A write takes the write lock, refreshes, writes one
segment and switches the manifest; a merge it makes due runs after it, on the store's merge
thread (stores/engine/merging.py). The retrieval log is separate,
per-process, append-only files under `log/` that never need the write lock.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from uuid import UUID

import numpy as np

from rms_retrieval.stores.engine import changes, compaction, merging, writer
from rms_retrieval.stores.providers.onnx_encoder import default_encoder
from rms_retrieval.stores.errors import EmbeddingMismatchError, StoreError
from rms_retrieval.stores.analysis.expansion import TurnExpansion, resolved_expansion
from rms_retrieval.stores.engine.manifest import (LEGACY_DATABASE_FILE, MANIFEST_FILE, Manifest, holds_segments,
                                                  missing_manifest_message, read_manifest, write_manifest)
from rms_retrieval.stores.analysis.messages import message_turns
from rms_retrieval.stores.models import MemoryObject
from rms_retrieval.stores.engine.repair import STORE_FACTS_FILE, write_store_facts
from rms_retrieval.stores.protocols import EmbeddingIdentity, IngestReport, QueryEncoder, RetrievalLog, SnapshotSource
from rms_retrieval.stores.indexes.entity_graph import GraphEdge
from rms_retrieval.stores.log.buffer import BufferedLogWriter
from rms_retrieval.stores.log.compaction import forget
from rms_retrieval.stores.log.retrieval_log import entries_newest_first, flush_queued, read_records
from rms_retrieval.stores.engine.segments import LoadedSegment
from rms_retrieval.stores.snapshot import StoreSnapshot
from rms_retrieval.stores.analysis.speakers import DEFAULT_SPEAKER_RULES, SpeakerRules
from rms_retrieval.stores.engine.write_lock import DEFAULT_WRITE_TIMEOUT_SECONDS, WriteLock

LOG_DIRECTORY = "log"
_RELOAD_ATTEMPTS = 5


@dataclass(frozen=True)
class ChangeReport:
    """What an update, supersede, delete or erase committed: the generation and the ids it touched."""

    generation: int
    object_ids: tuple[UUID, ...]


class MemoryStore(RetrievalLog, SnapshotSource):
    """One store directory: it opens, writes, and hands out snapshots (`snapshot()`), each of which
    serves every read of one generation; and it keeps the retrieval log."""

    def __init__(
        self, path: Path, encoder: QueryEncoder | None, *, read_only: bool, write_timeout: float,
        retired_grace: float = writer.RETIRED_GRACE_SECONDS, expansion: TurnExpansion | None = None,
        speakers: SpeakerRules = DEFAULT_SPEAKER_RULES,
    ) -> None:
        self.path = path
        self._encoder = encoder
        self._expansion = expansion
        self._speakers = speakers
        self._read_only = read_only
        self._write_timeout = write_timeout
        self._garbage = writer.GarbageCollector(path, retired_grace)
        self._reload_lock = threading.Lock()
        self._add_lock = threading.Lock()
        self._log_lock = threading.Lock()
        self._log_writer: BufferedLogWriter | None = None
        self._manifest_key: tuple[int, int, int] | None = None
        self._snapshot = StoreSnapshot(Manifest(0, None), (), self.log_retrieval)
        self._merger = merging.BackgroundMerger(path, self._merge_once)
        self._give_way = merging.GiveWay()  # this process's adds and requests go before its merge thread
        self._refresh()

    @classmethod
    def open(
        cls,
        path: str | Path,
        encoder: QueryEncoder | None = None,
        *,
        create: bool = True,
        read_only: bool = False,
        write_timeout: float = DEFAULT_WRITE_TIMEOUT_SECONDS,
        retired_grace: float = writer.RETIRED_GRACE_SECONDS,
        expansion: TurnExpansion | None = None,
        speakers: SpeakerRules = DEFAULT_SPEAKER_RULES,
    ) -> MemoryStore:
        """Open the store at `path`, creating an empty one when allowed. Opening never writes an
        existing store; `write_timeout` is how long an add waits for another process's write;
        `retired_grace` how long this process's writes keep a merged-away segment's files for
        readers still answering from an older generation; `expansion` is what the first write of
        an empty store records (stores/analysis/expansion.py); `speakers` how this process's writes find a
        plain turn's speaker (stores/analysis/speakers.py)."""
        path = Path(path)
        if not (path / MANIFEST_FILE).exists() and not (path / LEGACY_DATABASE_FILE).exists() and create and not read_only:
            if path.exists() and not path.is_dir():
                raise StoreError(f"{path} is a file, not a store directory; choose another path")
            path.mkdir(parents=True, exist_ok=True)
            with WriteLock(path, write_timeout):
                if holds_segments(path) and not (path / MANIFEST_FILE).exists():
                    raise StoreError(missing_manifest_message(path))
                if not (path / MANIFEST_FILE).exists():
                    write_manifest(path, Manifest(0, None))
        return cls(path, encoder, read_only=read_only, write_timeout=write_timeout, retired_grace=retired_grace,
                   expansion=expansion, speakers=speakers)

    def close(self) -> None:
        """Finish the merges this process's writes made due, and flush the retrieval log."""
        try:
            self._merger.wait()
        finally:
            with self._log_lock:
                if self._log_writer is not None:
                    self._log_writer.close()
                    self._log_writer = None

    def wait_for_merges(self) -> int:
        """Block until the merges this process's writes made due are done (a bulk load, say, before
        it is timed or copied); the live generation after them. Raises the error of a merge that
        failed (the store is then as it was before that merge)."""
        self._merger.wait()
        return self.snapshot().generation

    def __enter__(self) -> MemoryStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ----- generations ---------------------------------------------------------------------------

    def _stat_key(self) -> tuple[int, int, int]:
        try:
            stat = os.stat(self.path / MANIFEST_FILE)
        except FileNotFoundError:
            read_manifest(self.path)  # raises the right message (missing store, old format)
            raise
        return (stat.st_ino, stat.st_mtime_ns, stat.st_size)

    def snapshot(self) -> StoreSnapshot:
        """The live generation; a request that reads only this object sees one generation throughout."""
        if self._stat_key() != self._manifest_key:
            self._refresh()
        return self._snapshot

    def _refresh(self) -> None:
        with self._reload_lock:
            for _ in range(_RELOAD_ATTEMPTS):
                key = self._stat_key()
                if key == self._manifest_key:
                    return
                manifest = read_manifest(self.path)
                try:
                    self._install(manifest, self._segments_of(manifest), key)
                    return
                except FileNotFoundError as missing:
                    if read_manifest(self.path).generation == manifest.generation:
                        raise StoreError(f"{missing.filename} is missing, though {self.path / MANIFEST_FILE} names it; "
                                         f"run `rms check --store {self.path}`") from missing
            raise StoreError(f"{self.path} changed {_RELOAD_ATTEMPTS} times while it was being read; try again")

    def _segments_of(self, manifest: Manifest) -> list[LoadedSegment]:
        """The segments `manifest` names: those this process holds are shared (read with the
        manifest's deletion file), the others loaded and verified."""
        known = {segment.entry.id: segment for segment in self._snapshot.segments}
        return [known[entry.id].with_deletions(entry) if entry.id in known else LoadedSegment(self.path, entry)
                for entry in manifest.segments]

    def _install(self, manifest: Manifest, segments: Sequence[LoadedSegment], key: tuple[int, int, int]) -> None:
        self._snapshot = StoreSnapshot(manifest, segments, self.log_retrieval, previous=self._snapshot)
        self._manifest_key = key

    # ----- writing -------------------------------------------------------------------------------

    def add(
        self,
        objects: Sequence[MemoryObject],
        *,
        progress: bool = False,
        vectors: np.ndarray | None = None,
        vector_identity: EmbeddingIdentity | None = None,
    ) -> IngestReport:
        """Store `objects` with their entities, edges and vectors as one new generation, all or nothing.

        `vectors` (one row per object, in order) are used instead of embedding the objects; they must
        come from the model `vector_identity` names, which must be the store's encoder and the model
        of the vectors already stored. A bare entity keeps no vector (MemoryObject.is_bare_entity)."""
        started = time.perf_counter()
        if self._read_only:
            raise StoreError(f"{self.path} is open read-only; reopen it writable to add objects")
        if not objects:
            return IngestReport(0, 0, 0, time.perf_counter() - started, {"generation": self.snapshot().generation})
        encoder = self._checked_encoder(self.snapshot().embedding_identity)
        given = writer.given_vectors(objects, vectors, vector_identity, encoder.identity)
        with self._give_way.busy(), self._add_lock, WriteLock(self.path, self._write_timeout) as lock:
            self._refresh()
            snapshot = self._snapshot
            self._checked_encoder(snapshot.embedding_identity)
            step = "removing segments no generation needs"
            try:
                self._garbage.collect(snapshot.manifest, writer_died=lock.holder_died)
                expansion = resolved_expansion(snapshot.manifest.expansion, snapshot.manifest.object_count, self._expansion)
                step = "preparing the new segment"
                prepared = writer.prepare_write(snapshot, objects, encoder, progress=progress, expansion=expansion,
                                                speakers=self._speakers, given_vectors=given)
                step = f"writing generation {snapshot.generation + 1} (its segment, any merge, its manifest)"
                manifest, segments = writer.commit(self.path, snapshot, prepared, encoder.identity)
            except OSError as error:
                raise writer.write_failure(self.path, snapshot.generation, step, error) from error
            if (manifest.embedding, manifest.expansion) != (snapshot.manifest.embedding, snapshot.manifest.expansion) \
                    or not (self.path / STORE_FACTS_FILE).exists():
                with contextlib.suppress(OSError):  # committed already; the next write tries again
                    write_store_facts(self.path, manifest)
            self._committed(manifest, segments)
        return IngestReport(
            objects_added=len(objects),
            entities_added=len(prepared.graph.entities),
            edges_added=len(prepared.graph.edges),
            seconds=time.perf_counter() - started,
            details={
                "generation": manifest.generation,
                "edges_reweighted": len(prepared.graph.reweighted),
                "embedding_seconds": prepared.embedding_seconds,
                "segments": len(manifest.segments),
            },
        )

    @contextlib.contextmanager
    def _writing(self, what: str) -> Iterator[StoreSnapshot]:
        """The write lock held and the live generation loaded, garbage collected, for one commit."""
        if self._read_only:
            raise StoreError(f"{self.path} is open read-only; reopen it writable to {what}")
        with self._add_lock, WriteLock(self.path, self._write_timeout) as lock:
            self._refresh()
            generation = self._snapshot.generation
            try:
                self._garbage.collect(self._snapshot.manifest, writer_died=lock.holder_died)
                yield self._snapshot
            except OSError as error:
                raise writer.write_failure(self.path, generation, f"trying to {what}", error) from error

    def _committed(self, manifest: Manifest, segments: Sequence[LoadedSegment]) -> None:
        self._garbage.committed(manifest, time.time())
        self._install(manifest, segments, self._stat_key())
        if merging.merge_run(manifest.segments):
            self._merger.wanted()

    def answering(self) -> contextlib.AbstractContextManager[None]:
        """Held by `retrieve()` while it answers from this store: the merge thread gives way meanwhile."""
        return self._give_way.busy()

    def _merge_once(self) -> bool:
        """Plan, build (no lock held) and commit (under the write lock) one due merge; whether one was
        due. A file gone while the generation moved on (a compaction or erase) makes it plan again."""
        planned = self.snapshot()
        sources = merging.due_sources(planned.segments)
        if not sources:
            return False
        staged = None
        try:
            staged = merging.staged_merge(self.path, sources, self._give_way.begin())
            with self._add_lock, WriteLock(self.path, self._write_timeout) as lock:
                self._refresh()
                self._garbage.collect(self._snapshot.manifest, writer_died=lock.holder_died)
                committed = merging.committed_merge(self.path, self._snapshot, staged)
                if committed is not None:
                    self._committed(*committed)
        except FileNotFoundError:
            if self.snapshot().generation == planned.generation:
                raise
        finally:
            if staged is not None:  # dropped, or not renamed: nothing names it
                shutil.rmtree(staged.staging, ignore_errors=True)
        return True

    def update(self, namespace: str, object_id: UUID, changes_: Mapping[str, Any] | None = None,
               **fields: Any) -> ChangeReport:
        """Change `lifecycle_state`, `epistemic_type`, `confidence`, `salience`, `valid_to`,
        `metadata` or `content` of one stored object of `namespace` (a mapping, keywords, or both),
        stamping `updated_at`. The object keeps its id; its old row is deleted in the same commit.
        A content change is embedded and indexed again; other changes keep its vector and postings."""
        wanted = {**(changes_ or {}), **fields}
        with self._writing("update objects") as snapshot:
            where = changes.located(snapshot, namespace, object_id)
            old = where[0].object_at(where[1])
            version = changes.new_version(old, wanted, datetime.now(timezone.utc))
            expansion = snapshot.manifest.expansion
            again: list[changes.Located] = []
            if changes.analysed_again(old, version, self._speakers):
                encoder = self._checked_encoder(snapshot.embedding_identity)
                prepared = writer.prepare_write(snapshot, [version], encoder, progress=False, expansion=expansion,
                                                versions={object_id}, speakers=self._speakers)
                again = changes.followers(snapshot, [where], expansion)  # their expanded text took in the old one
                if again:
                    prepared = writer.joined(prepared, changes.reindexed_write(snapshot, [], again, encoder, expansion,
                                                                               present=[version]))
            else:
                prepared = changes.copied_write([(where, version)], expansion)
            prepared, gone = changes.with_entity_changes(snapshot, [where, *again], prepared)
            manifest, segments = writer.commit(self.path, snapshot, prepared, self._identity(snapshot),
                                               changes.deleted_rows(gone))
            self._committed(manifest, segments)
        return ChangeReport(manifest.generation, (object_id,))

    def supersede(self, namespace: str, old_id: UUID, new_object: MemoryObject) -> ChangeReport:
        """Store `new_object` (in `namespace`) as the successor of `old_id`: the old object becomes
        SUPERSEDED, with a SUPERSEDES edge from its successor. DEFAULT retrieval then leaves it
        out (reason `lifecycle:SUPERSEDED`); AUDIT still shows it."""
        if new_object.namespace != namespace:
            raise StoreError(f"the new object is in namespace {new_object.namespace!r}, not {namespace!r}; "
                             "an object is superseded within its namespace")
        with self._writing("supersede objects") as snapshot:
            where = changes.located(snapshot, namespace, old_id)
            old = where[0].object_at(where[1])
            retired = changes.new_version(old, {"lifecycle_state": "SUPERSEDED"}, datetime.now(timezone.utc))
            edge = GraphEdge(namespace, changes.SUPERSEDES, new_object.id, old_id, 1.0)
            fresh = writer.prepare_write(snapshot, [new_object], self._checked_encoder(snapshot.embedding_identity),
                                         progress=False, expansion=snapshot.manifest.expansion, extra_edges=[edge],
                                         speakers=self._speakers)
            copied = changes.copied_write([(where, retired)], snapshot.manifest.expansion, edges=False)
            prepared, gone = changes.with_entity_changes(snapshot, [where], writer.joined(fresh, copied))
            manifest, segments = writer.commit(self.path, snapshot, prepared, self._identity(snapshot),
                                               changes.deleted_rows(gone))
            self._committed(manifest, segments)
        return ChangeReport(manifest.generation, (old_id, new_object.id))

    def delete(self, namespace: str, ids: Iterable[UUID]) -> ChangeReport:
        """Delete objects of `namespace`, all or none: readers stop seeing them at once (a deletion
        file per touched segment); their bytes stay on disk until `compact()` (or `erase`)."""
        wanted = sorted(set(ids), key=lambda object_id: object_id.int)
        if not wanted:
            raise StoreError("delete needs at least one object id")
        with self._writing("delete objects") as snapshot:
            rows = [changes.located(snapshot, namespace, object_id) for object_id in wanted]
            self._commit_removal(snapshot, rows)
        return ChangeReport(self._snapshot.generation, tuple(wanted))

    def erase(self, namespace: str | None = None, *, owner: str | None = None,
              where: Mapping[str, Any] | None = None) -> ChangeReport:
        """Delete every object of `namespace` (every namespace if None) of `owner` matching `where`
        (stores/engine/changes.py ERASE_FIELDS or `metadata.<key>`, exact), then compact at once and
        remove the retrieval log records that name them: afterwards no byte of them is left in the
        store directory. An entity the store made (changes.store_made) is erased with the last
        memory naming it, unless `where` selects ENTITY objects or the whole namespace goes. Readers
        keep answering from the snapshot they hold."""
        with self._writing("erase objects") as snapshot:
            rows = changes.selected(snapshot, namespace, owner, where)
            whole = namespace is not None and owner is None and not where
            if not whole and (where or {}).get("node_type") != "ENTITY":
                # An entity the store made follows the memories naming it (changes.entity_changes): it
                # goes with the last of them, else stays, dated and owned by the first one left.
                rows = [(segment, row) for segment, row in rows if not changes.store_made(snapshot, segment.object_at(row))]
            erased = [segment.object_at(row) for segment, row in rows]
            if rows:
                self._commit_removal(snapshot, rows)
            self._compact_now()
        needles = [json.dumps(str(memory.id)).encode() for memory in erased]
        needles += [json.dumps(memory.content)[1:-1].encode() for memory in erased]
        if whole:
            needles.append(json.dumps(namespace).encode())
        self.close()  # this process's log file is rewritten too; the next record opens a new one
        forget(self.path / LOG_DIRECTORY, needles)
        return ChangeReport(self.snapshot().generation, tuple(memory.id for memory in erased))

    def _commit_removal(self, snapshot: StoreSnapshot, rows: Sequence[changes.Located]) -> None:
        """Delete `rows` and the entities only they named, and index again the turns whose
        expanded text took them in."""
        expansion = snapshot.manifest.expansion
        again = changes.followers(snapshot, rows, expansion)
        prepared = None
        if again:
            prepared = changes.reindexed_write(snapshot, rows, again, self._checked_encoder(snapshot.embedding_identity),
                                               expansion)
        prepared, gone = changes.with_entity_changes(snapshot, [*rows, *again], prepared)
        manifest, segments = writer.commit(self.path, snapshot, prepared, self._identity(snapshot),
                                           changes.deleted_rows(gone))
        self._committed(manifest, segments)

    def compact(self) -> int:
        """Rewrite the segments holding deleted rows without them and remove every file no
        generation names (no grace period); the live generation after it."""
        with self._writing("compact the store"):
            self._compact_now()
        return self.snapshot().generation

    def _compact_now(self) -> None:
        compacted = compaction.compact(self.path, self._snapshot)
        if compacted is not None:
            self._committed(*compacted)
        else:
            compaction.remove_unnamed(self.path, self._snapshot.manifest)

    def _identity(self, snapshot: StoreSnapshot) -> EmbeddingIdentity:
        if snapshot.embedding_identity is not None:
            return snapshot.embedding_identity
        return self._checked_encoder(None).identity

    def add_messages(
        self, namespace: str, session_id: str, messages: Sequence[Any], *, owner: str = "default",
        scope: str = "default", time: datetime | None = None, progress: bool = False,
    ) -> IngestReport:
        """Store chat messages (OpenAI/mem0 or Zep dicts, LangChain messages; stores/analysis/messages.py) as
        the next turns of session `session_id`, in order, content as given, each speaker recorded
        as an ENTITY once per namespace; `time` dates the messages that carry none (default: now)."""
        return self.add(message_turns(namespace, session_id, messages, owner=owner, scope=scope, time=time),
                        progress=progress)

    def _checked_encoder(self, stored: EmbeddingIdentity | None) -> QueryEncoder:
        if self._encoder is None:
            # The packaged model, loaded once per process on first encode (not at open: readers never need it).
            self._encoder = default_encoder()
        identity = self._encoder.identity
        if stored is not None and identity != stored:
            raise EmbeddingMismatchError(f"the encoder is {identity} but {self.path} holds vectors from {stored}; {writer.MISMATCH_HINT}")
        return self._encoder

    # ----- RetrievalLog (stores/log/retrieval_log.py) ---------------------------------------------------

    def log_retrieval(self, record: Mapping[str, Any]) -> None:
        """Queue one retrieval record for this process's log file (written by a background thread,
        stores/log/buffer.py); no write lock, fail-open."""
        with self._log_lock:
            if self._log_writer is None:
                self._log_writer = BufferedLogWriter(self.path / LOG_DIRECTORY)
            self._log_writer.append(record)

    def retrieval_log(self, limit: int | None = None, namespaces: Sequence[str] | None = None) -> list[dict[str, Any]]:
        """Logged records of every process, oldest first; with `limit`, only the latest `limit`; with
        `namespaces`, only those of requests that read nothing but those namespaces."""
        return read_records(self.path / LOG_DIRECTORY, limit, namespaces)

    def retrieval_log_newest_first(self, namespaces: Sequence[str] | None = None) -> Iterator[tuple[int, dict[str, Any]]]:
        """(logged_at_ns, record) of every process's logged records (with `namespaces`, as for
        `retrieval_log`), newest first, read lazily from the files' ends: a recent record costs
        what was logged after it."""
        flush_queued(self.path / LOG_DIRECTORY)
        return entries_newest_first(self.path / LOG_DIRECTORY, namespaces)
