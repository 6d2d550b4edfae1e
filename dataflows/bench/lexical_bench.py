"""Lexical search latency of `stores.lexical.Bm25Index` at LoCoMo size and on a synthetic corpus.

Run: `python -m rms_retrieval.dataflows.bench.lexical_bench [--locomo PATH] [--synthetic N]`.
Each query asks one namespace. "cold" is a query's first search (DuckDB analyses the text);
"warm" repeats it (the analysis is cached, so it is numpy alone); "warm CPU" is the same
searches' CPU time, which a shared machine's load does not inflate.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from uuid import UUID, uuid5, NAMESPACE_URL

import numpy as np

from rms_retrieval.dataflows.bench.metrics import latency_percentiles
from rms_retrieval.stores.indexes.lexical import Bm25Index
from rms_retrieval.stores.indexes.postings import query_terms, term_postings

SEGMENT_ROWS = 100_000
SEARCH_LIMIT = 200
SYNTHETIC_NAMESPACES = 10
SYNTHETIC_VOCABULARY = 50_000
SYNTHETIC_WORDS_PER_DOCUMENT = 14
_LETTERS = np.array(list("abcdefghijklmnopqrstuvwxyz"))


@dataclass(frozen=True)
class LexicalCorpus:
    """Documents as the store analyses them, with their namespaces and ids, and the queries to ask."""

    documents: list[tuple[str, str | None]]
    namespaces: list[str]
    object_ids: list[UUID]
    queries: list[tuple[str, str]]  # (text, namespace)


@dataclass(frozen=True)
class LexicalReport:
    documents: int
    segment_rows: int
    build_seconds: float
    cold_ms: dict[str, float | int]
    warm_ms: dict[str, float | int]
    warm_cpu_ms: dict[str, float | int]  # this thread's CPU time: what a loaded machine's wall clock hides

    def lines(self, label: str) -> list[str]:
        def show(figures: dict[str, float | int]) -> str:
            return " ".join(f"{name} {value}" if name == "n" else f"{name} {value:.3f}" for name, value in figures.items())

        return [
            f"{label}: {self.documents:,} documents, built in {self.build_seconds:.1f} s "
            f"({self.segment_rows:,}-row segments)",
            f"  cold per query (ms): {show(self.cold_ms)}",
            f"  warm per query (ms): {show(self.warm_ms)}",
            f"  warm CPU per query (ms): {show(self.warm_cpu_ms)}",
        ]


def locomo_corpus(path: Path) -> LexicalCorpus:
    """LoCoMo as the store holds it (speakers, turns and the entities `add` extracts), one namespace
    per conversation; its questions, each asked of its own conversation."""
    from rms_retrieval.dataflows.ingest import locomo_objects
    from rms_retrieval.dataflows.locomo import load_locomo
    from rms_retrieval.stores.indexes.entity_graph import entity_graph
    from rms_retrieval.stores.engine.writer import namespace_anchors
    from rms_retrieval.stores.snapshot import StoreSnapshot
    from rms_retrieval.stores.engine.manifest import Manifest

    dataset = load_locomo(path)
    turns = locomo_objects(dataset)
    anchors = namespace_anchors(StoreSnapshot(Manifest(0, None), (), lambda record: None), turns)
    objects = [*turns, *entity_graph(turns, {}, {}, anchors).entities]
    return LexicalCorpus(
        documents=[(obj.content, obj.entity_canonical_name) for obj in objects],
        namespaces=[obj.namespace for obj in objects],
        object_ids=[obj.id for obj in objects],
        queries=[(question.question, question.sample_id) for question in dataset.questions],
    )


def _synthetic_words(count: int, seed: int) -> np.ndarray:
    """Distinct letter-only words (digits would be tokenised away), Zipf-ranked by position."""
    generator = np.random.default_rng(seed)
    lengths = generator.integers(4, 10, size=count * 2)
    words = ["".join(_LETTERS[generator.integers(0, 26, size=length)]) for length in lengths]
    return np.array(list(dict.fromkeys(words))[:count], dtype=object)


def synthetic_corpus(
    size: int, queries: int = 200, seed: int = 7, vocabulary: int = SYNTHETIC_VOCABULARY
) -> LexicalCorpus:
    """`size` documents of Zipf-distributed words over ten namespaces, and `queries` 2-6 word
    queries. A small `vocabulary` is the worst case: every query matches most of its namespace."""
    generator = np.random.default_rng(seed)
    words = _synthetic_words(vocabulary, seed)
    ranks = np.minimum(generator.zipf(1.15, size=size * SYNTHETIC_WORDS_PER_DOCUMENT), len(words)) - 1
    rows = words[ranks].reshape(size, SYNTHETIC_WORDS_PER_DOCUMENT)
    documents = [(" ".join(row), None) for row in rows.tolist()]
    namespaces = [f"namespace-{index % SYNTHETIC_NAMESPACES}" for index in range(size)]
    asked = []
    for _ in range(queries):
        count = int(generator.integers(2, 7))
        picked = words[np.minimum(generator.zipf(1.15, size=count), len(words)) - 1]
        asked.append((" ".join(picked.tolist()), f"namespace-{int(generator.integers(0, SYNTHETIC_NAMESPACES))}"))
    return LexicalCorpus(documents, namespaces, [uuid5(NAMESPACE_URL, f"doc-{i}") for i in range(size)], asked)


def build_index(corpus: LexicalCorpus, segment_rows: int = SEGMENT_ROWS) -> Bm25Index:
    index = Bm25Index.empty()
    for start in range(0, len(corpus.documents), segment_rows):
        stop = start + segment_rows
        postings = term_postings(corpus.documents[start:stop])
        index = index.with_segment(postings, corpus.namespaces[start:stop], corpus.object_ids[start:stop])
    return index


def measure(corpus: LexicalCorpus, segment_rows: int = SEGMENT_ROWS) -> LexicalReport:
    """Build the index from `segment_rows`-row segments, then time every query cold, then warm."""
    started = time.perf_counter()
    index = build_index(corpus, segment_rows)
    build_seconds = time.perf_counter() - started
    query_terms.cache_clear()
    timings: dict[str, list[float]] = {"cold": [], "warm": [], "warm_cpu": []}
    for phase in ("cold", "warm"):
        for text, namespace in corpus.queries:
            started, started_cpu = time.perf_counter(), time.thread_time()
            index.search(text, [namespace], SEARCH_LIMIT)
            timings[phase].append(time.perf_counter() - started)
            if phase == "warm":
                timings["warm_cpu"].append(time.thread_time() - started_cpu)
    return LexicalReport(
        documents=len(corpus.documents),
        segment_rows=segment_rows,
        build_seconds=build_seconds,
        cold_ms=latency_percentiles(timings["cold"]),
        warm_ms=latency_percentiles(timings["warm"]),
        warm_cpu_ms=latency_percentiles(timings["warm_cpu"]),
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--locomo", type=Path, help="locomo10.json (skipped when omitted)")
    parser.add_argument("--synthetic", type=int, default=1_000_000, help="synthetic corpus size (0 skips)")
    parser.add_argument("--vocabulary", type=int, default=SYNTHETIC_VOCABULARY,
                        help=f"distinct words of the synthetic corpus (default {SYNTHETIC_VOCABULARY:,})")
    parser.add_argument("--segment-rows", type=int, nargs="+", default=[SEGMENT_ROWS],
                        help=f"rows per segment, one run per value (default {SEGMENT_ROWS:,})")
    args = parser.parse_args(argv)
    if args.synthetic < 0:
        parser.error(f"--synthetic must be 0 or more, not {args.synthetic}")
    if args.vocabulary <= 0:
        parser.error(f"--vocabulary must be positive, not {args.vocabulary}")
    if min(args.segment_rows) <= 0:
        parser.error(f"--segment-rows must be positive, not {min(args.segment_rows)}")
    corpora = []
    if args.locomo is not None:
        corpora.append(("LoCoMo", locomo_corpus(args.locomo)))
    if args.synthetic:
        corpora.append(("synthetic", synthetic_corpus(args.synthetic, vocabulary=args.vocabulary)))
    for label, corpus in corpora:
        for segment_rows in args.segment_rows:
            print("\n".join(measure(corpus, segment_rows).lines(label)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
