"""Stage 4: epistemic filtering (RFC 6), before scoring, plus the explicit time filters (RFC 3).

The rules live in `nodes/helpers/eligibility.py`; this stage applies them to the merged pool and keeps
every removal with its reason.
"""

from __future__ import annotations

from rms_retrieval.nodes.helpers.eligibility import exclusion_reason
from rms_retrieval.nodes.models import RetrievalRequest
from rms_retrieval.nodes.pools import Candidate, CandidatePool, CrossScopePass, CrossScopePool, FilteredPool
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


def cross_scope_pool(
    cross_scope_candidates: CrossScopePass, request: RetrievalRequest, settings: RetrievalSettings
) -> CrossScopePool:
    """The cross-scope hints that may be scored: the same epistemic and time rules, within their own namespaces."""
    scope = request.cross_scope_namespaces
    kept, removed, excluded = [], [], {}
    found = cross_scope_candidates.result
    for hit in found.hits:
        obj = found.objects.get(hit.object_id)
        if obj is None:  # gone between the search and the read
            continue
        candidate = Candidate(obj, {hit.path: hit})
        reason = exclusion_reason(obj, request, settings, scope)
        if reason is None:
            kept.append(candidate)
        else:
            removed.append(candidate)
            excluded[obj.id] = reason
    return CrossScopePool(FilteredPool(candidates=tuple(sorted(kept, key=lambda c: c.object_id.int)),
                                       excluded=excluded, removed=tuple(removed)))
