"""Stage 4: epistemic filtering (RFC 6), before scoring, plus the explicit time filters (RFC 3).

The rules live in `nodes/helpers/eligibility.py`; this stage applies them to the merged pool and keeps
every removal with its reason. The text paths' objects are decided while the question's embedding
is made (`text_path_exclusions`), so only the vector path's other objects are decided after it.
"""

from __future__ import annotations

from rms_retrieval.nodes.helpers.eligibility import exclusion_reason
from rms_retrieval.nodes.models import RetrievalRequest
from rms_retrieval.nodes.pools import CandidatePool, FilteredPool, PoolRows, TextPathCandidates, TextPathExclusions
from rms_retrieval.nodes.settings import RetrievalSettings


def text_path_exclusions(
    text_path_candidates: TextPathCandidates, request: RetrievalRequest, settings: RetrievalSettings
) -> TextPathExclusions:
    """Each object the text paths found with its exclusion reason (None: kept)."""
    return TextPathExclusions({obj.id.int: (obj, exclusion_reason(obj, request, settings))
                               for obj in text_path_candidates.objects.values()})


def filtered_candidates(
    merged_candidates: CandidatePool,
    request: RetrievalRequest,
    settings: RetrievalSettings,
    text_path_exclusions: TextPathExclusions | None = None,
) -> FilteredPool:
    """The candidates that may be scored, the removed ones, and every removed object id with its reason."""
    decided = text_path_exclusions.reasons if text_path_exclusions is not None else {}
    rows = PoolRows.of(merged_candidates.candidates)
    kept, removed = [], []
    excluded = {}
    for row, (key, obj) in enumerate(zip(rows.keys, rows.objects)):
        found = decided.get(key)  # decided already, for this very object
        reason = found[1] if found is not None and found[0] is obj else exclusion_reason(obj, request, settings)
        if reason is None:
            kept.append(row)
        else:
            removed.append(row)
            excluded[obj.id] = reason
    return FilteredPool(candidates=rows.taking(kept), excluded=excluded, removed=rows.taking(removed),
                        merged_from=merged_candidates.merged_from)
