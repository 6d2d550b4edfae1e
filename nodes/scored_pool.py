"""The scored pool as columns (stages 5 and 6): the candidates' numpy columns and their score
factors, the schema every scored pool keeps, and the final rank order."""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import islice
from typing import Any
from uuid import UUID

import numpy as np

from rms_retrieval.stores.models import MemoryObject


def _take(record: Any, order: np.ndarray) -> dict[str, Any]:
    """Every array field of a column record reordered (or subset) by the positions `order`."""
    taken = {}
    positions = None
    for f in dataclasses.fields(record):
        value = getattr(record, f.name)
        if isinstance(value, np.ndarray):
            taken[f.name] = value[order]
        elif isinstance(value, tuple):
            positions = order.tolist() if positions is None else positions  # a tuple indexes fastest by int
            taken[f.name] = tuple(map(value.__getitem__, positions))
        else:
            taken[f.name] = value
    return taken


@dataclass(frozen=True, eq=False)
class ScoreFactors:
    """Every input and factor of the scores, for audits; NaN where a candidate lacks one.

    Ranks are competition ranks within the pool (1, 2, 2, 4); `graph_hops` and the ranks are
    whole numbers stored as floats so that a missing one can be NaN."""

    semantic: np.ndarray
    semantic_rank: np.ndarray
    lexical: np.ndarray
    lexical_bm25: np.ndarray
    lexical_rank: np.ndarray
    graph_proximity: np.ndarray
    graph_hops: np.ndarray
    graph_rank: np.ndarray
    recency: np.ndarray
    salience: np.ndarray
    confidence: np.ndarray
    epistemic_weight: np.ndarray
    epistemic_factor: np.ndarray
    node_type_boost: np.ndarray
    node_type_factor: np.ndarray
    temporal_affinity: np.ndarray
    temporal_factor: np.ndarray
    speaker_factor: np.ndarray
    recency_boost_factor: np.ndarray
    tie_break: np.ndarray
    current_update_factor: np.ndarray
    base_score: np.ndarray
    # The cross-encoder (RFC 7.3), NaN outside the reranked prefix: the model's score, the prior
    # weight the blend gave the candidate's own score, the blend, the score before reranking and
    # the 1-based place the policy assigned.
    rerank_model_score: np.ndarray
    rerank_prior_weight: np.ndarray
    rerank_blend: np.ndarray
    rerank_prior_score: np.ndarray
    rerank_rank: np.ndarray

    def __len__(self) -> int:
        return len(self.semantic)

    def take(self, order: np.ndarray) -> ScoreFactors:
        """The factors at positions `order`, in that order (`_FactorRows`: gathered when read)."""
        return _FactorRows(self, np.asarray(order, dtype=np.intp))

    def padded(self, extra: int) -> ScoreFactors:
        """These factors and `extra` candidates that have none (session neighbours new to the pool)."""
        return _FactorRows(self, np.concatenate([np.arange(len(self)), np.full(extra, _NO_ROW)]))

    def replaced(self, **columns: np.ndarray) -> ScoreFactors:
        """These factors with `columns` in place of theirs, every column made."""
        return ScoreFactors(**{name: columns[name] if name in columns else getattr(self, name)
                               for name in FACTOR_NAMES})


_NO_ROW = -1  # a padded row: NaN in every column


class _FactorRows(ScoreFactors):
    """The factors of `source` at `rows` (`_NO_ROW`: NaN), each column gathered from the source
    when it is first read. Ranking reorders and pads a pool three times a request and reads none
    of its 27 factor columns; an audit, a frame or a comparison reads them as ever."""

    def __init__(self, source: ScoreFactors, rows: np.ndarray) -> None:  # the fields are read from `source`
        if isinstance(source, _FactorRows):  # rows of rows: one gather from the columns as made
            composed = np.full(len(rows), _NO_ROW, dtype=np.intp)
            kept = rows != _NO_ROW
            composed[kept] = source._rows[rows[kept]]
            rows, source = composed, source._source
        object.__setattr__(self, "_source", source)
        object.__setattr__(self, "_rows", rows)

    def __getattr__(self, name: str) -> np.ndarray:  # only what the instance does not hold yet
        if name not in FACTOR_NAMES:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        column, rows = getattr(self._source, name), self._rows
        kept = rows != _NO_ROW
        if kept.all():
            gathered = column[rows]
        else:
            gathered = np.full(len(rows), np.nan)
            gathered[kept] = column[rows[kept]]
        object.__setattr__(self, name, gathered)
        return gathered

    def __len__(self) -> int:
        return len(self._rows)


FACTOR_NAMES = tuple(f.name for f in dataclasses.fields(ScoreFactors))
WEIGHTED_FORMULA, RANK_FUSION_FORMULA = 1, 2


@dataclass(frozen=True, eq=False)
class ScoredPool:
    """The scored candidates as aligned columns, in final order: score descending, then path
    count descending, then object id. `formula_version` records which formula made the scores
    (the Hamilton config `fusion` picked the scoring node); later stages read it here."""

    formula_version: int
    objects: tuple[MemoryObject, ...]
    score: np.ndarray
    semantic_relevance: np.ndarray
    path_mask: np.ndarray
    path_count: np.ndarray
    factors: ScoreFactors

    def __post_init__(self) -> None:
        check_scored_pool(self)

    def __len__(self) -> int:
        return len(self.objects)

    @property
    def rank_fused(self) -> bool:
        """Scored by formula version 2 (reciprocal rank fusion), whose scores are no relevance."""
        return self.formula_version == RANK_FUSION_FORMULA

    @property
    def object_ids(self) -> tuple[UUID, ...]:
        return tuple(obj.id for obj in self.objects)

    def take(self, order: np.ndarray) -> ScoredPool:
        """The rows at positions `order`, in that order."""
        fields = _take(self, order)
        fields["factors"] = self.factors.take(order)
        return ScoredPool(**fields)


_POOL_COLUMNS: Mapping[str, type] = {
    "score": np.float64, "semantic_relevance": np.float64, "path_mask": np.int64, "path_count": np.int64}
_FACTOR_COLUMNS: Mapping[str, type] = {name: np.float64 for name in FACTOR_NAMES}
# The declared schema of `fused_scores` and every later pool: a dtype per column, one entry per object.
SCORED_POOL_SCHEMA: Mapping[str, type] = {**_POOL_COLUMNS, **_FACTOR_COLUMNS}


def _check_columns(record: Any, schema: Mapping[str, type], size: int) -> None:
    for name, dtype in schema.items():
        column = getattr(record, name)
        if column.dtype != dtype or column.shape != (size,):
            raise ValueError(
                f"scored pool column {name} must be {np.dtype(dtype)} of shape ({size},), "
                f"got {column.dtype} of shape {column.shape}"
            )


def _check_factors(factors: ScoreFactors, size: int) -> None:
    """Factors of `size` rows as the schema declares them; gathered ones by their source's columns,
    checked once (a gather keeps each column's dtype), and their own count of rows."""
    if not isinstance(factors, _FactorRows):
        _check_columns(factors, _FACTOR_COLUMNS, size)
        return
    source = factors._source
    if not source.__dict__.get("_checked"):
        _check_columns(source, _FACTOR_COLUMNS, len(source))
        object.__setattr__(source, "_checked", True)
    rows = factors._rows
    if rows.shape != (size,) or (size and (rows.max() >= len(source) or rows.min() < _NO_ROW)):
        span = f" from {rows.min()} to {rows.max()}" if len(rows) else ""
        raise ValueError(f"scored pool factors must have {size} rows of their {len(source)}, got {len(rows)} rows{span}")


def check_scored_pool(pool: ScoredPool) -> None:
    """Raise ValueError unless `pool` matches `SCORED_POOL_SCHEMA`."""
    if pool.formula_version not in (WEIGHTED_FORMULA, RANK_FUSION_FORMULA):
        raise ValueError(f"formula_version must be 1 or 2, got {pool.formula_version!r}")
    size = len(pool.objects)
    _check_columns(pool, _POOL_COLUMNS, size)
    _check_factors(pool.factors, size)
    if not np.isfinite(pool.score).all():
        raise ValueError("scored pool scores must be finite numbers; a NaN or infinite score cannot be ranked")


def rank_order(score: np.ndarray, path_count: np.ndarray, objects: Sequence[MemoryObject],
               keys: Sequence[int] | None = None) -> np.ndarray:
    """Positions in final order: score descending, then path count descending, then object id.

    Ids compare as their 128-bit integers (`keys`, where the caller has them): the order of their
    hex strings. A stable sort by score and path count leaves tied rows in the order given, which
    holds where they were given in id order (a merged pool's); else only the runs of tied rows are
    put in id order (a pool reordered by session context has a few short ones: a trigger's
    neighbours inherit one score)."""
    order = np.lexsort((-path_count, -score))
    ranked_score, ranked_count = score[order], path_count[order]
    tied = (ranked_score[1:] == ranked_score[:-1]) & (ranked_count[1:] == ranked_count[:-1])
    if not tied.any() or (keys is not None and all(map(operator.lt, keys, islice(keys, 1, None)))):
        return order  # no tie, or rows given in id order, which the stable sort kept among equals
    key_of = keys.__getitem__ if keys is not None else (lambda row: objects[row].id.int)
    positions = order.tolist()
    before = np.r_[False, tied[:-1]]  # the row above is tied to its own row above
    after = np.r_[tied[1:], False]
    for start, last in zip(np.flatnonzero(tied & ~before).tolist(), np.flatnonzero(tied & ~after).tolist()):
        positions[start:last + 2] = sorted(positions[start:last + 2], key=key_of)
    return np.array(positions, dtype=np.intp)


RERANK_COLUMNS = ("rerank_model_score", "rerank_prior_weight", "rerank_blend", "rerank_prior_score", "rerank_rank")
