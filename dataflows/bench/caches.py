"""Caches that make benchmark re-runs cheap: query and memory vectors on disk, keyed by the model's
identity and the text, and cross-encoder scores keyed by the model, question and text (in memory,
or on disk with a directory, so a stopped reranking run resumes without running the model again).

Embedding a LongMemEval-S haystack takes about an hour on two cores; with the cache a second
ingest of the same turns embeds nothing. The cache holds what the model gave for a text in
whatever call first embedded it; the model pads within a call, so a cached vector can differ in
the last bits from one embedded in another batch. Stores built from the cache answer alike
whenever they are built from it. Arms that rerank the same scored pool (the three policies, or a
top 50 inside a top 100) ask the cross-encoder once per (question, record).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from rms_retrieval.stores.providers.embedding import encode_many
from rms_retrieval.stores.protocols import CrossEncoder, EmbeddingIdentity, QueryEncoder


def _key(*parts: str) -> str:
    return hashlib.sha256("\x1f".join(parts).encode("utf-8", "surrogatepass")).hexdigest()


class VectorCache(QueryEncoder):
    """`encoder`'s vectors, cached in `directory` per model identity: an encoder that embeds only
    texts it has not seen. `save()` writes the cache (atomically; `encode` saves after each miss batch)."""

    def __init__(self, directory: str | Path, encoder: QueryEncoder) -> None:
        self._encoder = encoder
        identity = encoder.identity
        self._directory = Path(directory) / _key(identity.model_name, identity.model_hash, str(identity.dimension))[:16]
        self._keys: dict[str, int] = {}
        self._vectors = np.zeros((0, identity.dimension), dtype=np.float32)
        keys_file = self._directory / "keys.json"
        if keys_file.is_file():
            keys = json.loads(keys_file.read_text())
            vectors = np.load(self._directory / "vectors.npy")
            if len(keys) == len(vectors):  # a cache cut short by a crash is rebuilt, never trusted
                self._keys, self._vectors = {k: i for i, k in enumerate(keys)}, vectors
        self.hits = 0
        self.misses = 0

    @property
    def identity(self) -> EmbeddingIdentity:
        return self._encoder.identity

    def __len__(self) -> int:
        return len(self._keys)

    def encode(self, texts: Sequence[str], *, progress: bool = False) -> np.ndarray:
        keys = [_key(text) for text in texts]
        missing = list(dict.fromkeys(k for k in keys if k not in self._keys))
        if missing:
            first = {k: text for k, text in zip(keys, texts) if k in set(missing)}
            made = encode_many(self._encoder, [first[k] for k in missing], progress=progress)
            start = len(self._vectors)
            self._vectors = np.concatenate([self._vectors, made])
            self._keys.update({k: start + i for i, k in enumerate(missing)})
            self.save()
        self.misses += len(missing)
        self.hits += len(keys) - len(missing)
        return self._vectors[[self._keys[k] for k in keys]]

    def save(self) -> None:
        self._directory.mkdir(parents=True, exist_ok=True)
        ordered = sorted(self._keys, key=self._keys.__getitem__)
        for name, write in (("vectors.npy", lambda f: np.save(f, self._vectors)),
                            ("keys.json", lambda f: f.write(json.dumps(ordered).encode()))):
            handle, temporary = tempfile.mkstemp(dir=self._directory, prefix=f".{name}.")
            with os.fdopen(handle, "wb") as file:
                write(file)
            os.replace(temporary, self._directory / name)


class ScoreCache(CrossEncoder):
    """`model`'s pair scores, remembered by (question, text); same identity as the model. With
    `directory` they are kept on disk per model identity (`scores.jsonl`, one line per batch of
    new pairs, appended and flushed), so another run reuses them; a line cut short by a crash is
    left out and scored again."""

    def __init__(self, model: CrossEncoder, directory: str | Path | None = None) -> None:
        self._model = model
        self._scores: dict[str, float] = {}
        self._file = Path(directory) / _key(model.identity)[:16] / "scores.jsonl" if directory else None
        if self._file is not None and self._file.is_file():
            for line in self._file.read_text().splitlines():
                try:
                    self._scores.update(json.loads(line))
                except ValueError:
                    continue

    @property
    def identity(self) -> str:
        return self._model.identity

    def score(self, question: str, texts: Sequence[str]) -> np.ndarray:
        keys = [_key(question, text) for text in texts]
        missing = list(dict.fromkeys((k, t) for k, t in zip(keys, texts) if k not in self._scores))
        if missing:
            made = dict(zip((k for k, _ in missing), self._model.score(question, [t for _, t in missing]).tolist()))
            self._scores.update(made)
            if self._file is not None:
                self._file.parent.mkdir(parents=True, exist_ok=True)
                with self._file.open("a") as file:
                    file.write(json.dumps(made) + "\n")
        return np.array([self._scores[k] for k in keys], dtype=np.float64)
