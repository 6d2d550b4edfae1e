"""Exact BM25 in memory over immutable segments, scored as DuckDB FTS `match_bm25` scores.

Each segment's `TermPostings` (stores/indexes/postings.py) hold DuckDB's own analysis of its
text; numpy scores them. `Bm25Index` only gains segments, so a write costs what it adds while
document count, average length and document frequencies stay exact over whichever namespaces a
query names: a score never depends on how the store happens to be segmented, nor on what other
namespaces hold.

A document has two fields, the content (`value`) and the entity name. At their default weights
of 1 a score is match_bm25's over the two as one text; other weights (RFC-0005 Section 4.3,
`boost_fields`) count each field's term frequency and length times its weight (BM25F).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from uuid import UUID

import numpy as np

from rms_retrieval.stores.indexes.postings import TermPostings, query_terms, read_only
from rms_retrieval.stores.protocols import PLAIN_FIELDS, FieldWeights

# match_bm25's defaults, which the store has always used.
BM25_K1 = 1.2
BM25_B = 0.75
# Near-equal sums can differ in the last bits with summation order; rounding makes them exact
# ties, which the object id then breaks (RFC-0005 Section 11).
BM25_TIE_DECIMALS = 9
_ROUNDING_MARGIN = 2 * 10.0**-BM25_TIE_DECIMALS


@dataclass(frozen=True, eq=False)
class _Part:
    """One segment's rows of one namespace, postings sliced by term."""

    slices: Mapping[str, tuple[int, int]]
    rows: np.ndarray  # int32 per posting, row within the part
    tfs: np.ndarray  # int32 per posting
    lengths: np.ndarray  # int32 per posting: its row's document length
    name_tfs: np.ndarray  # int32 per posting: the part of its tf in the entity name
    name_lengths: np.ndarray  # int32 per posting: its row's entity-name length
    total_name_length: int
    object_ids: np.ndarray  # object array of UUID per row
    id_keys: np.ndarray  # (rows, 2) uint64: the ids' big-endian halves, for vectorised tie order
    num_docs: int
    total_length: int
    segment: Hashable | None


def _namespace_parts(
    postings: TermPostings, namespaces: Sequence[str], object_ids: Sequence[UUID], segment: Hashable | None
) -> dict[str, _Part]:
    names, row_namespace = np.unique(np.asarray(namespaces, dtype=object), return_inverse=True)
    ids = np.empty(len(object_ids), dtype=object)
    ids[:] = list(object_ids)
    id_keys = np.frombuffer(b"".join(object_id.bytes for object_id in object_ids), dtype=">u8").reshape(-1, 2)
    posting_namespace = row_namespace[postings.rows]
    name_tfs = postings.name_counts
    row_name_lengths = np.bincount(postings.rows, weights=name_tfs, minlength=postings.num_rows).astype(np.int32)
    parts = {}
    for code, name in enumerate(names):
        members = np.flatnonzero(row_namespace == code)
        local_row = np.full(postings.num_rows, -1, dtype=np.int32)
        local_row[members] = np.arange(len(members))
        chosen = np.flatnonzero(posting_namespace == code)
        term_ids = postings.term_ids[chosen]
        starts = np.flatnonzero(np.r_[True, term_ids[1:] != term_ids[:-1]]) if len(chosen) else np.empty(0, int)
        ends = np.r_[starts[1:], len(chosen)]
        global_rows = postings.rows[chosen]
        parts[str(name)] = _Part(
            slices=MappingProxyType(dict(zip(postings.vocabulary[term_ids[starts]].tolist(),
                                             zip(starts.tolist(), ends.tolist())))),
            rows=read_only(local_row[global_rows]),
            tfs=read_only(postings.tfs[chosen]),
            lengths=read_only(postings.lengths[global_rows]),
            name_tfs=read_only(name_tfs[chosen]),
            name_lengths=read_only(row_name_lengths[global_rows]),
            total_name_length=int(row_name_lengths[members].sum()),
            object_ids=read_only(ids[members]),
            id_keys=read_only(id_keys[members].astype(np.uint64)),
            num_docs=len(members),
            total_length=int(postings.lengths[members].sum()),
            segment=segment,
        )
    return parts


def _subscores(tf: np.ndarray, length: np.ndarray, idf: float, avgdl: float) -> np.ndarray:
    """match_bm25's `idf * ((tf * (k + 1)) / (tf + (k * ((1 - b) + (b * (len / avgdl))))))`, operation
    for operation (in place, and IEEE + and * commute exactly), so each subscore is DuckDB's."""
    norm = length / avgdl
    norm *= BM25_B
    norm += 1 - BM25_B
    norm *= BM25_K1
    norm += tf
    scores = tf * (BM25_K1 + 1)
    scores /= norm
    scores *= idf
    return scores


def _weighted(tf: np.ndarray, length: np.ndarray, rows: np.ndarray, hits: list, fields: FieldWeights
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One term's postings with each field's tf and length times its weight, those left with no
    weighted tf dropped."""
    name_tf = np.concatenate([part.name_tfs[start:end] for (start, end), part, _ in hits]).astype(np.float64)
    name_length = np.concatenate([part.name_lengths[start:end] for (start, end), part, _ in hits]).astype(np.float64)
    tf = fields.value * (tf - name_tf) + fields.entity_canonical_name * name_tf
    length = fields.value * (length - name_length) + fields.entity_canonical_name * name_length
    kept = tf > 0
    return tf[kept], length[kept], rows[kept]


def _round_half_away(values: np.ndarray, decimals: int) -> np.ndarray:
    """DuckDB's round(x, d) for x >= 0: std::round(x * 10^d) / 10^d (halves away from zero)."""
    modifier = 10.0**decimals
    scaled = values * modifier
    whole = np.floor(scaled)
    return (whole + (scaled - whole >= 0.5)) / modifier


@dataclass(frozen=True, eq=False)
class Bm25Index:
    """Immutable BM25 over segments; `with_segment` returns a new index sharing this one's parts."""

    _parts: Mapping[str, tuple[_Part, ...]] = field(default_factory=lambda: MappingProxyType({}))
    _segments: frozenset[Hashable] = frozenset()

    @classmethod
    def empty(cls) -> Bm25Index:
        return cls()

    def with_segment(
        self,
        postings: TermPostings,
        namespaces_per_row: Sequence[str],
        object_ids_per_row: Sequence[UUID],
        key: Hashable | None = None,
    ) -> Bm25Index:
        """This index plus one segment; costs time in proportion to the segment, not the index.
        A `key` lets `without_segments` take the segment out again (after a merge, say)."""
        if not len(namespaces_per_row) == len(object_ids_per_row) == postings.num_rows:
            raise ValueError(
                f"a segment of {postings.num_rows} rows needs one namespace and one object id per row "
                f"(got {len(namespaces_per_row)} namespaces and {len(object_ids_per_row)} ids)"
            )
        if key is not None and key in self._segments:
            raise ValueError(f"segment {key!r} is in the index already; take it out with without_segments first")
        merged = dict(self._parts)
        for namespace, part in _namespace_parts(postings, namespaces_per_row, object_ids_per_row, key).items():
            merged[namespace] = (*merged.get(namespace, ()), part)
        keys = self._segments if key is None else self._segments | {key}
        return Bm25Index(MappingProxyType(merged), keys)

    def without_segments(self, keys: Iterable[Hashable]) -> Bm25Index:
        """This index less the segments added with these keys. A merge is
        `index.without_segments(sources).with_segment(merged, ..., key=...)`: scores are unchanged,
        and queries no longer pay for many small parts."""
        removed = frozenset(keys)
        if not removed <= self._segments:
            raise ValueError(f"segments {sorted(map(repr, removed - self._segments))} are not in the index")
        kept = {}
        for namespace, parts in self._parts.items():
            remaining = tuple(part for part in parts if part.segment not in removed)
            if remaining:
                kept[namespace] = remaining
        return Bm25Index(MappingProxyType(kept), self._segments - removed)

    @property
    def namespaces(self) -> tuple[str, ...]:
        return tuple(sorted(self._parts))

    @property
    def segment_keys(self) -> frozenset[Hashable]:
        """The keys of the segments added with one."""
        return self._segments

    def num_docs(self, namespaces: Iterable[str]) -> int:
        return sum(part.num_docs for part in self._scope(namespaces))

    def _scope(self, namespaces: Iterable[str]) -> list[_Part]:
        return [part for namespace in sorted(set(namespaces)) for part in self._parts.get(namespace, ())]

    def search(self, text: str, namespaces: Sequence[str], limit: int,
               fields: FieldWeights = PLAIN_FIELDS) -> list[tuple[UUID, float]]:
        """match_bm25 scores over the documents of `namespaces` only, rounded to 9 decimals, the best
        `limit` first, ties by object id. Under `fields` other than 1 and 1, each field's tf and
        length count times its weight, and a term's document frequency counts the documents it
        is in with a positive weight."""
        parts = self._scope(namespaces)
        terms = query_terms(text) if parts and limit > 0 else ()
        num_docs = sum(part.num_docs for part in parts)
        total_length = sum(part.total_length for part in parts)
        if not fields.plain:
            names = sum(part.total_name_length for part in parts)
            total_length = fields.value * (total_length - names) + fields.entity_canonical_name * names
        if not terms or total_length == 0:
            return []
        avgdl = total_length / num_docs
        offsets = np.cumsum([0, *(part.num_docs for part in parts)])
        keys, subscores = [], []
        for term in terms:
            hits = [(part.slices[term], part, offset) for part, offset in zip(parts, offsets) if term in part.slices]
            if not hits:
                continue
            # Integers are exact in float64, so these equal DuckDB's BIGINT-to-DOUBLE operands.
            tf = np.concatenate([part.tfs[start:end] for (start, end), part, _ in hits]).astype(np.float64)
            length = np.concatenate([part.lengths[start:end] for (start, end), part, _ in hits]).astype(np.float64)
            rows = np.concatenate([part.rows[start:end].astype(np.int64) + offset for (start, end), part, offset in hits])
            if not fields.plain:
                tf, length, rows = _weighted(tf, length, rows, hits, fields)
                if not len(tf):
                    continue
            df = len(tf)
            idf = np.log10((num_docs - df + 0.5) / (df + 0.5) + 1)
            subscores.append(_subscores(tf, length, idf, avgdl))
            keys.append(rows)
        if not keys:
            return []
        sums = np.bincount(np.concatenate(keys), weights=np.concatenate(subscores), minlength=int(offsets[-1]))
        # Every subscore is positive, so a match never sums to 0. Rounding moves a score by at most
        # half the last decimal, so nothing far below the limit-th raw sum can reach the top.
        floor = 0.0
        if limit < len(sums):
            floor = np.partition(sums, len(sums) - limit)[len(sums) - limit] - _ROUNDING_MARGIN
        matched = np.flatnonzero(sums > floor) if floor > 0 else np.flatnonzero(sums)
        scores = _round_half_away(sums[matched], BM25_TIE_DECIMALS)
        if len(matched) > limit:
            threshold = np.partition(scores, len(scores) - limit)[len(scores) - limit]
            keep = scores >= threshold
            matched, scores = matched[keep], scores[keep]
        owner = np.searchsorted(offsets, matched, side="right") - 1
        id_keys = np.empty((len(matched), 2), dtype=np.uint64)
        object_ids = np.empty(len(matched), dtype=object)
        for index in np.unique(owner).tolist():
            chosen = owner == index
            local = matched[chosen] - offsets[index]
            id_keys[chosen] = parts[index].id_keys[local]
            object_ids[chosen] = parts[index].object_ids[local]
        order = np.lexsort((id_keys[:, 1], id_keys[:, 0], -scores))[:limit]
        return list(zip(object_ids[order].tolist(), scores[order].tolist()))
