"""What the latency benchmarks' arms share: the pipeline as an arm, the arm that writes before
each query, and interleaving, which runs every arm on each query in a shuffled order after the
warm-up, so that all arms see the same machine load (`latency_bench.py`, `lme_latency.py`). The
order is drawn anew for each query (seeded, so a run repeats it): an arm's time includes what the
arm before it left in the processor's caches, and in an order merely rotated each arm always
followed the same one (the pipeline always followed the LangChain peer, and the peer at k = 200
always followed itself at k = 30).

After the warm-up, what the process holds (imports, open stores, warm caches) is frozen out of the
garbage collector (`gc.freeze`), as a long-running server does once it has started (README,
"Serving"): a full collection then scans what the timed requests made, not the 180,000 objects of
the imports and the stores, which took about 100 ms each time and landed in one request of 70.
`Timings.full_collections_ms` says how long each that ran while the arms were timed took, and
`Timings.met_collection` which timed requests one ran inside (`without_collections`: an arm's
spread without them); the latency benchmark's node table is timed under the same freeze
(`frozen_collector`).
"""

from __future__ import annotations

import gc
import random
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from rms_retrieval.dataflows.bench.metrics import latency_percentiles
from rms_retrieval.dataflows.bench.speed_bench import LATENCY_BUDGET, BenchQuery
from rms_retrieval.dataflows.retrieval import retrieve
from rms_retrieval.nodes.settings import RetrievalSettings
from rms_retrieval.stores.protocols import QueryEncoder

BUNDLE = 50


def pipeline_arm(
    store: Any, encoder: QueryEncoder, settings: RetrievalSettings, *, log: bool = False
) -> Callable[[BenchQuery], Any]:
    def run(query: BenchQuery) -> Any:
        return retrieve(store, query.text, namespaces=query.namespaces, reference_time=query.reference_time,
                        token_budget=LATENCY_BUDGET, limit=BUNDLE, settings=settings, encoder=encoder, log=log).bundle

    return run


class AfterWriteArm:
    """`pipeline` on `store` (writable), each query after a one-turn add to its namespace; the
    add is `prepare`, which `interleaved` runs before it starts the clock."""

    def __init__(self, store: Any, encoder: QueryEncoder) -> None:
        self._run = pipeline_arm(store, encoder, RetrievalSettings())
        self._store = store
        self.writes = 0

    def prepare(self, query: BenchQuery) -> None:
        from rms_retrieval.stores.models import MemoryObject, NodeType

        self.writes += 1
        self._store.add([MemoryObject(
            namespace=query.namespaces[0], node_type=NodeType.TURN, session_id="bench-after-write",
            session_seq=self.writes, content=f"note {self.writes} of the benchmark: the kettle was descaled today.",
            created_at=query.reference_time, updated_at=query.reference_time, event_time=query.reference_time)])

    def __call__(self, query: BenchQuery) -> Any:
        return self._run(query)


class AfterUpdateArm:
    """`pipeline` on `store` (writable), each query right after an update of one turn of its
    namespace (its salience changed: a new version of the turn, the old row deleted), one of the
    namespace's first UPDATED_TURNS turns in turn; the update is `prepare`, untimed."""

    UPDATED_TURNS = 64

    def __init__(self, store: Any, encoder: QueryEncoder) -> None:
        self._run = pipeline_arm(store, encoder, RetrievalSettings())
        self._store = store
        self._turns: dict[str, list[Any]] = {}
        self.updates = 0

    def prepare(self, query: BenchQuery) -> None:
        from rms_retrieval.stores.protocols import ScanSelection

        namespace = query.namespaces[0]
        if namespace not in self._turns:
            page = self._store.snapshot().scan_page(
                ScanSelection(namespace, None, ("TURN",), ("ACTIVE",), None, self.UPDATED_TURNS))
            self._turns[namespace] = [memory.id for memory in page]
        turns = self._turns[namespace]
        self.updates += 1  # a salience no earlier update of this run gave
        self._store.update(namespace, turns[self.updates % len(turns)], {"salience": 0.2 + (self.updates % 600) / 1000})

    def __call__(self, query: BenchQuery) -> Any:
        return self._run(query)


def after_update_block(quiet: Callable[[BenchQuery], Any], store: Any, encoder: QueryEncoder,
                       queries: Sequence[BenchQuery]) -> dict[str, dict[str, float]]:
    """The percentiles (ms) of the quiet arm and `AfterUpdateArm` on `store`, interleaved over
    `queries`, in a block of their own after the others: an update decodes the edges of the segment
    it changes, and what it leaves for the collector would lengthen the full collections timed in
    the other arms."""
    timings = interleaved({"quiet": quiet, "after_update": AfterUpdateArm(store, encoder)}, queries, seed=1).seconds
    return {name: latency_percentiles(values) for name, values in timings.items()}


def over_quiet(table: Mapping[str, Mapping[str, float]], arm: str, quiet: str) -> dict[str, float]:
    """`arm`'s p50 and p99 over `quiet`'s, in a table of percentiles."""
    return {level: table[arm][level] / table[quiet][level] for level in ("p50", "p99")}


def after_change_lines(report: Mapping[str, Any], key: str, question: str, target: str) -> list[str]:
    """The printed ratios of a question right after a one-turn write and after an update, where the
    report holds them (`key` with "{change}", e.g. "after_{change}_over_quiet"; `question` the
    line's words before the ratios, with "{change}")."""
    lines = []
    for change in ("write", "update"):
        ratio = report.get(key.format(change=change))
        if ratio is not None:
            lines.append(f"{question.format(change=change)}: p50 {ratio['p50']:.2f}x, p99 {ratio['p99']:.2f}x "
                         f"(target {target})")
    return lines


def warming_queries(queries: Sequence[BenchQuery], first: int = 3) -> list[BenchQuery]:
    """The first `first` queries and the first query of every other namespace."""
    chosen = list(queries[:first])
    seen = {query.namespaces for query in chosen}
    for query in queries[first:]:
        if query.namespaces not in seen:
            seen.add(query.namespaces)
            chosen.append(query)
    return chosen


@dataclass(frozen=True)
class Timings:
    """Seconds per arm and query, and each full collection that ran while they were timed (ms)."""

    seconds: dict[str, list[float]]
    full_collections_ms: list[float]
    met_collection: dict[str, list[bool]]  # per arm and query: a full collection ran inside the timed call


@contextmanager
def frozen_collector() -> Iterator[list[float]]:
    """What the process holds, frozen out of the garbage collector while inside (as a server runs
    once it has started); yields the list that each full collection's milliseconds join."""
    pauses: list[float] = []
    started_at: list[float] = []

    def full_collection(phase: str, info: dict[str, int]) -> None:
        if info["generation"] == 2:
            if phase == "start":
                started_at[:] = [time.perf_counter()]
            elif started_at:
                pauses.append((time.perf_counter() - started_at[0]) * 1000)

    gc.collect()
    gc.freeze()
    gc.callbacks.append(full_collection)
    try:
        yield pauses
    finally:
        gc.callbacks.remove(full_collection)
        gc.unfreeze()


def collections_line(pauses: Sequence[float]) -> str:
    """The printed line on the full collections that ran while the arms were timed."""
    return f"full collections while timed: {len(pauses)}" + (f", longest {max(pauses):.1f} ms" if pauses else "")


def interleaved(
    arms: Mapping[str, Callable[[BenchQuery], Any]], queries: Sequence[BenchQuery], *, warmup: Sequence[BenchQuery] = (),
    seed: int = 0,
) -> Timings:
    """Every arm timed on each query, after every arm ran the `warmup` queries, with the collector
    frozen (`frozen_collector`); each query runs every arm, in an order shuffled per query
    (`random.Random(seed)`), after the arm's untimed `prepare(query)` if it has one."""
    names = list(arms)
    for query in warmup:
        for name in names:
            arms[name](query)
    seconds: dict[str, list[float]] = {name: [] for name in names}
    met: dict[str, list[bool]] = {name: [] for name in names}
    orders = random.Random(seed)
    with frozen_collector() as pauses:
        for query in queries:
            for name in orders.sample(names, len(names)):
                prepare = getattr(arms[name], "prepare", None)
                if prepare is not None:  # untimed: what the arm needs done just before the query
                    prepare(query)
                collected = len(pauses)
                started = time.perf_counter()
                arms[name](query)
                seconds[name].append(time.perf_counter() - started)
                met[name].append(len(pauses) > collected)
    return Timings(seconds, pauses, met)


def without_collections(seconds: Sequence[float], met: Sequence[bool]) -> dict[str, Any]:
    """How many of an arm's timed requests (`seconds`) met a full collection (`met`), and the p99
    over the p50 of the others: how far the requests' own work spreads, beside the collector's pauses."""
    others = [value for value, hit in zip(seconds, met) if not hit]
    spread = latency_percentiles(others) if len(others) > 1 else None
    return {"met": sum(met), "requests": len(seconds), "p99_over_p50": spread["p99"] / spread["p50"] if spread else None}


def without_collections_line(found: Mapping[str, Any]) -> str:
    """The printed words of `without_collections`."""
    line = f"{found['met']} of its {found['requests']} requests met one"
    return line if found["p99_over_p50"] is None else f"{line}, p99 over p50 of the others {found['p99_over_p50']:.2f}x"
