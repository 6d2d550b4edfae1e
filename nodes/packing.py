"""Stage 6: selection (min_score, limit, max_per_source, max_per_evidence) and token-budgeted packing (RFC 8).

Priority tiers: 1 pinned objects and ACTIVE tasks, 2 candidates found by two or more paths,
3 the rest by score (`packing.tier_order="score"` offers tiers 2 and 3 as one). Inside a tier
score order decides what fits when the budget is tight (RFC 8 names the signal-to-token ratio;
plain score order packed more evidence on LoCoMo, README, "Decisions where the RFC left room").
Tokens are cl100k_base and include each item's formatting, the newline between lines, the date
lines of the "dated_groups" format and, for count and list questions, the coverage warning that
heads the context.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import NamedTuple
from uuid import UUID

import numpy as np

from rms_retrieval.nodes.helpers.bundle_metadata import aggregation_coverage, retrieval_metadata
from rms_retrieval.nodes.helpers.formatting import format_item, group_header, reader_line, stated_day
from rms_retrieval.nodes.models import QueryAnalysis, QueryIntent, RetrievalRequest
from rms_retrieval.nodes.bundle import (BundleItem, CrossScopeHint,
                                        HistoricalCoverage, MemoryBundle, SessionContextLink)
from rms_retrieval.nodes.pools import (CandidatePool, FilteredPool, PathType, RankedCandidates, Selection, SessionLink,
                                       mask_paths, path_mask)
from rms_retrieval.nodes.scored_pool import ScoredPool
from rms_retrieval.nodes.settings import RetrievalSettings
from rms_retrieval.nodes.helpers.tokens import ITEM_TOKENS, count_joined_tokens, count_tokens, tokens_within
from rms_retrieval.stores.analysis.speakers import spoken_text
from rms_retrieval.stores.models import MemoryObject
from rms_retrieval.stores.protocols import RetrievalStore

SEPARATOR = "\n"
# RFC-0005 amendment: knowledge_at is an ingestion-time cutoff over the current pool, not a replay.
HISTORICAL_WARNING = (
    "[history] Only memories stored by the knowledge_at time are shown, but with their current "
    "state: later updates, supersessions and deletions are not undone."
)
HISTORICAL_LIMITATIONS = ("current_lifecycle_state", "current_derived_indexes", "unreplayed_mutations")
# RFC 3: temporal intent, or one of these words, selects the temporal context guidance. The text
# is ours (RFC-0006, which words it, is not among our specifications).
TEMPORAL_GUIDANCE = (
    "[time] Each memory is dated by when it was said. Resolve relative times in a memory "
    "(\"yesterday\", \"last week\") from that date, not from today."
)
_TEMPORAL_WORDS = re.compile(r"\b(when|before|after|last)\b", re.IGNORECASE)
COVERAGE_WARNING = (
    "[coverage] These memories come from a search, not a complete record: a count or list "
    "built from them may miss items or count one thing twice."
)


@dataclass(slots=True)
class _Item:  # local to one packing: `tokens` is filled in when the loop counts the item
    obj: MemoryObject
    score: float
    semantic_relevance: float
    mask: int
    path_count: int
    text: str
    tokens: int | None  # None until the packing loop needs it (the balanced order counts every item first)
    tier: int


# Why selection left a candidate out, by code; 0 keeps it.
_REASONS = (None, "min_score", "source_limit", "evidence_limit", "limit")
_KEPT, _MIN_SCORE, _SOURCE_LIMIT, _EVIDENCE_LIMIT, _LIMIT = range(len(_REASONS))


def _cap_groups(reason: np.ndarray, objects: tuple[MemoryObject, ...], cap: int,
                key: Callable[[MemoryObject], tuple | None], code: int) -> None:
    """In rank order, mark `code` on every still-kept candidate past the first `cap` of its group
    (`key(obj)`, None for no group)."""
    seen: dict[tuple, int] = {}
    for i in np.flatnonzero(reason == _KEPT).tolist():
        group = key(objects[i])
        if group is None:
            continue
        if seen.get(group, 0) >= cap:
            reason[i] = code
        else:
            seen[group] = seen.get(group, 0) + 1


def _evidence(obj: MemoryObject) -> tuple | None:
    return tuple(sorted(obj.evidence_refs)) if obj.evidence_refs else None


def _source(obj: MemoryObject) -> tuple | None:
    return (tuple(sorted(obj.evidence_refs)), obj.content) if obj.evidence_refs else None


def selected_candidates(
    ranked_candidates: RankedCandidates, merged_candidates: CandidatePool, request: RetrievalRequest
) -> Selection:
    """Apply min_score, max_per_source, max_per_evidence and limit in rank order; pinned objects and active tasks
    obey them too: an explicit caller bound wins (RFC amendment "explicit selection")."""
    pool = ranked_candidates.pool
    objects = pool.objects
    rank_fused = pool.rank_fused
    # RFC 7.2 (#150): the floor fails open only when the vector search failed or found a model
    # mismatch and no result has a cosine; a search that ran and found nothing keeps the floor.
    skipped = (request.min_score > 0 and rank_fused and PathType.VECTOR in merged_candidates.backend_failures
               and bool(np.isnan(pool.factors.semantic).all()))
    reason = np.zeros(len(pool), dtype=np.int8)
    if request.min_score > 0 and not skipped:
        value = pool.semantic_relevance if rank_fused else pool.score
        reason[value < request.min_score] = _MIN_SCORE
    if request.max_per_source:
        _cap_groups(reason, objects, request.max_per_source, _source, _SOURCE_LIMIT)
    if request.max_per_evidence:
        _cap_groups(reason, objects, request.max_per_evidence, _evidence, _EVIDENCE_LIMIT)
    if request.limit is not None:
        kept = reason == _KEPT
        reason[kept & (np.cumsum(kept) > request.limit)] = _LIMIT
    left_out = np.flatnonzero(reason)
    ids = [objects[i].id for i in left_out.tolist()]
    relevance = pool.semantic_relevance[left_out].tolist() if rank_fused else [None] * len(left_out)
    # ExclusionScore is a typed dict: a literal makes the same dictionary without a call.
    scores = dict(zip(ids, [{"score": score, "semantic_relevance": rel}
                            for score, rel in zip(pool.score[left_out].tolist(), relevance)]))
    codes = reason[left_out]
    if len(codes) and (codes == codes[0]).all():  # one reason (the limit, as a rule): no id hashed again
        excluded = dict.fromkeys(scores, _REASONS[codes[0]])
    else:
        excluded = dict(zip(ids, map(_REASONS.__getitem__, codes.tolist())))
    kept = pool.take(np.flatnonzero(reason == _KEPT)) if excluded else pool
    return Selection(pool=kept, excluded=excluded, min_score_skipped=skipped, excluded_scores=scores)


def _context_order(item: _Item) -> tuple:
    obj = item.obj
    return (obj.stated_time, obj.session_id or "", obj.session_seq or 0, obj.id.int)


def _context_lines(packed: list[_Item], item_format: str, warning: str | None = None) -> list[str]:
    """The lines of the packed text (joined by SEPARATOR), after the warning line if any. Under
    "dated_groups" items are chronological under one date line per day; otherwise they keep
    packing order."""
    lines: list[str] = [warning] if warning else []
    if item_format != "dated_groups":
        return lines + [item.text for item in packed]
    current = None
    for item in sorted(packed, key=_context_order):
        header = group_header(item.obj)
        if header != current:
            lines.append(header)
            current = header
        lines.append(item.text)
    return lines


def _tiering_paths(pool: ScoredPool, depth: int | None) -> np.ndarray:
    """The paths that count for tier 2: every primary path, or with `depth` a vector or lexical
    hit only within the first `depth` of the pool's hits of that path (the competition ranks the
    score trace records)."""
    if depth is None:
        return pool.path_count
    f = pool.factors
    deep = (f.semantic_rank > depth).astype(np.int64) + (f.lexical_rank > depth).astype(np.int64)
    return pool.path_count - deep


def _tier(path_count: int, obj: MemoryObject) -> int:
    if obj.is_pinned:
        return 1
    return 2 if path_count >= 2 else 3


PackingPriority = Callable[[_Item], tuple]


# Records that episode or evidence context routed (RFC 4.6, 4.7).
_ROUTED_BITS = path_mask([PathType.EPISODE_CONTEXT, PathType.EVIDENCE_CONTEXT])


def _tier_then_score(item: _Item) -> tuple:
    # RFC 4.6 and 4.7: routed episode and evidence records first in tier 2, before the ordinary
    # multi-path records; an id's integer sorts as its string.
    return (item.tier, not item.mask & _ROUTED_BITS, -item.score, item.obj.id.int)


# RFC 7.2, PRMEConfig's "balanced" order: the multi-path tier by score per token ** 0.25.
BALANCED_EXPONENT = 0.25


def _balanced(item: _Item) -> tuple:
    ordinary = item.tier == 2 and not item.mask & _ROUTED_BITS
    density = item.score / max(item.tokens, 1) ** BALANCED_EXPONENT if ordinary else item.score
    return (item.tier, not item.mask & _ROUTED_BITS, -density, -item.score, item.obj.id.int)


class _Order(NamedTuple):
    priority: PackingPriority
    reads_tokens: bool  # the priority reads items' tokens, so every item is counted before the sort


# packing.order; "adjacent" is score order with each session window then moved together (_windows_together).
_ORDERS: dict[str, _Order] = {"score": _Order(_tier_then_score, False), "balanced": _Order(_balanced, True),
                              "adjacent": _Order(_tier_then_score, False)}


def _windows_together(offered: list[_Item], links: Mapping[UUID, SessionLink]) -> list[_Item]:
    """RFC 4.5 "adjacent": each trigger's linked neighbours that share its tier move to it, and
    the window is offered as one block in session order (offset), where the trigger stood."""
    tier_of = {item.obj.id: item.tier for item in offered}
    window: dict[UUID, list[_Item]] = {}
    for item in offered:
        link = links.get(item.obj.id)
        if link is not None and tier_of.get(link.trigger) == item.tier:
            window.setdefault(link.trigger, []).append(item)
    moved = {item.obj.id for members in window.values() for item in members}
    ordered: list[_Item] = []
    for item in offered:
        if item.obj.id in moved:
            continue
        members = window.get(item.obj.id)
        if not members:
            ordered.append(item)
            continue
        block = [(links[m.obj.id].offset, m) for m in members] + [(0, item)]
        ordered += [member for _, member in sorted(block, key=lambda pair: pair[0])]
    return ordered


def _finite(value: float | None) -> float | None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return float(value)


def stored_item_tokens(
    selected_candidates: Selection, store_snapshot: RetrievalStore, request: RetrievalRequest, settings: RetrievalSettings
) -> dict[int, int]:
    """The tokens of the selected items' lines that the count cache does not hold yet, by id
    integer: the counts the store keeps of their spoken texts (stores/analysis/text_tokens.py),
    which are the lines of the `dated_groups` and `plain` formats, so a namespace's first query
    counts no long turn again. None for `reader` lines, or for items whose store keeps no count
    (packing counts them)."""
    if settings.packing.item_format == "reader":
        return {}
    objects = selected_candidates.pool.objects
    unknown = ITEM_TOKENS.missing([spoken_text(obj) for obj in objects])
    if not unknown:
        return {}
    kept = store_snapshot.text_tokens([objects[position].id for position in unknown], request.namespaces)
    return {object_id.int: tokens for object_id, tokens in kept.items()}


def packed_bundle(
    selected_candidates: Selection,
    ranked_candidates: RankedCandidates,
    filtered_candidates: FilteredPool,
    merged_candidates: CandidatePool,
    query_analysis: QueryAnalysis,
    request: RetrievalRequest,
    settings: RetrievalSettings,
    cross_scope_hints: tuple[CrossScopeHint, ...] | None = None,
    stored_item_tokens: Mapping[int, int] | None = None,
) -> MemoryBundle:
    """The Memory Bundle: tiers, then `packing.order` inside a tier, within the cl100k_base token budget."""
    order = _ORDERS[settings.packing.order]
    return _packed_bundle(selected_candidates, ranked_candidates, filtered_candidates, merged_candidates,
                          query_analysis, request, settings, order.priority, cross_scope_hints,
                          priority_reads_tokens=order.reads_tokens, known_tokens=stored_item_tokens)


def _packed_bundle(
    selected_candidates: Selection,
    ranked_candidates: RankedCandidates,
    filtered_candidates: FilteredPool,
    merged_candidates: CandidatePool,
    query_analysis: QueryAnalysis,
    request: RetrievalRequest,
    settings: RetrievalSettings,
    priority: PackingPriority,
    cross_scope_hints: tuple[CrossScopeHint, ...] | None = None,
    *,
    priority_reads_tokens: bool,
    known_tokens: Mapping[int, int] | None = None,
) -> MemoryBundle:
    """`packed_bundle`, the items offered in `priority` order (the benchmark's arms pass others).
    Where the priority reads items' tokens every item is counted first; else an item is counted
    only when the packing loop reaches it, and not at all when `least_tokens` shows it cannot fit."""
    pool = selected_candidates.pool
    rank_fused = pool.rank_fused
    item_format = settings.packing.item_format
    items = []
    known_tokens = known_tokens or {}
    tiering = _tiering_paths(pool, settings.packing.tier_path_depth)
    for obj, score, relevance, mask, path_count, strong in zip(
        pool.objects, pool.score.tolist(), pool.semantic_relevance.tolist(), pool.path_mask.tolist(),
        pool.path_count.tolist(), tiering.tolist(),
    ):
        text = format_item(obj, item_format)
        tokens = known_tokens.get(obj.id.int)
        if tokens is not None:
            ITEM_TOKENS.remember(text, tokens)
        elif priority_reads_tokens:
            tokens = count_tokens(text)
        items.append(_Item(obj, score, relevance, mask, path_count, text, tokens, _tier(strong, obj)))
    if ranked_candidates.episode_anchors or ranked_candidates.evidence_anchors:  # RFC 4.6, 4.7: after tier 1
        items = [dataclasses.replace(item, tier=2) if item.tier > 2 and item.mask & _ROUTED_BITS else item
                 for item in items]
    links = ranked_candidates.session_links
    if links:  # RFC 8 item 2: a linked session neighbour of a tier 1 or 2 trigger is in tier 2
        tier_of = {item.obj.id: item.tier for item in items}
        items = [dataclasses.replace(item, tier=2) if item.tier > 2 and item.obj.id in links
                 and tier_of.get(links[item.obj.id].trigger, 3) <= 2 else item for item in items]
    budget = request.token_budget
    separator = count_tokens(SEPARATOR)
    # A count or list question's bundle starts with the coverage warning, a knowledge_at one with
    # the history warning; when the warning cannot fit, nothing unqualified is packed.
    warnings = [*([HISTORICAL_WARNING] if request.knowledge_at is not None else []),
                *([COVERAGE_WARNING] if query_analysis.aggregation is not None else [])]
    warning = "\n".join(warnings) if warnings else None
    warning_fits = warning is None or count_tokens(warning) <= budget
    if warning_fits and settings.packing.temporal_guidance and (
            query_analysis.intent is QueryIntent.TEMPORAL or _TEMPORAL_WORDS.search(request.query)):
        guided = "\n".join([*warnings, TEMPORAL_GUIDANCE])  # only where it fits: it qualifies nothing
        if count_tokens(guided) <= budget:
            warning = guided
    used = count_tokens(warning) if warning and warning_fits else 0
    headers: set[str] = set()
    packed: list[_Item] = []
    if settings.packing.tier_order == "score":  # tiers 2 and 3 offered as one; items keep their tiers
        offered = sorted(items, key=lambda item: priority(dataclasses.replace(item, tier=2) if item.tier == 3 else item))
    else:
        offered = sorted(items, key=priority)
    if settings.packing.order == "adjacent" and links:
        offered = _windows_together(offered, links)
    # packing.fold_repeated_text, "reader" only: a memory whose text a packed line already holds
    # adds its day to that line instead of a line of its own (folded: (item, owner id, tokens)).
    fold = settings.packing.fold_repeated_text and item_format == "reader"
    lines: dict[str, tuple[int, list[str]]] = {}
    folded: list[tuple[_Item, UUID, int]] = []
    for item in offered if warning_fits else ():
        if fold and (text := spoken_text(item.obj)) in lines:
            row, days = lines[text]
            day = stated_day(item.obj)
            owner = packed[row]
            joined = owner if day in days else dataclasses.replace(owner, text=reader_line([*days, day], text))
            extra = count_tokens(joined.text) - owner.tokens if joined is not owner else 0
            if used + extra <= budget:
                packed[row] = dataclasses.replace(joined, tokens=owner.tokens + extra)
                if joined is not owner:
                    days.append(day)
                folded.append((item, owner.obj.id, extra))
                used += extra
            continue
        joint = separator if packed or warning else 0
        tokens = item.tokens if item.tokens is not None else tokens_within(item.text, budget - used - joint)
        if tokens is None:  # surely more tokens than the room left
            continue
        item.tokens = tokens
        cost = tokens + joint
        header = group_header(item.obj) if item_format == "dated_groups" else None
        if header is not None and header not in headers:
            cost += count_tokens(header) + separator
        if used + cost <= budget:
            if fold:
                lines[spoken_text(item.obj)] = (len(packed), [stated_day(item.obj)])
            packed.append(item)
            used += cost
            if header is not None:
                headers.add(header)
    lines = _context_lines(packed, item_format, warning if warning_fits else None)
    context_tokens = count_joined_tokens(lines, SEPARATOR)  # from the lines' cached counts
    while packed and context_tokens > budget:  # BPE merges across lines never add tokens in
        packed.pop()  # practice; this guard keeps the budget a hard limit if they ever do
        lines = _context_lines(packed, item_format, warning)
        context_tokens = count_joined_tokens(lines, SEPARATOR)
    context = SEPARATOR.join(lines)
    # Keyed by the id's integer, which hashes in C (a UUID hashes through Python code).
    owners = {item.obj.id.int: item for item in packed}
    joined = {item.obj.id.int: (owners[into.int], into, tokens) for item, into, tokens in folded if into.int in owners}
    # (item, its line, its tokens, the item it was folded into) in packing order
    placed = [(item, item.text, item.tokens, None) for item in packed] if not joined else [
        (owners[key], owners[key].text, owners[key].tokens, None) if key in owners
        else (item, joined[key][0].text, joined[key][2], joined[key][1])
        for item in offered if (key := item.obj.id.int) in owners or key in joined]
    budget_cuts = tuple(item.obj.id for item in offered
                        if item.obj.id.int not in owners and item.obj.id.int not in joined)
    bundle_items = tuple(
        BundleItem(
            id=item.obj.id,
            namespace=item.obj.namespace,
            node_type=str(item.obj.node_type),
            content=item.obj.content,
            text=text,
            score=item.score,
            semantic_relevance=_finite(item.semantic_relevance) if rank_fused else None,
            paths=mask_paths(item.mask),
            path_count=item.path_count,
            tier=item.tier,
            tokens=tokens,
            event_time=item.obj.event_time,
            source_ref=item.obj.source_ref,
            session_context_link=SessionContextLink(trigger=link.trigger, offset=link.offset)
            if links and (link := links.get(item.obj.id)) is not None else None,
            folded_into=into,
        )
        for item, text, tokens, into in placed
    )
    return MemoryBundle(
        query=request.query,
        namespaces=request.namespaces,
        reference_time=request.reference_time,
        token_budget=budget,
        tokens_used=context_tokens,
        items=bundle_items,
        context=context,
        retrieval_metadata=retrieval_metadata(
            selected_candidates, ranked_candidates, filtered_candidates, merged_candidates, query_analysis,
            settings, budget_cuts=budget_cuts,
            coverage=aggregation_coverage(
                selected_candidates, merged_candidates, query_analysis, len(placed),
                len(budget_cuts), warning_fits,
            ),
            historical=None if request.knowledge_at is None else HistoricalCoverage(
                knowledge_at=request.knowledge_at, exact_snapshot=False, limitations=HISTORICAL_LIMITATIONS,
                warning_fits=warning_fits,
            ),
        ),
        cross_scope_hints=cross_scope_hints,
    )
