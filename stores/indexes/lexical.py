"""Exact BM25 in memory over immutable segments, scored as DuckDB FTS `match_bm25` scores.

DuckDB analyses the text (its own `tokenize` macro, `english` stopword table and Porter stemmer,
read from a real FTS index, so the terms are exactly those `create_fts_index` would write);
numpy scores it. A segment's `TermPostings` never change once written, and `Bm25Index` only
gains segments, so a write costs what it adds while document count, average length and
document frequencies stay exact over whichever namespaces a query names: a score never depends
on how the store happens to be segmented, nor on what other namespaces hold.
"""

from __future__ import annotations

import functools
import os
import threading
import zipfile
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from uuid import UUID

import duckdb
import duckdb_extension_fts
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rms_retrieval.stores.engine.duckdb_process import ProcessDatabase

# match_bm25's defaults, which the store has always used.
BM25_K1 = 1.2
BM25_B = 0.75
# Near-equal sums can differ in the last bits with summation order; rounding makes them exact
# ties, which the object id then breaks (RFC-0005 Section 11).
BM25_TIE_DECIMALS = 9
_ROUNDING_MARGIN = 2 * 10.0**-BM25_TIE_DECIMALS

FTS_EXTENSION = os.path.join(
    os.path.dirname(duckdb_extension_fts.__file__), "extensions", "v" + duckdb.__version__, "fts.duckdb_extension"
)
SINGLE_THREADED = "SET threads = 1"
# A one-row index whose schema lends us DuckDB's own analyser: the `tokenize` macro and the
# stopword table that create_fts_index writes, with the stemmer and stopwords named explicitly.
CREATE_LEXICON = (
    "CREATE TABLE lexicon (id VARCHAR, content VARCHAR)",
    "INSERT INTO lexicon VALUES ('0', '')",
    "PRAGMA create_fts_index('lexicon', 'id', 'content', stemmer='porter', stopwords='english')",
)
# Each row's tokens over both fields (one list, so one unnest), with their stems. The rest of
# create_fts_index's `stemmed_stopped` step (dropping NULL, empty and stopword tokens) and the
# per-term grouping run in numpy: in SQL they cost a 1-row add about 5 ms of DuckDB's fixed
# per-operator cost, against 1 ms for this statement.
DOCUMENT_TERMS = """
WITH incoming AS (
    SELECT unnest($rows) AS doc_row, unnest($contents) AS content, unnest($names) AS entity_canonical_name
), tokenized AS (
    SELECT doc_row,
           unnest(list_concat(fts_main_lexicon.tokenize(content), fts_main_lexicon.tokenize(entity_canonical_name))) AS w
    FROM incoming
)
SELECT doc_row, w AS word, stem(w, 'porter') AS term FROM tokenized
"""
STOPWORDS = "SELECT sw FROM fts_main_lexicon.stopwords"
# match_bm25's query side: distinct stems, stopwords not removed (they match nothing indexed).
QUERY_TERMS = "SELECT DISTINCT stem(unnest(fts_main_lexicon.tokenize($text)), 'porter') AS term"
_QUERY_CACHE_SIZE = 8192


class _Analyzer:
    """DuckDB's analyser on this process's own database (stores/engine/duckdb_process.py), under a lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._database = ProcessDatabase(self._prepared)
        self._stopwords = pa.array([], type=pa.string())

    def _prepared(self, connection: duckdb.DuckDBPyConnection) -> None:
        connection.load_extension(FTS_EXTENSION)
        # Statements here are small and frequent: handing them to a second thread costs more
        # than it saves (query analysis p50 0.7 ms instead of 2-4 ms on a loaded 2-core box).
        connection.execute(SINGLE_THREADED)
        for statement in CREATE_LEXICON:
            connection.execute(statement)
        self._stopwords = connection.execute(STOPWORDS).to_arrow_table().column("sw").combine_chunks()

    def _ready(self) -> duckdb.DuckDBPyConnection:
        return self._database.connection()

    def document_terms(self, contents: list[str], names: list[str | None]) -> tuple[np.ndarray, np.ndarray]:
        """(doc_row, term) of every indexed token, in no particular order: what create_fts_index's
        `stemmed_stopped` step keeps (tokens that are not NULL, not empty, not stopwords)."""
        parameters = {"rows": list(range(len(contents))), "contents": contents, "names": names}
        with self._lock:
            tokens = self._ready().execute(DOCUMENT_TERMS, parameters).to_arrow_table()
            stopwords = self._stopwords
        word = tokens.column("word")
        kept = pc.and_(pc.invert(pc.is_in(word, value_set=stopwords)), pc.greater(pc.utf8_length(word), 0))
        kept = pc.fill_null(kept, False)
        return (tokens.column("doc_row").filter(kept).to_numpy().astype(np.int64),
                tokens.column("term").filter(kept).combine_chunks())

    def query_terms(self, text: str) -> list[str]:
        with self._lock:
            rows = self._ready().execute(QUERY_TERMS, {"text": text}).fetchall()
        return [term for (term,) in rows if term]


_ANALYZER = _Analyzer()


def indexed_terms(texts: Sequence[str]) -> list[tuple[str, ...]]:
    """Each text's terms as this BM25 indexes a document's content: porter stems of its tokens,
    stopwords and empty tokens dropped, repeats kept (one DuckDB statement for all the texts)."""
    if not texts:
        return []
    rows, terms = _ANALYZER.document_terms(list(texts), [None] * len(texts))
    found: list[list[str]] = [[] for _ in texts]
    for row, term in zip(rows.tolist(), terms.to_pylist()):
        found[row].append(term)
    return [tuple(sorted(each)) for each in found]


@functools.lru_cache(maxsize=_QUERY_CACHE_SIZE)
def query_terms(text: str) -> tuple[str, ...]:
    """The distinct stems match_bm25 looks up for `text`, sorted so that sums add in one order."""
    return tuple(sorted(_ANALYZER.query_terms(text)))


def _frozen(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array


@dataclass(frozen=True, eq=False)
class TermPostings:
    """One segment's lexical statistics: (term, row, tf) postings sorted by term then row, and each
    row's document length (terms over content and entity name, as FTS `docs.len` counts them)."""

    vocabulary: np.ndarray  # sorted distinct terms (object array of str)
    term_ids: np.ndarray  # int32 per posting, index into vocabulary
    rows: np.ndarray  # int32 per posting, row within the segment
    tfs: np.ndarray  # int32 per posting
    lengths: np.ndarray  # int32 per row

    def __post_init__(self) -> None:
        postings = len(self.term_ids)
        if len(self.rows) != postings or len(self.tfs) != postings:
            raise ValueError("TermPostings needs term_ids, rows and tfs of one length per posting")
        if postings and (self.rows.min() < 0 or self.rows.max() >= len(self.lengths)):
            raise ValueError(f"TermPostings rows must lie in 0..{len(self.lengths) - 1}")
        if postings and (self.term_ids.min() < 0 or self.term_ids.max() >= len(self.vocabulary)):
            raise ValueError(f"TermPostings term_ids must lie in 0..{len(self.vocabulary) - 1}")
        for array in (self.vocabulary, self.term_ids, self.rows, self.tfs, self.lengths):
            _frozen(array)

    @property
    def num_rows(self) -> int:
        return len(self.lengths)

    @property
    def terms(self) -> np.ndarray:
        """The term of each posting."""
        return self.vocabulary[self.term_ids]

    @classmethod
    def concatenate(cls, segments: Sequence[TermPostings]) -> TermPostings:
        """One segment holding `segments`' rows in order (for a merge), without re-analysing text."""
        if not segments:
            return term_postings([])
        vocabulary = np.unique(np.concatenate([segment.vocabulary for segment in segments])).astype(object)
        offsets = np.cumsum([0, *(segment.num_rows for segment in segments)])
        term_ids = np.concatenate(
            [np.searchsorted(vocabulary, segment.vocabulary)[segment.term_ids] for segment in segments]
        ).astype(np.int32)
        rows = np.concatenate([segment.rows + offset for segment, offset in zip(segments, offsets.tolist())])
        tfs = np.concatenate([segment.tfs for segment in segments])
        order = np.lexsort((rows, term_ids))
        lengths = np.concatenate([segment.lengths for segment in segments])
        return cls(vocabulary, term_ids[order], rows[order].astype(np.int32), tfs[order], lengths)

    def subset(self, kept: np.ndarray) -> TermPostings:
        """The postings of rows `kept` (ascending) only, renumbered 0..len(kept)-1: what a segment
        with deleted rows indexes, and what a merge that drops them writes."""
        if len(kept) == self.num_rows:
            return self
        new_row = np.full(self.num_rows, -1, dtype=np.int64)
        new_row[kept] = np.arange(len(kept))
        chosen = np.flatnonzero(new_row[self.rows] >= 0)
        used, term_ids = np.unique(self.term_ids[chosen], return_inverse=True)
        return TermPostings(self.vocabulary[used], term_ids.astype(np.int32), new_row[self.rows[chosen]].astype(np.int32),
                            self.tfs[chosen], self.lengths[kept])

    def to_arrays(self) -> dict[str, np.ndarray]:
        """Plain arrays (no pickles) for an `.npz` file; `from_arrays` reads them back."""
        encoded = [term.encode() for term in self.vocabulary]
        return {
            "vocabulary_bytes": np.frombuffer(b"".join(encoded), dtype=np.uint8),
            "vocabulary_ends": np.cumsum([len(term) for term in encoded], dtype=np.int64),
            "term_ids": self.term_ids, "rows": self.rows, "tfs": self.tfs, "lengths": self.lengths,
        }

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, np.ndarray], source: str | Path) -> TermPostings:
        """Read what `to_arrays` gave (e.g. from `np.load`); damage raises ValueError naming `source`."""
        try:
            blob = arrays["vocabulary_bytes"].tobytes()
            ends = arrays["vocabulary_ends"].tolist()
            starts = [0, *ends[:-1]]
            vocabulary = np.array([blob[start:end].decode() for start, end in zip(starts, ends)], dtype=object)
            return cls(vocabulary, arrays["term_ids"].astype(np.int32), arrays["rows"].astype(np.int32),
                       arrays["tfs"].astype(np.int32), arrays["lengths"].astype(np.int32))
        except (OSError, EOFError, KeyError, ValueError, zipfile.BadZipFile) as error:
            raise ValueError(f"{source} is not a readable TermPostings file ({error}); rewrite the segment") from error


def term_postings(documents: Sequence[tuple[str, str | None]]) -> TermPostings:
    """The postings of (content, entity_canonical_name) rows: DuckDB tokenises and stems them in one
    statement, numpy groups them by term (sorted by code point, as DuckDB sorts VARCHAR) and row."""
    if not documents:
        empty = np.empty(0, dtype=np.int32)
        return TermPostings(np.empty(0, dtype=object), empty, empty.copy(), empty.copy(), empty.copy())
    rows, terms = _ANALYZER.document_terms([content for content, _ in documents], [name for _, name in documents])
    if not len(terms):
        empty = np.empty(0, dtype=np.int32)
        return TermPostings(np.empty(0, dtype=object), empty, empty.copy(), empty.copy(),
                            np.zeros(len(documents), dtype=np.int32))
    # Terms sorted by UTF-8 bytes, as DuckDB sorts VARCHAR.
    encoded = pc.dictionary_encode(terms)
    order = pc.sort_indices(encoded.dictionary).to_numpy()
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    vocabulary = encoded.dictionary.take(pa.array(order)).to_numpy(zero_copy_only=False).astype(object)
    term_of_token = rank[encoded.indices.to_numpy()]
    keys, tfs = np.unique(term_of_token * len(documents) + rows, return_counts=True)
    posting_rows = (keys % len(documents)).astype(np.int32)
    tfs = tfs.astype(np.int32)
    return TermPostings(
        vocabulary=vocabulary,
        term_ids=(keys // len(documents)).astype(np.int32),
        rows=posting_rows,
        tfs=tfs,
        lengths=np.bincount(posting_rows, weights=tfs, minlength=len(documents)).astype(np.int32),
    )


@dataclass(frozen=True, eq=False)
class _Part:
    """One segment's rows of one namespace, postings sliced by term."""

    slices: Mapping[str, tuple[int, int]]
    rows: np.ndarray  # int32 per posting, row within the part
    tfs: np.ndarray  # int32 per posting
    lengths: np.ndarray  # int32 per posting: its row's document length
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
            rows=_frozen(local_row[global_rows]),
            tfs=_frozen(postings.tfs[chosen]),
            lengths=_frozen(postings.lengths[global_rows]),
            object_ids=_frozen(ids[members]),
            id_keys=_frozen(id_keys[members].astype(np.uint64)),
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

    def search(self, text: str, namespaces: Sequence[str], limit: int) -> list[tuple[UUID, float]]:
        """match_bm25 scores over the documents of `namespaces` only, rounded to 9 decimals, the best
        `limit` first, ties by object id."""
        parts = self._scope(namespaces)
        terms = query_terms(text) if parts and limit > 0 else ()
        num_docs = sum(part.num_docs for part in parts)
        total_length = sum(part.total_length for part in parts)
        if not terms or total_length == 0:
            return []
        avgdl = total_length / num_docs
        offsets = np.cumsum([0, *(part.num_docs for part in parts)])
        keys, subscores = [], []
        for term in terms:
            hits = [(part.slices[term], part, offset) for part, offset in zip(parts, offsets) if term in part.slices]
            if not hits:
                continue
            df = sum(end - start for (start, end), _, _ in hits)
            idf = np.log10((num_docs - df + 0.5) / (df + 0.5) + 1)
            # Integers are exact in float64, so these equal DuckDB's BIGINT-to-DOUBLE operands.
            tf = np.concatenate([part.tfs[start:end] for (start, end), part, _ in hits]).astype(np.float64)
            length = np.concatenate([part.lengths[start:end] for (start, end), part, _ in hits]).astype(np.float64)
            subscores.append(_subscores(tf, length, idf, avgdl))
            keys.append(np.concatenate([part.rows[start:end].astype(np.int64) + offset for (start, end), part, offset in hits]))
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
