"""Exact float32 search: brute-force equality, scores independent of where a row sits, ties at the cut."""

from __future__ import annotations

import faiss
import numpy as np
import pytest

from rms_retrieval.stores.indexes import vector_index


def _unit_vectors(count: int, dimension: int, seed: int) -> np.ndarray:
    vectors = np.random.default_rng(seed).normal(size=(count, dimension)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def _pair_kernel(query: np.ndarray, row: np.ndarray) -> np.float32:
    """FAISS's one-pair inner product: the bits every stored row must score, wherever it sits."""
    row = np.ascontiguousarray(row)
    return np.float32(faiss.fvec_inner_product(faiss.swig_ptr(query), faiss.swig_ptr(row), len(row)))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_top_k_equals_brute_force_by_the_pair_kernel(seed):
    vectors = _unit_vectors(500, 32, seed)
    query = _unit_vectors(1, 32, seed + 20)[0]
    positions, scores = vector_index.exact_top_k(vectors, query, 10)
    expected = np.array([_pair_kernel(query, row) for row in vectors])
    order = np.lexsort((np.arange(500), -expected))[:10]
    assert sorted(positions.tolist()) == sorted(order.tolist())
    assert scores.tolist() == expected[positions].tolist() == sorted(scores.tolist(), reverse=True)


def test_a_row_scores_the_same_bits_in_any_matrix_at_any_offset():
    # 12,000 rows of dimension 384 is past the size at which FAISS's selector-free search turns to
    # BLAS on a multi-core machine; a 1-row and a 37-row matrix are below it.
    vectors = _unit_vectors(12_000, 384, 4)
    query = _unit_vectors(1, 384, 5)[0]
    probes = [0, 1, 36, 1023, 1024, 5000, 11_999]
    expected = [_pair_kernel(query, vectors[row]) for row in probes]
    whole_positions, whole_scores = vector_index.exact_top_k(vectors, query, len(vectors))
    whole = dict(zip(whole_positions.tolist(), whole_scores.tolist()))
    assert [whole[row] for row in probes] == expected
    for row, bits in zip(probes, expected):
        for start in {max(0, row - 36), row}:
            window = vectors[start:start + 37]
            positions, scores = vector_index.exact_top_k(window, query, len(window))
            assert dict(zip(positions.tolist(), scores.tolist()))[row - start] == bits
        assert vector_index.exact_top_k(vectors[row:row + 1], query, 1)[1].tolist() == [bits]


def test_every_tie_at_the_cut_is_returned():
    vectors = np.vstack([_unit_vectors(1, 8, 6), np.tile(_unit_vectors(1, 8, 3), (30, 1))])
    query = vectors[1]
    positions, scores = vector_index.exact_top_k(vectors, query, 3)
    assert sorted(positions.tolist()) == list(range(1, 31))  # 30 tie; headroom is 8, so it had to widen
    assert len(set(scores.tolist())) == 1
    positions, _ = vector_index.exact_top_k(vectors, vectors[0], 1)
    assert positions.tolist() == [0]


def test_empty_small_and_mismatched():
    vectors = _unit_vectors(3, 4, 0)
    assert vector_index.exact_top_k(vectors[:0], vectors[0], 5)[0].size == 0
    assert vector_index.exact_top_k(vectors, vectors[0], 0)[0].size == 0
    assert sorted(vector_index.exact_top_k(vectors, vectors[0], 5)[0].tolist()) == [0, 1, 2]
    with pytest.raises(ValueError, match="dimension 5 cannot search vectors of dimension 4"):
        vector_index.exact_top_k(vectors, np.ones(5, dtype=np.float32), 2)


def test_format_2_index_round_trip(tmp_path):
    vectors = _unit_vectors(20, 8, 5)
    index = vector_index.with_vectors(vector_index.new_index(8), vectors, np.arange(100, 120))
    vector_index.save_index(index, tmp_path / "v.faiss")
    loaded = vector_index.load_index(tmp_path / "v.faiss")
    assert loaded.ntotal == 20 and vector_index.new_index(8).ntotal == 0
    assert faiss.vector_to_array(loaded.id_map).tolist() == list(range(100, 120))
    np.testing.assert_array_equal(loaded.index.reconstruct_n(0, 20), vectors)


@pytest.mark.parametrize("rows, layout", [(1_200, [1_000, 100, 100]),
                                          pytest.param(12_000, [10_000, 1_000, 1_000], marks=pytest.mark.slow)])
def test_one_segment_and_many_give_bit_identical_hits(tmp_path, rows, layout):
    """`rows` rows as one segment, and as twelve adds merged into `layout`: every hit and every
    score equal, bit for bit (the large size crosses FAISS's BLAS threshold in both layouts)."""
    from rms_retrieval.dataflows.bench.speed_bench import synthetic_objects
    from tests.factories import RandomEncoder
    from rms_retrieval.stores.memory_store import MemoryStore

    turns = synthetic_objects(0, rows, namespaces=1)
    batch = rows // 12
    with MemoryStore.open(tmp_path / "one", RandomEncoder()) as one, \
            MemoryStore.open(tmp_path / "many", RandomEncoder()) as many:
        one.add(turns)
        for start in range(0, len(turns), batch):
            many.add(turns[start:start + batch])
            many.wait_for_merges()
        assert [entry.rows for entry in many.snapshot().manifest.segments] == layout
        for query in _unit_vectors(4, 384, 7):
            whole = one.snapshot().search_vector(query, ["synthetic-0"], rows)
            assert len(whole) == rows and whole == many.snapshot().search_vector(query, ["synthetic-0"], 12_000)
            top = one.snapshot().search_vector(query, ["synthetic-0"], 50)
            assert top == many.snapshot().search_vector(query, ["synthetic-0"], 50) == whole[:50]


def test_the_snapshots_hits_are_best_first_with_tied_cosines_in_id_order(tmp_path):
    """Over several namespaces (one block each), with and without tied cosines: hits best first,
    ties by object id, as a sort of every hit by (-cosine, id) gives them."""
    from rms_retrieval.stores.memory_store import MemoryStore
    from rms_retrieval.stores.models import MemoryObject
    from tests.factories import RandomEncoder

    encoder = RandomEncoder()
    turns = [MemoryObject(namespace=namespace, content=content) for namespace in ("a", "b")
             for content in ["the same words"] * 3 + [f"turn {i}" for i in range(20)]]
    with MemoryStore.open(tmp_path / "s", encoder) as store:
        store.add(turns)
        snapshot = store.snapshot()
        tied, untied = encoder.encode(["the same words"])[0], _unit_vectors(1, 384, 3)[0]
        for query, limit in ((tied, 4), (tied, 46), (untied, 10), (untied, 46)):
            hits = snapshot.search_vector(query, ["a", "b"], limit)
            every = sorted(snapshot.search_vector(query, ["a", "b"], 46), key=lambda hit: (-hit.cosine, hit.object_id))
            assert hits == every[:limit]
        top = snapshot.search_vector(tied, ["a", "b"], 6)
        assert len({hit.cosine for hit in top}) == 1 and [h.object_id for h in top] == sorted(h.object_id for h in top)
