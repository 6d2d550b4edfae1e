"""Batch ingest: workers embed, one writer commits, and the store answers as a local ingest's does."""

from __future__ import annotations

import numpy as np
import pytest

from rms_retrieval.dataflows import batch_ingest
from rms_retrieval.dataflows.batch import ingest_with_workers
from rms_retrieval.dataflows.retrieval import retrieve
from rms_retrieval.stores.providers import embedding
from rms_retrieval.stores.errors import StoreError
from rms_retrieval.stores.memory_store import MemoryStore

# Small chunks, so that the demo corpus makes several worker tasks; the store cuts at the same size.
CHUNK = 16


@pytest.fixture
def small_chunks(monkeypatch):
    monkeypatch.setattr(embedding, "ENCODE_CHUNK_SIZE", CHUNK)


def _bundles(path, demo_store) -> list[str]:
    with MemoryStore.open(path, create=False, read_only=True) as store:
        return [retrieve(store, question, namespaces=[demo_store.namespace], reference_time=demo_store.reference_time,
                         token_budget=400, log=False).bundle.to_json()
                for question in demo_store.corpus.sample_questions]


@pytest.fixture(scope="module")
def local_bundles(demo_store, tmp_path_factory, encoder):
    """The bundles after a local ingest of the demo corpus, made with the same small chunks."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(embedding, "ENCODE_CHUNK_SIZE", CHUNK)
        path = tmp_path_factory.mktemp("local-ingest") / "store"
        with MemoryStore.open(path, encoder=encoder) as store:
            store.add(demo_store.corpus.objects)
    return _bundles(path, demo_store)


@pytest.mark.parametrize("engine", ["local", pytest.param("ray", marks=pytest.mark.slow),
                                    pytest.param("dask", marks=pytest.mark.slow)])
def test_an_ingest_embedded_on_workers_gives_the_bundles_of_a_local_ingest(
        engine, request, demo_store, local_bundles, small_chunks, tmp_path):
    address = request.getfixturevalue("dask_address") if engine == "dask" else None
    if engine == "ray":
        request.getfixturevalue("ray_cluster")
    objects = demo_store.corpus.objects
    report = ingest_with_workers(objects, tmp_path / "store", engine=engine, address=address)
    assert report.objects_added == len(objects)
    # Every text the store embeds came from the workers, the last short chunk too: bare entities
    # (the speakers, the names the store spots) are never embedded, so nothing else joins it.
    embedded = sum(not memory.is_bare_entity for memory in objects)
    assert 0 < embedded < len(objects) and embedded % CHUNK
    assert (report.details["texts_from_workers"], report.details["texts_encoded_by_writer"]) == (embedded, 0)
    assert _bundles(tmp_path / "store", demo_store) == local_bundles


def test_a_failed_commit_leaves_the_store_as_it_was(demo_store, small_chunks, tmp_path):
    objects = demo_store.corpus.objects
    ingest_with_workers(objects[:20], tmp_path / "store", engine="local")
    with MemoryStore.open(tmp_path / "store", create=False, read_only=True) as store:
        before = store.snapshot().state_fingerprint()
    with pytest.raises(StoreError, match="already in"):
        ingest_with_workers(objects[10:], tmp_path / "store", engine="local")
    with MemoryStore.open(tmp_path / "store", create=False, read_only=True) as store:
        assert store.snapshot().state_fingerprint() == before


def test_chunks_are_cut_where_encode_many_cuts_them():
    texts = [f"t{i}" for i in range(7)]
    assert batch_ingest.text_chunks(texts, 3) == [("t0", "t1", "t2"), ("t3", "t4", "t5"), ("t6",)]
    assert list(batch_ingest.text_chunk([("a",), ("b",)])) == [("a",), ("b",)]


def test_the_precomputed_encoder_answers_known_chunks_and_embeds_the_rest(encoder):
    known = batch_ingest.chunk_vectors(("Priya moved to Leeds.", "Tomas keeps bees."))
    precomputed = batch_ingest.PrecomputedEncoder(encoder, batch_ingest.worker_vectors([known]))
    assert precomputed.identity == encoder.identity
    assert precomputed.encode(list(known.texts)) is known.vectors
    assert np.array_equal(precomputed.encode(["Tomas keeps bees."]), encoder.encode(["Tomas keeps bees."]))
    assert (precomputed.texts_from_workers, precomputed.texts_encoded_here) == (2, 1)


def test_nothing_to_add_starts_no_workers(tmp_path):
    report = ingest_with_workers([], tmp_path / "store", engine="dask", workers=1)
    assert report.objects_added == 0
