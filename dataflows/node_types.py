"""The one table of the values the retrieval DAG passes between nodes.

Each row names a value type, the stage role it plays in an explanation (`explain.py` builds one
step per node of a role), how the DAG picture summarises it (`audit.py`) and how it becomes a
DataFrame (`node_frame`, for notebooks and audits; the builders are in `frames.py`). A node's role
follows from the type it returns, so a renamed node or a new candidate path needs no change
here; a new value type is one more row. Rows are matched in order, first `issubclass` wins.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pandas as pd

from rms_retrieval.dataflows import frames
from rms_retrieval.nodes.models import QueryAnalysis, QueryEmbedding, Reformulations
from rms_retrieval.nodes.bundle import MemoryBundle
from rms_retrieval.nodes.pools import (AlternatePasses, CandidateLimits, CandidatePool, ChannelResult,
                                       CrossEncoderScores, CrossScopePass, CrossScopePool, CrossScopeScores,
                                       FilteredPool, PathType, RankedCandidates, RerankedPool, Selection,
                                       TextPathCandidates, TextPathExclusions, TextPathScoreInputs, path_mask)
from rms_retrieval.nodes.scored_pool import ScoredPool


@dataclass(frozen=True)
class NodeValueType:
    """One row: the value type, its role in an explanation (None: no step), its one-line summary,
    and its DataFrame builder (None: `frames.generic_frame`)."""

    type: type
    role: str | None
    summary: Callable[[Any], str]
    frame: Callable[[Any], pd.DataFrame] | None = None


def _channel(value: ChannelResult) -> str:
    limit = f" (limit {value.limit}{', at the limit' if value.at_limit else ''})" if value.limit else ""
    failure = f"\nfailed: {value.failure}" if value.failure else ""
    return f"{len(value.hits)} hits{limit}{failure}"


def _scores(value: ScoredPool) -> str:
    return f"{len(value)} rows, {int((value.score > 0).sum())} scored above 0"


def _ranking(value: RankedCandidates) -> str:
    joined = int((value.pool.path_mask == path_mask([PathType.SESSION_CONTEXT])).sum())
    return f"{len(value.pool)} ranked ({joined} joined by session context)"


def _reranking(value: RerankedPool) -> str:
    if value.policy is None:
        return "reranker off"
    anchor = f", anchor {value.anchor}" if value.anchor else ""
    return f"{value.reranked} reranked ({value.policy}{anchor})"


def _analysis(value: QueryAnalysis) -> str:
    entities = ", ".join(e.name for e in value.entities) or "no entities"
    return f"intent {value.intent}\n{entities}"


NODE_VALUE_TYPES: tuple[NodeValueType, ...] = (
    NodeValueType(MemoryBundle, "bundle",
                  lambda v: f"{len(v.items)} items, {v.tokens_used}/{v.token_budget} tokens", frames.bundle_frame),
    NodeValueType(Selection, "selection", lambda v: f"{len(v.pool)} selected, {len(v.excluded)} left out",
                  frames.ranked_frame),
    NodeValueType(RankedCandidates, "ranking", _ranking, frames.ranked_frame),
    NodeValueType(RerankedPool, "rerank", _reranking, frames.scored_frame),
    NodeValueType(ScoredPool, "scores", _scores, frames.scored_frame),
    NodeValueType(FilteredPool, "filter", lambda v: f"{len(v.candidates)} kept, {len(v.excluded)} excluded",
                  frames.filtered_frame),
    NodeValueType(CandidatePool, "merge", lambda v: f"{len(v.candidates)} candidates", frames.pool_frame),
    NodeValueType(ChannelResult, "channel", _channel, frames.channel_frame),
    NodeValueType(CandidateLimits, "limits",
                  lambda v: f"vector {v.vector_k}, lexical {v.lexical_k}, graph {v.graph_max_candidates}"),
    NodeValueType(QueryAnalysis, "analysis", _analysis, frames.analysis_frame),
    NodeValueType(CrossEncoderScores, None, lambda v: f"{len(v.object_ids)} pairs scored by {v.model}"),
    NodeValueType(Reformulations, None,
                  lambda v: f"{len(v.alternatives)} alternatives" + (f", provider failed: {v.provider_failure}"
                                                                     if v.provider_failure else "")),
    NodeValueType(CrossScopePass, None, lambda v: f"{len(v.result.hits)} cross-scope hits"
                  + (f", failed: {v.result.failure}" if v.result.failure else "")),
    NodeValueType(CrossScopePool, None,
                  lambda v: f"{len(v.pool.candidates)} hints kept, {len(v.pool.excluded)} excluded"),
    NodeValueType(CrossScopeScores, None,
                  lambda v: "no cross-scope namespaces" if v.pool is None else f"{len(v.pool)} hints scored"),
    NodeValueType(TextPathCandidates, None, lambda v: f"{len(v.hits)} found by the text paths, {len(v.objects)} read"),
    NodeValueType(TextPathExclusions, None,
                  lambda v: f"{sum(reason is not None for _, reason in v.reasons.values())} of {len(v.reasons)} excluded"),
    NodeValueType(TextPathScoreInputs, None, lambda v: f"score inputs of {len(v.rows)} objects"),
    NodeValueType(AlternatePasses, None, lambda v: f"{len(v.passes)} alternative passes, {len(v.objects)} objects"),
    NodeValueType(QueryEmbedding, None,
                  lambda v: f"{v.identity.dimension}-d, {v.identity.model_name.rsplit('/', 1)[-1]}",
                  frames.embedding_frame),
)


def value_type_of(kind: Any) -> NodeValueType | None:
    """The table's row for a node's declared return type, or None."""
    if not isinstance(kind, type):
        return None
    return next((row for row in NODE_VALUE_TYPES if issubclass(kind, row.type)), None)


def role_of(kind: Any) -> str | None:
    """The explanation role of a node that returns `kind`, or None."""
    row = value_type_of(kind)
    return row.role if row else None


def value_summary(value: Any) -> str:
    """A short description of a node's value, for the execution picture."""
    row = value_type_of(type(value))
    if row is not None:
        return row.summary(value)
    if isinstance(value, list | tuple | dict | set | frozenset):
        return f"{len(value)} items"
    return type(value).__name__


def node_frame(value: Any) -> pd.DataFrame:
    """Any node's value as a DataFrame: its row's builder, else `frames.generic_frame`."""
    row = value_type_of(type(value))
    if row is not None and row.frame is not None:
        return row.frame(value)
    return frames.generic_frame(value)


@dataclass(frozen=True)
class LineageNode:
    """One node of the retrieval DAG, the nodes it reads, and its stage role (None for inputs)."""

    name: str
    upstream: tuple[str, ...]
    role: str | None
    is_input: bool


@dataclass(frozen=True)
class Lineage:
    """The nodes the final node depends on, in topological order (inputs first)."""

    nodes: tuple[LineageNode, ...]

    @property
    def computed(self) -> tuple[str, ...]:
        """Every function node, i.e. what one execution runs."""
        return tuple(n.name for n in self.nodes if not n.is_input)

    def named(self, role: str) -> list[str]:
        return [n.name for n in self.nodes if n.role == role]
