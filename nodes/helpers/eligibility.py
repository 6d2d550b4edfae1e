"""Which memories a request may see: the epistemic and time rules of RFC 3 and RFC 6.

DEFAULT mode removes DEPRECATED, HYPOTHETICAL, UNVERIFIED below the namespace threshold and
anything not ACTIVE. EXPLICIT mode (the caller asked for uncertain memories by name) keeps
UNVERIFIED, HYPOTHETICAL and TENTATIVE but still removes DEPRECATED, ARCHIVED, SUPERSEDED and
DELETED. AUDIT mode keeps everything except DELETED. Explicit `time_from`/`time_to` filter
validity windows (ENTITY and PREFERENCE objects are exempt); `event_time_from`/`event_time_to`
filter episode dates, falling back to ingestion time, without that exemption; `knowledge_at`
leaves out what was stored after it (`created_at`). Outside AUDIT
mode an ENTITY whose content is only its name (a speaker, a name spotted at ingestion) is left
out as `bare_entity`: it serves the graph walk but would spend budget saying nothing.

A plain module, not a stage: `filtered_candidates` and session context both apply it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from rms_retrieval.nodes.models import RetrievalMode, RetrievalRequest
from rms_retrieval.nodes.settings import FilterSettings, RetrievalSettings
from rms_retrieval.stores.models import EpistemicType, MemoryObject, NodeType
from rms_retrieval.stores.visibility import MODE_VISIBILITY

_VALIDITY_EXEMPT = frozenset({NodeType.ENTITY, NodeType.PREFERENCE})


def _epistemic_reason(obj: MemoryObject, mode: RetrievalMode, filtering: FilterSettings) -> str | None:
    if mode is not RetrievalMode.AUDIT and obj.is_bare_entity:
        return "bare_entity"
    rule = MODE_VISIBILITY[mode]
    if obj.epistemic_type in rule.dropped_epistemic_types:
        return str(obj.epistemic_type)
    if (
        rule.drops_unverified_below_threshold
        and obj.epistemic_type is EpistemicType.UNVERIFIED
        and obj.confidence < filtering.threshold_for(obj.namespace)
    ):
        return "UNVERIFIED_BELOW_THRESHOLD"
    if obj.lifecycle_state not in rule.kept_lifecycles:
        return f"lifecycle:{obj.lifecycle_state}"
    return None


def _time_reason(obj: MemoryObject, request: RetrievalRequest) -> str | None:
    if request.knowledge_at is not None and obj.created_at > request.knowledge_at:
        return "ingested_after_knowledge_at"
    if (request.time_from or request.time_to) and obj.node_type not in _VALIDITY_EXEMPT:
        if request.time_to and obj.valid_from and obj.valid_from > request.time_to:
            return "valid_after_time_to"
        if request.time_from and obj.valid_to and obj.valid_to < request.time_from:
            return "valid_before_time_from"
    if request.event_time_from is None and request.event_time_to is None:
        return None
    when = obj.stated_time
    if request.event_time_from and when < request.event_time_from:
        return "event_before_event_time_from"
    if request.event_time_to and when > request.event_time_to:
        return "event_after_event_time_to"
    return None


# What some mode drops, and what every mode keeps (stores/visibility.py): `visible_in_every_mode`.
_DROPPED_SOMEWHERE = frozenset().union(*(rule.dropped_epistemic_types for rule in MODE_VISIBILITY.values()))
_KEPT_EVERYWHERE = frozenset.intersection(*(rule.kept_lifecycles for rule in MODE_VISIBILITY.values()))


def visible_in_every_mode(obj: MemoryObject) -> bool:
    """Whether no retrieval mode's epistemic rule (`_epistemic_reason`) removes `obj`, whatever the
    namespace thresholds (an UNVERIFIED memory depends on them, so it never is): for such a memory
    only the namespace and time rules decide (`exclusion_reasons`)."""
    return (obj.epistemic_type is not EpistemicType.UNVERIFIED and obj.epistemic_type not in _DROPPED_SOMEWHERE
            and obj.lifecycle_state in _KEPT_EVERYWHERE and not obj.is_bare_entity)


def filters_by_time(request: RetrievalRequest) -> bool:
    """Whether any of the request's time rules (`knowledge_at`, validity, event time) can remove a memory."""
    return (request.knowledge_at is not None or request.time_from is not None or request.time_to is not None
            or request.event_time_from is not None or request.event_time_to is not None)


def exclusion_reasons(objects: Sequence[MemoryObject], visible: Callable[[Sequence[MemoryObject]], Sequence[bool]],
                      request: RetrievalRequest, settings: RetrievalSettings) -> list[str | None]:
    """`exclusion_reason` of each object, where `visible` tells which of them are
    `visible_in_every_mode` (asked only when the request has no time rule): such an object in the
    request's namespaces is kept at once then."""
    if filters_by_time(request):
        return [exclusion_reason(obj, request, settings) for obj in objects]
    namespaces = request.namespaces
    return [None if clear and obj.namespace in namespaces else exclusion_reason(obj, request, settings)
            for clear, obj in zip(visible(objects), objects)]


def exclusion_reason(obj: MemoryObject, request: RetrievalRequest, settings: RetrievalSettings,
                     scope: tuple[str, ...] | None = None) -> str | None:
    """Why `obj` must not reach scoring for this request, or None. Session context reuses it, and
    cross-scope hints with `scope` their own namespaces (the request's otherwise)."""
    if obj.namespace not in (request.namespaces if scope is None else scope):
        return "namespace_out_of_scope"
    return _epistemic_reason(obj, request.retrieval_mode, settings.filtering) or _time_reason(obj, request)
