"""Stage 5: scoring and ranking (RFC 7, 7.1, 7.2). Hamilton config `fusion` picks the formula.

`fused_scores` is a `ScoredPool`: one numpy column per input, rank and applied factor, so an
auditor sees exactly how each score was made (`rms_retrieval.dataflows.node_types.node_frame` shows
it as a table). Rows are in final order: score descending, then path count, then object id.

The arithmetic is elementwise numpy in the order the RFC writes each formula, so every score is
the same float a per-candidate loop gives. `math.exp` stays per element on purpose (numpy's
vectorised exp may differ from the C library's in the last bit); scores are rounded as Python's
`round()` rounds them, correctly, by `nodes/helpers/rounding.py` (numpy's scale-and-round does
not always).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from functools import cached_property, lru_cache
from itertools import repeat
from typing import NamedTuple

import numpy as np
from hamilton.function_modifiers import config

from rms_retrieval.nodes.models import QueryAnalysis, RetrievalRequest
from rms_retrieval.nodes.pools import (OBJECT_COLUMNS, PRIMARY_PATHS, TEXT_HIT_COLUMNS, ChannelHit, FilteredPool,
                                       PathType, PoolRows, TextPathCandidates, TextPathExclusions, TextPathScoreInputs,
                                       path_mask)
from rms_retrieval.nodes.scored_pool import RERANK_COLUMNS, ScoredPool, ScoreFactors, rank_order
from rms_retrieval.nodes.settings import RetrievalSettings, WeightedScoring
from rms_retrieval.nodes.helpers.rounding import rounded
from rms_retrieval.nodes.helpers.object_inputs import ObjectInputs
from rms_retrieval.nodes.helpers.temporal import micros
from rms_retrieval.stores.analysis.speakers import role_of
from rms_retrieval.stores.models import MemoryObject

SCORE_DECIMALS = 10
TIE_BREAK_SCALE = 1e-11
# An update-worded candidate ("moved", "now", ...) counts as this many times as recent, capped at 1:
# under the recency boost a stated change outranks an older statement of the old state.
UPDATE_WORDING_RECENCY_GAIN = 2.0
# RFC 7.2: while the weighted formula shifts weight to recency it decays by at least this per day.
SHIFTED_RECENCY_LAMBDA = 0.05
ADDITIVE_WEIGHTS = ("w_semantic", "w_lexical", "w_graph", "w_recency", "w_salience", "w_confidence")
# Pinned objects bypass scoring, so at most three primary paths can agree on a scored candidate;
# the weighted formula's w_paths term gives full credit when all three do.
SCORED_PATHS = len(PRIMARY_PATHS - {PathType.PINNED})
_PRIMARY_BITS = path_mask(PRIMARY_PATHS)
UPDATE_WORDS = ("now", "moved", "changed", "switched", "updated", "no longer", "anymore", "these days", "currently",
                "just started", "new job")
# Searched in the case-folded text: twice as fast as an IGNORECASE search over long turns.
_UPDATE_WORDING = re.compile(r"\b(" + "|".join(UPDATE_WORDS) + r")\b")


@lru_cache(maxsize=100_000)
def _update_worded(content: str) -> bool:
    """Whether `content` holds one of UPDATE_WORDS as whole words, whatever their case. A text
    holding none of them anywhere (nine in ten LongMemEval-S turns) is told by substring searches
    alone, in half the regular expression's time over a long turn."""
    folded = content.casefold()
    return any(word in folded for word in UPDATE_WORDS) and bool(_UPDATE_WORDING.search(folded))


def _days(later: int, earlier: np.ndarray) -> np.ndarray:
    """Whole days between epoch-microsecond times, never negative (as `timedelta.total_seconds`)."""
    return np.maximum((later - earlier) / 1e6 / 86400.0, 0.0)


def _exp(values: np.ndarray) -> np.ndarray:
    return np.fromiter((math.exp(v) for v in values.tolist()), dtype=float, count=len(values))


def _rounded(values: np.ndarray) -> np.ndarray:
    return rounded(values, SCORE_DECIMALS)


def _distinct_ascending(values: np.ndarray) -> np.ndarray:
    """`np.unique(values)` by sorting: numpy 2.4's hashing `unique` is three times slower here."""
    ordered = np.sort(values)
    return ordered[np.r_[True, ordered[1:] != ordered[:-1]]] if len(ordered) else ordered


def _competition_ranks(values: np.ndarray) -> np.ndarray:
    """Rank by value, best first; tied values share the better rank (1, 2, 2, 4); NaN stays NaN."""
    ranks = np.full(len(values), np.nan)
    present = ~np.isnan(values)
    found = values[present]
    ascending = np.sort(found)
    ranks[present] = len(found) - np.searchsorted(ascending, found, side="right") + 1
    return ranks


def _pool_relative(values: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """factor = value / the largest value among `rows`, capped at 1.0 (RFC 7.2); NaN off `rows`."""
    factor = np.full(len(values), np.nan)
    largest = float(values[rows].max()) if rows.any() else 0.0
    factor[rows] = np.minimum(values[rows] / largest, 1.0) if largest > 0 else 1.0
    return factor


# Bound once: reading an enum member off its class costs a Python call each time (3.11).
_VECTOR, _LEXICAL, _GRAPH = PathType.VECTOR, PathType.LEXICAL, PathType.GRAPH
_VECTOR_BIT = path_mask((PathType.VECTOR,))
_NAN = math.nan


def _text_hit_values(hits: Mapping[PathType, ChannelHit]) -> tuple[float, ...]:
    """A candidate's `TEXT_HIT_COLUMNS`: NaN (0.0 for graph proximity) where no such hit."""
    lexical, graph = hits.get(_LEXICAL), hits.get(_GRAPH)
    hops = graph.detail.get("hops") if graph else None
    return (lexical.score if lexical else _NAN, lexical.raw_score if lexical else _NAN,
            graph.score if graph else 0.0, _NAN if hops is None else hops, graph.rank if graph else _NAN)


class _Speakers(NamedTuple):
    """What a candidate's speaker value reads: the objects spoken by a person the question names and
    (scoring.pronoun_speakers) the chat roles the question names, which speak as named speakers do."""

    spoken: frozenset[int]
    roles: frozenset[str]
    boost: float

    @classmethod
    def of(cls, spoken: frozenset[int], analysis: QueryAnalysis, settings: RetrievalSettings) -> _Speakers:
        roles = frozenset(analysis.speaker_roles).intersection(settings.scoring.pronoun_speakers)
        return cls(spoken, roles, settings.scoring.speaker_boost)

    def values(self, keys: Sequence[int], objects: Sequence[MemoryObject]) -> np.ndarray:
        """Each object's speaker value (`keys`: their ids' integers): 1 + boost where lifted, else 1."""
        lifted = np.fromiter(map(self.spoken.__contains__, keys), dtype=bool, count=len(keys))
        if self.roles:
            lifted |= np.fromiter((role_of(obj) in self.roles for obj in objects), dtype=bool, count=len(objects))
        return np.where(lifted, 1.0 + self.boost, 1.0)


def text_path_score_inputs(
    text_path_exclusions: TextPathExclusions,
    text_path_candidates: TextPathCandidates,
    query_analysis: QueryAnalysis,
    settings: RetrievalSettings,
    spoken_by_query_entities: frozenset[int] = frozenset(),
) -> TextPathScoreInputs:
    """The score inputs of each text-path object the filter keeps, made while the question's
    embedding is, so `fused_scores` makes them only for the vector path's other objects."""
    speakers = _Speakers.of(spoken_by_query_entities, query_analysis, settings)
    found = text_path_candidates.hits
    kept = [(key, obj) for key, (obj, reason) in text_path_exclusions.reasons.items() if reason is None]
    objects = [obj for _, obj in kept]
    table = np.empty((len(kept), _TABLE_WIDTH))
    table[:, _HIT_COLUMNS], masks = _hit_columns([found.get(key, _NO_HITS) for key, _ in kept])
    table[:, _OWN_COLUMNS], times = _object_columns(objects, query_analysis, settings)
    table[:, -1] = speakers.values([key for key, _ in kept], objects)
    return TextPathScoreInputs(
        rows={key: row for row, (key, _) in enumerate(kept)}, objects=tuple(objects), table=table, times=times,
        masks=masks, text_paths=text_path_candidates, spoken=spoken_by_query_entities,
    )


_NO_HITS: Mapping[PathType, ChannelHit] = {}
_NO_TEXT_HITS = _text_hit_values(_NO_HITS)
# TextPathScoreInputs.table: the hit columns, the object's own columns, then the speaker value.
_TABLE_WIDTH = len(TEXT_HIT_COLUMNS) + len(OBJECT_COLUMNS) + 1
_HIT_COLUMNS = slice(0, len(TEXT_HIT_COLUMNS))
_OWN_COLUMNS = slice(len(TEXT_HIT_COLUMNS), _TABLE_WIDTH - 1)
_TIME_COLUMNS = ("stated_us", "updated_us", "current_us")


def _hit_columns(hits_of: Sequence[Mapping[PathType, ChannelHit]]) -> tuple[np.ndarray, np.ndarray]:
    """Each candidate's `TEXT_HIT_COLUMNS` (a row each), and its paths as a `path_mask`."""
    values = np.array(list(map(_text_hit_values, hits_of)), dtype=float).reshape(len(hits_of), len(TEXT_HIT_COLUMNS))
    return values, np.array(list(map(path_mask, hits_of)), dtype=np.int64)


def _object_columns(objects: Sequence[MemoryObject], analysis: QueryAnalysis, settings: RetrievalSettings
                    ) -> ObjectInputs:
    """Each object's `OBJECT_COLUMNS` (a row each), and its `_TIME_COLUMNS` in epoch microseconds."""
    scoring = settings.scoring
    # The window whatever the intent (settings.ScoringSettings.temporal_boost).
    return ObjectInputs.of(objects, scoring.epistemic_weights, scoring.node_type_boosts, analysis.temporal_window)


class _Inputs:
    """The inputs both formulas share, one numpy column each, in the filtered pool's order.

    A candidate's row of `TextPathScoreInputs` is read only for the very object it was made for: its
    object columns and times always, its hit columns and path mask where the pool was merged from
    the same text paths, its speaker value where the same objects were spoken; the rest is made here."""

    def __init__(
        self, filtered: FilteredPool, analysis: QueryAnalysis, settings: RetrievalSettings, spoken: frozenset[int],
        known: TextPathScoreInputs | None = None,
    ) -> None:
        rows = PoolRows.of(filtered.candidates)
        size = len(rows)
        row_of, made = (known.rows.get, known.objects) if known is not None else ({}.get, ())
        keys, objects = rows.keys, rows.objects
        # Each column is read key by key in C (dictionary lookups mapped over the keys).
        cosines = {key: hit.raw_score for key, hit in rows.vector.items()}
        self.objects: tuple[MemoryObject, ...] = objects
        self.keys: list[int] = keys
        self.semantic = np.fromiter(map(cosines.get, keys, repeat(_NAN)), dtype=float, count=size)
        # Each candidate's row of `known`, where it was made for this very object (the same id()).
        place = np.fromiter(map(row_of, keys, repeat(-1)), dtype=np.intp, count=size)
        kept = place >= 0
        if kept.any():
            made_ids = np.fromiter(map(id, made), dtype=np.uint64, count=len(made))
            kept &= made_ids[np.where(kept, place, 0)] == np.fromiter(map(id, objects), dtype=np.uint64, count=size)
        table = np.empty((size, _TABLE_WIDTH))
        whole = np.empty((size, len(_TIME_COLUMNS)), dtype=np.int64)
        mask = np.zeros(size, dtype=np.int64)
        if known is not None:
            known_rows = place[kept]
            table[kept] = known.table[known_rows]
            whole[kept] = known.times[known_rows]
            mask[kept] = known.masks[known_rows]
        mask[np.fromiter(map(rows.vector.__contains__, keys), dtype=bool, count=size)] |= _VECTOR_BIT
        new = np.flatnonzero(~kept).tolist()
        hit_rows = new if known is not None and filtered.merged_from is known.text_paths else range(size)
        if hit_rows:
            # A row the text paths did not find has only its vector hit: no text hit values.
            table[hit_rows, _HIT_COLUMNS] = _NO_TEXT_HITS
            found, keys = rows.hits, rows.keys
            texts = [i for i in hit_rows if keys[i] in found]
            if texts:
                table[texts, _HIT_COLUMNS], mask[texts] = _hit_columns([rows.hits_at(i) for i in texts])
        if new:
            table[new, _OWN_COLUMNS], whole[new] = _object_columns([objects[i] for i in new], analysis, settings)
        speaker_rows = new if known is not None and known.spoken == spoken else range(size)
        if speaker_rows:
            speakers = _Speakers.of(spoken, analysis, settings)
            table[speaker_rows, -1] = speakers.values(list(map(keys.__getitem__, speaker_rows)),
                                                      list(map(objects.__getitem__, speaker_rows)))
        for position, name in enumerate((*TEXT_HIT_COLUMNS, *OBJECT_COLUMNS, "speaker_value")):
            setattr(self, name, table[:, position])
        # Times as integer microseconds: differences stay exact, as datetime arithmetic is.
        for position, name in enumerate(_TIME_COLUMNS):
            setattr(self, name, whole[:, position])
        self.path_mask = mask
        # Stated after the request's reference time: never the current state at that time (_current_rows).
        self.after_reference = self.stated_us > micros(analysis.reference_time)
        # A candidate has one hit per path, so its primary paths are its mask's primary bits.
        self.path_count = np.bitwise_count(self.path_mask & _PRIMARY_BITS).astype(np.int64)
        self.semantic_relevance = np.maximum(np.nan_to_num(self.semantic, nan=0.0), 0.0)

    @cached_property
    def update_wording(self) -> np.ndarray:
        """Whether each candidate words a change ("moved", "now", ...): read only by a current-state
        question's recency, so a long turn's text is searched only when one asks."""
        return np.fromiter((_update_worded(obj.content) for obj in self.objects), dtype=bool, count=len(self.objects))

    def __len__(self) -> int:
        return len(self.objects)


def _current_update(
    inputs: _Inputs, lexical: np.ndarray, clock: np.ndarray, analysis: QueryAnalysis, settings: RetrievalSettings
) -> np.ndarray:
    """RFC 7.1: the factor per row; the newest candidate stated by the reference time, if it
    presents itself as an update, gets the bounded multiplier."""
    factor = np.ones(len(inputs))
    multiplier = settings.scoring.current_update_multiplier
    current = ~inputs.after_reference
    if not analysis.current_state or multiplier == 1.0 or not current.any():
        return factor
    relevant = (inputs.semantic_relevance + np.nan_to_num(lexical, nan=0.0)) >= settings.scoring.relevance_floor
    factor[(clock == clock[current].max()) & current & inputs.update_wording & relevant] = multiplier
    return factor


def _pool(
    inputs: _Inputs, formula_version: int, score: np.ndarray, **factors: np.ndarray
) -> ScoredPool:
    values = ScoreFactors(
        semantic=inputs.semantic, lexical_bm25=inputs.lexical_bm25, graph_proximity=inputs.graph_proximity,
        graph_hops=inputs.graph_hops, salience=inputs.salience, confidence=inputs.confidence,
        epistemic_weight=inputs.epistemic_weight, node_type_boost=inputs.node_type_boost,
        temporal_affinity=inputs.temporal_affinity, **factors,
        **{name: np.full(len(inputs), np.nan) for name in RERANK_COLUMNS},
    )
    unordered = ScoredPool(
        formula_version=formula_version, objects=inputs.objects, score=score,
        semantic_relevance=inputs.semantic_relevance, path_mask=inputs.path_mask, path_count=inputs.path_count,
        factors=values,
    )
    return unordered.take(rank_order(score, inputs.path_count, inputs.objects, inputs.keys))


@config.when(fusion="rrf")
def fused_scores__rrf(
    filtered_candidates: FilteredPool,
    query_analysis: QueryAnalysis,
    settings: RetrievalSettings,
    spoken_by_query_entities: frozenset[int] = frozenset(),
    text_path_score_inputs: TextPathScoreInputs | None = None,
) -> ScoredPool:
    """Score formula version 2: reciprocal rank fusion with pool-relative factors (RFC 7.2)."""
    fusion = settings.scoring.rank_fusion
    k = fusion.rrf_k
    inputs = _Inputs(filtered_candidates, query_analysis, settings, spoken_by_query_entities, text_path_score_inputs)
    semantic_rank = _competition_ranks(inputs.semantic)
    lexical_rank = _competition_ranks(inputs.lexical)
    graph_rank = _competition_ranks(-inputs.graph_channel_rank)
    ranks = [semantic_rank, lexical_rank] + ([graph_rank] if fusion.graph_as_ranked_list else [])
    # Python's sum over the present terms starts from 0; adding 0.0 for an absent one is exact.
    reciprocal = sum(np.where(np.isnan(rank), 0.0, 1.0 / (k + rank)) for rank in ranks)
    base_score = reciprocal * (k + 1) / len(ranks)
    on_channel = np.logical_or.reduce([~np.isnan(rank) for rank in ranks])
    temporal_value = 1.0 + settings.scoring.temporal_boost * inputs.temporal_affinity
    epistemic_factor = _pool_relative(inputs.epistemic_weight, on_channel)
    node_type_factor = _pool_relative(inputs.node_type_boost, on_channel)
    temporal_factor = _pool_relative(temporal_value, on_channel)
    speaker_factor = _pool_relative(inputs.speaker_value, on_channel)

    boost = fusion.rrf_recency_boost if query_analysis.current_state else None
    recency = np.full(len(inputs), np.nan)
    recency_boost_factor = np.full(len(inputs), np.nan)
    tie_break = np.full(len(inputs), np.nan)
    stated = inputs.stated_us[on_channel]
    later = inputs.after_reference[on_channel]
    if on_channel.any():
        # One recency decay serves both formulas (see WeightedScoring.recency_lambda_per_day); a
        # field of its own under rank_fusion would change every configuration fingerprint.
        lam = settings.scoring.weighted.recency_lambda_per_day
        if boost:  # the recency only a current-state question reads
            ranked_recency = _exp(-lam * _days(stated[~later].max(), stated)) if (~later).any() else np.zeros(len(stated))
            worded = inputs.update_wording[on_channel]
            ranked_recency[worded] = np.minimum(1.0, UPDATE_WORDING_RECENCY_GAIN * ranked_recency[worded])
            ranked_recency[later] = 0.0  # stated after the reference time: no current-state lift
            recency[on_channel] = ranked_recency
            recency_boost_factor = _pool_relative(1.0 + boost * recency, on_channel)
        if fusion.rrf_tie_break == "event_time":
            stated = np.where(later, np.iinfo(np.int64).min, stated)  # after the reference time: last
            times = _distinct_ascending(stated)
            # Place 0 for the newest time, 1 for the next newest, ...
            tie_break[on_channel] = (len(times) - 1 - np.searchsorted(times, stated)) / len(times)

    score = base_score * epistemic_factor * node_type_factor * temporal_factor * speaker_factor
    score = _rounded(score * np.nan_to_num(recency_boost_factor, nan=1.0))
    # Rounded first, so scores that differ keep their order; the tie-break only splits equals.
    split = ~np.isnan(tie_break) & (score > 0)
    score[split] -= tie_break[split] * TIE_BREAK_SCALE
    score[~on_channel] = 0.0
    current = _current_update(inputs, inputs.lexical, inputs.updated_us, query_analysis, settings)
    return _pool(
        inputs, 2, score * current, semantic_rank=semantic_rank, lexical=inputs.lexical, lexical_rank=lexical_rank,
        graph_rank=graph_rank, recency=recency, epistemic_factor=epistemic_factor,
        node_type_factor=node_type_factor, temporal_factor=temporal_factor, speaker_factor=speaker_factor,
        recency_boost_factor=recency_boost_factor, tie_break=tie_break, current_update_factor=current,
        base_score=base_score,
    )


def _additive_weights(w: WeightedScoring, current_state: bool) -> tuple[dict[str, float], bool]:
    """Formula 1's six additive weights, and whether RFC 7.2's current-state shift moved them: with
    `current_state_recency_weight` set, a current-state question raises a lower w_recency to it and
    scales the other five to keep the sum 1."""
    weights = {name: getattr(w, name) for name in ADDITIVE_WEIGHTS}
    target = w.current_state_recency_weight
    if not current_state or target is None or weights["w_recency"] >= target:
        return weights, False
    scale = (1.0 - target) / (1.0 - weights["w_recency"])  # w_recency < target < 1 here
    return {name: target if name == "w_recency" else value * scale for name, value in weights.items()}, True


@config.when(fusion="weighted")
def fused_scores__weighted(
    filtered_candidates: FilteredPool,
    query_analysis: QueryAnalysis,
    request: RetrievalRequest,
    settings: RetrievalSettings,
    spoken_by_query_entities: frozenset[int] = frozenset(),
    text_path_score_inputs: TextPathScoreInputs | None = None,
) -> ScoredPool:
    """Score formula version 1: the weighted sum of all eight inputs (RFC 7)."""
    w = settings.scoring.weighted
    inputs = _Inputs(filtered_candidates, query_analysis, settings, spoken_by_query_entities, text_path_score_inputs)
    current_state = query_analysis.current_state and len(inputs)
    if current_state:  # RFC 7: event_time, else updated_at, back from the newest memory stated by then
        known = inputs.current_us[~inputs.after_reference]
        anchor, clock = (known.max() if len(known) else micros(request.reference_time)), inputs.current_us
    else:  # RFC 7: updated_at, or with recency_time="event_time" when the memory was stated
        anchor = micros(request.reference_time)
        clock = inputs.stated_us if w.recency_time == "event_time" else inputs.updated_us
    boost = settings.scoring.temporal_boost
    lexical = np.nan_to_num(inputs.lexical, nan=0.0)  # the input formula 1 reads: no lexical hit is zero relevance
    weights, shifted = _additive_weights(w, bool(current_state))
    lam = max(w.recency_lambda_per_day, SHIFTED_RECENCY_LAMBDA) if shifted else w.recency_lambda_per_day
    recency = _exp(-lam * _days(anchor, clock))
    if shifted:
        worded = inputs.update_wording
        recency[worded] = np.minimum(1.0, UPDATE_WORDING_RECENCY_GAIN * recency[worded])
    if current_state:
        recency[inputs.after_reference] = 0.0  # stated after the reference time: no current-state lift
    temporal_factor = (1.0 + boost * inputs.temporal_affinity) / (1.0 + boost)
    # Relative to the pool's largest, as formula 2's factors: 1.0 for every row when no candidate
    # was spoken by a person the question names.
    speaker_factor = _pool_relative(inputs.speaker_value, np.ones(len(inputs), dtype=bool))
    additive = (
        weights["w_semantic"] * inputs.semantic_relevance
        + weights["w_lexical"] * lexical
        + weights["w_graph"] * inputs.graph_proximity
        + weights["w_recency"] * recency
        + weights["w_salience"] * inputs.salience
        + weights["w_confidence"] * inputs.confidence
    )
    score = _rounded(
        additive * inputs.epistemic_weight * inputs.node_type_boost * temporal_factor * speaker_factor
        + w.w_paths * np.minimum(inputs.path_count / SCORED_PATHS, 1.0)
    )
    current = _current_update(inputs, lexical, clock, query_analysis, settings)
    # RFC 7.1: below the relevance floor, the adjusted score is capped at the relevance itself, so
    # salience, recency and paths cannot lift a memory the question barely matches.
    relevance = inputs.semantic_relevance + lexical
    adjusted = np.where(relevance < settings.scoring.relevance_floor, np.minimum(score * current, relevance),
                        score * current)
    none = np.full(len(inputs), np.nan)
    return _pool(
        inputs, 1, adjusted, semantic_rank=none, lexical=lexical, lexical_rank=none, graph_rank=none,
        recency=recency, epistemic_factor=inputs.epistemic_weight, node_type_factor=inputs.node_type_boost,
        temporal_factor=temporal_factor, speaker_factor=speaker_factor, recency_boost_factor=none, tie_break=none,
        current_update_factor=current, base_score=additive,
    )
