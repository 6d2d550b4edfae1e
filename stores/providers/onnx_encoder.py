"""The default encoder: the packaged MiniLM weights run by ONNX Runtime, one text at a time,
for stored vectors and questions alike.

Why ONNX Runtime rather than torch for the same model: a text is short, and what it costs is the
runtime, not the arithmetic. Importing sentence-transformers (torch, transformers, scikit-learn)
takes 6 to 10 s, which every one-shot process that writes or asks pays in full, and one torch
forward pass of a dozen tokens took about 13 ms warm (27 ms for a sentence-long turn). ONNX
Runtime and the `tokenizers` library import in a fraction of a second, and one pass takes about
4.5 ms on one thread (11 ms for that turn). Its vectors agree with sentence-transformers'
(`stores/providers/embedding.py`, the reference) to within 1e-6 cosine (tests/test_onnx_encoder.py),
so the embedding identity is the same, and a store written by either is read by both.

The ONNX graph is exported once from the same weights with `torch.onnx` (which needs torch,
transformers and onnx) and cached under `cache_directory()`, named by the weights' hash. An export
is checked once: a few probe texts must give the vectors torch computes with the same weights.
The cached file's sha256 is written beside it and checked by every process before use, so a
damaged or partial file is exported again rather than trusted. The session is built from the file's
path (0.1 s in a cold process; from the file's bytes in memory it took 0.25 to 0.45 s) while a
thread hashes the same file (0.05 s): both release the GIL, so the check costs no wall time, and a
session whose file does not match its checksum is dropped before anyone runs it. Where the cache
cannot be written (a read-only home), the graph is exported into memory for the life of the
process.

Texts are encoded one per run, unpadded (RFC-0005's batch invariance): a padded batch would
depend on how the exporter traced the attention mask, and one text per run makes a text's vector
the same whether it is written, ingested in a batch, embedded again or asked as a question.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import tempfile
import threading
import warnings
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from rms_retrieval.stores.providers.embedding import (DEFAULT_DIMENSION, SentenceEncoder, default_model_path,
                                                     no_loading_bars, validated_vectors)
from rms_retrieval.stores.errors import EmbeddingError
from rms_retrieval.stores.protocols import EmbeddingIdentity, QueryEncoder

# The model reads at most this many tokens, special tokens included (sentence_bert_config.json
# of the packaged model: max_seq_length 256); the rest of a text is cut, as sentence-transformers does.
MAX_TOKENS = 256
# Bump when the export changes (inputs, opset, pooling): a cached graph of another format is not used.
EXPORT_FORMAT = 1
_OPSET = 17
_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
# Texts a new export must encode as torch does; 1e-6 cosine is ten times tighter than the agreement
# the hot-path issue asks of a second runtime (1e-5).
_PROBES = (
    "When did Caroline go to the LGBTQ support group?",
    "I finally moved into the flat on the 20th of March, it has a tiny balcony.",
    "x",
)
_PROBE_TOLERANCE = 1e-6
CACHE_ENVIRONMENT_VARIABLE = "RMS_CACHE_DIR"


def cache_directory() -> Path:
    """Where exported graphs are kept: $RMS_CACHE_DIR, else $XDG_CACHE_HOME/rms-retrieval, else
    ~/.cache/rms-retrieval."""
    chosen = os.environ.get(CACHE_ENVIRONMENT_VARIABLE)
    if chosen:
        return Path(chosen)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "rms-retrieval"


class OnnxQueryEncoder(QueryEncoder):
    """MiniLM through ONNX Runtime on one CPU thread; the graph loads on first encode."""

    def __init__(self, model_path: str | Path | None = None, *, cache_dir: str | Path | None = None) -> None:
        self._reference = SentenceEncoder(model_path)
        self._path = Path(model_path) if model_path is not None else default_model_path()
        self._cache_dir = Path(cache_dir) if cache_dir is not None else None
        self._runtime: tuple[Any, Any] | None = None
        self._lock = threading.Lock()

    @property
    def identity(self) -> EmbeddingIdentity:
        """The same identity as the sentence-transformers encoder of the same weights."""
        return self._reference.identity

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Float32 unit vectors, shape (len(texts), dimension), one ONNX run per text."""
        if not texts:
            return np.zeros((0, DEFAULT_DIMENSION), dtype=np.float32)
        tokenizer, session = self._loaded()
        return _unit_vectors(session, tokenizer, texts)

    def load_in_background(self) -> threading.Thread:
        """Start hashing the weights and loading the graph on a thread and return it. A process
        that embeds one question soon after it starts (`rms query`) overlaps that load with its
        imports and the store's opening on the other core: hashing and building the session
        release the GIL. A failure here is left for the first encode, which loads again and raises
        it where the caller sees it. Not a daemon: an interpreter that exits early (a bad request)
        waits for the load, as native code torn down under a running session aborts the process."""
        thread = threading.Thread(target=self._load_quietly, name="rms-encoder-load")
        thread.start()
        return thread

    def _load_quietly(self) -> None:
        try:
            self._loaded()
        except Exception:  # raised again by encode(), in the caller's thread
            return

    def graph_path(self) -> Path:
        """The cached ONNX graph for these weights (it may not exist yet)."""
        directory = self._cache_dir if self._cache_dir is not None else cache_directory()
        return directory / f"minilm-{self.identity.model_hash}-format{EXPORT_FORMAT}.onnx"

    def _loaded(self) -> tuple[Any, Any]:
        if self._runtime is None:
            with self._lock:
                if self._runtime is None:
                    self._runtime = (_tokenizer(self._path), self._verified_session())
        return self._runtime

    def _verified_session(self) -> Any:
        """A session over the cached graph when its bytes match their recorded sha256, else over
        a new export (cached when the cache can be written)."""
        graph = self.graph_path()
        cached = _cached_session(graph)
        if cached is not None:
            return cached
        model, probes = export_graph(self._path)
        session = _session(model)
        if not _reproduces(session, _tokenizer(self._path), probes):
            raise EmbeddingError(f"the ONNX export of {self._path} does not reproduce the model's own vectors")
        _store_in_cache(graph, model)
        return session


@lru_cache(maxsize=1)
def default_encoder() -> OnnxQueryEncoder:
    """The packaged MiniLM, one per process: what a store embeds its objects with and `retrieve()`
    its questions with, unless the caller passes another encoder."""
    return OnnxQueryEncoder()


@lru_cache(maxsize=4)
def _tokenizer(model_path: Path) -> Any:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(model_path / "tokenizer.json"))
    # The file pads every text to 128 tokens, which multiplies a short query's work tenfold.
    tokenizer.no_padding()
    tokenizer.enable_truncation(MAX_TOKENS)
    return tokenizer


def _mean_pooled(session: Any, ids: list[int]) -> np.ndarray:
    """Mean of the last hidden states over the text's tokens, as sentence-transformers pools."""
    input_ids = np.asarray([ids], dtype=np.int64)
    ones = np.ones_like(input_ids)
    (hidden,) = session.run(None, {"input_ids": input_ids, "attention_mask": ones, "token_type_ids": np.zeros_like(input_ids)})
    return hidden[0].mean(axis=0)


def _session(model: bytes | str) -> Any:
    """A session over a serialised graph or the path of one; the options are the same either way."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    # One thread, not spinning: a query gains little from a second thread, and under concurrent
    # requests on two cores spinning threads would take the CPU from the rest of the pipeline.
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.log_severity_level = 3
    return onnxruntime.InferenceSession(model, options, providers=["CPUExecutionProvider"])


def _unit_vectors(session: Any, tokenizer: Any, texts: Sequence[str]) -> np.ndarray:
    """One checked unit vector per text, one ONNX run each."""
    pooled = np.stack([_mean_pooled(session, tokenizer.encode(text).ids) for text in texts])
    return validated_vectors(pooled, len(texts), DEFAULT_DIMENSION)


def _reproduces(session: Any, tokenizer: Any, probes: np.ndarray) -> bool:
    """Whether the session's vectors for the probe texts are torch's, to within _PROBE_TOLERANCE."""
    got = _unit_vectors(session, tokenizer, _PROBES)
    return bool((1.0 - np.sum(got * probes, axis=1)).max() <= _PROBE_TOLERANCE)


def _checksum_path(graph: Path) -> Path:
    return graph.with_suffix(".sha256")


def _cached_session(graph: Path) -> Any | None:
    """A session over the cached graph when the file matches the checksum written beside it, else
    None (a missing, partial or damaged file is exported again, never trusted).

    The session reads the file by its path while a thread hashes the file through a handle opened
    first. That handle must still be the file at the path once the session is built: had another
    process replaced the file in between, the session might have read other bytes than the ones
    hashed, so the cache counts as missed rather than trusted."""
    try:
        recorded = _checksum_path(graph).read_text().strip()
        handle = graph.open("rb")
    except OSError:
        return None
    with handle:
        digest: list[str] = []
        hashing = threading.Thread(target=_append_sha256, args=(handle, digest), name="rms-graph-checksum")
        hashing.start()
        try:
            session, failure = _session(str(graph)), None
        except Exception as error:  # onnxruntime's own types, for a file it cannot parse
            session, failure = None, error
        finally:
            hashing.join()
        try:
            unchanged = _same_file(os.fstat(handle.fileno()), os.stat(graph))
        except OSError:
            unchanged = False
    if not unchanged or digest != [recorded]:
        return None
    if failure is not None:
        raise failure  # the recorded bytes themselves do not load: not a damaged cache, so say so
    return session


def _append_sha256(handle: Any, digest: list[str]) -> None:
    """The file's sha256 appended to `digest`; nothing when it cannot be read (a cache miss)."""
    try:
        digest.append(hashlib.file_digest(handle, "sha256").hexdigest())
    except OSError:
        return


def _same_file(opened: os.stat_result, named: os.stat_result) -> bool:
    return (opened.st_dev, opened.st_ino, opened.st_size, opened.st_mtime_ns) == (
        named.st_dev, named.st_ino, named.st_size, named.st_mtime_ns)


def _store_in_cache(graph: Path, model: bytes) -> None:
    """Write the graph, then its checksum, each atomically; a cache that cannot be written is
    left alone (the process keeps its export in memory)."""
    if write_cache_file(graph, model):
        write_cache_file(_checksum_path(graph), hashlib.sha256(model).hexdigest().encode())


def write_cache_file(path: Path, data: bytes) -> bool:
    """`data` as the file `path` of the cache directory, atomically: written to a temporary name
    beside it and renamed, so a reader sees a whole file or none. False (and no file, temporary or
    not) where the directory cannot be written: the caller keeps what it made in memory."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle = tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{path.name}.", delete=False)
    except OSError:
        return False
    try:
        with handle:
            handle.write(data)
        os.chmod(handle.name, 0o644)  # like any cache file: readable by the user's other tools
        os.replace(handle.name, path)
    except BaseException as error:
        with contextlib.suppress(OSError):
            os.unlink(handle.name)
        if not isinstance(error, OSError):
            raise
        return False
    return True


def export_graph(model_path: Path) -> tuple[bytes, np.ndarray]:
    """The weights at `model_path` as an ONNX graph (last hidden states), and the unit probe
    vectors torch computes with them (mean pooling, as sentence-transformers pools)."""
    import torch
    from transformers import AutoModel

    with no_loading_bars():
        model = AutoModel.from_pretrained(str(model_path), local_files_only=True).eval()
    tokenizer = _tokenizer(model_path)

    class LastHidden(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            return self.model(input_ids=input_ids, attention_mask=attention_mask,
                              token_type_ids=token_type_ids).last_hidden_state

    with torch.no_grad():
        # Before the export: tracing leaves the module in a state that computes other vectors.
        probes = []
        for text in _PROBES:
            ids = torch.tensor([tokenizer.encode(text).ids], dtype=torch.long)
            hidden = model(input_ids=ids, attention_mask=torch.ones_like(ids), token_type_ids=torch.zeros_like(ids))
            probes.append(hidden.last_hidden_state[0].mean(dim=0).numpy())
    sample = torch.ones((1, 8), dtype=torch.long)
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tracer's notes about shapes it treats as constants
        torch.onnx.export(LastHidden(), (sample, sample, torch.zeros_like(sample)), buffer, input_names=list(_INPUTS),
                          output_names=["last_hidden_state"], opset_version=_OPSET, dynamo=False,
                          dynamic_axes={name: {0: "batch", 1: "tokens"} for name in (*_INPUTS, "last_hidden_state")})
    vectors = np.stack(probes).astype(np.float32)
    return buffer.getvalue(), vectors / np.linalg.norm(vectors, axis=1, keepdims=True)

