"""What the candidate paths share: a failing backend empties its path; vector hits carry rank and floored cosine."""

from __future__ import annotations

import logging
import math
from uuid import uuid4

import pytest

from rms_retrieval.nodes.helpers.channels import guarded, vector_hits
from rms_retrieval.nodes.pools import ChannelResult, PathType
from rms_retrieval.stores.errors import EmbeddingMismatchError, StoreError
from rms_retrieval.stores.protocols import VectorHit


def test_a_backend_error_empties_the_path_and_names_the_error(caplog):
    def broken() -> ChannelResult:
        raise OSError("segment unreadable")

    with caplog.at_level(logging.WARNING):
        result = guarded(PathType.LEXICAL, 50, broken)
    assert (result.path, result.limit, result.hits) == (PathType.LEXICAL, 50, ())
    assert result.failure == "backend_error: OSError: segment unreadable"
    assert "candidate path failed" in caplog.text


def test_a_model_mismatch_raised_on_purpose_goes_through_and_a_good_search_is_returned_as_is():
    def strict() -> ChannelResult:
        raise EmbeddingMismatchError("EMBEDDING_VERSION_MISMATCH")

    with pytest.raises(EmbeddingMismatchError):
        guarded(PathType.VECTOR, 10, strict)

    def damaged() -> ChannelResult:
        raise StoreError("segments/g1/index.npz is damaged; set it aside with `rms check --repair`")

    with pytest.raises(StoreError, match="damaged"):  # a damaged store is repaired, not searched around
        guarded(PathType.LEXICAL, 10, damaged)
    found = ChannelResult(path=PathType.VECTOR, limit=10)
    assert guarded(PathType.VECTOR, 10, lambda: found) is found


def test_vector_hits_rank_from_one_and_floor_the_relevance_at_zero():
    ids = [uuid4(), uuid4()]
    hits = vector_hits([VectorHit(ids[0], 0.7), VectorHit(ids[1], -0.1)])
    assert [(h.object_id, h.path, h.rank, h.raw_score, h.score) for h in hits] == [
        (ids[0], PathType.VECTOR, 1, 0.7, 0.7), (ids[1], PathType.VECTOR, 2, -0.1, 0.0)]
    assert vector_hits([]) == ()
    # The floor is max(cosine, 0.0): zero keeps its sign, as max keeps its first argument among equals.
    signed = vector_hits([VectorHit(ids[0], 0.0), VectorHit(ids[1], -0.0)])
    assert [math.copysign(1.0, h.score) for h in signed] == [math.copysign(1.0, max(c, 0.0)) for c in (0.0, -0.0)]
    assert all(type(h).__name__ == "ChannelHit" and h.detail == {} for h in signed)
