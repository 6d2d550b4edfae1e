"""`rms check --repair`: a manifest rebuilt from the intact segments, when `manifest.json` is lost
or damaged or names segments that are damaged or gone.

Every segment carries its own description (`segment.json`: rows per namespace, its files' sha256,
the segments a merge replaced) and the store keeps its store-wide facts (embedding identity, turn
expansion) in `store.json`, so nothing a manifest says is known only to the manifest. Repair:

- verifies every store-made directory under `segments/` against its own description (or, for a
  segment written before descriptions, against the old manifest's entry, else by loading it);
- sets the damaged ones aside under `damaged/` (never deletes them) and reports what they held;
- drops a segment that an intact merged segment replaced (its rows are in the merged one), but
  keeps the sources of a damaged merged segment, so a merge's inputs still in their grace period
  bring its rows back;
- writes the next generation's manifest naming the rest, in the order they were written.

What it cannot bring back is reported exactly: the segments set aside, with their rows per
namespace where their description says, and whether those rows are held elsewhere.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from rms_retrieval.stores.errors import StoreError
from rms_retrieval.stores.analysis.expansion import OFF, TurnExpansion, expansion_from_json
from rms_retrieval.stores.engine.manifest import MANIFEST_FILE, SEGMENTS_DIR, Manifest, SegmentEntry, fsync_path, read_manifest, write_manifest
from rms_retrieval.stores.protocols import EmbeddingIdentity
from rms_retrieval.stores.engine.segment_layout import (SEGMENT_FILES, SEGMENT_NAME, SEPARATE_FILES, SIDECAR_FILE,
                                                       VECTORS_FILE, latest_deletions, segment_generation)
from rms_retrieval.stores.engine.segments import LoadedSegment
from rms_retrieval.stores.engine.write_lock import WriteLock

STORE_FACTS_FILE = "store.json"
DAMAGED_DIR = "damaged"


@dataclass
class RepairReport:
    """What `repair_store` found and did."""

    manifest_was: str = "intact"  # intact, missing or damaged
    generation: int = 0
    kept: list[str] = field(default_factory=list)
    replaced: list[str] = field(default_factory=list)  # merged away: their rows are in a kept segment
    set_aside: list[tuple[str, str, dict[str, int] | None]] = field(default_factory=list)  # id, why, rows lost by namespace
    objects: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return self.manifest_was != "intact" or bool(self.set_aside)

    def to_text(self) -> str:
        if not self.changed:
            return f"nothing to repair: generation {self.generation}, {len(self.kept)} segments, {self.objects} objects"
        lines = [f"repaired ({MANIFEST_FILE} was {self.manifest_was}): generation {self.generation} names "
                 f"{len(self.kept)} segments, {self.objects} objects; {len(self.replaced)} merged-away segments not counted"]
        for segment_id, why, rows in self.set_aside:
            held = "rows unknown" if rows is None else ", ".join(f"{namespace}: {count}" for namespace, count in rows.items())
            lines.append(f"lost: segment {segment_id} ({held}) set aside under {DAMAGED_DIR}/: {why}")
        lines.extend(f"note: {note}" for note in self.notes)
        return "\n".join(lines)


@dataclass(frozen=True)
class _Candidate:
    entry: SegmentEntry
    namespaces: dict[str, int] | None


def write_store_facts(store: Path, manifest: Manifest) -> None:
    """Record the store-wide facts a manifest carries (embedding identity, expansion) in `store.json`
    when they differ from what it holds: atomically, once in a store's life in practice."""
    facts = _facts_json(manifest.embedding, manifest.expansion)
    path = store / STORE_FACTS_FILE
    try:
        if json.loads(path.read_text(encoding="utf-8")) == facts:
            return
    except (OSError, ValueError):
        pass
    staged = store / (STORE_FACTS_FILE + ".tmp")
    staged.write_text(json.dumps(facts, sort_keys=True), encoding="utf-8")
    fsync_path(staged)
    os.replace(staged, path)
    fsync_path(store)


def _facts_json(identity: EmbeddingIdentity | None, expansion: TurnExpansion) -> dict:
    embedding = None if identity is None else {"model_name": identity.model_name, "model_hash": identity.model_hash,
                                               "dimension": identity.dimension}
    return {"embedding": embedding, "expansion": expansion.to_json()}


def _read_facts(store: Path) -> tuple[EmbeddingIdentity | None, TurnExpansion] | None:
    try:
        document = json.loads((store / STORE_FACTS_FILE).read_text(encoding="utf-8"))
        embedding = document["embedding"]
        identity = None if embedding is None else EmbeddingIdentity(
            str(embedding["model_name"]), str(embedding["model_hash"]), int(embedding["dimension"]))
        return identity, expansion_from_json(document["expansion"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _sidecar(directory: Path) -> _Candidate | None:
    try:
        document = json.loads((directory / SIDECAR_FILE).read_text(encoding="utf-8"))
        entry = SegmentEntry(str(document["id"]), int(document["rows"]), {str(k): str(v) for k, v in document["files"].items()},
                             tuple(map(str, document["sources"])))
        return _Candidate(entry, {str(k): int(v) for k, v in document["namespaces"].items()})
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def _hashed_entry(directory: Path) -> SegmentEntry:
    """An entry for a segment written before descriptions: its files' sha256 as they are now."""
    names = SEPARATE_FILES if (directory / VECTORS_FILE).exists() else SEGMENT_FILES
    files = {name: hashlib.sha256((directory / name).read_bytes()).hexdigest() for name in names if (directory / name).exists()}
    return SegmentEntry(directory.name, -1, files)


def repair_store(store: Path, default_identity: Callable[[], EmbeddingIdentity]) -> RepairReport:
    """Rebuild `store`'s manifest from its intact segments under the write lock (RepairReport says
    what was kept, replaced and set aside). `default_identity` names the vectors' model when neither
    the old manifest nor `store.json` does (the packaged encoder's, for `rms check --repair`)."""
    store = Path(store)
    if not (store / SEGMENTS_DIR).is_dir():
        raise StoreError(f"{store} has no {SEGMENTS_DIR}/ directory: there is nothing to repair from")
    with WriteLock(store):
        return _repair(store, default_identity)


def _repair(store: Path, default_identity: Callable[[], EmbeddingIdentity]) -> RepairReport:
    report = RepairReport()
    old: Manifest | None = None
    if not (store / MANIFEST_FILE).exists():
        report.manifest_was = "missing"
    else:
        try:
            old = read_manifest(store)
        except StoreError as error:
            report.manifest_was = "damaged"
            report.notes.append(f"the damaged manifest was kept as {MANIFEST_FILE}.damaged ({error})")
    old_entries = {entry.id: entry for entry in old.segments} if old is not None else {}

    intact: dict[str, tuple[LoadedSegment, _Candidate]] = {}
    damaged: dict[str, tuple[str, dict[str, int] | None, tuple[str, ...]]] = {}
    # With an intact manifest only what it names (and what its damaged segments merged) is a
    # candidate: a directory no generation named is a write that never committed.
    wanted = None if old is None else set(old_entries)
    for directory in sorted((store / SEGMENTS_DIR).iterdir()):
        if not directory.is_dir() or SEGMENT_NAME.fullmatch(directory.name) is None:
            continue
        if wanted is not None and directory.name not in wanted:
            continue
        described = _sidecar(directory)
        entry = described.entry if described is not None else old_entries.get(directory.name)
        try:
            if entry is None:
                entry = _hashed_entry(directory)
            if entry.rows < 0:
                entry = SegmentEntry(entry.id, _row_count(directory), entry.files, entry.sources)
            if entry.deletions is None:  # deleted rows stay deleted: the newest deletion file is the last change
                entry = replace(entry, deletions=latest_deletions(directory))
            segment = LoadedSegment(store, entry).checked()
        except (StoreError, OSError, ValueError) as error:
            damaged[directory.name] = (str(error).split(";")[0], described.namespaces if described else None,
                                       entry.sources if entry is not None else ())
            continue
        intact[directory.name] = (segment, described or _Candidate(entry, None))
    for segment_id in old_entries:
        if segment_id not in intact and segment_id not in damaged:
            damaged[segment_id] = ("its directory is gone", None, old_entries[segment_id].sources)
    for segment_id, (_, _, sources) in list(damaged.items()):
        for source in sources:  # a damaged merge's inputs, if they are still within their grace
            candidate = _sidecar(store / SEGMENTS_DIR / source)
            if source not in intact and candidate is not None:
                try:
                    intact[source] = (LoadedSegment(store, candidate.entry).checked(), candidate)
                except (StoreError, OSError, ValueError):
                    continue
    if old is None and intact:
        report.notes.append("with no manifest to tell, a write that was killed before it committed may be back")

    replaced = {source for segment, _ in intact.values() for source in segment.entry.sources if source in intact}
    keys: dict[str, set] = {segment_id: segment.keys() for segment_id, (segment, _) in intact.items()}
    for segment_id, (segment, candidate) in intact.items():
        if candidate.namespaces is None and segment_id not in replaced:
            # a segment without a description: it was merged away if a later segment holds all its rows
            if any(other != segment_id and segment_generation(other) >= segment_generation(segment_id) and keys[segment_id] <= keys[other]
                   for other in intact):
                replaced.add(segment_id)
    kept = sorted((segment_id for segment_id in intact if segment_id not in replaced), key=lambda name: (segment_generation(name), name))

    facts = _read_facts(store)
    if old is not None:
        identity, expansion = old.embedding, old.expansion
    elif facts is not None:
        identity, expansion = facts
    else:
        identity, expansion = (default_identity() if kept else None), OFF
        report.notes.append(f"{STORE_FACTS_FILE} is missing: the vectors were taken to come from {identity}, "
                            "and turn expansion to be off")
    for segment_id in kept:
        segment = intact[segment_id][0]
        matrix = segment.vectors.matrix
        if identity is not None and len(matrix) and matrix.shape[1:] != (identity.dimension,):
            raise StoreError(f"segment {segment_id} holds vectors of dimension {matrix.shape[1]}, not the "
                             f"{identity.dimension} of {identity.model_name}; nothing was changed")

    generation = max([segment_generation(name) for name in (*intact, *damaged)] + [old.generation if old else 0]) + 1
    if damaged:
        aside = store / DAMAGED_DIR
        aside.mkdir(exist_ok=True)
        for segment_id, (why, rows, sources) in sorted(damaged.items()):
            source = store / SEGMENTS_DIR / segment_id
            if source.exists():
                os.replace(source, aside / f"{segment_id}-{time.time_ns()}")
            back = [intact[name][1].namespaces or {} for name in sources if name in intact]
            if back and rows is not None:
                rows = {namespace: count - sum(found.get(namespace, 0) for found in back) for namespace, count in rows.items()}
                rows = {namespace: count for namespace, count in rows.items() if count > 0}
                why += f"; the rest of its rows are back from {len(back)} of the {len(sources)} segments it merged"
            report.set_aside.append((segment_id, why, rows))
    if report.manifest_was == "damaged":
        os.replace(store / MANIFEST_FILE, store / (MANIFEST_FILE + ".damaged"))
    manifest = Manifest(generation if report.changed else (old.generation if old else 0), identity,
                        tuple(intact[segment_id][0].entry for segment_id in kept), (), expansion)
    if report.changed:
        write_manifest(store, manifest)
        write_store_facts(store, manifest)
    report.generation = manifest.generation
    report.kept = kept
    report.replaced = sorted(replaced)
    report.objects = manifest.object_count
    return report


def _row_count(directory: Path) -> int:
    """Rows of a segment written before descriptions, read from its objects file's metadata."""
    import pyarrow.parquet as pq

    return pq.ParquetFile(directory / "objects.parquet").metadata.num_rows
