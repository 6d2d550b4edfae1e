"""The candidate pool as it travels from generation through merging, filtering, scoring and reranking to
selection: paths, hits, candidates, and the stages' typed values around the scored pool's columns
(`nodes/scored_pool.py`)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cache
from types import MappingProxyType
from typing import Any, NamedTuple
from uuid import UUID

import numpy as np

from rms_retrieval.nodes.scored_pool import ScoredPool
from rms_retrieval.stores.models import MemoryObject


@dataclass(frozen=True, slots=True)
class CandidateLimits:
    """Per-path candidate limits for one request; count and list questions widen them (RFC 4.3)."""

    vector_k: int
    lexical_k: int
    graph_max_candidates: int
    widened: bool = False


class PathType(StrEnum):
    VECTOR = "VECTOR"
    LEXICAL = "LEXICAL"
    GRAPH = "GRAPH"
    PINNED = "PINNED"
    SESSION_CONTEXT = "SESSION_CONTEXT"
    KEYWORD_SCAN = "KEYWORD_SCAN"
    EPISODE_CONTEXT = "EPISODE_CONTEXT"
    EVIDENCE_CONTEXT = "EVIDENCE_CONTEXT"


PRIMARY_PATHS = frozenset({PathType.VECTOR, PathType.LEXICAL, PathType.GRAPH, PathType.PINNED})
_PATH_ORDER = {path: position for position, path in enumerate(PathType)}


class ChannelHit(NamedTuple):
    """One object found by one path: its 1-based rank there, raw score and normalised score (a
    named tuple: immutable, and made in a fifth of a frozen dataclass's time, ~700 per request)."""

    object_id: UUID
    path: PathType
    rank: int
    raw_score: float
    score: float
    detail: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True)
class ChannelResult:
    """Everything one candidate path returned, or why it returned nothing."""

    path: PathType
    hits: tuple[ChannelHit, ...] = ()
    objects: Mapping[UUID, MemoryObject] = field(default_factory=dict)
    limit: int = 0
    failure: str | None = None
    embedding_mismatch: bool = False

    @property
    def at_limit(self) -> bool:
        return self.limit > 0 and len(self.hits) >= self.limit


def in_path_order(channels: Sequence[ChannelResult]) -> list[ChannelResult]:
    """The channels in `PathType` order, whatever order the DAG ran them in."""
    return sorted(channels, key=lambda channel: _PATH_ORDER[channel.path])


class Candidate(NamedTuple):
    """One object with every path that found it (a named tuple: made for each of ~450 candidates
    of a request in a fifth of a frozen dataclass's time)."""

    object: MemoryObject
    hits: Mapping[PathType, ChannelHit]

    @property
    def object_id(self) -> UUID:
        return self.object.id

    @property
    def paths(self) -> tuple[PathType, ...]:
        return tuple(p for p in PathType if p in self.hits)

    @property
    def path_count(self) -> int:
        """Primary retrieval paths that found it (RFC 5); session context and the count/list
        keyword scans widen the pool without counting as evidence of relevance."""
        return sum(1 for p in self.hits if p in PRIMARY_PATHS)


class PoolRows(Sequence[Candidate]):
    """Candidates as columns, in the order they were given: each one's id as an integer (`keys`),
    its stored object, its vector hit if it has one (`vector`, by key) and its other hits (`hits`,
    by key). Filtering and scoring read the columns; read as a sequence, each `Candidate` is made
    on first read (audits, explanations and frames do), its hits in `PathType` order."""

    __slots__ = ("keys", "objects", "vector", "hits", "_made")

    def __init__(self, keys: list[int], objects: tuple[MemoryObject, ...], vector: Mapping[int, ChannelHit],
                 hits: Mapping[int, Mapping[PathType, ChannelHit]], made: tuple[Candidate, ...] | None = None) -> None:
        self.keys, self.objects, self.vector, self.hits = keys, objects, vector, hits
        self._made = made

    @classmethod
    def of(cls, candidates: Sequence[Candidate]) -> PoolRows:
        """`candidates` as columns (themselves if they are); each keeps its own `Candidate`."""
        if isinstance(candidates, PoolRows):
            return candidates
        made = tuple(candidates)
        keys = [candidate.object.id.int for candidate in made]
        vector = {key: hit for key, candidate in zip(keys, made) if (hit := candidate.hits.get(PathType.VECTOR))}
        hits = {key: {path: hit for path, hit in candidate.hits.items() if path is not PathType.VECTOR}
                for key, candidate in zip(keys, made)}
        return cls(keys, tuple(candidate.object for candidate in made), vector, hits, made)

    def hits_at(self, row: int) -> Mapping[PathType, ChannelHit]:
        """Row `row`'s hits: its vector hit first, then its other hits."""
        key = self.keys[row]
        found, other = self.vector.get(key), self.hits.get(key, _NO_HITS)
        return other if found is None else {PathType.VECTOR: found, **other}

    def taking(self, rows: Sequence[int]) -> PoolRows:
        """The rows at the positions `rows`, in that order."""
        made = None if self._made is None else tuple(self._made[row] for row in rows)
        return PoolRows([self.keys[row] for row in rows], tuple(self.objects[row] for row in rows), self.vector,
                        self.hits, made)

    def _candidates(self) -> tuple[Candidate, ...]:
        if self._made is None:
            self._made = tuple(Candidate(obj, self.hits_at(row)) for row, obj in enumerate(self.objects))
        return self._made

    def __len__(self) -> int:
        return len(self.keys)

    def __getitem__(self, index):  # type: ignore[override]  # an int or a slice, as a tuple's
        return self._candidates()[index]

    def __iter__(self) -> Iterator[Candidate]:
        return iter(self._candidates())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, (tuple, PoolRows)) and self._candidates() == tuple(other)

    __hash__ = None  # type: ignore[assignment]  # a candidate's hits are a mapping: unhashable, as a tuple of them

    def __add__(self, other: Sequence[Candidate]) -> tuple[Candidate, ...]:
        return self._candidates() + tuple(other)

    def __radd__(self, other: Sequence[Candidate]) -> tuple[Candidate, ...]:
        return tuple(other) + self._candidates()

    def __repr__(self) -> str:
        return f"PoolRows({self._candidates()!r})"


_NO_HITS: Mapping[PathType, ChannelHit] = MappingProxyType({})


@dataclass(frozen=True, eq=False)
class TextPathCandidates:
    """What the paths that need no query embedding found (lexical, graph, pinned, keyword scan),
    with their stored objects and each object's hits in path order, by the id's integer: read and
    merged while the question's embedding is made, so that `candidate_objects` and
    `merged_candidates` only add the vector path's hits (DAG order: dataflows/pipeline.py)."""

    objects: Mapping[UUID, MemoryObject]
    hits: Mapping[int, Mapping[PathType, ChannelHit]]


@dataclass(frozen=True, eq=False)
class TextPathExclusions:
    """Each text-path object's exclusion reason (None: kept), by the id's integer, beside the
    object it was decided for: what `filtered_candidates` reads instead of deciding again."""

    reasons: Mapping[int, tuple[MemoryObject, str | None]]


@dataclass(frozen=True, eq=False)
class TextPathScoreInputs:
    """The score inputs of each text-path object the filter keeps, one row each, made while the
    question's embedding is: what `fused_scores` reads instead of making them again.

    `table` holds, per row, the text paths' hit columns (`TEXT_HIT_COLUMNS`, from the object's hits
    in `text_paths`), the columns that depend on the object alone (`OBJECT_COLUMNS`) and the speaker
    value (from `spoken`); `times` its stated, updated and current times in epoch microseconds;
    `masks` its text paths as a `path_mask`. `rows` gives each object's row by the id's integer and
    `objects` the object each row was made for. A row's hit columns hold for a candidate only in a
    pool merged from these very `text_paths` (`FilteredPool.merged_from`)."""

    rows: Mapping[int, int]
    objects: tuple[MemoryObject, ...]
    table: np.ndarray
    times: np.ndarray
    masks: np.ndarray
    text_paths: TextPathCandidates
    spoken: frozenset[int]


# The columns of `TextPathScoreInputs.table`, in order, and then the speaker value.
TEXT_HIT_COLUMNS = ("lexical", "lexical_bm25", "graph_proximity", "graph_hops", "graph_channel_rank")
OBJECT_COLUMNS = ("salience", "confidence", "epistemic_weight", "node_type_boost", "temporal_affinity")


@dataclass(frozen=True)
class CandidatePool:
    """Merged candidates in object-id order (a tuple, or the merge's `PoolRows`), with what each
    path reported."""

    candidates: Sequence[Candidate]
    backend_failures: Mapping[PathType, str] = field(default_factory=dict)
    embedding_mismatch: bool = False
    paths_at_limit: tuple[PathType, ...] = ()
    # The text paths this pool was merged from, if it was merged from them alone: each candidate's
    # hits are its hits there, with its vector hit added (what `TextPathScoreInputs` rows assume).
    merged_from: TextPathCandidates | None = field(default=None, compare=False, repr=False)

    @property
    def by_id(self) -> dict[UUID, Candidate]:
        return {c.object_id: c for c in self.candidates}


@dataclass(frozen=True)
class AlternatePasses:
    """What the vector, lexical and graph paths found for each alternative question, and the
    stored objects behind their hits (experimental policies, query reformulation)."""

    passes: tuple[tuple[ChannelResult, ...], ...] = ()
    objects: Mapping[UUID, MemoryObject] = field(default_factory=dict)


@dataclass(frozen=True)
class FilteredPool:
    """Candidates that may be scored, the removed ones (each a tuple, or the filter's `PoolRows`),
    and each removed object's reason."""

    candidates: Sequence[Candidate]
    excluded: Mapping[UUID, str]
    removed: Sequence[Candidate] = ()
    merged_from: TextPathCandidates | None = field(default=None, compare=False, repr=False)  # as CandidatePool's


# ---- Stage 5 and 6: the scored pool as columns ---------------------------------------------

_PATH_BITS = {path: 1 << position for position, path in enumerate(PathType)}


def path_mask(paths: Iterable[PathType]) -> int:
    """The paths as one integer, a bit per `PathType`."""
    mask = 0
    for path in paths:
        mask |= _PATH_BITS[path]
    return mask


# Session, episode and evidence context join after scoring, in that order.
_CONTEXT_PATHS = (PathType.SESSION_CONTEXT, PathType.EPISODE_CONTEXT, PathType.EVIDENCE_CONTEXT)


@cache  # a mask has one bit per PathType, so there are few
def mask_paths(mask: int) -> tuple[PathType, ...]:
    """The paths of a mask in `PathType` order, except the context paths last, in the order they join."""
    found = tuple(p for p in PathType if p not in _CONTEXT_PATHS and mask & _PATH_BITS[p])
    return found + tuple(p for p in _CONTEXT_PATHS if mask & _PATH_BITS[p])




@dataclass(frozen=True)
class CrossEncoderScores:
    """The cross-encoder's score for each object of the reranked prefix, and which model gave them:
    what the log records and replay hands back instead of running the model."""

    object_ids: tuple[UUID, ...]
    scores: np.ndarray
    model: str

    def __post_init__(self) -> None:
        if self.scores.shape != (len(self.object_ids),) or not np.isfinite(self.scores).all():
            raise ValueError(f"cross-encoder scores must be {len(self.object_ids)} finite numbers, "
                             f"got shape {self.scores.shape}")


@dataclass(frozen=True, eq=False)
class RerankedPool:
    """The scored pool after the optional cross-encoder, in final order (RFC 7.3). `policy` is None
    when the reranker is off (the pool is `fused_scores` itself); `anchor` is the candidate the
    anchored policy put first, if any."""

    pool: ScoredPool
    policy: str | None = None
    reranked: int = 0
    anchor: UUID | None = None
    model: str | None = None


@dataclass(frozen=True, eq=False)
class RankedCandidates:
    """The scored pool after session context, in final order, with each row's session provenance
    (`session_trigger` None and NaN offset and decay where the row kept its own score) and the
    neighbours the filter removed."""

    pool: ScoredPool
    session_trigger: tuple[UUID | None, ...]
    session_offset: np.ndarray
    session_decay: np.ndarray
    excluded: Mapping[UUID, str] = field(default_factory=dict)
    # Under session.context_packing: each neighbour that is not a trigger, by id, with the
    # highest-ranked trigger whose window holds it.
    session_links: Mapping[UUID, SessionLink] = field(default_factory=dict)
    # Under episode context (RFC 4.6): each marked record, by id, with the strongest candidate of
    # its episode, whose score times packing.episode_decay it inherits when that is higher.
    episode_anchors: Mapping[UUID, UUID] = field(default_factory=dict)
    # Under evidence projection or augmentation (RFC 4.7): each direct source that joined
    # EVIDENCE_CONTEXT, by id, with the candidate that routed its group, whose score it inherits
    # when that is higher. A projected group's members are in `excluded` ("evidence_projected").
    evidence_anchors: Mapping[UUID, UUID] = field(default_factory=dict)


# The stored objects an evidence group's references name (RFC 4.7), by the id of the candidate
# that routes the group, in the order of its evidence_refs; read by `evidence_sources`.
EvidenceSources = Mapping[UUID, tuple[MemoryObject, ...]]


class SessionLink(NamedTuple):
    """A session neighbour's trigger and its offset from it in session order (RFC 4.5)."""

    trigger: UUID
    offset: int


@dataclass(frozen=True, eq=False)
class Selection:
    """Candidates allowed into packing, in rank order, and why the others were left out."""

    pool: ScoredPool
    excluded: Mapping[UUID, str] = field(default_factory=dict)
    min_score_skipped: bool = False
    # Each left-out candidate's score and semantic_relevance in the ranked pool (bundle.ExclusionScore).
    excluded_scores: Mapping[UUID, Mapping[str, float | None]] = field(default_factory=dict)


# ---- Cross-scope hints (RFC-0005 amendment): their own pass, pool and scores, typed apart from
# the primary pool's so that no audit, explanation or what-if takes them for it.


@dataclass(frozen=True)
class CrossScopePass:
    """The hints' own vector pass over the request's cross_scope_namespaces, with its objects."""

    result: ChannelResult


@dataclass(frozen=True)
class CrossScopePool:
    """The hints that passed the epistemic and time rules, and the removed ones."""

    pool: FilteredPool


@dataclass(frozen=True, eq=False)
class CrossScopeScores:
    """The hints scored within their own pool; None when the request names no cross_scope_namespaces."""

    pool: ScoredPool | None
