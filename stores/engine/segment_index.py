"""A segment's index: its vectors, BM25 postings and graph edges, and the check of its index
file's sha256 they wait for.

`LoadedSegment` maps `index.npz` without reading it (stores/engine/npz_views.py) and holds its
arrays in an `IndexArrays`, which verifies the file the first time a search, a merge or `rms check`
reads them. Segments written before edge owners were stored (`legacy_edges`), or before
index.npz (`parquet_edges`), give their edges without owners; `owned_edges` finds each one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from uuid import UUID

import numpy as np
import pyarrow as pa

from rms_retrieval.stores.engine.edge_columns import CO_MENTIONED, EDGE_PREFIX, EdgeColumns, StoredEdge
from rms_retrieval.stores.engine.segment_vectors import SegmentVectors
from rms_retrieval.stores.errors import StoreError
from rms_retrieval.stores.indexes.postings import TermPostings
from rms_retrieval.stores.protocols import Edge


def legacy_edges(arrays: Mapping[str, np.ndarray]) -> tuple[StoredEdge, ...]:
    """The edges of an index.npz written before owners were stored, owners unknown (found on load)."""
    columns = EdgeColumns({name: array for name, array in arrays.items() if name.startswith(EDGE_PREFIX)}
                          | {"edge_rows": np.full(len(arrays["edge_ids"]), -1)})
    return tuple(StoredEdge(stored.edge, stored.namespace, None) for stored in columns.decoded())


def owned_edges(edges: Sequence[StoredEdge], row_of: Mapping[tuple[str, UUID], int], rows: int) -> tuple[StoredEdge, ...]:
    """`edges` with every unknown owner found (the source's row here, for the edges an object's
    analysis makes), each owner checked to be a row of the segment."""
    owned = []
    for stored in edges:
        if stored.row is None:
            row = -1 if stored.edge.edge_type == CO_MENTIONED else row_of.get((stored.namespace, stored.edge.source), -1)
            stored = StoredEdge(stored.edge, stored.namespace, row)
        elif not -1 <= stored.row < rows:
            raise StoreError(f"edge {stored.edge.edge_id} names row {stored.row} of a segment of {rows} rows")
        owned.append(stored)
    return tuple(owned)


def parquet_edges(table: pa.Table) -> tuple[StoredEdge, ...]:
    """The edges of an `edges.parquet` (segments written before index.npz), owners unknown."""
    edges = table.to_pydict()
    return tuple(
        StoredEdge(Edge(edge_id, source, target, edge_type, confidence), namespace)
        for edge_id, source, target, edge_type, confidence, namespace in zip(
            edges["edge_id"], edges["source"], edges["target"], edges["edge_type"], edges["confidence"], edges["namespace"])
    )


class IndexArrays:
    """A segment's vectors, postings and edge columns, and the check they wait for when they are
    views of a memory-mapped index file: `checked()` runs it once (a failed check raises again at
    the next call); until then the arrays are unverified, good for their shapes only. Shared by
    every reading of the segment."""

    def __init__(self, vectors: SegmentVectors, postings: TermPostings, edges: EdgeColumns, names: pa.Array | None,
                 check: Callable[[IndexArrays], None] | None, text_tokens: np.ndarray | None = None) -> None:
        """`names`: each row's entity name, for the postings' name counts (None: `postings` has them);
        `text_tokens`: each row's `text_tokens.spoken_tokens` (None: a segment written before it)."""
        vectors.matrix.flags.writeable = False
        if text_tokens is not None and (text_tokens.dtype.kind not in "iu" or text_tokens.shape != (postings.num_rows,)):
            raise ValueError(f"the text token counts do not match the {postings.num_rows} rows")
        self.vectors, self.edges, self._postings, self.text_tokens = vectors, edges, postings, text_tokens
        self._names, self._check = names, check
        self._named: TermPostings | None = None
        self._lock = threading.Lock()

    def checked(self) -> IndexArrays:
        if self._check is not None:
            with self._lock:
                if self._check is not None:
                    self._check(self)
                    self._check = None
        return self

    @property
    def num_rows(self) -> int:
        """The rows the postings count (their shape: nothing is read or named)."""
        return self._postings.num_rows

    @property
    def stored_postings(self) -> TermPostings:
        """The postings as the file holds them: without the entity-name counts, which `postings`
        makes by analysing every entity name again."""
        return self._postings

    @property
    def postings(self) -> TermPostings:
        """The postings, with each row's entity-name counts (made on first use)."""
        if self._names is None:
            return self._postings
        named = self._named
        if named is None:
            with self._lock:
                if self._named is None:
                    self._named = self._postings.with_names(self._names.to_pylist())
                named = self._named
        return named
