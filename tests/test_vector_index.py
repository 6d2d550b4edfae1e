from __future__ import annotations

import numpy as np
import pytest

from rms_retrieval.stores import vector_index


def _unit_vectors(count: int, dimension: int, seed: int) -> np.ndarray:
    vectors = np.random.default_rng(seed).normal(size=(count, dimension)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_filtered_search_equals_brute_force(seed):
    vectors = _unit_vectors(500, 32, seed)
    ids = np.arange(1000, 1500, dtype=np.int64)
    index = vector_index.with_vectors(vector_index.new_index(32), vectors, ids)
    allowed = np.random.default_rng(seed + 10).choice(ids, size=120, replace=False)
    query = _unit_vectors(1, 32, seed + 20)[0]

    found_ids, found_scores = vector_index.search(index, query, allowed, 10)

    mask = np.isin(ids, allowed)
    scores = vectors[mask] @ query
    expected = ids[mask][np.lexsort((ids[mask], -scores))][:10]
    assert found_ids.tolist() == expected.tolist()
    np.testing.assert_allclose(found_scores, np.sort(scores)[::-1][:10], atol=1e-5)


def test_ties_at_the_cut_are_all_returned_in_id_order():
    vectors = np.tile(_unit_vectors(1, 8, 3), (30, 1))
    ids = np.arange(30, dtype=np.int64)[::-1].copy()
    index = vector_index.with_vectors(vector_index.new_index(8), vectors, ids)
    found_ids, _ = vector_index.search(index, vectors[0], ids, 3)
    assert found_ids.tolist() == list(range(30))


def test_empty_and_out_of_subset():
    index = vector_index.new_index(4)
    assert vector_index.search(index, np.ones(4) / 2, np.array([1, 2]), 5)[0].size == 0
    grown = vector_index.with_vectors(index, _unit_vectors(3, 4, 0), np.array([7, 8, 9]))
    assert index.ntotal == 0 and grown.ntotal == 3
    assert vector_index.search(grown, np.ones(4) / 2, np.array([], dtype=np.int64), 5)[0].size == 0
    assert vector_index.search(grown, np.ones(4) / 2, np.array([8]), 5)[0].tolist() == [8]


def test_save_and_load_round_trip(tmp_path):
    vectors = _unit_vectors(20, 8, 5)
    index = vector_index.with_vectors(vector_index.new_index(8), vectors, np.arange(20))
    vector_index.save_index(index, tmp_path / "v.faiss")
    loaded = vector_index.load_index(tmp_path / "v.faiss")
    assert loaded.ntotal == 20
    query = vectors[4]
    assert vector_index.search(loaded, query, np.arange(20), 3)[0].tolist() == (
        vector_index.search(index, query, np.arange(20), 3)[0].tolist()
    )
