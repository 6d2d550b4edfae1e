"""The default encoder, MiniLM through ONNX Runtime: the same vectors as sentence-transformers, a
cache it checks before trusting, and processes that write and ask without importing the torch stack."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from rms_retrieval.stores.providers import onnx_encoder
from rms_retrieval.stores.providers.embedding import DEFAULT_MODEL_NAME
from rms_retrieval.stores.providers.onnx_encoder import MAX_TOKENS, OnnxQueryEncoder, default_encoder
from rms_retrieval.stores.protocols import QueryEncoder

TEXTS = [
    "When did Caroline go to the LGBTQ support group?",
    "x",
    "Tomás moved to Lisbon in June 2023 🎉 — after the Ünïcødé festival.",
    "   leading and trailing spaces   ",
    "word " * 400,  # longer than the model reads: cut at MAX_TOKENS as sentence-transformers cuts it
    "Melanie: I ran a charity race for mental health last Saturday, it was so rewarding!",
]


@pytest.fixture(scope="module")
def query_encoder() -> OnnxQueryEncoder:
    encoder = default_encoder()
    encoder.encode(["warm"])  # exports into the user cache once, on a machine that never had it
    return encoder


@pytest.fixture(scope="module")
def exported_encoder(query_encoder, tmp_path_factory) -> OnnxQueryEncoder:
    """An encoder whose cache cannot be written: it exports the weights afresh and keeps the graph in memory."""
    blocked = tmp_path_factory.mktemp("unwritable") / "a-file"
    blocked.write_text("not a directory")
    encoder = OnnxQueryEncoder(cache_dir=blocked / "cache")
    encoder.encode(["warm"])
    return encoder


@pytest.fixture
def good_cache(query_encoder, tmp_path):
    """A private cache directory holding a copy of the graph and its checksum."""
    source = query_encoder.graph_path()
    for path in (source, onnx_encoder._checksum_path(source)):
        shutil.copy(path, tmp_path / path.name)
    return tmp_path


def test_vectors_agree_with_sentence_transformers_and_share_its_identity(query_encoder, sentence_encoder):
    ours, theirs = query_encoder.encode(TEXTS), sentence_encoder.encode(TEXTS)
    assert isinstance(query_encoder, QueryEncoder) and query_encoder.identity == sentence_encoder.identity
    assert ours.dtype == np.float32 and ours.shape == (len(TEXTS), 384)
    assert (1.0 - np.sum(ours * theirs, axis=1)).max() < 1e-6
    assert np.abs(ours - theirs).max() < 1e-5
    # The reference is batch-invariant too: each text alone, on one torch thread.
    np.testing.assert_array_equal(np.stack([sentence_encoder.encode([text])[0] for text in TEXTS]), theirs)


def test_a_long_text_is_cut_where_the_model_stops_reading(query_encoder):
    tokenizer, _ = query_encoder._loaded()
    assert len(tokenizer.encode("word " * 400).ids) == MAX_TOKENS
    np.testing.assert_array_equal(query_encoder.encode(["word " * 400]), query_encoder.encode(["word " * 1000]))


def test_a_batch_is_bit_identical_to_each_text_alone(query_encoder):
    alone = np.stack([query_encoder.encode([text])[0] for text in TEXTS])
    np.testing.assert_array_equal(query_encoder.encode(TEXTS), alone)
    assert query_encoder.encode([]).shape == (0, 384)


@pytest.mark.slow
def test_vectors_agree_on_locomo_questions(query_encoder, sentence_encoder, locomo_path):
    from rms_retrieval.dataflows.locomo import load_locomo

    questions = [q.question for q in load_locomo(locomo_path).questions][::10]
    gap = 1.0 - np.sum(query_encoder.encode(questions) * sentence_encoder.encode(questions), axis=1)
    assert len(questions) > 150 and gap.max() < 1e-6


def test_a_cached_graph_is_used_without_exporting_again(good_cache, monkeypatch, query_encoder):
    def no_export(path):
        raise AssertionError("exported although a good graph was cached")

    monkeypatch.setattr(onnx_encoder, "export_graph", no_export)
    cached = OnnxQueryEncoder(cache_dir=good_cache)
    np.testing.assert_array_equal(cached.encode(TEXTS[:2]), query_encoder.encode(TEXTS[:2]))


def test_a_damaged_cached_graph_is_exported_again_not_trusted(good_cache, query_encoder):
    graph = good_cache / query_encoder.graph_path().name
    data = bytearray(graph.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 4096] = bytes(4096)  # the rows of a few tokens' embeddings: it still loads
    graph.write_bytes(bytes(data))
    repaired = OnnxQueryEncoder(cache_dir=good_cache)
    np.testing.assert_array_equal(repaired.encode(TEXTS[:2]), query_encoder.encode(TEXTS[:2]))
    assert graph.read_bytes() == query_encoder.graph_path().read_bytes()


def test_a_partial_cached_graph_is_not_loaded(good_cache, query_encoder):
    graph = good_cache / query_encoder.graph_path().name
    graph.write_bytes(graph.read_bytes()[: 1 << 20])  # onnxruntime cannot parse it; the checksum decides
    assert onnx_encoder._cached_session(graph) is None
    graph.unlink()
    assert onnx_encoder._cached_session(graph) is None


def test_a_graph_replaced_while_its_session_loads_is_not_trusted(good_cache, monkeypatch, query_encoder):
    """The session reads the path, the checksum thread a handle opened before: if another process
    swaps the file in between, what was hashed may not be what was loaded."""
    graph = good_cache / query_encoder.graph_path().name
    replacement = good_cache / "replacement.onnx"
    shutil.copy(graph, replacement)  # the same bytes, but another file: the session reads that one
    real_session = onnx_encoder._session
    monkeypatch.setattr(onnx_encoder, "_session", lambda model: os.replace(replacement, graph) or real_session(model))
    assert onnx_encoder._cached_session(graph) is None
    monkeypatch.setattr(onnx_encoder, "_session", real_session)
    assert onnx_encoder._cached_session(graph) is not None


def test_an_unwritable_cache_keeps_the_export_in_memory(exported_encoder, query_encoder):
    blocked = exported_encoder.graph_path().parent.parent
    np.testing.assert_array_equal(exported_encoder.encode(TEXTS[:2]), query_encoder.encode(TEXTS[:2]))
    assert blocked.read_text() == "not a directory"


def test_a_graph_loaded_from_the_cache_gives_the_floats_of_a_fresh_export(good_cache, monkeypatch, exported_encoder):
    """The cache is loaded from its path, a fresh export from its bytes in memory: the same
    session options either way, so every vector is the same to the bit."""
    monkeypatch.setattr(onnx_encoder, "export_graph", lambda path: pytest.fail("the good cached graph was not used"))
    cached = OnnxQueryEncoder(cache_dir=good_cache)
    np.testing.assert_array_equal(cached.encode(TEXTS), exported_encoder.encode(TEXTS))


def test_the_cache_directory_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("RMS_CACHE_DIR", str(tmp_path / "mine"))
    assert onnx_encoder.cache_directory() == tmp_path / "mine"
    monkeypatch.delenv("RMS_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert onnx_encoder.cache_directory() == tmp_path / "xdg" / "rms-retrieval"


_WRITE_AND_QUERY_PROCESS = """
import contextlib, io, json, sys
from rms_retrieval.dataflows.cli import main
from rms_retrieval.stores.memory_store import MemoryStore
with MemoryStore.open(sys.argv[1]) as store:
    store.add_messages(sys.argv[2], "cold-process", [{"role": "user", "content": "My bike is a green Brompton."}])
with contextlib.redirect_stdout(io.StringIO()) as printed:
    code = main(["query", "--store", sys.argv[1], "--namespace", sys.argv[2], "What colour is my bike?"])
print(json.dumps({"code": code, "answered": "Brompton" in printed.getvalue(),
                  "heavy": sorted(m for m in ("torch", "transformers", "sentence_transformers", "sklearn", "dateparser") if m in sys.modules)}))
"""


def test_a_cold_write_and_query_never_import_the_torch_stack(query_encoder, demo_copy, demo_store):
    """What makes a one-shot process fast: with the graph cached, writing a message and answering
    a question import none of torch, transformers, sentence-transformers or scikit-learn (nor
    dateparser, for a question that names no date), and print nothing on stderr."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "TRANSFORMERS"))}
    done = subprocess.run([sys.executable, "-c", _WRITE_AND_QUERY_PROCESS, str(demo_copy), demo_store.namespace],
                          capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout) == {"code": 0, "answered": True, "heavy": []}
    assert done.stderr == ""


_COLD_PROCESS = """
import json, os, sys
from rms_retrieval.stores.providers.onnx_encoder import default_encoder
encoder = default_encoder()
identity = encoder.identity
loaded_before_encode = sorted(m for m in ("onnxruntime", "torch") if m in sys.modules)
from transformers.utils import logging as transformers_logging
bars_before = transformers_logging.is_progress_bar_enabled()
vector = encoder.encode(["Where does Tomas work now?"])
print(json.dumps({"same": default_encoder() is encoder, "loaded_before_encode": loaded_before_encode,
                  "bars_kept": transformers_logging.is_progress_bar_enabled() == bars_before,
                  "shape": list(vector.shape), "model": identity.model_name, "cached": encoder.graph_path().exists(),
                  "environ": sorted(k for k in os.environ if k.startswith(("HF_", "TRANSFORMERS")))}))
"""


def test_the_default_encoder_is_one_lazily_loaded_model_that_needs_no_environment(tmp_path):
    """In a fresh process with an empty cache and without HF_HUB_OFFLINE (the machine has no route
    to a model hub): the packaged weights are exported from their path on first encode, once, and
    leave os.environ and the caller's progress-bar setting as they were; nothing reaches stderr."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "TRANSFORMERS"))}
    env[onnx_encoder.CACHE_ENVIRONMENT_VARIABLE] = str(tmp_path / "cache")
    done = subprocess.run([sys.executable, "-c", _COLD_PROCESS], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout) == {"same": True, "loaded_before_encode": [], "bars_kept": True, "shape": [1, 384],
                                       "model": DEFAULT_MODEL_NAME, "cached": True, "environ": []}
    assert done.stderr == ""


def test_a_stored_vector_is_the_vector_of_the_same_text_asked(tmp_path, query_encoder):
    """A store opened without an encoder embeds with the default one, one text per run: the floats
    it stores for a text are the ones a question of the same text gets (RFC-0005's batch invariance
    across writes and queries)."""
    from rms_retrieval.stores.memory_store import MemoryStore
    from rms_retrieval.stores.models import MemoryObject

    texts = ["Tomas works at the harbour cafe.", "x", "The spare key hangs by the door."]
    objects = [MemoryObject(namespace="n", node_type="FACT", content=text) for text in texts]
    with MemoryStore.open(tmp_path / "store") as store:
        store.add(objects)
        [segment] = store.snapshot().segments
        stored = np.stack([segment.vectors.of(segment.ids.index(o.id)) for o in objects])
    np.testing.assert_array_equal(stored, np.stack([query_encoder.encode([text])[0] for text in texts]))


def test_threads_that_first_encode_together_load_the_graph_once(good_cache, monkeypatch, query_encoder):
    """Concurrent first use builds one ONNX Runtime session (RFC-0005 amendment: native model
    construction is serialised), and every thread gets the same floats."""
    import threading

    built, real_session = [], onnx_encoder._session
    monkeypatch.setattr(onnx_encoder, "_session", lambda model: built.append(1) or real_session(model))
    fresh = OnnxQueryEncoder(cache_dir=good_cache)
    start, vectors = threading.Barrier(6), [None] * 6

    def first_encode(slot: int) -> None:
        start.wait()
        vectors[slot] = fresh.encode([TEXTS[0]])

    threads = [threading.Thread(target=first_encode, args=(slot,)) for slot in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert built == [1]
    assert all(np.array_equal(vector, query_encoder.encode([TEXTS[0]])) for vector in vectors)


def test_a_background_load_is_the_session_the_first_encode_uses(good_cache, monkeypatch, query_encoder):
    """`rms query` starts the load on a thread while it imports and opens the store: the first
    encode waits for that session instead of building another, and gives the same floats."""
    built, real_session = [], onnx_encoder._session
    monkeypatch.setattr(onnx_encoder, "_session", lambda model: built.append(1) or real_session(model))
    fresh = OnnxQueryEncoder(cache_dir=good_cache)
    loading = fresh.load_in_background()
    assert not loading.daemon  # an early exit waits for it: tearing down a half-built session aborts
    vector = fresh.encode([TEXTS[0]])
    loading.join()
    assert built == [1]
    np.testing.assert_array_equal(vector, query_encoder.encode([TEXTS[0]]))


def test_a_background_load_that_fails_leaves_the_error_to_the_first_encode(tmp_path):
    """The thread swallows nothing the caller would have seen: the first encode raises what it
    raises without a background load."""
    missing = OnnxQueryEncoder(tmp_path / "no-model", cache_dir=tmp_path / "cache")
    missing.load_in_background().join()  # nothing raised on the thread
    with pytest.raises(Exception) as after_background:
        missing.encode(["Where does Tomas work now?"])
    with pytest.raises(Exception) as without:
        OnnxQueryEncoder(tmp_path / "no-model", cache_dir=tmp_path / "cache").encode(["Where does Tomas work now?"])
    assert (type(after_background.value), str(after_background.value)) == (type(without.value), str(without.value))


def test_a_cache_file_is_written_whole_or_not_at_all(tmp_path):
    path = tmp_path / "cache" / "kept.bin"
    assert onnx_encoder.write_cache_file(path, b"first") and path.read_bytes() == b"first"
    assert onnx_encoder.write_cache_file(path, b"second") and path.read_bytes() == b"second"
    blocked = tmp_path / "cache" / "a directory"
    (blocked / "inside").mkdir(parents=True)  # a name the rename cannot take
    assert not onnx_encoder.write_cache_file(blocked, b"third")
    assert sorted(entry.name for entry in path.parent.iterdir()) == ["a directory", "kept.bin"]  # no temporary left
    (tmp_path / "a file").write_text("where a directory would be")
    assert not onnx_encoder.write_cache_file(tmp_path / "a file" / "kept.bin", b"fourth")
