"""Exact inner-product search over int64-keyed unit vectors (FAISS IndexIDMap2 over IndexFlatIP).

Flat search is exact, so results are reproducible given the vectors. The caller's id subset is
applied inside FAISS before top-k (a namespace filter must never lose its budget to another
namespace). Scores that tie at the cut are all returned so the caller can break ties by its own key.
"""

from __future__ import annotations

from pathlib import Path

import faiss
import numpy as np

# Extra results requested beyond k so a tie at the cut is seen without a second search.
_TIE_HEADROOM = 8


def new_index(dimension: int) -> faiss.IndexIDMap2:
    """An empty exact index for unit vectors of `dimension`."""
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


def search(
    index: faiss.IndexIDMap2, vector: np.ndarray, allowed_ids: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """The best `k` of `allowed_ids` by inner product with `vector`, plus any that tie the k-th score.

    Returns (ids int64, scores float32) sorted by descending score, then ascending id.
    """
    allowed = np.asarray(allowed_ids, dtype=np.int64)
    if k <= 0 or allowed.size == 0 or index.ntotal == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
    query = np.ascontiguousarray(np.asarray(vector, dtype=np.float32).reshape(1, -1))
    params = faiss.SearchParameters(sel=faiss.IDSelectorBatch(allowed))
    asked = min(allowed.size, k + _TIE_HEADROOM)
    while True:
        scores, ids = index.search(query, asked, params=params)
        scores, ids = scores[0], ids[0]
        found = ids >= 0  # -1 marks "no result" when fewer ids are stored than asked
        scores, ids = scores[found], ids[found]
        tie_may_continue = ids.size == asked and ids.size > k and scores[-1] == scores[k - 1]
        if not tie_may_continue or asked >= allowed.size:
            break
        asked = min(allowed.size, asked * 2)
    order = np.lexsort((ids, -scores))
    scores, ids = scores[order], ids[order]
    if ids.size > k:
        keep = scores >= scores[k - 1]
        scores, ids = scores[keep], ids[keep]
    return ids.astype(np.int64), scores.astype(np.float32)
