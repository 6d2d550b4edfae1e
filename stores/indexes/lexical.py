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

import threading
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType
from uuid import UUID

import numpy as np

from rms_retrieval.stores.indexes.adjacency import uuid_keys, uuid_of
from rms_retrieval.stores.indexes.postings import TermPostings, query_terms
from rms_retrieval.stores.protocols import PLAIN_FIELDS, FieldWeights

# match_bm25's defaults, which the store has always used.
BM25_K1 = 1.2
BM25_B = 0.75
# Near-equal sums can differ in the last bits with summation order; rounding makes them exact
# ties, which the object id then breaks (RFC-0005 Section 11).
BM25_TIE_DECIMALS = 9
_ROUNDING_MARGIN = 2 * 10.0**-BM25_TIE_DECIMALS


@dataclass(frozen=True)
class _Hit:
    """One part's postings of one term: rows within the part, and per posting its tf and its row's
    document length; the entity-name counts (`names`) are read only for weighted fields."""

    rows: np.ndarray
    tfs: np.ndarray
    lengths: np.ndarray
    segment: _SegmentPostings
    segment_rows: np.ndarray
    positions: slice | np.ndarray

    def names(self) -> tuple[np.ndarray, np.ndarray]:
        """Per posting, the part of its tf in the entity name, and its row's entity-name length."""
        name_tfs = self.segment.name_tfs
        return (np.zeros(len(self.rows), dtype=np.int32) if name_tfs is None else name_tfs[self.positions],
                self.segment.name_lengths[self.segment_rows])


@dataclass(frozen=True, eq=False)
class _Part:
    """One segment's live rows of one namespace: rows `first`..`last` of the segment (those of
    `members` among them, in row order, where the namespace's rows are not one unbroken run or some
    are deleted). A term's postings are read from the segment's own arrays when asked for."""

    segment: _SegmentPostings
    first: int
    stop: int
    members: np.ndarray | None  # the part's rows, None: all of first..stop
    num_docs: int
    total_length: int

    @cached_property
    def total_name_length(self) -> int:
        """The terms in the part's entity names (weighted fields only ask)."""
        kept = slice(self.first, self.stop) if self.members is None else self.members
        return int(self.segment.name_lengths[kept].sum())

    def postings_of(self, term: str) -> _Hit | None:
        return self.segment.postings_of(self, term)

    def segment_rows(self, local: np.ndarray) -> np.ndarray:
        """The segment rows of the part's rows `local` (0 is its first)."""
        return local + self.first if self.members is None else self.members[local]

    def without(self, dead: np.ndarray) -> _Part:
        """This part less its rows `dead` (ascending, each one of its rows): what the segment's
        `part` gives with them deleted, from this part's own rows."""
        if not len(dead):
            return self
        members = np.arange(self.first, self.stop) if self.members is None else self.members
        keep = np.ones(len(members), dtype=bool)
        keep[np.searchsorted(members, dead)] = False
        kept = members[keep]
        return _Part(self.segment, self.first, self.stop, kept, len(kept),
                     self.total_length - int(self.segment.lengths[dead].sum()))


class _SegmentParts:
    """One segment's postings split by namespace. A part is a few numbers and, for each term a
    search names, a slice of the segment's postings (sorted by term, then row): nothing per
    posting is copied, so a store of many namespaces, memory-mapped, costs a reader what its
    searches read. The rows `dead` names (deleted ones) are not indexed. Each namespace's part
    is made when a search first names it, and kept here; a part refers to the segment's
    `_SegmentPostings`, never back to this cache, so no reference cycle keeps a replaced segment
    for the garbage collector to find."""

    def __init__(self, postings: TermPostings, names: Sequence[str], codes: np.ndarray, id_keys: np.ndarray,
                 dead: np.ndarray, key: Hashable | None,
                 name_tfs: Callable[[], np.ndarray | None] | None = None,
                 id_at: Callable[[int], UUID] | None = None) -> None:
        live_counts = np.bincount(codes, minlength=len(names)) - np.bincount(codes[dead], minlength=len(names))
        self._install(key, _SegmentPostings(postings, codes, id_keys, name_tfs, id_at), list(names), dead,
                      live_counts, {})

    def _install(self, key: Hashable | None, segment: _SegmentPostings, names: list[str], dead: np.ndarray,
                 live_counts: np.ndarray, parts: dict[str, _Part]) -> None:
        self.key, self.segment, self.dead = key, segment, dead  # the rows left out, ascending
        self._names, self._live_counts = names, live_counts
        self.namespaces = [names[code] for code in np.flatnonzero(live_counts).tolist()]
        self._code_of = {name: code for code, name in enumerate(names)}
        self._parts = parts
        self._lock = threading.Lock()

    def part(self, namespace: str) -> _Part:
        found = self._parts.get(namespace)
        if found is None:
            with self._lock:
                found = self._parts.get(namespace)
                if found is None:
                    found = self._parts[namespace] = self.segment.part(self._code_of[namespace], self.dead)
        return found

    def with_dead(self, dead: np.ndarray, key: Hashable | None) -> _SegmentParts | None:
        """This segment read with more of its rows deleted (`dead`: every row a later deletion file
        names, ascending, once each): its postings and the caches over them shared, each part made so
        far less the rows deleted since, at the cost of the deleted rows. None where `dead` lacks a
        row this reading left out (a deletion file only grows)."""
        since = rows_added(dead, self.dead)
        if since is None:
            return None
        codes = self.segment.codes[since]
        derived = _SegmentParts.__new__(_SegmentParts)
        live_counts = self._live_counts - np.bincount(codes, minlength=len(self._names))
        touched = set(codes.tolist())
        with self._lock:
            made = list(self._parts.items())
        parts = {namespace: part.without(since[codes == code]) if code in touched else part
                 for namespace, part in made if live_counts[code := self._code_of[namespace]]}
        derived._install(key, self.segment, self._names, dead, live_counts, parts)
        return derived


def rows_added(rows: np.ndarray, earlier: np.ndarray) -> np.ndarray | None:
    """The rows of `rows` not in `earlier` (both ascending, once each), or None where `earlier`
    holds a row `rows` lacks: what a later deletion file adds to an earlier one, by one search of
    the few rows deleted (`np.setdiff1d` sorts both again)."""
    at = np.searchsorted(rows, earlier)
    if len(earlier) and (at[-1] >= len(rows) or not np.array_equal(rows[at], earlier)):
        return None
    keep = np.ones(len(rows), dtype=bool)
    keep[at] = False
    return rows[keep]


class _SegmentPostings:
    """One segment's postings and row columns, as its parts read them. The entity-name counts
    (`name_tfs`) are `postings`' own, or what `name_tfs` gives when a weighted search first asks:
    a reader's segment makes them by analysing every entity name again."""

    def __init__(self, postings: TermPostings, codes: np.ndarray, id_keys: np.ndarray,
                 name_tfs: Callable[[], np.ndarray | None] | None, id_at: Callable[[int], UUID] | None) -> None:
        # (rows, 2) big-endian uint64: the ids' halves, for tie order and the ids found
        self._postings, self.codes, self.id_keys = postings, codes, id_keys
        self._name_tfs, self._id_at = name_tfs, id_at

    @property
    def lengths(self) -> np.ndarray:
        """Each row's document length."""
        return self._postings.lengths

    def object_id(self, row: int, high: int, low: int) -> UUID:
        """The id of segment row `row` (its halves `high`, `low`): the segment's own UUID object
        where it hands them out (`id_at`), so a search makes no new one for a row it has named."""
        return uuid_of((high << 64) | low) if self._id_at is None else self._id_at(row)

    @cached_property
    def name_tfs(self) -> np.ndarray | None:
        """Per posting, the part of its tf in the row's entity name (None: no row has a name)."""
        return self._postings.name_tfs if self._name_tfs is None else self._name_tfs()

    @cached_property
    def name_lengths(self) -> np.ndarray:
        """Each row's entity-name length (terms in its name)."""
        postings, name_tfs = self._postings, self.name_tfs
        if name_tfs is None:
            return np.zeros(postings.num_rows, dtype=np.int32)
        return np.bincount(postings.rows, weights=name_tfs, minlength=postings.num_rows).astype(np.int32)

    def part(self, code: int, dead: np.ndarray) -> _Part:
        """The part of the namespace whose code is `code`, less the rows `dead` (ascending)."""
        member = self.codes == code
        rows = np.flatnonzero(member)
        first, stop = int(rows[0]), int(rows[-1]) + 1
        low, high = np.searchsorted(dead, [first, stop])
        whole = len(rows) == stop - first and low == high
        members = None if whole else rows[np.isin(rows, dead[low:high], invert=True)]
        kept = slice(first, stop) if whole else members
        lengths = self._postings.lengths[kept]
        return _Part(self, first, stop, members, len(lengths), int(lengths.sum()))

    def postings_of(self, part: _Part, term: str) -> _Hit | None:
        postings = self._postings
        vocabulary = postings.vocabulary
        term_id = int(np.searchsorted(vocabulary, term))
        if term_id >= len(vocabulary) or vocabulary[term_id] != term:
            return None
        # keys of the arrays' own dtype: other keys would make numpy cast every posting first
        term_ids, rows = postings.term_ids, postings.rows
        low, high = np.searchsorted(term_ids, np.asarray([term_id, term_id + 1], dtype=term_ids.dtype))
        start, end = np.searchsorted(rows[low:high], np.asarray([part.first, part.stop], dtype=rows.dtype)) + low
        if start == end:
            return None
        rows = postings.rows[start:end]
        positions = slice(start, end)
        if part.members is not None:  # the part's rows among them, each at its place in the part
            local = np.searchsorted(part.members, rows)
            chosen = np.flatnonzero(part.members[np.minimum(local, len(part.members) - 1)] == rows)
            if not len(chosen):
                return None
            rows, positions, local = rows[chosen], start + chosen, local[chosen]
        else:
            local = rows - part.first
        return _Hit(local, postings.tfs[positions], postings.lengths[rows], self, rows, positions)


def _check_dead(dead: np.ndarray, rows: int, segment: Hashable | None) -> None:
    """Raise ValueError unless every deleted row of `dead` is one of a segment's `rows`."""
    if len(dead) and not 0 <= int(dead.min()) <= int(dead.max()) < rows:
        raise ValueError(f"segment {segment!r} has {rows} rows, got deleted rows up to {int(dead.max())}")


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
    names = [hit.names() for hit, _ in hits]
    name_tf = np.concatenate([name_tfs for name_tfs, _ in names]).astype(np.float64)
    name_length = np.concatenate([name_lengths for _, name_lengths in names]).astype(np.float64)
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

    _parts: Mapping[str, tuple[_SegmentParts, ...]] = field(default_factory=lambda: MappingProxyType({}))
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
        names, codes = np.unique(np.asarray(namespaces_per_row, dtype=object), return_inverse=True)
        ids = uuid_keys(object_ids_per_row)
        return self.with_segment_columns(postings, [str(name) for name in names], codes, ids, key=key)

    def with_segment_columns(self, postings: TermPostings, namespaces: Sequence[str], namespace_codes: np.ndarray,
                             object_ids: np.ndarray, dead: np.ndarray | None = None,
                             key: Hashable | None = None,
                             name_tfs: Callable[[], np.ndarray | None] | None = None,
                             id_at: Callable[[int], UUID] | None = None) -> Bm25Index:
        """`with_segment` from a segment's columns: each row's namespace as a code into `namespaces`,
        its object id as 16 big-endian bytes (dtype V16), and the rows not to index (`dead`, deleted
        ones: their positions, ascending, once each; None: none). Each namespace's part is made when
        a search first names it. `name_tfs`, if given, makes the postings' entity-name counts when a
        weighted search first needs them; `id_at`, if given, gives a row's id as the segment's own
        UUID object."""
        if not len(namespace_codes) == len(object_ids) == postings.num_rows:
            raise ValueError(f"a segment of {postings.num_rows} rows needs a namespace and an object id "
                             f"per row (got {len(namespace_codes)} and {len(object_ids)})")
        dead = np.empty(0, dtype=np.int64) if dead is None else np.asarray(dead, dtype=np.int64)
        _check_dead(dead, postings.num_rows, key)
        if key is not None and key in self._segments:
            raise ValueError(f"segment {key!r} is in the index already; take it out with without_segments first")
        parts = _SegmentParts(postings, list(namespaces), np.asarray(namespace_codes),
                              np.asarray(object_ids).view(">u8").reshape(-1, 2), dead, key, name_tfs, id_at)
        merged = dict(self._parts)
        for namespace in parts.namespaces:
            merged[namespace] = (*merged.get(namespace, ()), parts)
        keys = self._segments if key is None else self._segments | {key}
        return Bm25Index(MappingProxyType(merged), keys)

    def with_deletions(self, old: Hashable, dead: np.ndarray, key: Hashable) -> Bm25Index | None:
        """This index with segment `old` read with more of its rows deleted (`dead`, the positions of
        every deleted row, ascending, once each) as `key`: what taking `old` out and adding the
        segment again with `dead` scores, at the cost of the rows deleted since. The segment's
        postings and the caches over them are shared and the parts made so far lose those rows.
        None where `old` is in no namespace's parts or `dead` lacks a row it left out."""
        if key in self._segments:
            raise ValueError(f"segment {key!r} is in the index already; take it out with without_segments first")
        parts = next((found for held in self._parts.values() for found in held if found.key == old), None)
        if parts is not None:
            _check_dead(dead, len(parts.segment.codes), old)
        derived = None if parts is None else parts.with_dead(dead, key)
        if derived is None:
            return None
        still = set(derived.namespaces)
        merged = {}
        for namespace, held in self._parts.items():
            now = tuple(derived if found is parts else found for found in held if found is not parts or namespace in still)
            if now:
                merged[namespace] = now
        return Bm25Index(MappingProxyType(merged), (self._segments - {old}) | {key})

    def without_segments(self, keys: Iterable[Hashable]) -> Bm25Index:
        """This index less the segments added with these keys. A merge is
        `index.without_segments(sources).with_segment(merged, ..., key=...)`: scores are unchanged,
        and queries no longer pay for many small parts."""
        removed = frozenset(keys)
        if not removed:
            return self
        if not removed <= self._segments:
            raise ValueError(f"segments {sorted(map(repr, removed - self._segments))} are not in the index")
        kept = {}
        for namespace, parts in self._parts.items():
            remaining = tuple(part for part in parts if part.key not in removed)
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
        return [parts.part(namespace) for namespace in sorted(set(namespaces)) for parts in self._parts.get(namespace, ())]

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
            hits = [(hit, offset) for part, offset in zip(parts, offsets) if (hit := part.postings_of(term)) is not None]
            if not hits:
                continue
            # Integers are exact in float64, so these equal DuckDB's BIGINT-to-DOUBLE operands.
            tf = np.concatenate([hit.tfs for hit, _ in hits]).astype(np.float64)
            length = np.concatenate([hit.lengths for hit, _ in hits]).astype(np.float64)
            rows = np.concatenate([hit.rows.astype(np.int64) + offset for hit, offset in hits])
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
        segment_rows = np.empty(len(matched), dtype=np.int64)
        for index in np.unique(owner).tolist():
            chosen = owner == index
            rows = parts[index].segment_rows(matched[chosen] - offsets[index])
            id_keys[chosen] = parts[index].segment.id_keys[rows]
            segment_rows[chosen] = rows
        order = np.lexsort((id_keys[:, 1], id_keys[:, 0], -scores))[:limit]
        return [(parts[index].segment.object_id(row, high, low), score) for index, row, (high, low), score in zip(
            owner[order].tolist(), segment_rows[order].tolist(), id_keys[order].tolist(), scores[order].tolist())]
