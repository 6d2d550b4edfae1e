"""Score lineage: how one object's place in a bundle was decided, or where it dropped out.

The steps come from the driver's lineage, not from a list kept here. Every node upstream of
`packed_bundle` whose return type has a role in `node_types.NODE_VALUE_TYPES` (the bundle, the
selection, the ranked, the reranked and the scored pool, the filtered and the merged pool, each candidate
path, the limits, the query analysis) gives one step, named after its node, in reverse topological order, with the nodes
it reads. A renamed node or a new candidate path shows up without a change here.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any
from uuid import UUID

import numpy as np
import pandas as pd

from rms_retrieval.dataflows.frames import scored_frame
from rms_retrieval.dataflows.node_types import Lineage
from rms_retrieval.dataflows.pipeline import build_driver, pipeline_lineage
from rms_retrieval.dataflows.retrieval import retrieve
from rms_retrieval.nodes.models import QueryAnalysis, RetrievalRequest
from rms_retrieval.nodes.bundle import MemoryBundle
from rms_retrieval.nodes.pools import (CandidateLimits, CandidatePool, ChannelResult, FilteredPool, PathType,
                                       RankedCandidates, RerankedPool, Selection)
from rms_retrieval.nodes.scored_pool import ScoredPool
from rms_retrieval.nodes.helpers.formatting import format_item
from rms_retrieval.nodes.settings import RetrievalSettings
from rms_retrieval.nodes.helpers.tokens import count_tokens
from rms_retrieval.stores.models import MemoryObject
from rms_retrieval.stores.protocols import CrossEncoder, QueryEncoder, ReadableStore, snapshot_of

_COUNT_SUFFIXES = ("_rank", "_hops", "_offset")
SELECTION_SCORE_CUTS = frozenset({"limit", "min_score"})
_RAW_SCORE_NAMES = {PathType.VECTOR: "cosine", PathType.LEXICAL: "BM25", PathType.GRAPH: "graph weight",
                    PathType.PINNED: "salience"}


class Outcome(StrEnum):
    INCLUDED = "INCLUDED"
    NEVER_A_CANDIDATE = "NEVER_A_CANDIDATE"
    EXCLUDED = "EXCLUDED"
    SCORED_TOO_LOW = "SCORED_TOO_LOW"
    CUT_BY_BUDGET = "CUT_BY_BUDGET"


def not_found(object_id: UUID, namespaces: Sequence[str]) -> str:
    """What an audit says of an id it may not show: missing, or in a namespace outside the request.
    The two read the same, so an audit never tells one namespace what another holds."""
    return f"object {object_id} not found in namespaces [{', '.join(namespaces)}]"


@dataclass(frozen=True)
class Step:
    """What one node decided about the object: a one-line summary and the numbers behind it."""

    node: str
    role: str
    upstream: tuple[str, ...]
    summary: str
    facts: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Explanation:
    """One object's way through one request, from the bundle back to the query analysis."""

    object_id: UUID
    query: str
    namespaces: tuple[str, ...]
    outcome: Outcome
    reason: str
    decided_by: str
    object: dict[str, Any] | None
    steps: tuple[Step, ...]
    configuration_fingerprint: str

    def step(self, role: str) -> Step:
        """The first step of `role` ("bundle", "scores", "channel", ...)."""
        return next(s for s in self.steps if s.role == role)

    def steps_for(self, role: str) -> list[Step]:
        return [s for s in self.steps if s.role == role]

    def to_dict(self) -> dict[str, Any]:
        return json.loads(json.dumps(asdict(self), default=str))

    def to_text(self) -> str:
        lines = [f"object {self.object_id}"]
        if self.object:
            lines[0] += f" ({self.object['node_type']} in {self.object['namespace']}): {self.object['content']}"
        lines += [
            f"question: {self.query}   namespaces: {', '.join(self.namespaces)}   "
            f"settings {self.configuration_fingerprint}",
            f"outcome: {self.outcome} at {self.decided_by}: {self.reason}",
            "lineage, from the bundle back to the query:",
        ]
        for step in self.steps:
            lines.append(f"  {step.node} <- {', '.join(step.upstream)}")
            lines.append(f"      {step.summary}")
        return "\n".join(lines)


def _plain(value: Any) -> Any:
    """A DataFrame cell as a plain Python value (NaN as None)."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, pd.Timestamp):
        return value.to_pydatetime()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def _row(frame: pd.DataFrame, object_id: UUID) -> tuple[int, dict[str, Any]] | None:
    """The object's 1-based rank in a scored frame and its row, or None."""
    if frame.empty:
        return None
    positions = np.flatnonzero(frame["object_id"].to_numpy() == str(object_id))
    if positions.size == 0:
        return None
    position = int(positions[0])
    row = {k: _plain(v) for k, v in frame.iloc[position].to_dict().items()}
    # Ranks, hops and offsets are integers that pandas widened to float beside missing values.
    counts = {k: int(v) for k, v in row.items() if k.endswith(_COUNT_SUFFIXES) and isinstance(v, float)}
    return position + 1, {**row, **counts}


@dataclass
class _Context:
    object_id: UUID
    request: RetrievalRequest
    settings: RetrievalSettings
    stored: MemoryObject | None
    values: dict[str, Any]


def _bundle_step(bundle: MemoryBundle, ctx: _Context) -> tuple[str, dict]:
    budget = f"{bundle.tokens_used}/{bundle.token_budget} tokens"
    for position, item in enumerate(bundle.items, start=1):
        if item.id == ctx.object_id:
            facts = {"included": True, "position": position, "items": len(bundle.items), "tier": item.tier,
                     "tokens": item.tokens, "score": item.score, "paths": [str(p) for p in item.paths],
                     "tokens_used": bundle.tokens_used, "token_budget": bundle.token_budget}
            return (f"packed at position {position} of {len(bundle.items)}, tier {item.tier}, {item.tokens} tokens, "
                    f"score {item.score:.6f} ({budget})"), facts
    facts = {"included": False, "items": len(bundle.items), "tokens_used": bundle.tokens_used,
             "token_budget": bundle.token_budget}
    return f"not in the bundle ({len(bundle.items)} items, {budget})", facts


def _selection_step(selection: Selection, ctx: _Context) -> tuple[str, dict]:
    found = _row(scored_frame(selection), ctx.object_id)
    if found:
        rank, _ = found
        obj = selection.pool.objects[rank - 1]
        tokens = count_tokens(format_item(obj, ctx.settings.packing.item_format))
        return (f"selected at rank {rank} of {len(selection.pool)}; its text takes {tokens} tokens",
                {"selected": True, "rank": rank, "selected_count": len(selection.pool), "tokens": tokens})
    reason = selection.excluded.get(ctx.object_id)
    if reason is None:
        return "not among the ranked candidates", {"selected": False}
    detail = {"limit": f" (limit {ctx.request.limit})", "min_score": f" (min_score {ctx.request.min_score})"}
    return f"left out: {reason}{detail.get(reason, '')}", {"selected": False, "reason": reason}


def _ranking_step(ranked: RankedCandidates, ctx: _Context) -> tuple[str, dict]:
    if ctx.object_id in ranked.excluded:
        reason = ranked.excluded[ctx.object_id]
        return f"session context reached it but excluded it: {reason}", {"ranked": False, "reason": reason}
    found = _row(scored_frame(ranked), ctx.object_id)
    if found is None:
        return "not ranked", {"ranked": False}
    rank, row = found
    summary = f"rank {rank} of {len(ranked.pool)}, score {row['score']:.6f}"
    if row.get("session_trigger"):
        summary += (f"; score inherited through session context from {row['session_trigger']} "
                    f"(offset {row['session_offset']}, decay {row['session_decay']})")
    return summary, {"ranked": True, "rank": rank, "candidates": len(ranked.pool), "row": row}


_FACTORS = (("epistemic_factor", "epistemic"), ("node_type_factor", "node type"), ("temporal_factor", "temporal"),
            ("speaker_factor", "speaker"), ("recency_boost_factor", "recency boost"),
            ("current_update_factor", "current update"))


def _scores_step(scores: ScoredPool, ctx: _Context) -> tuple[str, dict]:
    frame = scored_frame(scores)
    found = _row(frame, ctx.object_id)
    if found is None:
        return "not scored", {"scored": False}
    rank, row = found
    factors = " × ".join(f"{label} {row[key]:.4g}" for key, label in _FACTORS if row.get(key) is not None)
    base = "RRF base" if row["formula_version"] == 2 else "weighted sum"
    ranks = ", ".join(f"{name} rank {row[f'{name}_rank']}" for name in ("semantic", "lexical", "graph")
                      if row.get(f"{name}_rank") is not None)
    summary = (f"score {row['score']:.6f} = {base} {row['base_score']:.6f} × {factors} "
               f"(formula {row['formula_version']}; rank {rank} of {len(frame)}{'; ' + ranks if ranks else ''})")
    return summary, {"scored": True, "rank": rank, "candidates": len(frame), "row": row}


def _rerank_step(reranked: RerankedPool, ctx: _Context) -> tuple[str, dict]:
    if reranked.policy is None:
        return "reranker off: the scored order goes on unchanged", {"reranked": False}
    found = _row(scored_frame(reranked), ctx.object_id)
    if found is None:
        return "not scored", {"reranked": False}
    rank, row = found
    if row.get("rerank_model_score") is None:
        return (f"rank {rank} of {len(reranked.pool)}, score {row['score']:.6f}: below the reranked top "
                f"{reranked.reranked}, kept its score"), {"reranked": False, "rank": rank}
    anchored = "; the anchor, put first" if reranked.anchor == ctx.object_id else ""
    summary = (f"reranked ({reranked.policy}): cross-encoder score {row['rerank_model_score']:.4f}, blend "
               f"{row['rerank_blend']:.4f} (prior weight {row['rerank_prior_weight']:g}, own score "
               f"{row['rerank_prior_score']:.6f}), assigned place {row['rerank_rank']} of {reranked.reranked}, "
               f"score {row['score']:.6f}, rank {rank} of {len(reranked.pool)}{anchored}")
    return summary, {"reranked": True, "rank": rank, "policy": reranked.policy, "model": reranked.model,
                     "anchor": reranked.anchor == ctx.object_id, "row": row}


def _filter_step(pool: FilteredPool, ctx: _Context) -> tuple[str, dict]:
    if ctx.object_id in pool.excluded:
        reason = pool.excluded[ctx.object_id]
        return f"excluded: {reason}", {"kept": False, "reason": reason}
    kept = any(c.object_id == ctx.object_id for c in pool.candidates)
    counts = f"{len(pool.candidates)} of {len(pool.candidates) + len(pool.removed)} kept"
    return (f"kept ({counts})" if kept else f"not a candidate ({counts})"), {"kept": kept}


def _merge_step(pool: CandidatePool, ctx: _Context) -> tuple[str, dict]:
    candidate = pool.by_id.get(ctx.object_id)
    if candidate is None:
        return f"not in the merged pool of {len(pool.candidates)}", {"candidate": False}
    paths = [str(p) for p in candidate.paths]
    return (f"candidate via {'+'.join(paths)} (path count {candidate.path_count}) in a pool of {len(pool.candidates)}",
            {"candidate": True, "paths": paths, "path_count": candidate.path_count})


def _channel_step(result: ChannelResult, ctx: _Context) -> tuple[str, dict]:
    facts: dict[str, Any] = {"path": str(result.path), "hits": len(result.hits), "limit": result.limit,
                             "at_limit": result.at_limit, "failure": result.failure}
    hit = next((h for h in result.hits if h.object_id == ctx.object_id), None)
    if hit is None:
        notes = [f"{len(result.hits)} hits"] + ([f"limit {result.limit}"] if result.limit else [])
        notes += ["at the limit"] if result.at_limit else []
        notes += [f"failed: {result.failure}"] if result.failure else []
        return f"{result.path}: not found ({', '.join(notes)})", {**facts, "found": False}
    facts.update(found=True, rank=hit.rank, raw_score=hit.raw_score, score=hit.score, detail=dict(hit.detail))
    raw_name = _RAW_SCORE_NAMES.get(result.path, "raw score")
    summary = f"{result.path} rank {hit.rank} of {len(result.hits)}: {raw_name} {hit.raw_score:.4f}"
    if result.path is PathType.GRAPH:
        hops = hit.detail.get("hops")
        route = " -> ".join(f"{kind}#{edge}" for kind, edge in zip(hit.detail.get("edge_types", ()),
                                                                    hit.detail.get("edge_path", ())))
        summary += f", {hops} hop{'s' if hops != 1 else ''} via {route}, proximity {hit.score:.4f}"
    elif hit.score != hit.raw_score:
        summary += f", normalised {hit.score:.4f}"
    return summary, facts


def _limits_step(limits: CandidateLimits, ctx: _Context) -> tuple[str, dict]:
    facts = asdict(limits)
    return ", ".join(f"{k} {v}" for k, v in facts.items()), facts


def _analysis_step(analysis: QueryAnalysis, ctx: _Context) -> tuple[str, dict]:
    window = analysis.temporal_window
    facts = {
        "intent": str(analysis.intent),
        "entities": [{"name": e.name, "type": str(e.type), "confidence": e.confidence,
                      "matched_ids": [str(i) for i in e.matched_ids]} for e in analysis.entities],
        "temporal_signals": [s.model_dump(mode="json") for s in analysis.temporal_signals],
        "temporal_window": [window[0].isoformat(), window[1].isoformat()] if window else None,
        "current_state": analysis.current_state,
        "aggregation": str(analysis.aggregation) if analysis.aggregation else None,
        "reference_time": analysis.reference_time.isoformat(),
    }
    names = ", ".join(e.name for e in analysis.entities) or "none"
    summary = f"intent {analysis.intent}; entities {names}"
    if window:
        summary += f"; temporal window {window[0]:%Y-%m-%d} .. {window[1]:%Y-%m-%d}"
    if analysis.current_state:
        summary += "; asks for the current state"
    if analysis.aggregation:
        summary += f"; {analysis.aggregation} question"
    return summary, facts


_STEP_BUILDERS: dict[str, Callable[[Any, _Context], tuple[str, dict]]] = {
    "bundle": _bundle_step,
    "selection": _selection_step,
    "ranking": _ranking_step,
    "rerank": _rerank_step,
    "scores": _scores_step,
    "filter": _filter_step,
    "merge": _merge_step,
    "channel": _channel_step,
    "limits": _limits_step,
    "analysis": _analysis_step,
}


def _first(lineage: Lineage, ctx: _Context, role: str) -> tuple[str, Any] | tuple[None, None]:
    names = lineage.named(role)
    return (names[0], ctx.values[names[0]]) if names else (None, None)


def _never_reason(lineage: Lineage, ctx: _Context) -> str:
    if ctx.stored is None:
        return not_found(ctx.object_id, ctx.request.namespaces)
    channels = [ctx.values[name] for name in lineage.named("channel")]
    found = ", ".join(_channel_step(c, ctx)[0] for c in channels)
    return f"no candidate path found it: {found}"


def _outcome(lineage: Lineage, ctx: _Context) -> tuple[Outcome, str, str]:
    """Where the object's way ended, and the node that decided it."""
    oid = ctx.object_id
    bundle_node, bundle = _first(lineage, ctx, "bundle")
    selection_node, selection = _first(lineage, ctx, "selection")
    ranking_node, ranked = _first(lineage, ctx, "ranking")
    filter_node, filtered = _first(lineage, ctx, "filter")
    merge_node, pool = _first(lineage, ctx, "merge")
    if bundle is not None and any(item.id == oid for item in bundle.items):
        return Outcome.INCLUDED, _bundle_step(bundle, ctx)[0], bundle_node
    if selection is not None and _row(scored_frame(selection), oid):
        tokens = _selection_step(selection, ctx)[1]["tokens"]
        return (Outcome.CUT_BY_BUDGET,
                f"selected, but its {tokens} tokens did not fit: {bundle.tokens_used} of the "
                f"{bundle.token_budget}-token budget went to higher-priority items", bundle_node)
    if selection is not None and oid in selection.excluded:
        reason = selection.excluded[oid]
        if reason in SELECTION_SCORE_CUTS:
            place = _row(scored_frame(ranked), oid) if ranked is not None else None
            rank = f"rank {place[0]} of {len(ranked.pool)}, score {place[1]['score']:.6f}; " if place else ""
            return Outcome.SCORED_TOO_LOW, f"{rank}{_selection_step(selection, ctx)[0]}", selection_node
        return Outcome.EXCLUDED, reason, selection_node
    if ranked is not None and oid in ranked.excluded:
        return Outcome.EXCLUDED, ranked.excluded[oid], ranking_node
    if filtered is not None and oid in filtered.excluded:
        return Outcome.EXCLUDED, filtered.excluded[oid], filter_node
    if pool is not None and oid not in pool.by_id:
        return Outcome.NEVER_A_CANDIDATE, _never_reason(lineage, ctx), merge_node
    return Outcome.EXCLUDED, "left out after merging without a recorded reason", ranking_node or merge_node


def explain(
    store: ReadableStore,
    question: str | RetrievalRequest,
    object_id: UUID | str,
    *,
    settings: RetrievalSettings | None = None,
    encoder: QueryEncoder | None = None,
    cross_encoder: CrossEncoder | None = None,
    **request_fields: Any,
) -> Explanation:
    """Run `question` once (every node of the DAG kept, nothing logged) and explain `object_id`.

    `question` is a `RetrievalRequest`, or the question with the request fields as for
    `retrieve()` (namespaces, reference_time, token_budget, limit, ...). An id outside the
    request's namespaces is reported exactly like a missing one: "not found in namespaces [...]".
    """
    object_id = UUID(str(object_id))
    settings = settings or RetrievalSettings()
    store = snapshot_of(store)  # the run and the object it explains read one generation
    lineage = pipeline_lineage(build_driver(settings))
    result = retrieve(store, question, settings=settings, encoder=encoder, cross_encoder=cross_encoder,
                      extra_nodes=lineage.computed, log=False, **request_fields)
    request = result.request
    stored = store.get_objects([object_id], request.namespaces).get(object_id)
    ctx = _Context(object_id, request, settings, stored, result.nodes)
    steps = []
    for node in reversed(lineage.nodes):
        if node.role is not None:
            summary, facts = _STEP_BUILDERS[node.role](ctx.values[node.name], ctx)
            steps.append(Step(node.name, node.role, node.upstream, summary, facts))
    outcome, reason, decided_by = _outcome(lineage, ctx)
    described = ({"node_type": str(stored.node_type), "namespace": stored.namespace, "content": stored.content}
                 if stored else None)
    return Explanation(object_id, request.query, request.namespaces, outcome, reason, decided_by, described,
                       tuple(steps), settings.fingerprint())
