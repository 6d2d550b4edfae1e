"""Stage 3: candidate merging (RFC 5). Deduplicate by object id, keep every path's hit."""

from __future__ import annotations

from uuid import UUID

from rms_retrieval.nodes.models import Candidate, CandidatePool, ChannelHit, ChannelResult, PathType
from rms_retrieval.stores.models import MemoryObject


def merged_candidates(
    vector_candidates: ChannelResult,
    lexical_candidates: ChannelResult,
    graph_candidates: ChannelResult,
    pinned_candidates: ChannelResult,
    keyword_scan_candidates: ChannelResult,
    candidate_objects: dict[UUID, MemoryObject],
) -> CandidatePool:
    """One candidate per object id with its `paths`, `path_count` and each path's rank and raw score."""
    channels = (vector_candidates, lexical_candidates, graph_candidates, pinned_candidates, keyword_scan_candidates)
    hits: dict[UUID, dict[PathType, ChannelHit]] = {}
    for channel in channels:
        for hit in channel.hits:
            hits.setdefault(hit.object_id, {})[hit.path] = hit
    candidates = tuple(
        Candidate(object=candidate_objects[oid], hits=hits[oid])
        for oid in sorted(hits, key=str)
        if oid in candidate_objects  # an object deleted since the search is no candidate
    )
    return CandidatePool(
        candidates=candidates,
        backend_failures={c.path: c.failure for c in channels if c.failure},
        embedding_mismatch=any(c.embedding_mismatch for c in channels),
        paths_at_limit=tuple(c.path for c in channels if c.at_limit),
    )
