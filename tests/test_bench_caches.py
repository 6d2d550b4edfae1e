"""The benchmark caches: vectors on disk by model and text, cross-encoder scores in memory or on disk."""

from __future__ import annotations

import numpy as np

from rms_retrieval.dataflows.bench.caches import ScoreCache, VectorCache
from rms_retrieval.stores.protocols import CrossEncoder, EmbeddingIdentity
from tests.factories import FakeEncoder


class _Counting(FakeEncoder):
    def __init__(self, identity=None):
        self.calls: list[list[str]] = []
        if identity is not None:
            self.identity = identity

    def encode(self, texts):
        self.calls.append(list(texts))
        return super().encode(texts)


def test_a_second_run_embeds_nothing_it_embedded_before(tmp_path):
    model = _Counting()
    cache = VectorCache(tmp_path, model)
    first = cache.encode(["a b", "c d", "a b"])
    assert model.calls == [["a b", "c d"]] and len(cache) == 2
    assert np.allclose(first, FakeEncoder().encode(["a b", "c d", "a b"]), atol=1e-7)
    again = VectorCache(tmp_path, _Counting())
    assert np.array_equal(again.encode(["c d", "a b"]), first[[1, 0]]) and again.misses == 0 and again.hits == 2


def test_the_cache_is_kept_per_model(tmp_path):
    VectorCache(tmp_path, _Counting()).encode(["a b"])
    other = _Counting(EmbeddingIdentity("other-model", "1" * 16, 4))
    VectorCache(tmp_path, other).encode(["a b"])
    assert other.calls == [["a b"]]


def test_a_cache_cut_short_is_rebuilt_not_trusted(tmp_path):
    cache = VectorCache(tmp_path, _Counting())
    cache.encode(["a b", "c d"])
    directory = next(p for p in tmp_path.iterdir() if p.is_dir())
    (directory / "keys.json").write_text('["only-one"]')
    model = _Counting()
    VectorCache(tmp_path, model).encode(["a b"])
    assert model.calls == [["a b"]]


class _Lengths(CrossEncoder):
    identity = "lengths@0"

    def __init__(self):
        self.calls = []

    def score(self, question, texts):
        self.calls.append(list(texts))
        return np.array([float(len(question + t)) for t in texts])


def test_scores_are_asked_once_per_question_and_record():
    model = _Lengths()
    cache = ScoreCache(model)
    assert cache.score("q", ["ab", "abc"]).tolist() == [3.0, 4.0]
    assert cache.score("q", ["abc", "abcd"]).tolist() == [4.0, 5.0]
    assert model.calls == [["ab", "abc"], ["abcd"]] and cache.identity == "lengths@0"
    assert cache.score("other", ["ab"]).tolist() == [7.0]


def test_scores_kept_on_disk_serve_another_run_and_stay_per_model(tmp_path):
    first = _Lengths()
    ScoreCache(first, tmp_path).score("q", ["ab", "abc"])
    again = _Lengths()
    assert ScoreCache(again, tmp_path).score("q", ["abc", "ab", "x"]).tolist() == [4.0, 3.0, 2.0]
    assert again.calls == [["x"]]
    other = _Lengths()
    other.identity = "lengths@1"
    ScoreCache(other, tmp_path).score("q", ["ab"])
    assert other.calls == [["ab"]]  # another model's scores are not reused


def test_a_scores_line_cut_short_is_scored_again(tmp_path):
    ScoreCache(_Lengths(), tmp_path).score("q", ["ab"])
    scores = next(tmp_path.glob("*/scores.jsonl"))
    scores.write_text(scores.read_text() + '{"cut sh')
    again = _Lengths()
    assert ScoreCache(again, tmp_path).score("q", ["ab", "abc"]).tolist() == [3.0, 4.0]
    assert again.calls == [["abc"]]
