"""The text a BM25 index reads: DuckDB's analyser and each segment's term postings.

The terms are exactly those DuckDB's `create_fts_index` would write: its `tokenize` macro, its
`english` stopword table and its Porter stemmer, read from a real FTS index. ASCII text, nearly
all text, is analysed in Python instead: the macro's steps are a lower-casing, one regular
expression and a split at RE2's whitespace, and the stemmer is the Snowball library's Porter
algorithm, which PyStemmer binds too (checked against DuckDB on LoCoMo and LongMemEval-S text:
195,644 distinct tokens stem alike, 5,924 texts give the same terms), ten times faster than a
DuckDB statement. Other text goes to DuckDB, whose accent stripping and case folding Python's
would not match everywhere. numpy groups the terms. A segment's `TermPostings` never change once
written; `lexical.Bm25Index` scores them.
"""

from __future__ import annotations

import functools
import os
import re
import threading
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import duckdb
import duckdb_extension_fts
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import Stemmer

from rms_retrieval.stores.engine.duckdb_process import ProcessDatabase
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
# The tokenize macro's steps after lower-casing, for ASCII text (strip_accents changes none).
_SEPARATORS = re.compile(r"""[0-9!@#$%^&*()_+={}\[\]:;<>,.?~\\/|'"`-]+""")
_WHITESPACE = re.compile(r"[\t\n\f\r ]+")  # RE2's \s, which Python's \s is not (it has \v and \x1c-\x1f)



class _Analyzer:
    """DuckDB's analyser on this process's own database (stores/engine/duckdb_process.py), under a lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._database = ProcessDatabase(self._prepared)
        self._stopwords = pa.array([], type=pa.string())
        self._stopword_set: frozenset[str] = frozenset()

    def _prepared(self, connection: duckdb.DuckDBPyConnection) -> None:
        connection.load_extension(FTS_EXTENSION)
        # Statements here are small and frequent: handing them to a second thread costs more
        # than it saves (query analysis p50 0.7 ms instead of 2-4 ms on a loaded 2-core box).
        connection.execute(SINGLE_THREADED)
        for statement in CREATE_LEXICON:
            connection.execute(statement)
        self._stopwords = connection.execute(STOPWORDS).to_arrow_table().column("sw").combine_chunks()
        self._stopword_set = frozenset(self._stopwords.to_pylist())

    def _ready(self) -> duckdb.DuckDBPyConnection:
        return self._database.connection()

    def document_terms(self, contents: list[str], names: list[str | None]) -> tuple[np.ndarray, pa.Array]:
        """(doc_row, term) of every indexed token, in no particular order: what create_fts_index's
        `stemmed_stopped` step keeps (tokens that are not NULL, not empty, not stopwords)."""
        ascii_rows, other = [], []
        for row, (content, name) in enumerate(zip(contents, names)):
            (ascii_rows if content.isascii() and (name is None or name.isascii()) else other).append(row)
        with self._lock:
            connection = self._ready()  # the stopwords are read with it
            stopwords, stopped = self._stopwords, self._stopword_set
            if other:
                parameters = {"rows": other, "contents": [contents[row] for row in other], "names": [names[row] for row in other]}
                tokens = connection.execute(DOCUMENT_TERMS, parameters).to_arrow_table()
        doc_rows: list[int] = []
        terms: list[str] = []
        for row in ascii_rows:
            words = _ascii_tokens(contents[row]) + (_ascii_tokens(names[row]) if names[row] is not None else [])
            kept = [term for word, term in zip(words, _stems(words)) if word and word not in stopped]
            doc_rows += [row] * len(kept)
            terms += kept
        found_rows, found_terms = np.asarray(doc_rows, dtype=np.int64), pa.array(terms, type=pa.string())
        if not other:
            return found_rows, found_terms
        word = tokens.column("word")
        kept = pc.fill_null(pc.and_(pc.invert(pc.is_in(word, value_set=stopwords)), pc.greater(pc.utf8_length(word), 0)), False)
        return (np.concatenate([found_rows, tokens.column("doc_row").filter(kept).to_numpy().astype(np.int64)]),
                pa.concat_arrays([found_terms, tokens.column("term").filter(kept).combine_chunks().cast(pa.string())]))

    def query_terms(self, text: str) -> list[str]:
        if text.isascii():
            return sorted({term for term in _stems(_ascii_tokens(text)) if term})
        with self._lock:
            rows = self._ready().execute(QUERY_TERMS, {"text": text}).fetchall()
        return [term for (term,) in rows if term]


_STEMMERS = threading.local()  # a PyStemmer stemmer is not thread-safe: one per thread


def _stems(words: list[str]) -> list[str]:
    """The Porter stems of `words`, as DuckDB's stem(word, 'porter') gives them."""
    stemmer = getattr(_STEMMERS, "porter", None)
    if stemmer is None:
        stemmer = _STEMMERS.porter = Stemmer.Stemmer("porter")
    return stemmer.stemWords(words)


def _ascii_tokens(text: str) -> list[str]:
    """DuckDB's tokenize macro over ASCII `text`: empty tokens included, as it gives them."""
    return _WHITESPACE.split(_SEPARATORS.sub(" ", text.lower()))


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


def read_only(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array


@dataclass(frozen=True, eq=False)
class TermPostings:
    """One segment's lexical statistics: (term, row, tf) postings sorted by term then row, and each
    row's document length (terms over content and entity name, as FTS `docs.len` counts them).
    `name_tfs` is the part of each posting's tf that is in the entity name (`with_names`)."""

    vocabulary: np.ndarray  # sorted distinct terms (object array of str)
    term_ids: np.ndarray  # int32 per posting, index into vocabulary
    rows: np.ndarray  # int32 per posting, row within the segment
    tfs: np.ndarray  # int32 per posting
    lengths: np.ndarray  # int32 per row
    name_tfs: np.ndarray | None = None  # int32 per posting; None: no row has an entity name

    def __post_init__(self) -> None:
        postings = len(self.term_ids)
        if len(self.rows) != postings or len(self.tfs) != postings:
            raise ValueError("TermPostings needs term_ids, rows and tfs of one length per posting")
        if self.name_tfs is not None and (len(self.name_tfs) != postings or (postings and (
                self.name_tfs.min() < 0 or (self.name_tfs > self.tfs).any()))):
            raise ValueError("TermPostings name_tfs must be one count per posting, from 0 to its tf")
        if postings and (self.rows.min() < 0 or self.rows.max() >= len(self.lengths)):
            raise ValueError(f"TermPostings rows must lie in 0..{len(self.lengths) - 1}")
        if postings and (self.term_ids.min() < 0 or self.term_ids.max() >= len(self.vocabulary)):
            raise ValueError(f"TermPostings term_ids must lie in 0..{len(self.vocabulary) - 1}")
        for array in (self.vocabulary, self.term_ids, self.rows, self.tfs, self.lengths):
            read_only(array)
        if self.name_tfs is not None:
            read_only(self.name_tfs)

    @property
    def num_rows(self) -> int:
        return len(self.lengths)

    @property
    def terms(self) -> np.ndarray:
        """The term of each posting."""
        return self.vocabulary[self.term_ids]

    @property
    def name_counts(self) -> np.ndarray:
        """Each posting's tf within the entity name (zeros where no row has one)."""
        return np.zeros(len(self.tfs), dtype=np.int32) if self.name_tfs is None else self.name_tfs

    def with_names(self, names: Sequence[str | None]) -> TermPostings:
        """These postings with `name_tfs` from each row's entity name (the names these postings
        were made with: their tokens are among each row's terms)."""
        if len(names) != self.num_rows:
            raise ValueError(f"{self.num_rows} postings rows need as many names, got {len(names)}")
        named = [row for row, name in enumerate(names) if name]
        if not named:
            return self if self.name_tfs is None else replace(self, name_tfs=None)
        rows, terms = _ANALYZER.document_terms([names[row] for row in named], [None] * len(named))
        words = np.asarray(terms.to_pylist(), dtype=object)
        term_ids = np.minimum(np.searchsorted(self.vocabulary, words), max(len(self.vocabulary) - 1, 0))
        keys, counts = np.unique(term_ids * self.num_rows + np.asarray(named, dtype=np.int64)[rows], return_counts=True)
        posting_keys = self.term_ids.astype(np.int64) * self.num_rows + self.rows
        found = np.minimum(np.searchsorted(posting_keys, keys), max(len(posting_keys) - 1, 0))
        if len(words) and (not len(posting_keys) or (self.vocabulary[term_ids] != words).any()
                           or (posting_keys[found] != keys).any()):
            raise ValueError("these postings do not hold the names' terms; they were made from other rows")
        name_tfs = np.zeros(len(posting_keys), dtype=np.int32)
        name_tfs[found] = counts
        return replace(self, name_tfs=name_tfs)

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
        name_tfs = None
        if any(segment.name_tfs is not None for segment in segments):
            name_tfs = np.concatenate([segment.name_counts for segment in segments])[order]
        return cls(vocabulary, term_ids[order], rows[order].astype(np.int32), tfs[order], lengths, name_tfs)

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
                            self.tfs[chosen], self.lengths[kept], None if self.name_tfs is None else self.name_tfs[chosen])

    def to_arrays(self) -> dict[str, np.ndarray]:
        """Plain arrays (no pickles) for an `.npz` file; `from_arrays` reads them back, and
        `with_names` restores `name_tfs` from the rows' entity names."""
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
            return cls(vocabulary, *(arrays[name].astype(np.int32, copy=False) for name in ("term_ids", "rows", "tfs", "lengths")))
        except (OSError, EOFError, KeyError, ValueError, zipfile.BadZipFile) as error:
            raise ValueError(f"{source} is not a readable TermPostings file ({error}); rewrite the segment") from error


def term_postings(documents: Sequence[tuple[str, str | None]]) -> TermPostings:
    """The postings of (content, entity_canonical_name) rows: DuckDB tokenises and stems them in one
    statement, numpy groups them by term (sorted by code point, as DuckDB sorts VARCHAR) and row,
    with each posting's count within the entity name."""
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
    ).with_names([name for _, name in documents])
