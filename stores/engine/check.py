"""`rms check`: verify every file of a store's live generation, and that its parts agree."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from rms_retrieval.stores.errors import StoreError
from rms_retrieval.stores.engine.manifest import read_manifest
from rms_retrieval.stores.engine.segments import LoadedSegment


@dataclass
class CheckReport:
    """What `check_store` verified and every problem it found (none means the store is sound)."""

    generation: int = 0
    segments: int = 0
    objects: int = 0
    edges: int = 0
    problems: list[str] = field(default_factory=list)

    def to_text(self) -> str:
        if not self.problems:
            return (f"ok: generation {self.generation}, {self.segments} segments, {self.objects} objects, "
                    f"{self.edges} edges; every file matches its sha256")
        return "\n".join(f"damaged: {problem}" for problem in self.problems)


def check_store(path: Path) -> CheckReport:
    """Load and verify every segment the manifest names (sha256, row counts of rows, vectors and
    postings, deletion files), then check live ids are unique. Edge ids are unique per edge, with
    gaps where compaction dropped the edges of deleted objects."""
    report = CheckReport()
    try:
        manifest = read_manifest(path)
    except StoreError as error:
        report.problems.append(str(error))
        return report
    report.generation, report.segments = manifest.generation, len(manifest.segments)
    seen: set = set()
    edge_ids: set[int] = set()
    for entry in manifest.segments:
        try:
            segment = LoadedSegment(path, entry).checked()
        except (StoreError, OSError) as error:
            report.problems.append(str(error))
            continue
        keys = {(segment.namespace_of_row[row], segment.ids[row]) for row in segment.live_positions().tolist()}
        duplicates = seen.intersection(keys)
        if duplicates:
            namespace, object_id = min(duplicates, key=lambda key: (key[0], key[1].int))
            report.problems.append(f"segment {entry.id} repeats object {object_id} of namespace {namespace!r}")
        seen.update(keys)
        edge_ids.update(stored.edge.edge_id for stored in segment.edges)
        matrix = segment.vectors.matrix
        if manifest.embedding is not None and len(matrix) and matrix.shape[1:] != (manifest.embedding.dimension,):
            report.problems.append(f"segment {entry.id} holds vectors of shape {matrix.shape[1:]}, "
                                   f"the manifest says dimension {manifest.embedding.dimension}")
        if (problem := segment.vectors.problem()) is not None:
            report.problems.append(f"segment {entry.id}: {problem}")
    report.objects, report.edges = len(seen), len(edge_ids)
    return report
