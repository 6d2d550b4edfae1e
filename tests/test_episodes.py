"""Episode routing (RFC 4.6, nodes/helpers/episodes.py): BM25 over episodes, then over records."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

from rms_retrieval.nodes.helpers.episodes import EpisodeMark, bm25_scores, episode_marks


def test_bm25_is_the_usual_formula_over_the_given_documents():
    documents = [Counter({"kiln": 2, "clay": 1}), Counter({"clay": 1}), Counter({"river": 3})]
    [kiln, clay, river] = bm25_scores(frozenset({"kiln"}), documents)
    idf = math.log(1 + (3 - 1 + 0.5) / (1 + 0.5))
    length_norm = 1.2 * (1 - 0.75 + 0.75 * 3 / (7 / 3))
    assert kiln == pytest.approx(idf * 2 * 2.2 / (2 + length_norm)) and clay == river == 0.0
    assert bm25_scores(frozenset({"kiln"}), []) == []


def test_the_best_episode_marks_its_best_records_and_names_its_strongest_candidate():
    episodes = ["a", "b", "b", None, "b", "a"]
    terms = [("river",), ("kiln", "clay"), ("lunch",), ("kiln",), ("kiln",), ("kiln", "garden")]
    scores = np.array([0.9, 0.5, 0.8, 0.7, 0.1, 0.2])
    # episode b uses "kiln" in two of its three records, a in one of two: b first
    marks = episode_marks(episodes, terms, scores, ["kiln"], top_k=1, local_k=2)
    assert marks == [EpisodeMark(row=4, anchor=2), EpisodeMark(row=1, anchor=2)]  # row 3 has no episode
    assert [m.row for m in episode_marks(episodes, terms, scores, ["kiln"], top_k=2, local_k=1)] == [4, 5]
    assert episode_marks(episodes, terms, scores, ["kiln"], top_k=0, local_k=2) == []
    assert episode_marks(episodes, terms, scores, ["absent"], top_k=3, local_k=2) == []
    assert episode_marks(episodes, terms, scores, [], top_k=3, local_k=2) == []
