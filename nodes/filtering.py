"""Stage 4: epistemic filtering (RFC 6), before scoring, plus the explicit time filters (RFC 3).

The rules live in `nodes/helpers/eligibility.py`; this stage applies them to the merged pool and keeps
every removal with its reason. The text paths' objects are decided while the question's embedding
is made (`text_path_exclusions`), so only the vector path's other objects are decided after it.
"""

from __future__ import annotations

from rms_retrieval.nodes.helpers.eligibility import exclusion_reasons
from rms_retrieval.nodes.helpers.object_inputs import visible_everywhere
from rms_retrieval.nodes.models import RetrievalRequest
from rms_retrieval.nodes.pools import CandidatePool, FilteredPool, PoolRows, TextPathCandidates, TextPathExclusions
from rms_retrieval.nodes.settings import RetrievalSettings


def text_path_exclusions(
    text_path_candidates: TextPathCandidates, request: RetrievalRequest, settings: RetrievalSettings
) -> TextPathExclusions:
    """Each object the text paths found with its exclusion reason (None: kept)."""
    objects = list(text_path_candidates.objects.values())
    reasons = exclusion_reasons(objects, visible_everywhere, request, settings)
    return TextPathExclusions({obj.id.int: (obj, reason) for obj, reason in zip(objects, reasons)})


def filtered_candidates(
    merged_candidates: CandidatePool,
    request: RetrievalRequest,
    settings: RetrievalSettings,
    text_path_exclusions: TextPathExclusions | None = None,
) -> FilteredPool:
    """The candidates that may be scored, the removed ones, and every removed object id with its reason."""
    decided = text_path_exclusions.reasons if text_path_exclusions is not None else {}
    rows = PoolRows.of(merged_candidates.candidates)
    objects = rows.objects
    # Decided already where the text paths found this very object; the vector path's others here.
    found = [entry if entry is not None and entry[0] is obj else None
             for entry, obj in zip(map(decided.get, rows.keys), objects)]
    new = [obj for entry, obj in zip(found, objects) if entry is None]
    made = iter(exclusion_reasons(new, visible_everywhere, request, settings))
    kept, removed = [], []
    excluded = {}
    for row, (entry, obj) in enumerate(zip(found, objects)):
        reason = next(made) if entry is None else entry[1]
        if reason is None:
            kept.append(row)
        else:
            removed.append(row)
            excluded[obj.id] = reason
    return FilteredPool(candidates=rows.taking(kept), excluded=excluded, removed=rows.taking(removed),
                        merged_from=merged_candidates.merged_from)
