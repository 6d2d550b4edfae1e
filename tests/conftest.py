"""Shared fixtures. The sentence encoder takes seconds to load, so one serves the whole session."""

from __future__ import annotations

import pytest

from stores.embedding import SentenceEncoder


@pytest.fixture(scope="session")
def encoder() -> SentenceEncoder:
    """The packaged MiniLM encoder, loaded once."""
    return SentenceEncoder()
