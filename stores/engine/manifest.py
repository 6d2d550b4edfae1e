"""`manifest.json`: the one small file that names a store's live generation.

A commit writes the next manifest to `manifest.json.tmp`, fsyncs it (and `segments/`), renames it
over `manifest.json` and fsyncs the directory, so a reader opens either the old generation or the
new one, never a mix. Everything the manifest names is immutable and carries a sha256.
"""

from __future__ import annotations

import hashlib
import json
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rms_retrieval.stores.errors import StoreError
from rms_retrieval.stores.analysis.expansion import OFF, TurnExpansion, expansion_from_json
from rms_retrieval.stores.protocols import EmbeddingIdentity

FORMAT_VERSION = 6
# Formats 3 to 5 differ from 6 only in their segments' files (stores/engine/segments.py reads each
# form; format 6 adds `vector_rows`, as bare entities have no vector), so they are read as is; a
# write adds segments of the current form.
READABLE_VERSIONS = (3, 4, 5, 6)
MANIFEST_FILE = "manifest.json"
SEGMENTS_DIR = "segments"
LEGACY_DATABASE_FILE = "store.duckdb"


@dataclass(frozen=True, slots=True)
class SegmentEntry:
    """One live segment: its directory name under `segments/`, its row count, its files' sha256,
    for a merged segment the ids of the segments it replaced, and its deletion file (if any rows
    of it were deleted or replaced by a newer version)."""

    id: str
    rows: int
    files: dict[str, str]
    sources: tuple[str, ...] = ()
    deletions: Deletions | None = None

    @property
    def key(self) -> str:
        """What a reader's caches are keyed by: the segment and the deletion file it is read with."""
        return self.id if self.deletions is None else f"{self.id}/{self.deletions.file}"

    @property
    def live_rows(self) -> int:
        return self.rows - (0 if self.deletions is None else self.deletions.rows)

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"id": self.id, "rows": self.rows, "files": self.files, "sources": list(self.sources)}
        if self.deletions is not None:  # absent means none, so stores written before deletions read the same
            body["deletions"] = {"file": self.deletions.file, "sha256": self.deletions.sha256, "rows": self.deletions.rows}
        return body


def segment_of_key(key: str) -> str:
    """The segment id of a cache key (`SegmentEntry.key`), whatever deletion file it names."""
    return key.split("/", 1)[0]


@dataclass(frozen=True, slots=True)
class Deletions:
    """A segment's deletion file (`deleted-g<generation>.npy` in its directory): the sorted row
    positions no reader may see, after tantivy's delete bitsets and Lance's deletion files. A
    change to the set writes a new file; the manifest switch makes it live."""

    file: str
    sha256: str
    rows: int


@dataclass(frozen=True, slots=True)
class Manifest:
    """One generation. `retired` names the segments the previous generation still used, so a
    reader that is loading that generation finds them for one more write."""

    generation: int
    embedding: EmbeddingIdentity | None
    segments: tuple[SegmentEntry, ...] = ()
    retired: tuple[str, ...] = field(default=())
    expansion: TurnExpansion = OFF

    @property
    def segment_ids(self) -> tuple[str, ...]:
        return tuple(entry.id for entry in self.segments)

    @property
    def object_count(self) -> int:
        """Live objects: rows less deleted rows."""
        return sum(entry.live_rows for entry in self.segments)

    def to_json(self) -> dict[str, Any]:
        embedding = None
        if self.embedding is not None:
            embedding = {
                "model_name": self.embedding.model_name,
                "model_hash": self.embedding.model_hash,
                "dimension": self.embedding.dimension,
            }
        body = {
            "format_version": FORMAT_VERSION,
            "generation": self.generation,
            "embedding": embedding,
            "segments": [entry.to_json() for entry in self.segments],
            "retired": list(self.retired),
        }
        if not self.expansion.is_off:  # absent means off, so stores written before expansion read the same
            body["expansion"] = self.expansion.to_json()
        return {**body, "sha256": _body_digest(body)}


def _body_digest(body: dict[str, Any]) -> str:
    """The manifest's own checksum, over its other fields in canonical JSON."""
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def fsync_path(path: Path) -> None:
    """Flush a file or a directory entry to disk."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def read_manifest(store: Path) -> Manifest:
    """The committed manifest of `store`; StoreError naming the file if it is missing or unreadable."""
    path = store / MANIFEST_FILE
    if not path.exists():
        if (store / LEGACY_DATABASE_FILE).exists():
            raise StoreError(f"{store} is in the old single-database format; upgrade it with `rms migrate --store {store}`")
        if holds_segments(store):
            raise StoreError(missing_manifest_message(store))
        raise StoreError(f"no memory store at {store} ({MANIFEST_FILE} is missing); create it with `rms ingest`")
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
        version = document["format_version"]
        recorded = document.pop("sha256", None)
        if version in READABLE_VERSIONS and recorded != _body_digest(document):
            raise ValueError("its sha256 does not match its content")
        if version not in READABLE_VERSIONS:
            raise StoreError(f"{path} has format version {version!r}, this version reads {', '.join(map(str, READABLE_VERSIONS[:-1]))} and {READABLE_VERSIONS[-1]}; "
                             "upgrade rms-retrieval, or rebuild the store with `rms ingest`")
        embedding = document["embedding"]
        identity = None if embedding is None else EmbeddingIdentity(
            str(embedding["model_name"]), str(embedding["model_hash"]), int(embedding["dimension"])
        )
        segments = tuple(
            SegmentEntry(str(entry["id"]), int(entry["rows"]), {str(k): str(v) for k, v in entry["files"].items()},
                         tuple(map(str, entry.get("sources", ()))), _deletions(entry.get("deletions")))
            for entry in document["segments"]
        )
        return Manifest(int(document["generation"]), identity, segments, tuple(map(str, document.get("retired", []))),
                        expansion_from_json(document.get("expansion")))
    except StoreError:
        raise
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        raise StoreError(f"cannot read {path} ({type(error).__name__}: {error}); the store's manifest is damaged: "
                         f"rebuild it from the segments with `rms check --store {store} --repair`, or restore it "
                         "from a backup") from error


def holds_segments(store: Path) -> bool:
    """Whether `store/segments/` holds anything: such a directory is a store, never "no store"."""
    try:
        return any(True for _ in (store / SEGMENTS_DIR).iterdir())
    except (FileNotFoundError, NotADirectoryError):
        return False


def missing_manifest_message(store: Path) -> str:
    return (f"{store} holds segments but its {MANIFEST_FILE} is missing: the store is damaged, not empty, and nothing "
            f"will be written over it; rebuild the manifest from its segments with `rms check --store {store} --repair`")


def _deletions(document: Any) -> Deletions | None:
    if document is None:
        return None
    return Deletions(str(document["file"]), str(document["sha256"]), int(document["rows"]))


def write_manifest(store: Path, manifest: Manifest) -> None:
    """Switch `store` to `manifest` atomically and durably.

    The staged manifest and `segments/` (whose entries name the segments the manifest may name;
    stores/engine/segments.py renames each one into place without a directory fsync of its own) are
    fsynced at once, both before the switch; the store directory after it.
    """
    staged = store / (MANIFEST_FILE + ".tmp")
    try:
        with staged.open("w", encoding="utf-8") as handle:
            json.dump(manifest.to_json(), handle, indent=1, sort_keys=True)
            handle.write("\n")
        durable_first = [staged, *([store / SEGMENTS_DIR] if (store / SEGMENTS_DIR).is_dir() else [])]
        with ThreadPoolExecutor(len(durable_first), thread_name_prefix="manifest-fsync") as pool:
            list(pool.map(fsync_path, durable_first))
    except BaseException:
        staged.unlink(missing_ok=True)  # a failed switch leaves nothing behind
        raise
    os.replace(staged, store / MANIFEST_FILE)
    fsync_path(store)


def committed_generation(store: Path) -> int | None:
    """The generation `store`'s manifest names, None if it cannot be read."""
    try:
        return read_manifest(store).generation
    except StoreError:
        return None
