"""A segment's vectors: one float32 unit vector for each row that has one.

A bare ENTITY (`MemoryObject.is_bare_entity`: a speaker, a spotted name, whose text is only its
name) has none. It serves the graph walk and the name lookups; retrieval leaves it out of every
bundle outside AUDIT mode, so a vector of it would only take a place in the vector search's top k.
On LongMemEval-S such names are five rows in six, so their vectors were most of a store's bytes.

`index.npz` holds `vectors` (one row per vector) and `vector_rows` (int32, ascending: the row each
vector belongs to). A segment written before holds a vector for every row and no `vector_rows`
(`rows` is None here); the search skips its bare entities' vectors as it skips dead rows, and a
merge or compaction that rewrites it drops them (`take` with `keep`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

VECTOR_ROWS = "vector_rows"


class SegmentVectors:
    """`matrix` (float32, one row per vector) and the segment row each belongs to (`rows`,
    ascending; None: every row of the segment has one, in row order). Read-only."""

    __slots__ = ("matrix", "rows", "num_rows")

    def __init__(self, matrix: np.ndarray, rows: np.ndarray | None, num_rows: int) -> None:
        self.matrix, self.rows, self.num_rows = matrix, rows, num_rows

    @classmethod
    def dense(cls, matrix: np.ndarray) -> SegmentVectors:
        """A vector for every row, in row order."""
        return cls(matrix, None, len(matrix))

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, np.ndarray], num_rows: int) -> SegmentVectors:
        """The vectors an index file holds (`num_rows`: the segment's rows)."""
        return cls(arrays["vectors"], arrays[VECTOR_ROWS] if VECTOR_ROWS in arrays else None, num_rows)

    @classmethod
    def stacked(cls, vectors: Sequence[np.ndarray | None], dimension: int) -> SegmentVectors:
        """One row per item of `vectors`, None where that row has no vector."""
        rows = np.asarray([row for row, vector in enumerate(vectors) if vector is not None], dtype=np.int64)
        present = [vector for vector in vectors if vector is not None]
        matrix = np.stack(present).astype(np.float32, copy=False) if present else np.empty((0, dimension), np.float32)
        return cls(matrix, rows, len(vectors))

    @staticmethod
    def concatenate(parts: Sequence[SegmentVectors]) -> SegmentVectors:
        """The rows of `parts` one after another."""
        offsets = np.cumsum([0, *(part.num_rows for part in parts)])
        rows = [part.row_numbers() + offset for part, offset in zip(parts, offsets.tolist())]
        dimension = next((part.matrix.shape[1] for part in parts if len(part.matrix)), 0)
        matrices = [part.matrix for part in parts if len(part.matrix)]
        matrix = np.concatenate(matrices) if matrices else np.empty((0, dimension), np.float32)
        return SegmentVectors(matrix, np.concatenate(rows) if rows else np.empty(0, np.int64), int(offsets[-1]))

    def to_arrays(self) -> dict[str, np.ndarray]:
        """What an index file stores: the matrix and, always, each vector's row."""
        return {"vectors": np.ascontiguousarray(self.matrix, dtype=np.float32),
                VECTOR_ROWS: self.row_numbers().astype(np.int32)}

    def shape_problem(self) -> str | None:
        """What disagrees in these vectors' shapes (None: nothing); reads no array's data."""
        if self.rows is None:
            return None if len(self.matrix) == self.num_rows else f"{len(self.matrix)} vectors for {self.num_rows} rows"
        if len(self.rows) != len(self.matrix) or len(self.rows) > self.num_rows:
            return f"{len(self.matrix)} vectors and {len(self.rows)} vector rows for {self.num_rows} rows"
        return None

    def problem(self) -> str | None:
        """`shape_problem`, and vector rows out of order or outside the segment (reads `rows`)."""
        problem = self.shape_problem()
        if problem is None and self.rows is not None and len(self.rows) and (
                self.rows[0] < 0 or self.rows[-1] >= self.num_rows or np.any(np.diff(self.rows) <= 0)):
            problem = f"vector rows out of order or outside the segment's {self.num_rows} rows"
        return problem

    def row_numbers(self) -> np.ndarray:
        """The row of each vector (int64)."""
        return np.arange(self.num_rows, dtype=np.int64) if self.rows is None else self.rows.astype(np.int64)

    def has_vector(self) -> np.ndarray:
        """Per row, whether it has a vector."""
        if self.rows is None:
            return np.ones(self.num_rows, dtype=bool)
        mask = np.zeros(self.num_rows, dtype=bool)
        mask[self.rows] = True
        return mask

    def span(self, start: int, stop: int) -> tuple[int, int]:
        """Where the vectors of rows start..stop lie in `matrix`."""
        if self.rows is None:
            return start, stop
        return int(np.searchsorted(self.rows, start)), int(np.searchsorted(self.rows, stop))

    def rows_at(self, positions: np.ndarray) -> np.ndarray:
        """The rows of the vectors at `positions` of `matrix`."""
        return positions if self.rows is None else self.rows[positions].astype(np.int64)

    def of(self, row: int) -> np.ndarray | None:
        """Row `row`'s vector, or None."""
        if self.rows is None:
            return self.matrix[row]
        position = int(np.searchsorted(self.rows, row))
        return self.matrix[position] if position < len(self.rows) and self.rows[position] == row else None

    def take(self, rows: np.ndarray, keep: np.ndarray | None = None) -> SegmentVectors:
        """The vectors of a segment whose row i is this one's row `rows[i]`; `keep` (per row of this
        one) False drops that row's vector."""
        rows = np.asarray(rows, dtype=np.int64)
        has = self.has_vector() if keep is None else self.has_vector() & keep
        new_rows = np.flatnonzero(has[rows])
        old_rows = rows[new_rows]
        positions = old_rows if self.rows is None else np.searchsorted(self.rows, old_rows)
        return SegmentVectors(self.matrix[positions], new_rows, len(rows))
