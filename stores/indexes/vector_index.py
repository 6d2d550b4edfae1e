"""Exact inner-product search in float32 with FAISS's flat kernel, plus the format-2 index files.

`exact_top_k` is the store's vector search: the best rows of one float32 matrix (a segment's
namespace slice, searched in place), every row tying the k-th score included so that the caller
can break ties by its own key. Each score is FAISS's one-pair kernel (`fvec_inner_product`) on
that row and the query, which sums in an order fixed by the dimension alone, so a row scores the
same bits wherever it sits: in a segment of one row or of a million, at any offset. FAISS's
search without a selector does not: for one query over 10,000 rows or more on two OpenMP threads
(FAISS 1.15) it runs BLAS `sgemm` over row blocks, and measured on 50,000 random rows of
dimension 384, 917 of 1,025 rows scored other bits there than in a matrix of 1,025 rows. Any
selector keeps FAISS on the per-row path, and `IDSelectorAll` selects every row, so `_EVERY_ROW`
is what makes scores independent of segmentation (tests/test_vector_index.py checks every
score against the one-pair kernel, on both sides of that 10,000-row threshold).

The IndexIDMap2 helpers read and write the single-file index of format-2 stores (`rms migrate`).
"""

from __future__ import annotations

from pathlib import Path

import faiss
import numpy as np

# Extra results requested beyond k so a tie at the cut is seen without a second search.
_TIE_HEADROOM = 8
# Any selector sends FAISS to exhaustive_inner_product_seq (one fvec_inner_product per row, one
# thread for one query); IDSelectorRange and IDSelectorArray are not used because FAISS strips
# them into a plain (BLAS-eligible) search. Stateless, so one instance serves every thread.
_EVERY_ROW = faiss.IDSelectorAll()


def exact_top_k(matrix: np.ndarray, query: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Row positions and float32 scores of the best `k` rows of `matrix` by inner product with
    `query`, plus every row that ties the k-th score; best first (ties in no promised order).

    `matrix` is searched in place when it is C-contiguous float32 (a row slice of one is)."""
    rows = len(matrix)
    if k <= 0 or rows == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
    matrix = np.ascontiguousarray(matrix, dtype=np.float32)
    query = np.ascontiguousarray(np.asarray(query, dtype=np.float32).reshape(1, -1))
    if query.shape[1] != matrix.shape[1]:
        raise ValueError(f"a query of dimension {query.shape[1]} cannot search vectors of dimension {matrix.shape[1]}")
    asked = min(rows, k + _TIE_HEADROOM)
    while True:
        scores = np.empty((1, asked), dtype=np.float32)
        positions = np.empty((1, asked), dtype=np.int64)
        faiss.knn_inner_product(faiss.swig_ptr(query), faiss.swig_ptr(matrix), matrix.shape[1], 1, rows, asked,
                                faiss.swig_ptr(scores), faiss.swig_ptr(positions), _EVERY_ROW)
        scores, positions = scores[0], positions[0]
        # FAISS returns the asked-for number sorted best first; if the last still ties the k-th,
        # rows beyond it may tie too.
        if asked == rows or scores[-1] < scores[k - 1]:
            break
        asked = min(rows, asked * 2)
    if asked > k:
        keep = scores >= scores[k - 1]
        scores, positions = scores[keep], positions[keep]
    return positions, scores


def new_index(dimension: int) -> faiss.IndexIDMap2:
    """An empty format-2 index for unit vectors of `dimension`."""
    return faiss.IndexIDMap2(faiss.IndexFlatIP(dimension))


def with_vectors(index: faiss.IndexIDMap2, vectors: np.ndarray, ids: np.ndarray) -> faiss.IndexIDMap2:
    """A copy of `index` with `vectors` added under `ids`; `index` itself is left unchanged."""
    grown = faiss.clone_index(index)
    grown.add_with_ids(np.ascontiguousarray(vectors, dtype=np.float32), np.asarray(ids, dtype=np.int64))
    return grown


def save_index(index: faiss.IndexIDMap2, path: Path) -> None:
    faiss.write_index(index, str(path))


def load_index(path: Path) -> faiss.IndexIDMap2:
    """Read an index written by `save_index`; FAISS raises RuntimeError for an unreadable file."""
    return faiss.read_index(str(path))
