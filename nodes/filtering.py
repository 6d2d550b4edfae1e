"""Stage 4: epistemic filtering (RFC 6), before scoring, plus the explicit time filters (RFC 3).

The rules live in `nodes/helpers/eligibility.py`; this stage applies them to the merged pool and keeps
every removal with its reason.
"""

from __future__ import annotations

from rms_retrieval.nodes.helpers.eligibility import exclusion_reason
from rms_retrieval.nodes.models import RetrievalRequest
from rms_retrieval.nodes.pools import CandidatePool, FilteredPool
from rms_retrieval.nodes.settings import RetrievalSettings


def filtered_candidates(
    merged_candidates: CandidatePool, request: RetrievalRequest, settings: RetrievalSettings
) -> FilteredPool:
    """The candidates that may be scored, the removed ones, and every removed object id with its reason."""
    kept, removed = [], []
    excluded = {}
    for candidate in merged_candidates.candidates:
        reason = exclusion_reason(candidate.object, request, settings)
        if reason is None:
            kept.append(candidate)
        else:
            removed.append(candidate)
            excluded[candidate.object_id] = reason
    return FilteredPool(candidates=tuple(kept), excluded=excluded, removed=tuple(removed))
