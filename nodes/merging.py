"""Stage 3: candidate merging (RFC 5). Deduplicate by object id, keep every path's hit."""

from __future__ import annotations

from uuid import UUID

from hamilton.function_modifiers import inject

from rms_retrieval.nodes.candidate_generation import CANDIDATE_CHANNELS
from rms_retrieval.nodes.models import Candidate, CandidatePool, ChannelHit, ChannelResult, PathType
from rms_retrieval.stores.models import MemoryObject


@inject(channels=CANDIDATE_CHANNELS)
def merged_candidates(channels: list[ChannelResult], candidate_objects: dict[UUID, MemoryObject]) -> CandidatePool:
    """One candidate per object id with its `paths`, `path_count` and each path's rank and raw score."""
    # Keyed by the id's integer (hashed in C, not in UUID's Python code); integers sort as the
    # ids' strings do, both being the same 128 bits in fixed-width hex.
    hits: dict[int, dict[PathType, ChannelHit]] = {}
    ids: dict[int, UUID] = {}
    for channel in channels:
        for hit in channel.hits:
            key = hit.object_id.int
            if key not in hits:
                hits[key], ids[key] = {}, hit.object_id
            hits[key][hit.path] = hit
    found = ((candidate_objects.get(ids[key]), hits[key]) for key in sorted(hits))
    # An object deleted since the search is no candidate.
    candidates = tuple(Candidate(obj, paths) for obj, paths in found if obj is not None)
    return CandidatePool(
        candidates=candidates,
        backend_failures={c.path: c.failure for c in channels if c.failure},
        embedding_mismatch=any(c.embedding_mismatch for c in channels),
        paths_at_limit=tuple(c.path for c in channels if c.at_limit),
    )
