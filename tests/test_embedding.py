from __future__ import annotations

import numpy as np
import pytest

from rms_retrieval.stores.embedding import DEFAULT_MODEL_NAME, SentenceEncoder, encode_many, validated_vectors
from rms_retrieval.stores.errors import EmbeddingError
from rms_retrieval.stores.protocols import EmbeddingIdentity, QueryEncoder


def test_identity_names_the_packaged_model(encoder):
    identity = encoder.identity
    assert identity.model_name == DEFAULT_MODEL_NAME
    assert identity.dimension == 384
    assert len(identity.model_hash) == 16 and int(identity.model_hash, 16) >= 0
    assert SentenceEncoder().identity == identity  # hashing is deterministic and needs no model load
    assert isinstance(encoder, QueryEncoder)


def test_encode_returns_float32_unit_vectors(encoder):
    vectors = encoder.encode(["Caroline paints", "Melanie goes camping", "Caroline paints"])
    assert vectors.dtype == np.float32 and vectors.shape == (3, 384)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(vectors[0], vectors[2], atol=1e-6)
    assert encoder.encode([]).shape == (0, 384)


def test_related_texts_are_closer_than_unrelated(encoder):
    query, near, far = encoder.encode(["a painting class", "she took an art class", "the stock market fell"])
    assert float(query @ near) > float(query @ far)


def test_encode_many_matches_encode(encoder):
    texts = [f"memory number {i}" for i in range(5)]
    np.testing.assert_allclose(encoder.encode_many(texts, progress=False), encoder.encode(texts), atol=1e-6)


@pytest.mark.parametrize(
    ("vectors", "message"),
    [
        (np.ones((1, 4), dtype=np.float32), "expected 2 vectors"),
        (np.ones((2, 3), dtype=np.float32), "dimension 4"),
        (np.array([[1, 0, 0, np.nan], [1, 0, 0, 0]], dtype=np.float32), "NaN"),
        (np.array([[0, 0, 0, 0], [1, 0, 0, 0]], dtype=np.float32), "zero vector"),
    ],
)
def test_malformed_vectors_are_rejected(vectors, message):
    with pytest.raises(EmbeddingError, match=message):
        validated_vectors(vectors, 2, 4)


def test_encode_many_rejects_a_misbehaving_encoder():
    class OneShort:
        identity = EmbeddingIdentity("fake", "0" * 16, 4)

        def encode(self, texts):
            return np.ones((len(texts) - 1, 4), dtype=np.float32)

    with pytest.raises(EmbeddingError, match="expected 3 vectors"):
        encode_many(OneShort(), ["a", "b", "c"], progress=False)


def test_unreadable_model_path_is_an_embedding_error(tmp_path):
    with pytest.raises(EmbeddingError, match="model.safetensors"):
        SentenceEncoder(tmp_path).identity
    assert SentenceEncoder(tmp_path)._model_name == tmp_path.name


def test_token_counts_include_special_tokens_and_stop_at_the_model_maximum(encoder):
    assert encoder.token_counts([]) == []
    assert encoder.token_counts(["hello there", "a much longer sentence about things", "x " * 1000]) == [4, 8, 256]
