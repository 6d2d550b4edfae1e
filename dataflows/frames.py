"""Intermediate node values as pandas DataFrames, for Jupyter and for audits.

One builder per node value: a channel's hits, the merged pool (one column group per path), the
filtered pool with each exclusion reason, the scored pools (`scored_frame`), the bundle's items,
and the small records (query analysis, limits). `dataflows.node_types.node_frame(value)` picks
the builder for any node's value from the one table of node value types.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any
from uuid import UUID

import pandas as pd

from rms_retrieval.nodes.models import QueryAnalysis, QueryEmbedding
from rms_retrieval.nodes.bundle import MemoryBundle
from rms_retrieval.nodes.pools import (CandidatePool, ChannelResult, FilteredPool, PathType, RankedCandidates,
                                       RerankedPool, Selection, mask_paths)
from rms_retrieval.nodes.scored_pool import ScoredPool
from rms_retrieval.stores.models import MemoryObject

HIT_COLUMNS = ["object_id", "path", "rank", "raw_score", "score"]
OBJECT_COLUMNS = ["node_type", "namespace", "content"]
SCORE_COLUMNS = [
    "object_id", "formula_version", "score", "semantic_relevance", "paths", "path_count", "node_type",
    "stated_time", "semantic", "semantic_rank", "lexical", "lexical_bm25", "lexical_rank",
    "graph_proximity", "graph_hops", "graph_rank", "recency", "salience", "confidence",
    "epistemic_weight", "epistemic_factor", "node_type_boost", "node_type_factor",
    "temporal_affinity", "temporal_factor", "speaker_factor", "recency_boost_factor", "tie_break",
    "current_update_factor", "base_score", "rerank_model_score", "rerank_prior_weight", "rerank_blend",
    "rerank_prior_score", "rerank_rank",
]
SESSION_COLUMNS = ["session_trigger", "session_offset", "session_decay"]


def _object_fields(obj: MemoryObject | None) -> dict[str, Any]:
    if obj is None:
        return {column: None for column in OBJECT_COLUMNS}
    return {"node_type": str(obj.node_type), "namespace": obj.namespace, "content": obj.content}


def channel_frame(result: ChannelResult, objects: Mapping[UUID, MemoryObject] | None = None) -> pd.DataFrame:
    """One row per hit of one candidate path, in the path's rank order; `detail` keys become columns.

    `objects` (the `candidate_objects` node) adds each hit's type, namespace and content.
    """
    known = {**result.objects, **(objects or {})}
    rows = []
    for hit in result.hits:
        row = {"object_id": str(hit.object_id), "path": str(hit.path), "rank": hit.rank,
               "raw_score": hit.raw_score, "score": hit.score, **dict(hit.detail)}
        if known:
            row.update(_object_fields(known.get(hit.object_id)))
        rows.append(row)
    columns = HIT_COLUMNS + sorted({key for row in rows for key in row} - set(HIT_COLUMNS) - set(OBJECT_COLUMNS))
    if known:
        columns += OBJECT_COLUMNS
    return pd.DataFrame(rows, columns=columns)


def _path_columns(path: PathType) -> list[str]:
    name = path.value.lower()
    return [f"{name}_rank", f"{name}_raw", f"{name}_score"]


def pool_frame(pool: CandidatePool) -> pd.DataFrame:
    """One row per merged candidate: its paths and, per path, the rank, raw and normalised score."""
    rows = []
    for candidate in pool.candidates:
        row: dict[str, Any] = {"object_id": str(candidate.object_id), **_object_fields(candidate.object),
                               "paths": tuple(str(p) for p in candidate.paths), "path_count": candidate.path_count}
        for path in PathType:
            hit = candidate.hits.get(path)
            rank, raw, score = _path_columns(path)
            row[rank], row[raw], row[score] = (hit.rank, hit.raw_score, hit.score) if hit else (None, None, None)
        rows.append(row)
    columns = ["object_id", *OBJECT_COLUMNS, "paths", "path_count"]
    columns += [column for path in PathType for column in _path_columns(path)]
    return pd.DataFrame(rows, columns=columns)


def filtered_frame(pool: FilteredPool) -> pd.DataFrame:
    """The merged pool, kept and removed candidates in object-id order, with `kept` and, for
    removed candidates, `excluded_reason`."""
    merged = tuple(sorted(pool.candidates + pool.removed, key=lambda c: str(c.object_id)))
    frame = pool_frame(CandidatePool(candidates=merged))
    reasons = {str(oid): reason for oid, reason in pool.excluded.items()}
    frame.insert(1, "excluded_reason", [reasons.get(oid) for oid in frame["object_id"]])
    frame.insert(1, "kept", frame["excluded_reason"].isna())
    return frame


def bundle_frame(bundle: MemoryBundle) -> pd.DataFrame:
    """The bundle's items in packing order, with their tier, tokens and score."""
    rows = [
        {"position": position, "object_id": str(item.id), "tier": item.tier, "tokens": item.tokens,
         "score": item.score, "semantic_relevance": item.semantic_relevance,
         "paths": tuple(str(p) for p in item.paths), "path_count": item.path_count,
         "node_type": item.node_type, "text": item.text}
        for position, item in enumerate(bundle.items, start=1)
    ]
    return pd.DataFrame(rows, columns=["position", "object_id", "tier", "tokens", "score", "semantic_relevance",
                                       "paths", "path_count", "node_type", "text"])


def _pool_of(value: ScoredPool | RerankedPool | RankedCandidates | Selection) -> ScoredPool:
    return value if isinstance(value, ScoredPool) else value.pool


def scored_frame(value: ScoredPool | RerankedPool | RankedCandidates | Selection) -> pd.DataFrame:
    """A scored pool in rank order, one column per input, rank and factor (`SCORE_COLUMNS`); after
    session context also each row's trigger, offset and decay (`SESSION_COLUMNS`)."""
    pool = _pool_of(value)
    factors = pool.factors
    columns: dict[str, Any] = {
        "object_id": [str(obj.id) for obj in pool.objects],
        "formula_version": [pool.formula_version] * len(pool),
        "score": pool.score,
        "semantic_relevance": pool.semantic_relevance,
        "paths": [tuple(str(p) for p in mask_paths(mask)) for mask in pool.path_mask.tolist()],
        "path_count": pool.path_count,
        "node_type": [str(obj.node_type) for obj in pool.objects],
        "stated_time": [obj.stated_time for obj in pool.objects],
    }
    for name in SCORE_COLUMNS[len(columns):]:
        columns[name] = getattr(factors, name)
    names = list(SCORE_COLUMNS)
    if isinstance(value, RankedCandidates):
        columns["session_trigger"] = [None if t is None else str(t) for t in value.session_trigger]
        columns["session_offset"] = value.session_offset
        columns["session_decay"] = value.session_decay
        names += SESSION_COLUMNS
    return pd.DataFrame(columns, columns=names)


def _with_exclusions(frame: pd.DataFrame, excluded: Mapping[UUID, str]) -> pd.DataFrame:
    """Rank-ordered rows, then one row per left-out object with its reason."""
    ranked = frame.copy()
    ranked.insert(0, "rank", range(1, len(ranked) + 1))
    left_out = pd.DataFrame({"object_id": [str(oid) for oid in excluded], "excluded_reason": list(excluded.values())})
    if left_out.empty:
        return ranked.assign(excluded_reason=None)
    return pd.concat([ranked.assign(excluded_reason=None), left_out], ignore_index=True)


def _record_frame(record: Mapping[str, Any]) -> pd.DataFrame:
    return pd.DataFrame({"field": list(record), "value": [_cell(v) for v in record.values()]})


def _cell(value: Any) -> Any:
    if isinstance(value, tuple | list):
        return ", ".join(str(_cell(v)) for v in value)
    if isinstance(value, MemoryObject):
        return value.content
    if hasattr(value, "model_dump"):
        return str(value.model_dump(mode="json"))
    return value


def ranked_frame(value: RankedCandidates | Selection) -> pd.DataFrame:
    """A ranking or a selection: the scored rows, then each candidate it left out with the reason."""
    return _with_exclusions(scored_frame(value), value.excluded)


def analysis_frame(value: QueryAnalysis) -> pd.DataFrame:
    """The query analysis as field/value rows, entities and date signals spelled out."""
    record = value.model_dump(exclude={"entities", "temporal_signals"})
    record["entities"] = [f"{e.name} ({e.type}, {len(e.matched_ids)} matched)" for e in value.entities]
    record["temporal_signals"] = [f"{s.text!r} {s.type} {s.start} .. {s.end}" for s in value.temporal_signals]
    record["temporal_window"] = value.temporal_window
    return _record_frame(record)


def embedding_frame(value: QueryEmbedding) -> pd.DataFrame:
    """The query embedding's identity and norm (the vector itself is in the retrieval log)."""
    identity = value.identity
    return _record_frame({"model_name": identity.model_name, "model_hash": identity.model_hash,
                          "dimension": identity.dimension, "norm": float((value.vector ** 2).sum() ** 0.5)})


def generic_frame(value: Any) -> pd.DataFrame:
    """A value no table row names: a DataFrame as it is, a mapping or a record as field/value
    rows, a list of records as one row each, anything else as one `value` cell."""
    if isinstance(value, pd.DataFrame):
        return value
    if isinstance(value, dict):
        if value and all(isinstance(v, MemoryObject) for v in value.values()):
            return pd.DataFrame([{"object_id": str(k), **_object_fields(v)} for k, v in value.items()],
                                columns=["object_id", *OBJECT_COLUMNS])
        return _record_frame(value)
    if isinstance(value, list):
        if value and all(dataclasses.is_dataclass(v) for v in value):
            return pd.DataFrame([{f.name: _cell(getattr(v, f.name)) for f in dataclasses.fields(v)} for v in value])
        return pd.DataFrame({"value": value})
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _record_frame({f.name: getattr(value, f.name) for f in dataclasses.fields(value)})
    return pd.DataFrame({"value": [value]})
