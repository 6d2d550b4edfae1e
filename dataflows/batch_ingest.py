"""The outer DAG of batch ingest: the texts fan out to the workers in the store's own chunks
(`Parallelizable`), each worker embeds its chunks, the vectors are collected for the one writer.

The writer then runs the ordinary `MemoryStore.add`, all or nothing, with a `PrecomputedEncoder`:
asked for a chunk the workers embedded, it answers with their vectors; asked for anything else
(the last chunk, which also holds the entities the store adds) it runs the model itself. The
workers' chunks are cut exactly where `encode_many` cuts them, so the writer's requests find
them; a vector is the same bits whichever process embeds it (stores/providers/embedding.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from hamilton.htypes import Collect, Parallelizable

from rms_retrieval.stores.protocols import EmbeddingIdentity, QueryEncoder


@dataclass(frozen=True)
class ChunkVectors:
    """One chunk of texts and the vectors the model gave them in one call."""

    texts: tuple[str, ...]
    vectors: np.ndarray


def text_chunks(texts: list[str], chunk_size: int) -> list[tuple[str, ...]]:
    """The texts cut every `chunk_size`, from the first, as the store's encode_many cuts them."""
    return [tuple(texts[start : start + chunk_size]) for start in range(0, len(texts), chunk_size)]


def text_chunk(text_chunks: list[tuple[str, ...]]) -> Parallelizable[tuple[str, ...]]:
    """One task per chunk."""
    yield from text_chunks


def chunk_vectors(text_chunk: tuple[str, ...]) -> ChunkVectors:
    """The chunk embedded by this worker's model, in one call as the store makes it."""
    from rms_retrieval.stores.providers.onnx_encoder import default_encoder

    return ChunkVectors(text_chunk, default_encoder().encode(list(text_chunk)))


def worker_vectors(chunk_vectors: Collect[ChunkVectors]) -> dict[tuple[str, ...], np.ndarray]:
    """Every chunk's vectors, by its texts."""
    return {chunk.texts: chunk.vectors for chunk in chunk_vectors}


class PrecomputedEncoder(QueryEncoder):
    """The model's identity, answering with the workers' vectors for exactly the chunks they embedded.

    `texts_from_workers` and `texts_encoded_here` count what each side embedded.
    """

    def __init__(self, model: QueryEncoder, vectors_by_chunk: Mapping[tuple[str, ...], np.ndarray]) -> None:
        self._model = model
        self._vectors = dict(vectors_by_chunk)
        self.texts_from_workers = 0
        self.texts_encoded_here = 0

    @property
    def identity(self) -> EmbeddingIdentity:
        return self._model.identity

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        vectors = self._vectors.get(tuple(texts))
        if vectors is None:
            self.texts_encoded_here += len(texts)
            return self._model.encode(texts)
        self.texts_from_workers += len(texts)
        return vectors
