"""Two-stage episode context (RFC 4.6), the routing: which records of the pool an episode marks.

An episode is an exact (namespace, owner, scope, session_id) group of the pool's records; no
model runs and nothing outside the pool is read. Stage one scores each episode's candidate-backed
text (its records' terms together) against the question with BM25 and keeps the best
`top_k` episodes with a positive score; stage two scores each kept episode's records alone, the
episode's records as the corpus, and marks the best `local_k` with a positive score. Each mark
names the episode's strongest candidate, from which the record inherits (`ranked_candidates`).
Terms come from the caller (`ranked_candidates` analyses them as the store's BM25 indexes content).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Hashable, Sequence
from typing import NamedTuple

import numpy as np

from rms_retrieval.stores.indexes.lexical import BM25_B as B, BM25_K1 as K1  # the store's BM25 constants


class EpisodeMark(NamedTuple):
    """A record `row` of the pool that episode routing marks, and its episode's strongest `anchor` row."""

    row: int
    anchor: int


def bm25_scores(question: frozenset[str], documents: Sequence[Counter]) -> list[float]:
    """Each document's BM25 score for the question's terms, the documents as the corpus."""
    count = len(documents)
    lengths = [sum(document.values()) for document in documents]
    average = (sum(lengths) / count) if count else 0.0
    frequency = Counter(term for document in documents for term in question if term in document)
    idf = {term: math.log(1.0 + (count - df + 0.5) / (df + 0.5)) for term, df in frequency.items()}
    scores = []
    for document, length in zip(documents, lengths):
        norm = K1 * (1.0 - B + B * (length / average if average else 0.0))
        scores.append(sum(idf[term] * tf * (K1 + 1.0) / (tf + norm)
                          for term in idf if (tf := document.get(term, 0))))
    return scores


def _best(scores: Sequence[float], k: int) -> list[int]:
    """The positions of the `k` best positive scores, best first; ties keep the earlier position."""
    return sorted((i for i, score in enumerate(scores) if score > 0), key=lambda i: (-scores[i], i))[:k]


def episode_marks(
    episodes: Sequence[Hashable | None], terms: Sequence[Sequence[str]], scores: np.ndarray,
    question: Sequence[str], top_k: int, local_k: int,
) -> list[EpisodeMark]:
    """The marked records of the pool, episode by episode, best episode first.

    `episodes[row]` is the row's episode key (None outside a session), `terms[row]` its analysed
    text, `scores[row]` its score; rows are in rank order, which breaks ties."""
    if top_k == 0:
        return []
    groups: dict[Hashable, list[int]] = {}
    for row, key in enumerate(episodes):
        if key is not None:
            groups.setdefault(key, []).append(row)
    wanted = frozenset(question)
    if not groups or not wanted:
        return []
    keys = list(groups)
    chosen = _best(bm25_scores(wanted, [Counter(t for row in groups[key] for t in terms[row]) for key in keys]), top_k)
    marks = []
    for position in chosen:
        rows = groups[keys[position]]
        anchor = max(rows, key=lambda row: (float(scores[row]), -row))
        local = bm25_scores(wanted, [Counter(terms[row]) for row in rows])
        marks.extend(EpisodeMark(rows[i], anchor) for i in _best(local, local_k))
    return marks
