from __future__ import annotations

import numpy as np
import pytest

from rms_retrieval.stores.providers.embedding import (
    DEFAULT_MODEL_NAME,
    SentenceEncoder,
    encode_many,
    validated_query_vector,
    validated_vectors,
)
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
    np.testing.assert_allclose(encode_many(encoder, texts, progress=False), encoder.encode(texts), atol=1e-6)


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


def test_a_query_vector_is_checked_as_stored_vectors_are():
    identity = EmbeddingIdentity("custom", "0" * 16, 4)
    for bad, message in [([[1.0, 0.0, 0.0]], "dimension 4"), ([[np.nan, 0.0, 0.0, 1.0]], "NaN"),
                         ([[0.0] * 4], "zero vector"), ([[1.0, 0, 0, 0]] * 2, "expected 1 vectors")]:
        with pytest.raises(EmbeddingError, match=f"the query encoder custom gave an unusable vector .*{message}"):
            validated_query_vector(np.asarray(bad, dtype=np.float32), identity)
    assert validated_query_vector(np.array([[3.0, 0, 4.0, 0]]), identity).tolist() == pytest.approx([0.6, 0, 0.8, 0])
    unit = np.array([[0.6, 0, 0.8, 0]], dtype=np.float32)  # an encoder's unit vector is used bit for bit
    assert validated_query_vector(unit, identity).tobytes() == unit[0].tobytes()


def test_unreadable_model_path_is_an_embedding_error(tmp_path):
    with pytest.raises(EmbeddingError, match="model.safetensors"):
        SentenceEncoder(tmp_path).identity
    assert SentenceEncoder(tmp_path)._model_name == tmp_path.name


def test_a_vector_does_not_depend_on_the_texts_embedded_with_it(encoder):
    """Batch invariance (RFC-0005): in a padded batch, or on another thread count, the same text's
    floats differed in the last bits; the packaged encoder embeds each text alone (so does
    `SentenceEncoder`, on one torch thread: tests/test_onnx_encoder.py, where it is loaded anyway)."""
    texts = ["Caroline: I went to the LGBTQ support group yesterday and it was so powerful.",
             "Melanie: Wow!", "Caroline: Thanks, Mel. The transgender stories were so inspiring."]
    together = encoder.encode(texts)
    for position, text in enumerate(texts):
        assert np.array_equal(encoder.encode([text])[0], together[position])
    stored = encode_many(encoder, texts, progress=False)  # what a store's add computes
    assert np.array_equal(encode_many(encoder, texts[::-1], progress=False)[::-1], stored)
    assert all(np.array_equal(encode_many(encoder, [text], progress=False)[0], stored[i]) for i, text in enumerate(texts))
