"""Where a segment's files are and what they are called: the files of a segment directory, the
segment ids a store makes, and the deletion files beside them (stores/engine/segments.py reads
them, stores/engine/segment_writing.py writes them).

Files under `segments/<id>/`:
- `objects.parquet`: the rows as typed columns for SQL, grouped by namespace so that each
  namespace's vectors are one contiguous slice;
- `index.npz`: plain arrays (no pickles) of the float32 unit vectors in row order, each row's JSON
  `record` (the object, end to end in one byte array with its offsets), the BM25 term postings of
  the rows (stores/indexes/lexical.py) and the graph edges this write added or re-weighted (a later
  segment's edge wins over an earlier one with the same edge id). One file, not three, because
  every file of a write costs an fsync.
Segments written before the records moved to index.npz hold them in objects.parquet's `record`
column; they load the same.
Segments written before index.npz have `vectors.npy`, `edges.parquet` and `postings.npz` instead;
they load the same, and a merge rewrites them in the current form.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from pathlib import Path

from rms_retrieval.stores.engine.manifest import SEGMENTS_DIR, Deletions
from rms_retrieval.stores.engine.npz_views import load_npy

OBJECTS_FILE = "objects.parquet"
INDEX_FILE = "index.npz"
# The segment's own description (id, rows per namespace, its files' sha256, the segments a merge
# replaced): what `rms check --repair` rebuilds a lost manifest from. Readers never need it.
SIDECAR_FILE = "segment.json"
SEGMENT_FILES = (OBJECTS_FILE, INDEX_FILE)
# Segments written before index.npz held vectors, edges and postings in files of their own.
VECTORS_FILE = "vectors.npy"
EDGES_FILE = "edges.parquet"
POSTINGS_FILE = "postings.npz"
SEPARATE_FILES = (OBJECTS_FILE, VECTORS_FILE, EDGES_FILE, POSTINGS_FILE)
TEMPORARY_PREFIX = ".tmp-"
DELETIONS_PREFIX = "deleted-"


def segment_directory(store: Path, segment_id: str) -> Path:
    return store / SEGMENTS_DIR / segment_id


def new_segment_id(generation: int) -> str:
    return f"g{generation:08d}-{uuid.uuid4().hex[:12]}"


# What new_segment_id makes; nothing else under segments/ is the store's.
SEGMENT_NAME = re.compile(r"g[0-9]{8}-[0-9a-f]{12}")


def segment_generation(segment_id: str) -> int:
    """The generation a segment directory was written for (ids are `g<generation>-<random>`)."""
    return int(segment_id[1:9])


def latest_deletions(directory: Path) -> Deletions | None:
    """The newest deletion file in a segment directory, described as a manifest would (for
    `rms check --repair`, which has no manifest to name it); None without one."""
    found = sorted(path for path in directory.glob(f"{DELETIONS_PREFIX}g*.npy"))
    if not found:
        return None
    data = found[-1].read_bytes()
    rows = load_npy(data)
    return Deletions(found[-1].name, hashlib.sha256(data).hexdigest(), len(rows))
