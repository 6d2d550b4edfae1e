"""Stage 3: candidate merging (RFC 5). Deduplicate by object id, keep every path's hit."""

from __future__ import annotations

from uuid import UUID

from hamilton.function_modifiers import config, inject

from rms_retrieval.nodes.candidate_generation import CANDIDATE_CHANNELS
from rms_retrieval.nodes.pools import (AlternatePasses, CandidatePool, ChannelResult, PathType, PoolRows,
                                       TextPathCandidates, in_path_order)
from rms_retrieval.nodes.reformulation import merge_alternates
from rms_retrieval.nodes.settings import RetrievalSettings
from rms_retrieval.stores.models import MemoryObject


@config.when(reformulation="off")
@inject(channels=CANDIDATE_CHANNELS)
def merged_candidates__primary(
    text_path_candidates: TextPathCandidates, channels: list[ChannelResult], candidate_objects: dict[UUID, MemoryObject]
) -> CandidatePool:
    """One candidate per object id with its `paths`, `path_count` and each path's rank and raw score."""
    return _merged(text_path_candidates, channels, candidate_objects)


@config.when(reformulation="on")
@inject(channels=CANDIDATE_CHANNELS)
def merged_candidates__reformulated(
    text_path_candidates: TextPathCandidates,
    channels: list[ChannelResult],
    candidate_objects: dict[UUID, MemoryObject],
    alternate_candidates: AlternatePasses,
    settings: RetrievalSettings,
) -> CandidatePool:
    """The question's own candidates, with what the alternative questions found merged in under
    `reformulation.merge_policy` (nodes/reformulation.py)."""
    return merge_alternates(_merged(text_path_candidates, channels, candidate_objects), alternate_candidates,
                            settings.reformulation.merge_policy)


def _merged(text_paths: TextPathCandidates, channels: list[ChannelResult],
            candidate_objects: dict[UUID, MemoryObject]) -> CandidatePool:
    """The text paths' hits, merged already (`text_path_candidates`), with the vector path's added,
    as columns (`PoolRows`): each candidate's hits in `PathType` order, the vector hit first."""
    # Keyed by the id's integer (hashed in C, not in UUID's Python code); integers sort as the
    # ids' strings do, both being the same 128 bits in fixed-width hex.
    channels = in_path_order(channels)
    vector = PathType.VECTOR  # bound once: an enum member read off its class costs a Python call (3.11)
    vector_hits = {hit.object_id.int: hit for channel in channels if channel.path is vector for hit in channel.hits}
    objects = {obj.id.int: obj for obj in candidate_objects.values()}
    # An object deleted since the search is no candidate.
    keys = [key for key in sorted(text_paths.hits.keys() | vector_hits.keys()) if key in objects]
    candidates = PoolRows(keys, tuple(map(objects.__getitem__, keys)), vector_hits, text_paths.hits)
    return CandidatePool(
        candidates=candidates,
        backend_failures={c.path: c.failure for c in channels if c.failure},
        embedding_mismatch=any(c.embedding_mismatch for c in channels),
        paths_at_limit=tuple(c.path for c in channels if c.at_limit),
        merged_from=text_paths,
    )
