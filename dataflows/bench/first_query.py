"""The first query on a namespace against warm ones, for `rms bench latency`.

A namespace's first query after a store opens builds what later ones reuse: its entity catalog
and graph, its lookups by id and its sessions, its candidates decoded and their token counts.
The store is opened anew, read-only; one question on one namespace warms what every namespace
shares (the first read of each index file, which checks its sha256); then each other namespace's
first question is timed, and asked again `REPEATS` times, warm. `first_over_warm` is the median
first query over the median warm one (issue 24's target: at most 2, on LoCoMo and on
LongMemEval-S). It runs before the other arms of its block, so no arm has asked those questions.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rms_retrieval.dataflows.bench.interleaving import pipeline_arm
from rms_retrieval.dataflows.bench.metrics import latency_percentiles
from rms_retrieval.dataflows.bench.speed_bench import BenchQuery
from rms_retrieval.nodes.settings import RetrievalSettings
from rms_retrieval.stores.protocols import QueryEncoder

REPEATS = 3
NAMESPACES = 12


def first_query_report(path: str | Path, queries: Sequence[BenchQuery], encoder: QueryEncoder,
                       namespaces: int = NAMESPACES) -> dict[str, Any] | None:
    """First and warm timings on the store at `path`, the first question of each namespace of
    `queries` (at most `namespaces` timed, after the warm-up one); None when they name fewer than two."""
    from rms_retrieval.stores.memory_store import MemoryStore

    first_of: dict[tuple[str, ...], BenchQuery] = {}
    for query in queries:
        first_of.setdefault(query.namespaces, query)
    chosen = list(first_of.values())[:namespaces + 1]
    if len(chosen) < 2:
        return None
    first, warm = [], []
    with MemoryStore.open(path, create=False, read_only=True) as store:
        ask = pipeline_arm(store, encoder, RetrievalSettings())
        ask(chosen[0])
        for query in chosen[1:]:
            for times in (first, *[warm] * REPEATS):
                started = time.perf_counter()
                ask(query)
                times.append(time.perf_counter() - started)
    return {"namespaces": len(first), "first_ms": latency_percentiles(first), "warm_ms": latency_percentiles(warm),
            "first_over_warm": statistics.median(first) / statistics.median(warm)}


def first_query_line(name: str, report: dict[str, Any] | None) -> str:
    if report is None:
        return f"{name}: the first query on a namespace is not timed: the questions name one namespace"
    return (f"{name}: the first query on a namespace after an open over a warm one: {report['first_over_warm']:.2f}x "
            f"(p50 {report['first_ms']['p50']:.1f} against {report['warm_ms']['p50']:.1f} ms, "
            f"{report['namespaces']} namespaces; target 2x)")
