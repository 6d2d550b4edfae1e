"""What every candidate path shares: a backend failure empties one path instead of failing the
request (RFC 4.2), and vector hits become channel hits with their rank and floored cosine."""

from __future__ import annotations

import logging
from collections.abc import Callable
from itertools import repeat

from rms_retrieval.nodes.pools import ChannelHit, ChannelResult, PathType
from rms_retrieval.stores.errors import StoreError
from rms_retrieval.stores.protocols import VectorHit

logger = logging.getLogger(__name__)


def guarded(path: PathType, limit: int, search: Callable[[], ChannelResult]) -> ChannelResult:
    """`search()`, or an empty `path` result naming the backend error it raised. A store's own error
    goes through: a damaged file (its message names the file and the repair), or a model mismatch
    raised on purpose (`on_embedding_mismatch="error"`)."""
    try:
        return search()
    except StoreError:
        raise
    except Exception as error:  # a failing backend must not take the other paths down (RFC 4.2)
        logger.warning("%s candidate path failed: %s", path, error)
        return ChannelResult(path=path, limit=limit, failure=f"backend_error: {type(error).__name__}: {error}")


def vector_hits(found: list[VectorHit]) -> tuple[ChannelHit, ...]:
    """Vector search results as channel hits: rank from 1, the cosine as raw score, floored at 0 as relevance."""
    if not found:
        return ()
    ids, cosines = zip(*found)
    # max(cosine, 0.0), as a comparison: a cosine of -0.0 (or NaN) stays as it is
    floored = [0.0 if cosine < 0.0 else cosine for cosine in cosines]
    return tuple(map(ChannelHit, ids, repeat(PathType.VECTOR), range(1, len(found) + 1), cosines, floored))
